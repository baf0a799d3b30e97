// Package store opens the databases mcprel keeps durable state in: SQLite
// (through modernc.org/sqlite, pure Go) as the embedded default, a single
// file with no server to run, and PostgreSQL (through pgx) when several
// replicas share the work. It applies versioned schema migrations at open
// and offers the small seam the ledger and tasks write through: a write
// transaction with one placeholder style for both dialects.
//
// On SQLite every write transaction is BEGIN IMMEDIATE on the process's one
// write connection, and writers wait for it in a FIFO queue in Go rather
// than in SQLite's busy handler, which sleep-polls unfairly and lets a
// writer wait seconds under contention. The file is in WAL mode with
// synchronous=FULL unless NORMAL is asked for. On PostgreSQL write
// transactions are READ COMMITTED, the level at which INSERT … ON CONFLICT
// DO NOTHING makes a racing duplicate wait for the first writer and then
// see its committed row instead of failing.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect is the kind of database behind a DB.
type Dialect uint8

const (
	SQLite Dialect = iota + 1
	Postgres
)

// String returns "sqlite" or "postgres".
func (d Dialect) String() string {
	if d == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// Options configure Open. The zero value is the durable default.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "FULL" (the default) or
	// "NORMAL". NORMAL is about three times faster and still safe against
	// a crash of the process, but a power loss or a crash of the machine
	// may roll back the last commits: only choose it when that is
	// acceptable.
	Synchronous string
	// BusyTimeout bounds how long a SQLite writer waits for another
	// process holding the file. Zero means 10 s.
	BusyTimeout time.Duration
	// MaxConns bounds the PostgreSQL connection pool (and the SQLite read
	// pool). Zero means 16.
	MaxConns int
	// ReadOnly opens the database for reading only: a SQLite file must
	// already exist and is never created or changed, WriteTx fails with
	// ErrReadOnly, and Migrate only checks that the schema is current. For
	// tools that inspect a database another process serves.
	ReadOnly bool
	// OnCommit, when set, is called after each write transaction commits
	// with the operations it carried (more than one for a group commit of
	// WriteBatched callers) and the time from its BEGIN to the end of its
	// COMMIT: metrics attach here. It runs on the committing goroutine and
	// must not block.
	OnCommit func(ops int, d time.Duration)
}

// ErrReadOnly is returned by WriteTx on a database opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("store: the database was opened read-only")

// ErrNestedWrite is returned by WriteTx and WriteBatched on SQLite when
// ctx was marked (Tx.Within) as running inside a write transaction of the
// same database: SQLite has one writer, which that transaction holds, so
// the new one would wait for itself until ctx ends.
var ErrNestedWrite = errors.New("store: a write transaction begun inside another on the same SQLite database would wait for itself; write through the transaction held (idempotency.Tx)")

// DB is an open store.
type DB struct {
	dialect  Dialect
	write    *sql.DB      // SQLite: the one write connection; Postgres: the pool
	read     *sql.DB      // SQLite: a read-only pool; Postgres: the pool
	writers  *writerQueue // SQLite: the write connection, handed out in arrival order
	target   string       // what was opened, for messages
	ro       bool         // opened with Options.ReadOnly
	onCommit func(ops int, d time.Duration)

	stmts stmtCache // SQLite: statements prepared once per pool

	batch batcher // WriteBatched's queue and the commit counters
}

type stmtKey struct {
	pool  *sql.DB
	query string
}

// maxCachedStmts bounds the statement cache: queries past it (built at run
// time, say) are simply not cached.
const maxCachedStmts = 128

// stmtCache holds prepared statements. SQLite parses every statement it is
// given, which costs as much CPU as the rest of a small transaction, so on
// SQLite statements are prepared once per pool and reused; pgx caches its
// own, so on PostgreSQL the cache stays off.
type stmtCache struct {
	mu     sync.Mutex
	on     bool
	closed bool
	stmts  map[stmtKey]*sql.Stmt
}

