package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
)

func TestMigrateAndWrite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		table := "store_test_items"
		steps := []Migration{
			{Version: 1, SQLite: `DROP TABLE IF EXISTS store_test_items; CREATE TABLE store_test_items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`,
				Postgres: `DROP TABLE IF EXISTS store_test_items; CREATE TABLE store_test_items (id BIGINT PRIMARY KEY, name TEXT NOT NULL)`},
			{Version: 2, SQLite: `ALTER TABLE store_test_items ADD COLUMN note TEXT`, Postgres: `ALTER TABLE store_test_items ADD COLUMN note TEXT`},
		}
		component := "store-test-" + t.Name()
		cleanup := func() {
			db.WriteTx(ctx, func(tx *Tx) error {
				tx.Exec(ctx, `DELETE FROM mcprel_migrations WHERE component = ?`, component)
				_, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+table)
				return err
			})
		}
		cleanup()
		defer cleanup()
		// Twice: the second run must apply nothing.
		for range 2 {
			if err := db.Migrate(ctx, component, steps); err != nil {
				t.Fatal(err)
			}
		}
		err = db.WriteTx(ctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO store_test_items (id, name, note) VALUES (?, ?, ?)`, 1, "a '?' inside", "n")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// A failing function rolls back.
		boom := errors.New("boom")
		if err := db.WriteTx(ctx, func(tx *Tx) error {
			tx.Exec(ctx, `INSERT INTO store_test_items (id, name) VALUES (?, ?)`, 2, "rolled back")
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("WriteTx = %v", err)
		}
		var n int
		var name string
		db.ReadTx(ctx, func(tx *Tx) error {
			tx.QueryRow(ctx, `SELECT count(*) FROM store_test_items`).Scan(&n)
			return tx.QueryRow(ctx, `SELECT name FROM store_test_items WHERE id = ?`, 1).Scan(&name)
		})
		if n != 1 || name != "a '?' inside" {
			t.Fatalf("rows = %d, name %q", n, name)
		}
	})
}

func TestRebind(t *testing.T) {
	got := rebind(Postgres, `SELECT '?' , ? FROM t WHERE a = ? AND b = "x?"`)
	if want := `SELECT '?' , $1 FROM t WHERE a = $2 AND b = "x?"`; got != want {
		t.Fatalf("rebind = %s", got)
	}
	if rebind(SQLite, "a = ?") != "a = ?" {
		t.Fatal("SQLite placeholders must stay")
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), &Options{Synchronous: "OFF"}); err == nil {
		t.Fatal("synchronous=OFF accepted")
	}
	if _, err := Open(context.Background(), "file:x.db?_synchronous=OFF", nil); err == nil {
		t.Fatal("a DSN with its own parameters accepted")
	}
}

// TestWritersQueueInOrder: SQLite writers are served in arrival order by
// the Go-side queue, and one that gives up while waiting leaves.
func TestWritersQueueInOrder(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	release := holdWriter(db)
	waiting := make(chan struct{}, 4)
	db.batch.onWait = func() { waiting <- struct{}{} }

	var order []int // appended by each writer in turn, under the write connection
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		wg.Go(func() {
			if err := db.WriteTx(ctx, func(*Tx) error { order = append(order, i); return nil }); err != nil {
				t.Error(err)
			}
		})
		<-waiting // each writer queues before the next arrives
	}
	// A writer that gives up while waiting leaves the queue with its cause.
	gctx, cancel := context.WithCancelCause(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		gaveUp <- db.WriteTx(gctx, func(*Tx) error { t.Error("a writer that gave up ran"); return nil })
	}()
	<-waiting
	cause := errors.New("deadline passed")
	cancel(cause)
	if err := <-gaveUp; !errors.Is(err, cause) {
		t.Fatalf("a writer that gives up: %v", err)
	}
	release()
	wg.Wait()
	if fmt.Sprint(order) != "[1 2 3]" {
		t.Fatalf("writers ran in order %v, want [1 2 3]", order)
	}
}

// TestSQLiteSettings: the file is in WAL mode with synchronous FULL unless
// NORMAL is asked for, and write transactions are IMMEDIATE.
func TestSQLiteSettings(t *testing.T) {
	for _, tc := range []struct {
		sync string
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{"", 2}, {"NORMAL", 1}} {
		ctx := context.Background()
		db, err := Open(ctx, filepath.Join(t.TempDir(), "s.db"), &Options{Synchronous: tc.sync})
		if err != nil {
			t.Fatal(err)
		}
		var mode string
		var sync int
		db.WriteTx(ctx, func(tx *Tx) error {
			tx.QueryRow(ctx, `PRAGMA journal_mode`).Scan(&mode)
			return tx.QueryRow(ctx, `PRAGMA synchronous`).Scan(&sync)
		})
		db.Close()
		if mode != "wal" || sync != tc.want {
			t.Errorf("Synchronous %q: journal_mode %q synchronous %d, want wal and %d", tc.sync, mode, sync, tc.want)
		}
	}
}

// TestImmediateTransactions: a write transaction takes the write lock when
// it begins, so a second handle on the same file cannot write until the
// first commits: no read-then-upgrade failures.
func TestImmediateTransactions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "i.db")
	a, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path, &Options{BusyTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.WriteTx(ctx, func(tx *Tx) error { _, err := tx.Exec(ctx, `CREATE TABLE t (x INTEGER)`); return err })
	inside := make(chan struct{})
	release := make(chan struct{})
	go a.WriteTx(ctx, func(tx *Tx) error {
		close(inside) // no statement yet: only BEGIN IMMEDIATE has run
		<-release
		return nil
	})
	<-inside
	err = b.WriteTx(ctx, func(tx *Tx) error { return nil })
	close(release)
	if err == nil {
		t.Fatal("a second writer began while the first held an IMMEDIATE transaction")
	}
}

// A panic inside a write transaction rolls it back and frees the write
// connection for the next writer.
func TestPanicInWriteTxRollsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := Open(ctx, dsn, &Options{MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.WriteTx(ctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `CREATE TABLE panic_test (v INTEGER)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not reach the caller")
				}
			}()
			db.WriteTx(ctx, func(tx *Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO panic_test (v) VALUES (1)`); err != nil {
					t.Error(err)
				}
				panic("handler bug")
			})
		}()
		if err := db.WriteTx(ctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO panic_test (v) VALUES (2)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var sum int
		db.ReadTx(ctx, func(tx *Tx) error { return tx.QueryRow(ctx, `SELECT COALESCE(SUM(v), 0) FROM panic_test`).Scan(&sum) })
		if sum != 2 {
			t.Fatalf("sum = %d: the panicking transaction's row survived (or the next one was lost)", sum)
		}
	})
}

// Replicas starting together migrate the same database at once: every one
// succeeds and each step is applied once.
func TestConcurrentMigrations(t *testing.T) {
	dsn := storetest.Postgres(t)
	ctx := context.Background()
	steps := []Migration{{Version: 1, SQL: `CREATE TABLE concurrent_items (id BIGINT PRIMARY KEY)`}}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			db, err := Open(ctx, dsn, nil)
			if err == nil {
				err = db.Migrate(ctx, "concurrent", steps)
				db.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a replica failed to migrate: %v", err)
		}
	}
}

// A write transaction begun inside another on the same SQLite database —
// a tool's handler calling WriteTx while the ledger holds the writer for
// it — fails at once, naming the mistake, instead of waiting for itself
// until its context ends. Another database, and a context not marked,
// are unaffected.
func TestNestedWriteFailsAtOnceOnSQLite(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Bounded only so that the old behaviour (waiting for itself) ends
	// the test as a failure rather than a hang.
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	noop := func(*Tx) error { return nil }
	err = db.WriteTx(ctx, func(tx *Tx) error {
		inner := tx.Within(bounded)
		if err := db.WriteTx(inner, noop); !errors.Is(err, ErrNestedWrite) {
			t.Errorf("WriteTx inside a write transaction = %v, want ErrNestedWrite", err)
		}
		if err := db.WriteBatched(inner, noop); !errors.Is(err, ErrNestedWrite) {
			t.Errorf("WriteBatched inside a write transaction = %v, want ErrNestedWrite", err)
		}
		if err := other.WriteTx(inner, noop); err != nil {
			t.Errorf("WriteTx on another database = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.WriteTx(ctx, noop); err != nil {
		t.Fatalf("after the transaction: %v", err)
	}
}

// Concurrent readers reuse the read pool's connections: none is closed for
// want of an idle slot and opened again (its pragmas run and its statements
// prepared anew) on the next read.
func TestReadersKeepTheirConnections(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, storetest.SQLite(t), &Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// All 8 readers hold a connection at once, then give it back.
	var holding, reading sync.WaitGroup
	holding.Add(8)
	for range 8 {
		reading.Go(func() {
			tx, err := db.read.BeginTx(ctx, nil)
			if err != nil {
				t.Error(err)
				holding.Done()
				return
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT 1`).Scan(&n); err != nil {
				t.Error(err)
			}
			holding.Done()
			holding.Wait()
			tx.Rollback()
		})
	}
	reading.Wait()
	if s := db.read.Stats(); s.MaxIdleClosed != 0 || s.Idle != 8 {
		t.Fatalf("read pool after 8 concurrent readers: %d idle, %d closed for want of an idle slot; want 8 kept", s.Idle, s.MaxIdleClosed)
	}
}
