package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
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

	onWait func() // tests: called when a writer starts waiting for its turn
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

// WriterBusy reports whether a write transaction of this process is
// running or waiting on SQLite, whose writers take turns: a caller that
// may be answered by a read (a replay) reads first then, rather than
// queue for the write connection. It is false on PostgreSQL, whose
// writers do not queue, and says nothing of other processes.
func (db *DB) WriterBusy() bool {
	return db.writers != nil && db.writers.busy()
}

// WriteBatched runs fn like WriteTx, except that on SQLite fn may share
// its transaction with other WriteBatched callers waiting at the same
// time: a group commit, one fsync for the batch instead of one per caller.
// Each fn runs in a savepoint of its own (a lone one needs none), so an
// error, a panic (re-raised on the caller's goroutine) or the end of the
// caller's ctx rolls back only its own writes. The batch commits once; if
// that commit fails, every caller in it gets the error and nothing of
// theirs is kept.
//
// fn runs on whichever caller's goroutine leads the batch, so it must not
// depend on goroutine identity. Its statements are not interrupted when
// its ctx ends — interrupting one would roll back every caller's writes —
// but a statement started after that fails, and whatever fn did is rolled
// back. A caller whose ctx ends while it waits is dropped without running.
// On PostgreSQL, whose concurrent transactions commit in parallel
// already, WriteBatched is WriteTx.
func (db *DB) WriteBatched(ctx context.Context, fn func(*Tx) error) error {
	if db.writers == nil {
		return db.WriteTx(ctx, fn)
	}
	if db.nestedWrite(ctx) {
		return ErrNestedWrite
	}
	j := &batchJob{ctx: ctx, fn: fn, done: make(chan struct{})}
	db.batch.mu.Lock()
	db.batch.pending = append(db.batch.pending, j)
	db.batch.mu.Unlock()
	if db.batch.onWait != nil {
		db.batch.onWait()
	}
	for {
		turn := db.writers.join()
		select {
		case <-j.done: // an earlier leader ran it
			db.writers.leave(turn)
			return j.outcome()
		case <-turn:
			// Lead a batch: whatever is queued, ours first in line or
			// already taken by an earlier leader.
			func() {
				defer db.writers.release()
				db.runBatch(db.takeBatch())
			}()
			select {
			case <-j.done:
				return j.outcome()
			default: // taken by no batch yet (the queue was longer than a batch)
			}
		case <-ctx.Done():
			db.writers.leave(turn)
			if db.dropJob(j) {
				return context.Cause(ctx)
			}
			<-j.done // a leader has it: its outcome is the answer
			return j.outcome()
		}
	}
}

// errNotCommitted is the outcome of a job whose batch ended without a
// commit for reasons not its own (its leader's goroutine exited).
var errNotCommitted = errors.New("store: the shared transaction ended before it committed; nothing was written")

// outcome is what the job's caller gets, once its batch is done.
func (j *batchJob) outcome() error {
	if j.panicked != nil {
		panic(j.panicked)
	}
	return j.err
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

// runBatch runs jobs in one transaction, each in a savepoint when there
// are several, and commits once. The leader holds the write slot. Every
// job's outcome starts as errNotCommitted and becomes nil only after the
// commit, so no way out of here reports a write that was not kept.
func (db *DB) runBatch(jobs []*batchJob) {
	if len(jobs) == 0 {
		return
	}
	for _, j := range jobs {
		j.err = errNotCommitted
	}
	defer func() {
		for _, j := range jobs {
			close(j.done)
		}
	}()
	// fail gives err to every job not already failed by its own fn.
	fail := func(err error) {
		for _, j := range jobs {
			if j.err == errNotCommitted {
				j.err = err
			}
		}
	}
	// The batch outlives any one caller's context.
	bg := context.Background()
	began := time.Now()
	tx, err := db.write.BeginTx(bg, nil)
	if err != nil {
		fail(wrap("begin", err))
		return
	}
	t := &Tx{tx: tx, db: db, pool: db.write, shared: true}
	defer db.prepare(bg, t)
	defer tx.Rollback()
	// Alone, a job needs no savepoint: its failure rolls back the whole
	// transaction, which is only its own.
	savepoints := len(jobs) > 1
	var kept []*batchJob
	for _, j := range jobs {
		if savepoints {
			if _, err := t.Exec(bg, `SAVEPOINT mcprel_batch`); err != nil {
				fail(fmt.Errorf("store: savepoint: %w", err))
				return
			}
		}
		var err error
		if j.panicked, err = runJob(j, t); err == nil && j.panicked == nil {
			kept = append(kept, j)
		} else {
			j.err = err
			if !savepoints {
				return
			}
			if _, rerr := t.Exec(bg, `ROLLBACK TO mcprel_batch`); rerr != nil {
				// SQLite rolled the whole transaction back (a full disk,
				// an I/O error): no one's writes survive.
				fail(fmt.Errorf("store: the transaction was lost: %w", errors.Join(err, rerr)))
				return
			}
		}
		if savepoints {
			if _, err := t.Exec(bg, `RELEASE mcprel_batch`); err != nil {
				fail(fmt.Errorf("store: release savepoint: %w", err))
				return
			}
		}
	}
	if len(kept) == 0 {
		return
	}
	if err := tx.Commit(); err != nil {
		fail(wrap("commit", err))
		return
	}
	for _, j := range kept {
		j.err = nil
	}
	db.committed(len(kept), began)
}

// runJob runs one job's fn, catching a panic to hand to its caller. A job
// whose caller is gone, before or by the end of its fn, keeps nothing, as
// in WriteTx.
func runJob(j *batchJob, t *Tx) (panicked any, err error) {
	if j.ctx.Err() != nil {
		return nil, context.Cause(j.ctx)
	}
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	if err := j.fn(t); err != nil {
		return nil, err
	}
	if j.ctx.Err() != nil {
		return nil, context.Cause(j.ctx)
	}
	return nil, nil
}