// get returns pool's prepared statement for query, if there is one.
func (c *stmtCache) get(pool *sql.DB, query string) *sql.Stmt {
	if !c.on {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[stmtKey{pool, query}]
}

// add prepares and caches pool's statements for queries. It must run
// while the caller holds none of pool's connections: preparing inside a
// transaction on SQLite's only write connection would wait for that
// connection forever.
func (c *stmtCache) add(ctx context.Context, pool *sql.DB, queries []string) {
	for _, q := range queries {
		k := stmtKey{pool, q}
		c.mu.Lock()
		_, done := c.stmts[k]
		full := c.closed || len(c.stmts) >= maxCachedStmts
		c.mu.Unlock()
		if done || full {
			continue
		}
		st, err := pool.PrepareContext(ctx, q)
		if err != nil {
			continue // the query reports its own error when it runs
		}
		c.mu.Lock()
		if _, done := c.stmts[k]; done || c.closed {
			st.Close()
		} else {
			c.stmts[k] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.stmts {
		st.Close()
	}
	c.stmts = nil
}

// IsPostgres reports whether dsn names a PostgreSQL database.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// CheckDSN reports whether Open could take dsn for what it names: a
// postgres:// URL, or a SQLite file path. A URL of any other scheme is an
// error, not a file name, and so is an empty string.
func CheckDSN(dsn string) error {
	if dsn == "" {
		return errors.New("store: empty database path")
	}
	if scheme, _, ok := strings.Cut(dsn, "://"); ok && !IsPostgres(dsn) && !strings.ContainsAny(scheme, `/\.`) {
		return fmt.Errorf("store: unsupported database URL scheme %q: give a postgres:// URL or the path of a SQLite file", scheme+"://")
	}
	return nil
}

// Open opens a store: a postgres:// or postgresql:// URL, or otherwise the
// path of a SQLite file (created if missing). A URL of any other scheme is
// refused rather than taken for a file name.
func Open(ctx context.Context, dsn string, opts *Options) (*DB, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := CheckDSN(dsn); err != nil {
		return nil, err
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 10 * time.Second
	}
	var db *DB
	var err error
	if IsPostgres(dsn) {
		db, err = openPostgres(dsn, o)
	} else {
		db, err = openSQLite(dsn, o)
	}
	if err != nil {
		return nil, err
	}
	db.ro, db.onCommit = o.ReadOnly, o.OnCommit
	if err := db.connect(ctx, o.BusyTimeout); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: opening %s: %w%s", db.target, err, createHint(dsn, err))
	}
	return db, nil
}

// connect opens the first write connection. When processes open one
// SQLite file at once (its switch to WAL, its first pages), SQLite may
// answer one of them SQLITE_BUSY at once, without waiting out the busy
// timeout (it calls no busy handler where waiting could deadlock): that
// open is tried again, until busyTimeout has passed.
func (db *DB) connect(ctx context.Context, busyTimeout time.Duration) error {
	deadline := time.Now().Add(busyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := db.write.PingContext(ctx)
		var lite *sqlite.Error
		if err == nil || db.dialect != SQLite || !errors.As(err, &lite) ||
			lite.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// createHint is, when a PostgreSQL server says the database a URL names
// does not exist (SQLSTATE 3D000), how to create it, on that server and as
// that user: PostgreSQL creates no database on connect, as SQLite creates
// its file. It is "" for any other failure.
func createHint(dsn string, err error) string {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "3D000" {
		return ""
	}
	cfg, perr := pgconn.ParseConfig(dsn)
	if perr != nil || cfg.Database == "" {
		return "; create it first (createdb NAME)"
	}
	return fmt.Sprintf("; create it first: createdb -h %s -p %d -U %s %s", shellWord(cfg.Host), cfg.Port, shellWord(cfg.User), shellWord(cfg.Database))
}

// shellWord quotes s for a shell when it holds more than letters, digits
// and -._/:@.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func openPostgres(dsn string, o Options) (*DB, error) {
	pool, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	pool.SetMaxOpenConns(o.MaxConns)
	pool.SetMaxIdleConns(o.MaxConns)
	target := dsn
	if u, err := url.Parse(dsn); err == nil {
		target = u.Redacted()
	}
	return &DB{dialect: Postgres, write: pool, read: pool, target: target}, nil
}

func openSQLite(path string, o Options) (*DB, error) {
	sync := strings.ToUpper(o.Synchronous)
	switch sync {
	case "":
		sync = "FULL"
	case "FULL", "NORMAL":
	default:
		return nil, fmt.Errorf("store: Synchronous must be FULL or NORMAL, not %q", o.Synchronous)
	}
	if path == "" {
		return nil, errors.New("store: empty database path")
	}
	file := strings.TrimPrefix(path, "file:")
	if i := strings.IndexByte(file, '?'); i >= 0 {
		return nil, fmt.Errorf("store: give SQLite a plain file path, not %q", path)
	}
	if err := checkFile(file, o.ReadOnly); err != nil {
		return nil, err
	}
	params := url.Values{}
	params.Set("_busy_timeout", fmt.Sprint(o.BusyTimeout.Milliseconds()))
	if o.ReadOnly {
		// No journal mode change, no file created: SQLite's own read-only
		// mode. A WAL database still reads what its writer committed.
		params.Set("mode", "ro")
		read, err := sql.Open("sqlite", "file:"+file+"?"+params.Encode())
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		keepReaders(read, o.MaxConns)
		return &DB{dialect: SQLite, write: read, read: read, target: file,
			stmts: stmtCache{on: true, stmts: map[stmtKey]*sql.Stmt{}}}, nil
	}
	params.Set("_journal_mode", "WAL")
	params.Set("_synchronous", sync)
	params.Add("_pragma", "foreign_keys(1)")
	writeParams := url.Values{}
	for k, v := range params {
		writeParams[k] = v
	}
	writeParams.Set("_txlock", "immediate")
	write, err := sql.Open("sqlite", "file:"+file+"?"+writeParams.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// One write connection, handed out in arrival order by writers.
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	read, err := sql.Open("sqlite", "file:"+file+"?"+params.Encode())
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	keepReaders(read, o.MaxConns)
	return &DB{dialect: SQLite, write: write, read: read, writers: &writerQueue{}, target: file,
		stmts: stmtCache{on: true, stmts: map[stmtKey]*sql.Stmt{}}}, nil
}

// keepReaders sizes a SQLite read pool: up to max connections, all of them
// kept while in use. database/sql keeps 2 idle connections by default, so
// with more concurrent readers than that every read past the second opened
// a connection (its pragmas, its statements prepared again) and closed it
// after: under 8 writers, a third of the ledger's CPU went there. What the
// kept connections hold is bounded by max page caches.
func keepReaders(read *sql.DB, max int) {
	read.SetMaxOpenConns(max)
	read.SetMaxIdleConns(max)
}

// checkFile tells, in words, why a SQLite file cannot be opened (for
// writing, unless readOnly), instead of SQLite's "unable to open database
// file (14)". Opened for writing, a missing file is created empty here, with
// permissions for its owner only: the ledger holds what tools returned.
func checkFile(file string, readOnly bool) error {
	fail := func(why string) error {
		return fmt.Errorf("store: cannot open the SQLite file %s: %s", file, why)
	}
	info, err := os.Stat(file)
	switch {
	case err == nil && info.IsDir():
		return fail("it is a directory")
	case err == nil:
		flag := os.O_RDWR
		if readOnly {
			flag = os.O_RDONLY
		}
		f, err := os.OpenFile(file, flag, 0)
		if err != nil {
			return fail(describePathError(err))
		}
		return f.Close()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return fail(describePathError(err))
	case readOnly:
		return fail("no such file")
	}
	dir := filepath.Dir(file)
	if d, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail("its directory " + dir + " does not exist")
		}
		return fail(describePathError(err))
	} else if !d.IsDir() {
		return fail(dir + " is not a directory")
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil // another process just created it
	}
	if err != nil {
		return fail("cannot create it in " + dir + ": " + describePathError(err))
	}
	return f.Close()
}

// describePathError is the reason of a file error without its repeated
// operation and path.
func describePathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Dialect returns the kind of database.
func (db *DB) Dialect() Dialect { return db.dialect }

// Close closes the store.
func (db *DB) Close() error {
	db.stmts.close()
	err := db.write.Close()
	if db.read != db.write {
		if rerr := db.read.Close(); err == nil {
			err = rerr
		}
	}
	return err
}

// Tx is a transaction. Queries use ? placeholders in both dialects.
type Tx struct {
	tx   *sql.Tx
	db   *DB
	pool *sql.DB
	// shared marks a group-commit transaction: one caller's cancellation
	// must not interrupt a statement, since SQLite then rolls back the
	// whole transaction, everyone's writes included.
	shared bool
	// unprepared lists queries that ran without a cached statement, to
	// prepare once the transaction ends.
	unprepared []string
}

type withinKey struct{}

// Within returns ctx marked as running inside t, for code that runs
// someone else's function inside a transaction it holds (the ledger runs a
// tool's handler so): on SQLite, a write transaction begun with the
// marked context on t's database fails at once with ErrNestedWrite,
// instead of waiting for the writer its own caller holds.
func (t *Tx) Within(ctx context.Context) context.Context {
	return context.WithValue(ctx, withinKey{}, t)
}

// nestedWrite reports whether ctx runs inside a write transaction of db
// that a new one would wait for.
func (db *DB) nestedWrite(ctx context.Context) bool {
	t, _ := ctx.Value(withinKey{}).(*Tx)
	return t != nil && t.db == db && db.writers != nil
}

// DB is the database the transaction belongs to: a component that writes
// through a transaction someone else began (a task created in the
// ledger's transaction) checks it is its own database.
func (t *Tx) DB() *DB { return t.db }

// prepared returns the transaction's use of a cached statement for query,
// or nil to run it unprepared (and cache it afterwards).
func (t *Tx) prepared(ctx context.Context, query string) *sql.Stmt {
	if !t.db.stmts.on {
		return nil
	}
	if st := t.db.stmts.get(t.pool, query); st != nil {
		// Closed with the transaction; the cached statement stays.
		return t.tx.StmtContext(ctx, st)
	}
	if len(t.unprepared) < 16 && !slices.Contains(t.unprepared, query) {
		t.unprepared = append(t.unprepared, query)
	}
	return nil
}

// stmtCtx is the context a statement runs under: the caller's, or in a
// shared transaction one that cannot interrupt it, after refusing to start
// for a caller that is gone.
func (t *Tx) stmtCtx(ctx context.Context) (context.Context, error) {
	if !t.shared {
		return ctx, nil
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return context.WithoutCancel(ctx), nil
}

// Exec runs a statement.
func (t *Tx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx, err := t.stmtCtx(ctx)
	if err != nil {
		return nil, err
	}
	var res sql.Result
	if st := t.prepared(ctx, query); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = t.tx.ExecContext(ctx, rebind(t.db.dialect, query), args...)
	}
	return res, wrap("exec", err)
}

// QueryRow runs a query expected to return at most one row.
func (t *Tx) QueryRow(ctx context.Context, query string, args ...any) *Row {
	if t.shared {
		// A Row cannot carry an early error; the caller's fn is rolled
		// back anyway once its ctx has ended.
		ctx = context.WithoutCancel(ctx)
	}
	if st := t.prepared(ctx, query); st != nil {
		return &Row{st.QueryRowContext(ctx, args...)}
	}
	return &Row{t.tx.QueryRowContext(ctx, rebind(t.db.dialect, query), args...)}
}

// Query runs a query. Errors met while iterating the rows are the
// driver's own.
func (t *Tx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx, err := t.stmtCtx(ctx)
	if err != nil {
		return nil, err
	}
	var rows *sql.Rows
	if st := t.prepared(ctx, query); st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = t.tx.QueryContext(ctx, rebind(t.db.dialect, query), args...)
	}
	return rows, wrap("query", err)
}

// WriteTx runs fn in a write transaction and commits it if fn returns nil,
// or rolls it back. On SQLite it waits its turn for the write connection
// (in arrival order, bounded by ctx) and begins IMMEDIATE; on PostgreSQL it
// begins READ COMMITTED.
func (db *DB) WriteTx(ctx context.Context, fn func(*Tx) error) error {
	if db.ro {
		return ErrReadOnly
	}
	if db.nestedWrite(ctx) {
		return ErrNestedWrite
	}
	if db.writers != nil {
		turn := db.writers.join()
		if db.batch.onWait != nil {
			db.batch.onWait()
		}
		select {
		case <-turn:
			defer db.writers.release()
		case <-ctx.Done():
			db.writers.leave(turn)
			return context.Cause(ctx)
		}
	}
	opts := &sql.TxOptions{}
	if db.dialect == Postgres {
		opts.Isolation = sql.LevelReadCommitted
	}
	began := time.Now()
	tx, err := db.write.BeginTx(ctx, opts)
	if err != nil {
		return wrap("begin", err)
	}
	t := &Tx{tx: tx, db: db, pool: db.write}
	// Deferred calls run last first: roll back, then prepare what ran
	// unprepared, then hand the write connection on.
	defer db.prepare(context.WithoutCancel(ctx), t)
	// Roll back on every way out but a commit, a panic in fn included:
	// an abandoned transaction would hold the write connection forever.
	defer tx.Rollback()
	if err := fn(t); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return wrap("commit", err)
	}
	db.committed(1, began)
	return nil
}

