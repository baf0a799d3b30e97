package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Error is a failure of the database: every error a transaction, a
// statement or a row scan meets in the driver comes back as one, except
// sql.ErrNoRows (an answer, not a failure) and the end of the caller's
// context.
//
// Its message is the driver's, which may name tables, constraints and
// values: it belongs in the operator's log. Code that answers clients
// reports a storage failure in its own words instead (package server does,
// for any error whose chain holds an Error) — see Unavailable for the
// advice to give.
type Error struct {
	// Op is what failed: "begin", "exec", "query", "scan", "commit".
	Op  string
	Err error
}

func (e *Error) Error() string { return "store: " + e.Op + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// StorageUnavailable reports whether the failure is the database's state
// rather than the statement's fault, so that the same operation may well
// succeed if retried: a lost or refused connection, a terminated backend,
// a serialization failure or deadlock, a busy or locked SQLite file, a
// full disk, an I/O error. Nothing of the failed transaction was kept. A
// constraint violation or a syntax error is not: it fails again.
func (e *Error) StorageUnavailable() bool { return transient(e.Err) }

// wrap makes err an *Error, unless it is none of the database's doing.
func wrap(op string, err error) error {
	if err == nil || errors.Is(err, sql.ErrNoRows) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	return &Error{Op: op, Err: err}
}

// transient classifies a driver error (see Error.StorageUnavailable).
func transient(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), // connection exception
			strings.HasPrefix(pg.Code, "53"),                           // insufficient resources: disk full, out of memory, too many connections
			pg.Code == "40001",                                         // serialization failure
			pg.Code == "40P01",                                         // deadlock detected
			pg.Code == "55P03",                                         // lock not available
			pg.Code == "57014",                                         // statement cancelled or timed out
			pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03": // terminated, crashed, starting up
			return true
		}
		return false
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	var netErr net.Error
	var connect *pgconn.ConnectError
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &netErr) || errors.As(err, &connect) || pgconn.Timeout(err)
}

// Row is the result of a query for one row; its Scan reports a database
// failure as an *Error, like every other method here.
type Row struct {
	row *sql.Row
}

// Scan copies the row's columns into dest. It returns sql.ErrNoRows when
// there was no row.
func (r *Row) Scan(dest ...any) error { return wrap("scan", r.row.Scan(dest...)) }
