package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// maxBatch bounds how many operations share one group-commit transaction.
const maxBatch = 64

// batchJob is one operation waiting for a group commit.
type batchJob struct {
	ctx      context.Context
	fn       func(*Tx) error
	err      error
	panicked any
	done     chan struct{}
}

// batcher queues operations for WriteBatched.
type batcher struct {
	mu      sync.Mutex
	pending []*batchJob

	commits atomic.Int64 // write transactions committed, batched or not
	ops     atomic.Int64 // operations committed in them

	onQueue func() // tests: called after a caller joins the queue
}

// WriteStats counts committed write transactions and the operations they
// carried; Operations / Commits is the mean group-commit batch size.
type WriteStats struct {
	Commits    int64
	Operations int64
}

// WriteStats returns the counters since the store was opened.
func (db *DB) WriteStats() WriteStats {
	return WriteStats{Commits: db.batch.commits.Load(), Operations: db.batch.ops.Load()}
}

// WriteBatched runs fn like WriteTx, except that on SQLite fn may share
// its transaction with other WriteBatched callers waiting at the same
// time: a group commit, one fsync for the batch instead of one per caller.
// Each fn runs in a savepoint of its own, so an error (or a panic, which
// reaches the caller's goroutine) rolls back only its own writes. The
// batch commits once; if that commit fails, every caller in it gets the
// error and nothing of theirs is kept. Throughput under concurrency rises
// with the batch size; a lone caller pays one savepoint more than WriteTx.
//
// fn runs on whichever caller's goroutine leads the batch, so it must not
// depend on goroutine identity, and it should use its own ctx in its
// statements: a caller whose ctx ends while it waits is dropped from the
// batch without running. On PostgreSQL, whose concurrent transactions
// commit in parallel already, WriteBatched is WriteTx.
func (db *DB) WriteBatched(ctx context.Context, fn func(*Tx) error) error {
	if db.slot == nil {
		return db.WriteTx(ctx, fn)
	}
	j := &batchJob{ctx: ctx, fn: fn, done: make(chan struct{})}
	db.batch.mu.Lock()
	db.batch.pending = append(db.batch.pending, j)
	db.batch.mu.Unlock()
	if db.batch.onQueue != nil {
		db.batch.onQueue()
	}
	for {
		select {
		case <-j.done:
			if j.panicked != nil {
				panic(j.panicked)
			}
			return j.err
		case <-db.slot:
			// Lead a batch: whatever is queued, ours first in line or
			// already taken by an earlier leader.
			db.runBatch(db.takeBatch())
			db.slot <- struct{}{}
		case <-ctx.Done():
			if db.dropJob(j) {
				return context.Cause(ctx)
			}
			<-j.done // a leader has it: its outcome is the answer
			if j.panicked != nil {
				panic(j.panicked)
			}
			return j.err
		}
	}
}

func (db *DB) takeBatch() []*batchJob {
	db.batch.mu.Lock()
	defer db.batch.mu.Unlock()
	n := min(len(db.batch.pending), maxBatch)
	batch := db.batch.pending[:n:n]
	db.batch.pending = db.batch.pending[n:]
	return batch
}

// dropJob removes j from the queue; false means a leader took it.
func (db *DB) dropJob(j *batchJob) bool {
	db.batch.mu.Lock()
	defer db.batch.mu.Unlock()
	for i, p := range db.batch.pending {
		if p == j {
			db.batch.pending = append(db.batch.pending[:i:i], db.batch.pending[i+1:]...)
			return true
		}
	}
	return false
}

// runBatch runs jobs in one transaction, each in a savepoint, and commits
// once. The leader holds the write slot.
func (db *DB) runBatch(jobs []*batchJob) {
	if len(jobs) == 0 {
		return
	}
	defer func() {
		for _, j := range jobs {
			close(j.done)
		}
	}()
	fail := func(err error) {
		for _, j := range jobs {
			if j.err == nil && j.panicked == nil {
				j.err = err
			}
		}
	}
	// The batch outlives any one caller's context: a caller that gives up
	// loses only its own savepoint.
	bg := context.Background()
	tx, err := db.write.BeginTx(bg, nil)
	if err != nil {
		fail(fmt.Errorf("store: begin: %w", err))
		return
	}
	t := &Tx{tx: tx, dialect: db.dialect, db: db, pool: db.write}
	defer db.prepare(bg, t)
	defer tx.Rollback()
	var ran int64
	savepointed := jobs
	if len(jobs) == 1 {
		// Alone, a job needs no savepoint: its failure rolls back the
		// whole transaction, which is only its own.
		j := jobs[0]
		if j.err = context.Cause(j.ctx); j.err == nil {
			j.panicked, j.err = runJob(j, t)
			if j.err == nil && j.panicked == nil && j.ctx.Err() != nil {
				j.err = context.Cause(j.ctx)
			}
		}
		if j.err != nil || j.panicked != nil {
			return
		}
		ran = 1
		savepointed = nil
	}
	for _, j := range savepointed {
		if err := j.ctx.Err(); err != nil {
			j.err = context.Cause(j.ctx)
			continue
		}
		if _, err := t.Exec(bg, `SAVEPOINT mcprel_batch`); err != nil {
			fail(fmt.Errorf("store: savepoint: %w", err))
			return
		}
		j.panicked, j.err = runJob(j, t)
		if j.err == nil && j.panicked == nil && j.ctx.Err() != nil {
			// As WriteTx does: a caller that is gone by the end of its
			// work keeps nothing.
			j.err = context.Cause(j.ctx)
		}
		if j.err != nil || j.panicked != nil {
			if _, err := t.Exec(bg, `ROLLBACK TO mcprel_batch`); err != nil {
				// SQLite rolled the whole transaction back (a full disk,
				// an I/O error): no one's writes survive.
				fail(fmt.Errorf("store: the transaction was lost: %w", errors.Join(j.err, err)))
				return
			}
		} else {
			ran++
		}
		if _, err := t.Exec(bg, `RELEASE mcprel_batch`); err != nil {
			fail(fmt.Errorf("store: release savepoint: %w", err))
			return
		}
	}
	if err := tx.Commit(); err != nil {
		fail(fmt.Errorf("store: commit: %w", err))
		return
	}
	db.batch.commits.Add(1)
	db.batch.ops.Add(ran)
}

// runJob runs one job's fn, catching a panic to hand to its caller.
func runJob(j *batchJob, t *Tx) (panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return nil, j.fn(t)
}