// committed counts a write transaction that committed ops operations.
func (db *DB) committed(ops int, began time.Time) {
	db.batch.commits.Add(1)
	db.batch.ops.Add(int64(ops))
	if db.onCommit != nil {
		db.onCommit(ops, time.Since(began))
	}
}

// ReadTx runs fn in a read-only transaction on the read pool, which on
// SQLite never waits for writers. Every statement in fn sees one
// consistent snapshot of the database: on SQLite the WAL snapshot taken
// at the first read, on PostgreSQL a REPEATABLE READ READ ONLY
// transaction's. (At READ COMMITTED each statement would see whatever had
// committed by its own start, so two related reads could disagree.)
func (db *DB) ReadTx(ctx context.Context, fn func(*Tx) error) error {
	opts := &sql.TxOptions{}
	if db.dialect == Postgres {
		opts.Isolation, opts.ReadOnly = sql.LevelRepeatableRead, true
	}
	tx, err := db.read.BeginTx(ctx, opts)
	if err != nil {
		return wrap("begin", err)
	}
	t := &Tx{tx: tx, db: db, pool: db.read}
	defer db.prepare(context.WithoutCancel(ctx), t)
	defer tx.Rollback()
	return fn(t)
}

// QueryRow runs a single-row read on the read pool, outside any explicit
// transaction: one statement sees one consistent snapshot by itself, and
// skipping BEGIN and ROLLBACK makes the ledger's replay check cheap.
func (db *DB) QueryRow(ctx context.Context, query string, args ...any) *Row {
	st := db.stmts.get(db.read, query)
	if st == nil && db.stmts.on {
		// No connection is held here, so preparing cannot wait on us.
		db.stmts.add(ctx, db.read, []string{query})
		st = db.stmts.get(db.read, query)
	}
	if st != nil {
		return &Row{st.QueryRowContext(ctx, args...)}
	}
	return &Row{db.read.QueryRowContext(ctx, rebind(db.dialect, query), args...)}
}

// prepare caches the statements t ran unprepared, once t has ended.
func (db *DB) prepare(ctx context.Context, t *Tx) {
	if len(t.unprepared) > 0 {
		db.stmts.add(ctx, t.pool, t.unprepared)
	}
}

// rebind turns ? placeholders into PostgreSQL's $1, $2, …, leaving quoted
// text alone.
func rebind(d Dialect, q string) string {
	if d != Postgres || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	quote := byte(0)
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// CountAtMost counts the rows of "FROM rows" (a table and its WHERE,
// with args for its placeholders), reading at most max+1 of them: past
// max the count is max and capped is true. An operator's page counts so,
// at the cost of a bounded read of an index however many rows there are.
func (t *Tx) CountAtMost(ctx context.Context, max int, rows string, args ...any) (n int, capped bool, err error) {
	err = t.QueryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM `+rows+` LIMIT ?) counted`, append(args, max+1)...).Scan(&n)
	if n > max {
		return max, true, err
	}
	return n, false, err
}
