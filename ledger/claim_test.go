package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// clock is a time source tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

// The ledger stores milliseconds; so does the clock.
func newClock() *clock { return &clock{now: time.UnixMilli(time.Now().UnixMilli())} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestClaimCompleteReplay(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "pay-1", `{"cents":500}`)
		claim, replayed, err := l.Claim(ctx, o)
		if err != nil || replayed != nil || claim == nil {
			t.Fatalf("Claim = %v, %v, %v", claim, replayed, err)
		}
		if claim.Key() != "pay-1" || !claim.LeaseUntil().Equal(clk.Now().Add(10*time.Second)) || claim.Executions != 1 {
			t.Fatalf("claim = key %q, lease until %v, executions %d", claim.Key(), claim.LeaseUntil(), claim.Executions)
		}
		// While the lease holds, duplicates are told to come back: after
		// as long again as the holder has run (see
		// TestInProgressRetryAfterFollowsTheHolder).
		clk.Advance(4 * time.Second)
		var busy *ledger.InProgressError
		if _, _, err := l.Claim(ctx, o); !errors.As(err, &busy) || busy.RetryAfter != 4*time.Second {
			t.Fatalf("duplicate Claim = %v, want InProgressError with RetryAfter 4s", err)
		}
		var executed atomic.Int64
		if _, err := l.Do(ctx, o, reserve(&executed, o, 1)); !errors.As(err, &busy) || executed.Load() != 0 {
			t.Fatalf("Do on a claimed key = %v (%d executions), want InProgressError", err, executed.Load())
		}
		rec, err := l.Lookup(ctx, "acme", "reserve", "pay-1")
		if err != nil || rec.State != ledger.InProgress || rec.Result != nil {
			t.Fatalf("Lookup while in progress = %+v, %v", rec, err)
		}
		res, err := claim.Complete(ctx, json.RawMessage(`{"charge":"ch_1"}`))
		if err != nil || res.Replayed || string(res.Data) != `{"charge":"ch_1"}` {
			t.Fatalf("Complete = %+v, %v", res, err)
		}
		// After completion both modes replay.
		_, again, err := l.Claim(ctx, o)
		if err != nil || again == nil || !again.Replayed || string(again.Data) != `{"charge":"ch_1"}` {
			t.Fatalf("Claim after Complete = %+v, %v", again, err)
		}
		viaDo, err := l.Do(ctx, o, reserve(&executed, o, 1))
		if err != nil || !viaDo.Replayed || executed.Load() != 0 {
			t.Fatalf("Do after Complete = %+v, %v", viaDo, err)
		}
		if _, err := claim.Complete(ctx, json.RawMessage(`{"charge":"ch_2"}`)); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("second Complete = %v, want ErrLeaseLost", err)
		}
	})
}

func TestClaimReleaseAndTakeover(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "pay-2", `{"cents":100}`)

		// Released: the effect did not happen, the next caller starts over.
		first, _, err := l.Claim(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Lookup(ctx, "acme", "reserve", "pay-2"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Lookup after Release = %v", err)
		}
		second, _, err := l.Claim(ctx, o)
		if err != nil || second.Executions != 1 {
			t.Fatalf("Claim after Release = %+v, %v", second, err)
		}

		// The holder stalls past its lease: another caller takes over,
		// and the stalled holder can no longer complete.
		clk.Advance(10 * time.Second)
		third, _, err := l.Claim(ctx, o)
		if err != nil || third == nil || third.Executions != 2 {
			t.Fatalf("Claim after the lease expired = %+v, %v; want a takeover counting 2 executions", third, err)
		}
		if _, err := second.Complete(ctx, json.RawMessage(`{"late":true}`)); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("Complete by the expired holder = %v, want ErrLeaseLost", err)
		}
		if err := second.Release(ctx); !errors.Is(err, ledger.ErrLeaseLost) { // not its key any more
			t.Fatalf("Release by the expired holder = %v, want ErrLeaseLost", err)
		}
		if rec, err := l.Lookup(ctx, "acme", "reserve", "pay-2"); err != nil || rec.State != ledger.InProgress || rec.Executions != 2 {
			t.Fatalf("after the expired holder's Release: %+v, %v; want the taker's claim untouched", rec, err)
		}
		res, err := third.Complete(ctx, json.RawMessage(`{"charge":"ch_3"}`))
		if err != nil || res.Executions != 2 {
			t.Fatalf("Complete after takeover = %+v, %v", res, err)
		}
		rec, err := l.Lookup(ctx, "acme", "reserve", "pay-2")
		if err != nil || rec.State != ledger.Committed || string(rec.Result) != `{"charge":"ch_3"}` || rec.Executions != 2 {
			t.Fatalf("record = %+v, %v", rec, err)
		}
	})
}

