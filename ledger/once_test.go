package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
)

// A key claimed at most once is never handed out again: an answer lost
// makes its outcome unknown, and every later claim is told so; a claim
// that honours keys may take it over.
func TestClaimOnceLostAnswerIsUnknown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "fwd-1", `{"cents":500}`)
		claim, replayed, err := l.ClaimOnce(ctx, o)
		if err != nil || replayed != nil || claim == nil {
			t.Fatalf("ClaimOnce = %v, %v, %v", claim, replayed, err)
		}
		if err := claim.Unknown(ctx, "the connection to the upstream ended with the call in flight"); err != nil {
			t.Fatal(err)
		}
		var unknown *ledger.UnknownError
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &unknown) || unknown.Reason != "the connection to the upstream ended with the call in flight" || !unknown.Since.Equal(clk.Now()) {
			t.Fatalf("ClaimOnce after Unknown = %v, want UnknownError with its reason", err)
		}
		if _, err := claim.Complete(ctx, json.RawMessage(`{}`)); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("Complete after Unknown = %v, want ErrLeaseLost", err)
		}
		// The arguments still decide first: another operation is a conflict.
		var conflict *ledger.ConflictError
		if _, _, err := l.ClaimOnce(ctx, op("acme", "fwd-1", `{"cents":1}`)); !errors.As(err, &conflict) {
			t.Fatalf("ClaimOnce with other arguments = %v, want ConflictError", err)
		}
		if _, err := l.Do(ctx, o, reserve(nil, o, 1)); !errors.As(err, &unknown) {
			t.Fatalf("Do on an unknown outcome = %v, want UnknownError", err)
		}
		rec, err := l.Lookup(ctx, "acme", "reserve", "fwd-1")
		if err != nil || rec.State != ledger.OutcomeUnknown || rec.State.String() != "outcome_unknown" {
			t.Fatalf("Lookup = %+v, %v", rec, err)
		}
		// A receiver that honours the key makes a second run safe.
		again, _, err := l.Claim(ctx, o)
		if err != nil || again == nil || again.Executions != 2 {
			t.Fatalf("Claim of an unknown outcome = %+v, %v; want a takeover counting 2", again, err)
		}
		if _, err := again.Complete(ctx, json.RawMessage(`{"ok":true}`)); err != nil {
			t.Fatal(err)
		}
		_, res, err := l.ClaimOnce(ctx, o)
		if err != nil || res == nil || string(res.Data) != `{"ok":true}` {
			t.Fatalf("ClaimOnce after completion = %+v, %v", res, err)
		}
	})
}

// A holder that dies leaves its claim to expire: at most once, the key's
// outcome becomes unknown, not taken over; a holder that extends its lease
// keeps the key.
func TestClaimOnceExpiredLeaseIsUnknown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "fwd-2", `{}`)
		alive, _, err := l.ClaimOnce(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(8 * time.Second)
		if err := alive.Extend(ctx); err != nil || !alive.LeaseUntil().Equal(clk.Now().Add(10*time.Second)) {
			t.Fatalf("Extend = %v, lease until %v", err, alive.LeaseUntil())
		}
		clk.Advance(8 * time.Second) // past the first lease, within the second
		var busy *ledger.InProgressError
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &busy) || busy.RetryAfter != 2*time.Second {
			t.Fatalf("ClaimOnce of an extended claim = %v, want InProgressError after 2s", err)
		}
		clk.Advance(2 * time.Second) // the holder stopped extending
		var unknown *ledger.UnknownError
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &unknown) || !unknown.Since.Equal(clk.Now()) {
			t.Fatalf("ClaimOnce after the lease expired = %v, want UnknownError", err)
		}
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &unknown) {
			t.Fatalf("ClaimOnce again = %v, want UnknownError", err)
		}
		if err := alive.Extend(ctx); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("Extend of an expired claim = %v, want ErrLeaseLost", err)
		}
		rec, err := l.Lookup(ctx, "acme", "reserve", "fwd-2")
		if err != nil || rec.State != ledger.OutcomeUnknown || rec.Executions != 1 {
			t.Fatalf("Lookup = %+v, %v", rec, err)
		}
	})
}

