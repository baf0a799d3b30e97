package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
)

// batchTable creates a table for the batch tests.
func batchTable(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	if err := db.WriteTx(ctx, func(tx *Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE batch_rows (name TEXT NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// queuedWriters opens a SQLite store with the batch table, takes its write
// connection (release gives it back) and then reports, on queued, each
// writer that starts waiting for it.
func queuedWriters(t *testing.T) (db *DB, queued chan struct{}, release func()) {
	t.Helper()
	db, err := Open(context.Background(), storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	batchTable(t, db)
	release = holdWriter(db) // before the hook: the holder does not count
	queued = make(chan struct{}, 16)
	db.batch.onWait = func() { queued <- struct{}{} }
	return db, queued, release
}

// holdWriter takes the write connection until the returned release is
// called, so that WriteBatched callers queue up behind it.
func holdWriter(db *DB) (release func()) {
	holding, done := make(chan struct{}), make(chan struct{})
	go db.WriteTx(context.Background(), func(*Tx) error { close(holding); <-done; return nil })
	<-holding
	return func() { close(done) }
}

func batchRows(t *testing.T, db *DB) map[string]bool {
	t.Helper()
	ctx := context.Background()
	got := map[string]bool{}
	err := db.ReadTx(ctx, func(tx *Tx) error {
		rows, err := tx.Query(ctx, `SELECT name FROM batch_rows`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			rows.Scan(&n)
			got[n] = true
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Callers queued behind a busy writer commit together, each in its own
// savepoint: a failing one and a panicking one lose only their own rows.
func TestWriteBatchedGroupsWaitingCallers(t *testing.T) {
	ctx := context.Background()
	db, queued, release := queuedWriters(t)
	before := db.WriteStats()
	var mu sync.Mutex
	var batches []int
	db.onCommit = func(ops int, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, ops)
	}

	const callers = 6
	errs := make([]error, callers)
	panics := make([]any, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			defer func() { panics[i] = recover() }()
			errs[i] = db.WriteBatched(ctx, func(tx *Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES (?)`, fmt.Sprint("row-", i)); err != nil {
					return err
				}
				switch i {
				case 2:
					return errors.New("business rule says no")
				case 4:
					panic("bug in caller 4")
				}
				return nil
			})
		})
	}
	// Every caller is queued before the connection frees up.
	for range callers {
		<-queued
	}
	release()
	wg.Wait()

	for i := range callers {
		switch i {
		case 2:
			if errs[i] == nil || errs[i].Error() != "business rule says no" {
				t.Errorf("caller 2: %v, want its own error", errs[i])
			}
		case 4:
			if panics[i] != "bug in caller 4" {
				t.Errorf("caller 4 recovered %v, want its own panic", panics[i])
			}
		default:
			if errs[i] != nil || panics[i] != nil {
				t.Errorf("caller %d: %v, %v", i, errs[i], panics[i])
			}
		}
	}
	got := batchRows(t, db)
	want := map[string]bool{"row-0": true, "row-1": true, "row-3": true, "row-5": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
	after := db.WriteStats()
	// The holder's transaction plus one batch.
	if commits, ops := after.Commits-before.Commits, after.Operations-before.Operations; commits != 2 || ops != 5 {
		t.Fatalf("%d commits carrying %d operations; want 2 (the holder and one batch) carrying 5", commits, ops)
	}
	// OnCommit saw the same: the holder alone, then the batch of the four
	// callers whose writes were kept.
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(batches) != "[1 4]" {
		t.Fatalf("OnCommit saw batches %v, want [1 4]", batches)
	}
}

// Options.OnCommit reaches the store: a lone write transaction is a batch
// of one, and a failed one is not reported.
func TestOnCommitOption(t *testing.T) {
	ctx := context.Background()
	var got []int
	db, err := Open(ctx, storetest.SQLite(t), &Options{OnCommit: func(ops int, d time.Duration) {
		if d <= 0 {
			t.Errorf("commit took %v", d)
		}
		got = append(got, ops)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	batchTable(t, db)
	db.WriteTx(ctx, func(*Tx) error { return errors.New("no") })
	if err := db.WriteBatched(ctx, func(tx *Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES ('a')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 1]" { // the table's creation, then the insert
		t.Fatalf("OnCommit saw %v, want [1 1]", got)
	}
}

// A caller whose context ends while it is queued never runs.
func TestWriteBatchedDropsCancelledCallers(t *testing.T) {
	ctx := context.Background()
	db, queued, release := queuedWriters(t)
	cctx, cancel := context.WithCancelCause(ctx)
	gone := errors.New("caller left")
	done := make(chan error, 1)
	go func() {
		done <- db.WriteBatched(cctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES ('cancelled')`)
			return err
		})
	}()
	<-queued
	cancel(gone)
	if err := <-done; !errors.Is(err, gone) {
		t.Fatalf("cancelled caller = %v, want its cause", err)
	}
	release()
	db.batch.onWait = nil
	if err := db.WriteBatched(ctx, func(tx *Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES ('next')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := batchRows(t, db); !got["next"] || got["cancelled"] {
		t.Fatalf("rows = %v", got)
	}
}

// On PostgreSQL WriteBatched is a plain write transaction.
func TestWriteBatchedOnPostgres(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, storetest.Postgres(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	batchTable(t, db)
	err = db.WriteBatched(ctx, func(tx *Tx) error {
		tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES ('rolled back')`)
		return errors.New("no")
	})
	if err == nil || batchRows(t, db)["rolled back"] {
		t.Fatalf("WriteBatched = %v, rows %v", err, batchRows(t, db))
	}
}

// A caller whose context ends in the middle of its work in a shared
// transaction loses its own writes; the others in the batch commit.
func TestWriteBatchedCancelledMidWork(t *testing.T) {
	ctx := context.Background()
	db, queued, release := queuedWriters(t)

	actx, cancel := context.WithCancelCause(ctx)
	gone := errors.New("client went away")
	results := make(chan error, 2)
	go func() {
		results <- db.WriteBatched(actx, func(tx *Tx) error {
			if _, err := tx.Exec(actx, `INSERT INTO batch_rows (name) VALUES ('a1')`); err != nil {
				return err
			}
			cancel(gone)
			_, err := tx.Exec(actx, `INSERT INTO batch_rows (name) VALUES ('a2')`)
			return err
		})
	}()
	<-queued // a is first in line
	go func() {
		results <- db.WriteBatched(ctx, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES ('b')`)
			return err
		})
	}()
	<-queued
	release()
	var errs []error
	for range 2 {
		errs = append(errs, <-results)
	}
	var sawGone, sawNil bool
	for _, err := range errs {
		sawGone = sawGone || errors.Is(err, gone)
		sawNil = sawNil || err == nil
	}
	if !sawGone || !sawNil {
		t.Fatalf("outcomes %v: want the cancelled caller's cause and one success", errs)
	}
	if got := batchRows(t, db); !got["b"] || got["a1"] || got["a2"] {
		t.Fatalf("rows = %v: want b only", got)
	}
}

// A fn that ends its goroutine (runtime.Goexit, as t.FailNow does) takes
// no one's success with it: every caller that returns reports that
// nothing was written, and the writer is free again.
func TestWriteBatchedSurvivesGoexit(t *testing.T) {
	ctx := context.Background()
	db, queued, release := queuedWriters(t)
	results := make(chan error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"exits", "innocent"} {
		wg.Go(func() {
			err := db.WriteBatched(ctx, func(tx *Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES (?)`, name); err != nil {
					return err
				}
				if i == 0 {
					runtime.Goexit()
				}
				return nil
			})
			results <- err // not reached by a goroutine that led and exited
		})
		<-queued
	}
	release()
	wg.Wait()
	close(results)
	for err := range results {
		if !errors.Is(err, errNotCommitted) {
			t.Fatalf("a caller returned %v, want errNotCommitted", err)
		}
	}
	db.batch.onWait = nil
	if err := db.WriteBatched(ctx, func(tx *Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO batch_rows (name) VALUES ('after')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := batchRows(t, db); len(got) != 1 || !got["after"] {
		t.Fatalf("rows = %v: want only the write made after", got)
	}
}