// Racing claims on one key: exactly one holds it, the others are told it
// is in progress.
func TestClaimRace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		handles := []*ledger.Ledger{open(t, dsn, nil), open(t, dsn, nil), open(t, dsn, nil), open(t, dsn, nil)}
		o := op("acme", "pay-race", `{}`)
		var held, busy atomic.Int64
		barrier := make(chan struct{})
		var wg sync.WaitGroup
		for _, l := range handles {
			wg.Go(func() {
				<-barrier
				claim, _, err := l.Claim(context.Background(), o)
				var inProgress *ledger.InProgressError
				switch {
				case err == nil && claim != nil:
					held.Add(1)
				case errors.As(err, &inProgress):
					busy.Add(1)
				default:
					t.Errorf("Claim = %v, %v", claim, err)
				}
			})
		}
		close(barrier)
		wg.Wait()
		if held.Load() != 1 || busy.Load() != int64(len(handles)-1) {
			t.Fatalf("%d claims held, %d told in progress", held.Load(), busy.Load())
		}
	})
}

func TestRetentionAndReaper(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Retention: time.Hour})
		ledger.SetClock(l, clk.Now)
		for _, key := range []string{"a", "b", "c", "d", "e"} {
			o := op("acme", key, `{}`)
			if _, err := l.Do(ctx, o, reserve(nil, o, 1)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(30 * time.Minute)
		late := op("acme", "late", `{}`)
		if _, err := l.Do(ctx, late, reserve(nil, late, 1)); err != nil {
			t.Fatal(err)
		}
		if n, err := l.Reap(ctx, clk.Now(), 2); err != nil || n != 0 {
			t.Fatalf("Reap within retention = %d, %v", n, err)
		}
		clk.Advance(31 * time.Minute) // the first five expired, "late" did not
		if _, err := l.Lookup(ctx, "acme", "reserve", "a"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Lookup of an expired record = %v, want ErrNotFound", err)
		}
		var total int
		for {
			n, err := l.Reap(ctx, clk.Now(), 2)
			if err != nil {
				t.Fatal(err)
			}
			if n > 2 {
				t.Fatalf("Reap deleted %d records, more than its batch", n)
			}
			total += n
			if n < 2 {
				break
			}
		}
		if total != 5 {
			t.Fatalf("reaped %d records, want 5", total)
		}
		if _, err := l.Lookup(ctx, "acme", "reserve", "late"); err != nil {
			t.Fatalf("the unexpired record went: %v", err)
		}
		// An expired key is a new operation, even with other arguments.
		o := op("acme", "b", `{"changed":true}`)
		if res, err := l.Do(ctx, o, reserve(nil, o, 1)); err != nil || res.Replayed {
			t.Fatalf("reused key after retention = %+v, %v", res, err)
		}
	})
}

// An expired record the reaper has not reached yet does not hold its key.
func TestExpiredRecordFreesKeyBeforeReaping(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Retention: time.Minute})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "k", `{"quantity":1}`)
		if _, err := l.Do(ctx, o, reserve(nil, o, 1)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		changed := op("acme", "k", `{"quantity":2}`)
		res, err := l.Do(ctx, changed, reserve(nil, changed, 2))
		if err != nil || res.Replayed {
			t.Fatalf("Do on an expired key = %+v, %v; want a fresh execution", res, err)
		}
		claimOp := op("acme", "k2", `{}`)
		if _, err := l.Do(ctx, claimOp, reserve(nil, claimOp, 1)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if claim, _, err := l.Claim(ctx, claimOp); err != nil || claim == nil || claim.Executions != 1 {
			t.Fatalf("Claim on an expired key = %+v, %v", claim, err)
		}
	})
}