// An operator closes an unknown outcome: resolved with the result found,
// which retries then get, or forgotten, which frees the key. Nothing else
// can be closed that way.
func TestResolveAndForget(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
		ledger.SetClock(l, clk.Now)
		lost := func(key string) ledger.Op {
			o := op("acme", key, `{}`)
			c, _, err := l.ClaimOnce(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Unknown(ctx, "lost"); err != nil {
				t.Fatal(err)
			}
			return o
		}
		o := lost("r-1")
		if err := l.Resolve(ctx, "acme", "reserve", "r-1", json.RawMessage(`{"content":[],"found":"by hand"}`)); err != nil {
			t.Fatal(err)
		}
		_, res, err := l.ClaimOnce(ctx, o)
		if err != nil || res == nil || !res.Replayed || string(res.Data) != `{"content":[],"found":"by hand"}` {
			t.Fatalf("ClaimOnce after Resolve = %+v, %v", res, err)
		}
		if err := l.Resolve(ctx, "acme", "reserve", "r-1", json.RawMessage(`{}`)); !errors.Is(err, ledger.ErrNotUnknown) {
			t.Fatalf("Resolve of a committed record = %v, want ErrNotUnknown", err)
		}
		if err := l.Forget(ctx, "acme", "reserve", "r-1"); !errors.Is(err, ledger.ErrNotUnknown) {
			t.Fatalf("Forget of a committed record = %v, want ErrNotUnknown", err)
		}
		o2 := lost("r-2")
		if err := l.Forget(ctx, "other-tenant", "reserve", "r-2"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Forget in another tenant = %v, want ErrNotFound", err)
		}
		if err := l.Forget(ctx, "acme", "reserve", "r-2"); err != nil {
			t.Fatal(err)
		}
		if c, _, err := l.ClaimOnce(ctx, o2); err != nil || c == nil {
			t.Fatalf("ClaimOnce after Forget = %v, %v; want a fresh claim", c, err)
		}
		// A live claim is not the operator's to close; one whose lease
		// expired is, before any caller came back to find it.
		live, _, err := l.ClaimOnce(ctx, op("acme", "r-3", `{}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Resolve(ctx, "acme", "reserve", "r-3", json.RawMessage(`{}`)); !errors.Is(err, ledger.ErrNotUnknown) {
			t.Fatalf("Resolve of a live claim = %v, want ErrNotUnknown", err)
		}
		clk.Advance(10 * time.Second)
		if err := l.Resolve(ctx, "acme", "reserve", "r-3", json.RawMessage(`{"late":1}`)); err != nil {
			t.Fatalf("Resolve of an expired claim = %v", err)
		}
		if _, err := live.Complete(ctx, json.RawMessage(`{}`)); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("Complete after Resolve = %v, want ErrLeaseLost", err)
		}
		if err := l.Resolve(ctx, "acme", "reserve", "none", json.RawMessage(`{}`)); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Resolve of no record = %v, want ErrNotFound", err)
		}
		if err := l.Resolve(ctx, "acme", "reserve", "r-2", json.RawMessage(`{`)); err == nil {
			t.Fatal("Resolve with a result that is not JSON succeeded")
		}
	})
}

// Many callers on separate handles find one expired claim at once: at
// most once, every one of them is told the outcome is unknown and none
// holds the key; and an operator resolving it while claims that honour
// the key race to take it over: exactly one of them wins.
func TestClaimOnceExpiryRace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		var handles []*ledger.Ledger
		for range 6 {
			l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
			ledger.SetClock(l, clk.Now)
			handles = append(handles, l)
		}
		o := op("acme", "race-once", `{}`)
		if _, _, err := handles[0].ClaimOnce(ctx, o); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second) // its holder is gone
		var unknown, other atomic.Int64
		barrier := make(chan struct{})
		var wg sync.WaitGroup
		for _, l := range handles {
			wg.Go(func() {
				<-barrier
				c, _, err := l.ClaimOnce(ctx, o)
				var u *ledger.UnknownError
				var busy *ledger.InProgressError
				switch {
				case errors.As(err, &u):
					unknown.Add(1)
				case errors.As(err, &busy):
					other.Add(1) // lost the race to mark it; told to come back
				default:
					t.Errorf("ClaimOnce = %v, %v", c, err)
				}
			})
		}
		close(barrier)
		wg.Wait()
		if unknown.Load() == 0 || unknown.Load()+other.Load() != int64(len(handles)) {
			t.Fatalf("%d told unknown, %d in progress, of %d", unknown.Load(), other.Load(), len(handles))
		}
		rec, err := handles[0].Lookup(ctx, "acme", "reserve", "race-once")
		if err != nil || rec.State != ledger.OutcomeUnknown || rec.Executions != 1 {
			t.Fatalf("record = %+v, %v", rec, err)
		}

		// The operator and the takeovers race on the unknown record.
		var resolved, took atomic.Int64
		barrier = make(chan struct{})
		wg.Go(func() {
			<-barrier
			switch err := handles[0].Resolve(ctx, "acme", "reserve", "race-once", json.RawMessage(`{"by":"operator"}`)); {
			case err == nil:
				resolved.Add(1)
			case !errors.Is(err, ledger.ErrNotUnknown):
				t.Errorf("Resolve = %v", err)
			}
		})
		for _, l := range handles[1:] {
			wg.Go(func() {
				<-barrier
				c, res, err := l.Claim(ctx, o)
				var busy *ledger.InProgressError
				switch {
				case err == nil && c != nil:
					took.Add(1)
				case err == nil && res != nil, errors.As(err, &busy):
				default:
					t.Errorf("Claim = %v, %v, %v", c, res, err)
				}
			})
		}
		close(barrier)
		wg.Wait()
		if resolved.Load()+took.Load() != 1 {
			t.Fatalf("resolved %d times and taken over %d times, want one of them once", resolved.Load(), took.Load())
		}
	})
}

// A claim renewed past the record's retention keeps its key: the record
// lives a retention beyond the lease, never reused while held. An outcome
// made unknown late in a record's life is kept a full retention from
// then. Forget leaves a claim whose lease merely expired alone.
func TestRetentionFollowsTheClaim(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second, Retention: 30 * time.Second})
		ledger.SetClock(l, clk.Now)
		o := op("acme", "long-1", `{}`)
		holder, _, err := l.ClaimOnce(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for range 6 { // 42 s: past the retention the claim began with
			clk.Advance(7 * time.Second)
			if err := holder.Extend(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var busy *ledger.InProgressError
		if c, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &busy) {
			t.Fatalf("ClaimOnce of a claim held past its first retention = %v, %v; want InProgressError", c, err)
		}
		if _, err := holder.Complete(ctx, json.RawMessage(`{"done":true}`)); err != nil {
			t.Fatalf("Complete after renewals = %v", err)
		}

		late := op("acme", "late-1", `{}`)
		c, _, err := l.ClaimOnce(ctx, late)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(9 * time.Second)
		if err := c.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(9 * time.Second)
		if err := c.Unknown(ctx, "lost"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(25 * time.Second) // past the claim's first retention, within one from Unknown
		var unknown *ledger.UnknownError
		if _, _, err := l.ClaimOnce(ctx, late); !errors.As(err, &unknown) {
			t.Fatalf("ClaimOnce 25 s after the outcome became unknown = %v, want UnknownError", err)
		}

		stalled := op("acme", "stalled-1", `{}`)
		if _, _, err := l.ClaimOnce(ctx, stalled); err != nil {
			t.Fatal(err)
		}
		clk.Advance(11 * time.Second)
		if err := l.Forget(ctx, "acme", "reserve", "stalled-1"); !errors.Is(err, ledger.ErrNotUnknown) {
			t.Fatalf("Forget of a claim whose lease expired = %v, want ErrNotUnknown", err)
		}
	})
}

// A claim the record decides without a write — a replay, a conflict, a
// live lease, an unknown outcome — is answered with a read: it commits
// nothing, so a retry of a finished forward costs no durable write.
func TestClaimDecidedByTheRecordWritesNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		done, live, lost := op("acme", "r-1", `{"a":1}`), op("acme", "r-2", `{}`), op("acme", "r-3", `{}`)
		c, _, err := l.ClaimOnce(ctx, done)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Complete(ctx, json.RawMessage(`{"ok":1}`)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.ClaimOnce(ctx, live); err != nil {
			t.Fatal(err)
		}
		u, _, err := l.ClaimOnce(ctx, lost)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Unknown(ctx, "lost"); err != nil {
			t.Fatal(err)
		}
		before := l.DB().WriteStats()
		var conflict *ledger.ConflictError
		var busy *ledger.InProgressError
		var unknown *ledger.UnknownError
		for _, claim := range []func(context.Context, ledger.Op) (*ledger.Claim, *ledger.Result, error){l.Claim, l.ClaimOnce} {
			if _, res, err := claim(ctx, done); err != nil || res == nil || !res.Replayed || string(res.Data) != `{"ok":1}` {
				t.Fatalf("a replay = %+v, %v", res, err)
			}
			if _, _, err := claim(ctx, op("acme", "r-1", `{"a":2}`)); !errors.As(err, &conflict) {
				t.Fatalf("other arguments = %v, want ConflictError", err)
			}
			if _, _, err := claim(ctx, live); !errors.As(err, &busy) {
				t.Fatalf("a live lease = %v, want InProgressError", err)
			}
		}
		if _, _, err := l.ClaimOnce(ctx, lost); !errors.As(err, &unknown) {
			t.Fatalf("an unknown outcome = %v, want UnknownError", err)
		}
		if after := l.DB().WriteStats(); after.Commits != before.Commits {
			t.Fatalf("claims decided by the record committed %d write transactions, want none", after.Commits-before.Commits)
		}
		// A claim that honours the key takes an unknown outcome over: that
		// is a write.
		if c, _, err := l.Claim(ctx, lost); err != nil || c == nil {
			t.Fatalf("Claim of an unknown outcome = %v, %v", c, err)
		}
	})
}

// A holder whose claim was lost — its lease ran out while it was stopped,
// and the key was made unknown, taken over or resolved — reads what the
// ledger records for the key, to answer its caller with that rather than
// with its own answer: the same thing a retry is told.
func TestALostClaimReadsTheKeysOutcome(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clk := newClock()
		l := open(t, dsn, &ledger.Options{Lease: 10 * time.Second})
		ledger.SetClock(l, clk.Now)

		// At most once: another caller finds the lease expired, and the
		// outcome becomes unknown; an operator then resolves it.
		o := op("acme", "lost-1", `{}`)
		stopped, _, err := l.ClaimOnce(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		var told *ledger.UnknownError
		if _, _, err := l.ClaimOnce(ctx, o); !errors.As(err, &told) {
			t.Fatalf("ClaimOnce after the lease = %v, want UnknownError", err)
		}
		if _, err := stopped.Complete(ctx, json.RawMessage(`{"late":true}`)); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("Complete by the stopped holder = %v, want ErrLeaseLost", err)
		}
		var unknown *ledger.UnknownError
		if _, err := stopped.Outcome(ctx); !errors.As(err, &unknown) || *unknown != *told {
			t.Fatalf("Outcome = %v, want %v, as the retry was told", err, told)
		}
		if err := l.Resolve(ctx, "acme", "reserve", "lost-1", json.RawMessage(`{"found":"by hand"}`)); err != nil {
			t.Fatal(err)
		}
		if res, err := stopped.Outcome(ctx); err != nil || !res.Replayed || string(res.Data) != `{"found":"by hand"}` {
			t.Fatalf("Outcome after Resolve = %+v, %v; want the resolution, replayed", res, err)
		}
		if err := stopped.Release(ctx); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Fatalf("Release by the stopped holder = %v, want ErrLeaseLost", err)
		}
		if _, _, err := l.ClaimOnce(ctx, o); err != nil {
			t.Fatalf("ClaimOnce after the stopped holder's Release = %v; want the resolution kept", err)
		}

		// Taken over by a caller whose receiver honours the key: in
		// progress while it holds the key, its result once stored.
		o = op("acme", "lost-2", `{}`)
		stopped, _, err = l.Claim(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		taker, _, err := l.Claim(ctx, o)
		if err != nil || taker == nil {
			t.Fatalf("takeover = %v, %v", taker, err)
		}
		var busy *ledger.InProgressError
		if _, err := stopped.Outcome(ctx); !errors.As(err, &busy) || busy.RetryAfter <= 0 {
			t.Fatalf("Outcome while the taker holds the key = %v, want InProgressError", err)
		}
		if _, err := taker.Complete(ctx, json.RawMessage(`{"by":"taker"}`)); err != nil {
			t.Fatal(err)
		}
		if res, err := stopped.Outcome(ctx); err != nil || !res.Replayed || string(res.Data) != `{"by":"taker"}` || res.Executions != 2 {
			t.Fatalf("Outcome after the taker completed = %+v, %v", res, err)
		}

		// Nothing recorded: the taker released the key.
		o = op("acme", "lost-3", `{}`)
		stopped, _, err = l.Claim(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		if taker, _, err = l.Claim(ctx, o); err != nil {
			t.Fatal(err)
		}
		if err := taker.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := stopped.Outcome(ctx); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Outcome of a released key = %v, want ErrNotFound", err)
		}
	})
}
