package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

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
	db, err := Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	batchTable(t, db)

	queued := make(chan struct{}, 16)
	db.batch.onQueue = func() { queued <- struct{}{} }
	release := holdWriter(db)
	before := db.WriteStats()

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
}

// A caller whose context ends while it is queued never runs.
func TestWriteBatchedDropsCancelledCallers(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	batchTable(t, db)
	queued := make(chan struct{}, 1)
	db.batch.onQueue = func() { queued <- struct{}{} }
	release := holdWriter(db)
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
	db.batch.onQueue = nil
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