func TestOpenRefusesRetentionShorterThanLease(t *testing.T) {
	db, err := store.Open(context.Background(), storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := ledger.Open(context.Background(), db, &ledger.Options{Retention: time.Second, Lease: time.Minute}); err == nil {
		t.Fatal("Open accepted a retention shorter than the lease")
	}
}

// RunReaper reaps on its ticker, in batches, and stops with its context;
// the bubble's fake clock drives both the ticker and the ledger's time.
func TestRunReaper(t *testing.T) {
	l := open(t, storetest.SQLite(t), &ledger.Options{Retention: time.Hour})
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		for _, key := range []string{"a", "b", "c"} {
			o := op("acme", key, `{}`)
			if _, err := l.Do(ctx, o, reserve(nil, o, 1)); err != nil {
				t.Fatal(err)
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { l.RunReaper(rctx, time.Minute, 2); close(done) }()
		time.Sleep(59 * time.Minute) // fake time: ticks come, nothing has expired
		synctest.Wait()
		if _, err := l.Lookup(ctx, "acme", "reserve", "a"); err != nil {
			t.Fatalf("reaped before expiry: %v", err)
		}
		time.Sleep(2 * time.Minute) // past retention and one more tick
		synctest.Wait()
		if n, err := l.Reap(ctx, time.Now(), 10); err != nil || n != 0 {
			t.Fatalf("after the reaper ran, %d expired records were left (%v)", n, err)
		}
		cancel()
		<-done
	})
}

// Racing callers on a key whose retention ended: exactly one takes it
// over and runs; the other replays that run or is told it is in progress.
func TestExpiredKeyRace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		clk := newClock()
		handles := []*ledger.Ledger{open(t, dsn, &ledger.Options{Retention: time.Minute}), open(t, dsn, &ledger.Options{Retention: time.Minute})}
		for _, l := range handles {
			ledger.SetClock(l, clk.Now)
		}
		for round := range 30 {
			key := fmt.Sprintf("expiring-%d", round)
			o := op("acme", key, `{"quantity":1}`)
			if _, err := handles[0].Do(context.Background(), o, reserve(nil, o, 1)); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute) // the record expires, unreaped
			var executed atomic.Int64
			barrier := make(chan struct{})
			var wg sync.WaitGroup
			for _, l := range handles {
				wg.Go(func() {
					<-barrier
					_, err := l.Do(context.Background(), o, reserve(&executed, o, 1))
					var busy *ledger.InProgressError
					if err != nil && !errors.As(err, &busy) {
						t.Errorf("round %d: %v", round, err)
					}
				})
			}
			close(barrier)
			wg.Wait()
			if executed.Load() != 1 {
				t.Fatalf("round %d: the expired key ran %d times, want 1", round, executed.Load())
			}
			if n := countEffects(t, handles[0], "acme", key); n != 2 { // the first life and the second
				t.Fatalf("round %d: %d effect rows, want 2", round, n)
			}
		}
	})
}

// On SQLite, which keeps no expiry index, the reaper reads the records in
// key order, a paced number a tick, and each tick goes on where the last
// one stopped; records still within retention are kept wherever they lie.
func TestSweepGoesOnWhereItStopped(t *testing.T) {
	ledger.SetReapPace(t, 10, 25)
	l := open(t, storetest.SQLite(t), &ledger.Options{Retention: time.Hour})
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		do := func(key string) {
			o := op("acme", key, `{}`)
			if _, err := l.Do(ctx, o, reserve(nil, o, 1)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 100 {
			do(fmt.Sprintf("old-%03d", i))
		}
		time.Sleep(30 * time.Minute)
		for i := range 10 { // interleaved in key order with the old ones
			do(fmt.Sprintf("old-%03d-young", i*10))
		}
		time.Sleep(31 * time.Minute) // the 100 expired; the 10 young did not
		count := func() int {
			var n int
			if err := l.DB().ReadTx(ctx, func(tx *store.Tx) error {
				return tx.QueryRow(ctx, `SELECT COUNT(*) FROM mcprel_ledger`).Scan(&n)
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { l.RunReaper(rctx, time.Minute, 100); close(done) }()
		// Each tick reads 25 records: about 23 of them old ones.
		var left []int
		for range 6 {
			time.Sleep(time.Minute)
			synctest.Wait()
			left = append(left, count())
		}
		for i := 1; i < len(left); i++ {
			if left[i] > left[i-1] {
				t.Fatalf("records after each tick: %v", left)
			}
		}
		if left[0] < 110-25 || left[0] > 110-20 {
			t.Fatalf("the first tick left %d of 110 records; it reads 25 (records after each tick: %v)", left[0], left)
		}
		if left[len(left)-1] != 10 {
			t.Fatalf("records after each tick: %v; want the 10 young ones left at the end", left)
		}
		for i := range 10 {
			if _, err := l.Lookup(ctx, "acme", "reserve", fmt.Sprintf("old-%03d-young", i*10)); err != nil {
				t.Fatalf("a record within retention went: %v", err)
			}
		}
		cancel()
		<-done
	})
}

// The expiry index is dropped on SQLite, where writing it cost every keyed
// operation a page, and kept on PostgreSQL, whose reaper uses it.
func TestExpiryIndexOnlyOnPostgres(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		q := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'mcprel_ledger_expires'`
		want := 0
		if l.DB().Dialect() == store.Postgres {
			q, want = `SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'mcprel_ledger_expires' AND schemaname = current_schema()`, 1
		}
		var n int
		if err := l.DB().QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("%d expiry indexes on %s, want %d", n, l.DB().Dialect(), want)
		}
	})
}

// A tick reads enough records to read them all in a quarter of the
// retention, and never fewer than the minimum: with one-minute ticks and
// a day's retention, 1/360 of the ledger a tick, at any size.
func TestSweepBudget(t *testing.T) {
	for _, c := range []struct{ total, want int }{
		{0, 10_000}, {1_000_000, 10_000}, {10_000_000, 27_778}, {100_000_000, 277_778}, {3_000_000_000, 8_333_334},
	} {
		if got := ledger.SweepBudget(c.total, time.Minute, 24*time.Hour); got != c.want {
			t.Errorf("%d records: %d a tick, want %d", c.total, got, c.want)
		}
	}
}

// The reaper and a call that takes an expired key over race: the reaper
// has found the record expired, the call renews it, and only then does the
// reaper delete. The renewed record stays, on both stores: the delete is
// conditional on the record still being expired, not on having been.
func TestReaperRacesATakeover(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		const app = "ledger-reaper-race"
		l := open(t, storetest.Tagged(dsn, app), &ledger.Options{Retention: time.Minute})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "k", `{"quantity":1}`)
		if _, err := l.Do(ctx, o, reserve(nil, o, 1)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute) // expired; the reaper will find it so
		reapAt := clk.Now()
		clk.Advance(time.Second) // the takeover's record expires after reapAt

		// The takeover holds its transaction open inside its effect.
		entered, release := make(chan struct{}), make(chan struct{})
		took := make(chan error, 1)
		go func() {
			_, err := l.Do(ctx, o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
				close(entered)
				<-release
				return reserve(nil, o, 2)(ctx, tx)
			})
			took <- err
		}()
		<-entered

		reaped := make(chan int, 1)
		scanned := make(chan struct{})
		if l.DB().Dialect() == store.SQLite {
			// The reaper reads (no writer waits for that), then queues
			// for the writer the takeover holds.
			ledger.OnScanned(l, func() { close(scanned) })
		}
		go func() {
			n, err := l.Reap(ctx, reapAt, 10)
			if err != nil {
				t.Error(err)
			}
			reaped <- n
		}()
		if l.DB().Dialect() == store.SQLite {
			<-scanned
		} else {
			// PostgreSQL: the reaper's DELETE found the old, expired row
			// and waits for the takeover's row lock.
			awaitLockWait(t, l.DB(), app, "DELETE FROM mcprel_ledger")
		}
		close(release)
		if err := <-took; err != nil {
			t.Fatal(err)
		}
		if n := <-reaped; n != 0 {
			t.Fatalf("the reaper deleted %d records, want 0: the one it found was renewed", n)
		}
		rec, err := l.Lookup(ctx, "acme", "reserve", "k")
		if err != nil || !strings.Contains(string(rec.Result), `"reserved":2`) {
			t.Fatalf("the renewed record: %+v, %v", rec, err)
		}
	})
}

// awaitLockWait waits until a PostgreSQL backend named application (see
// storetest.Tagged), running a statement that starts with prefix, waits
// for a lock.
func awaitLockWait(t *testing.T, db *store.DB, application, prefix string) {
	t.Helper()
	deadline := time.Now().Add(mcptest.Timeout)
	for time.Now().Before(deadline) {
		var n int
		err := db.QueryRow(context.Background(), `SELECT COUNT(*) FROM pg_stat_activity
			WHERE application_name = ? AND wait_event_type = 'Lock' AND query LIKE ? || '%'`, application, prefix).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling what PostgreSQL reports, not standing in for it
	}
	t.Fatalf("no statement %q waited for a lock within %v", prefix, mcptest.Timeout)
}

// A duplicate of a claim in progress is told to come back after about as
// long as the holder has run so far — a call just begun soon, a longer
// one later — at least a tenth of a second, but never after the holder's
// deadline (its context's, recorded with the claim), when it must have
// answered, nor after its lease runs out, when the key is decided
// without it. Both ways of claiming, and Do meeting a claim, answer so.
func TestInProgressRetryAfterFollowsTheHolder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		const lease = 5 * time.Minute
		l := open(t, dsn, &ledger.Options{Lease: lease})
		ledger.SetClock(l, clk.Now)
		told := func(o ledger.Op) []time.Duration {
			t.Helper()
			var got []time.Duration
			var busy *ledger.InProgressError
			for _, claim := range []func(context.Context, ledger.Op) (*ledger.Claim, *ledger.Result, error){l.Claim, l.ClaimOnce} {
				if c, _, err := claim(ctx, o); !errors.As(err, &busy) {
					t.Fatalf("a duplicate = %v, %v; want InProgressError", c, err)
				}
				got = append(got, busy.RetryAfter)
			}
			if _, err := l.Do(ctx, o, reserve(nil, o, 1)); !errors.As(err, &busy) {
				t.Fatalf("Do on a claimed key = %v; want InProgressError", err)
			}
			return append(got, busy.RetryAfter)
		}
		want := func(o ledger.Op, d time.Duration, why string) {
			t.Helper()
			for i, got := range told(o) {
				if got != d {
					t.Fatalf("%s: duplicate %d told to retry after %v, want %v", why, i, got, d)
				}
			}
		}

		// A call with a minute to run: the deadline its context gives.
		deadline := clk.Now().Add(time.Minute)
		callCtx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		o := op("acme", "short", `{}`)
		holder, _, err := l.ClaimOnce(callCtx, o)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(20 * time.Millisecond)
		want(o, 100*time.Millisecond, "20 ms into the call")
		clk.Advance(3*time.Second - 20*time.Millisecond)
		want(o, 3*time.Second, "3 s into the call") // not the 4 min 57 s the lease has left
		clk.Advance(56 * time.Second)
		want(o, time.Second, "1 s before the holder's deadline")
		clk.Advance(950 * time.Millisecond)
		want(o, 50*time.Millisecond, "50 ms before the holder's deadline")
		clk.Advance(100 * time.Millisecond) // past it: the holder is settling its answer now
		want(o, 100*time.Millisecond, "past the holder's deadline")
		rec, err := l.Lookup(ctx, "acme", "reserve", "short")
		if err != nil || !rec.Deadline.Equal(deadline) || !rec.ClaimedAt.Equal(deadline.Add(-time.Minute)) {
			t.Fatalf("the record of a claim in progress: %+v, %v; want its holder's deadline and when it was claimed", rec, err)
		}
		if _, err := holder.Complete(ctx, json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}

		// A call without a deadline: bounded by what its lease has left,
		// renewed or not.
		o = op("acme", "long", `{}`)
		holder, _, err = l.Claim(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)
		want(o, 2*time.Minute, "2 min into a call without a deadline")
		clk.Advance(2 * time.Minute)
		want(o, time.Minute, "4 min into a call whose lease has 1 min left")
		if err := holder.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		want(o, 4*time.Minute, "4 min into a call whose lease was just renewed")

		// A claim taken over is a new call: its age starts again.
		clk.Advance(lease)
		if _, _, err := l.Claim(ctx, o); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		want(o, time.Second, "1 s after a takeover")
	})
}

// A claim in progress when the ledger's schema was migrated to keep when
// claims begin and their holders' deadlines has neither: its duplicates
// are told to retry by the record's age and the claim's lease.
func TestAClaimFromBeforeTheMigration(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := store.Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Migrate(ctx, "ledger", ledger.Migrations[:2]); err != nil {
			t.Fatal(err)
		}
		clk := newClock()
		o := op("acme", "old-claim", `{}`)
		if err := db.WriteTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO mcprel_ledger (tenant, tool, idem_key, fingerprint, state, created_at, expires_at, lease_until, lease_token, executions)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'token', 1)`, o.Tenant, o.Tool, o.Key, o.Fingerprint[:], int(ledger.InProgress),
				clk.Now().UnixMilli(), clk.Now().Add(time.Hour).UnixMilli(), clk.Now().Add(30*time.Second).UnixMilli())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		l := open(t, dsn, &ledger.Options{Lease: 30 * time.Second})
		ledger.SetClock(l, clk.Now)
		clk.Advance(2 * time.Second)
		var busy *ledger.InProgressError
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &busy) || busy.RetryAfter != 2*time.Second {
			t.Fatalf("a duplicate of a claim from before the migration = %v, want InProgressError after 2s", err)
		}
		clk.Advance(27 * time.Second)
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &busy) || busy.RetryAfter != time.Second {
			t.Fatalf("a duplicate a second before its lease ends = %v, want InProgressError after 1s", err)
		}
	})
}
