package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/store"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.UnixMilli(1_800_000_000_000)} }

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

func open(t testing.TB, dsn string, opts *outbox.Options) *outbox.Outbox {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	o, err := outbox.Open(context.Background(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// put records an intent in a transaction of its own, committed unless
// rollback is set.
func put(t testing.TB, o *outbox.Outbox, in outbox.Intent, rollback bool) (outbox.Operation, error) {
	t.Helper()
	var op outbox.Operation
	errRollback := errors.New("rolled back")
	err := o.DB().WriteTx(context.Background(), func(tx *store.Tx) error {
		var err error
		if op, err = o.Put(context.Background(), tx, in); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		err = nil
	}
	return op, err
}

func intent(tenant, key string) outbox.Intent {
	return outbox.Intent{Tenant: tenant, Tool: "send_payout", Key: key, Target: "payouts", Request: json.RawMessage(`{"account":"a-1","cents":500}`)}
}

// An intent commits with its transaction or not at all, is found by the
// keyed call that recorded it, within its tenant only, and carries a
// delivery key that is the same for the operation and differs between
// tenants and tools that chose the same key.
func TestIntentCommitsWithItsTransaction(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, nil)
		if _, err := put(t, o, intent("acme", "k1"), true); err != nil {
			t.Fatal(err)
		}
		if ops, err := o.Lookup(ctx, "acme", "send_payout", "k1"); err != nil || len(ops) != 0 {
			t.Fatalf("an intent of a rolled-back transaction: %+v, %v", ops, err)
		}
		op, err := put(t, o, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		ops, err := o.Lookup(ctx, "acme", "send_payout", "k1")
		if err != nil || len(ops) != 1 || ops[0].ID != op.ID || ops[0].State != outbox.Pending || ops[0].DeliveryKey != op.DeliveryKey {
			t.Fatalf("Lookup = %+v, %v; want the committed intent, pending", ops, err)
		}
		if _, err := o.Get(ctx, "other", op.ID); !errors.Is(err, outbox.ErrNotFound) {
			t.Fatalf("another tenant's Get = %v, want ErrNotFound", err)
		}
		if ops, _ := o.Lookup(ctx, "other", "send_payout", "k1"); len(ops) != 0 {
			t.Fatalf("another tenant's Lookup found %+v", ops)
		}
		if op.DeliveryKey != outbox.DeliveryKey("acme", "send_payout", "k1", "payouts") ||
			op.DeliveryKey == outbox.DeliveryKey("other", "send_payout", "k1", "payouts") ||
			op.DeliveryKey == outbox.DeliveryKey("acme", "refund", "k1", "payouts") {
			t.Fatalf("delivery key %q is not the operation's alone", op.DeliveryKey)
		}
		// The key's next operation waits for this one's delivery.
		var pending *outbox.PendingError
		if _, err := put(t, o, intent("acme", "k1"), false); !errors.As(err, &pending) || pending.ID != op.ID {
			t.Fatalf("a second intent of the key while the first is pending = %v", err)
		}
	})
}

// Pending intents are bounded per tenant and in all: past either bound
// Put refuses, retryably, and writes nothing; a delivery makes room.
func TestPendingIntentsAreBounded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, &outbox.Options{MaxPendingPerTenant: 2, MaxPending: 3})
		for _, k := range []string{"a1", "a2"} {
			if _, err := put(t, o, intent("acme", k), false); err != nil {
				t.Fatal(err)
			}
		}
		var full *outbox.FullError
		if _, err := put(t, o, intent("acme", "a3"), false); !errors.As(err, &full) || full.All || full.Tenant != "acme" {
			t.Fatalf("a tenant's third pending intent = %v, want its bound", err)
		}
		if _, err := put(t, o, intent("bolt", "b1"), false); err != nil {
			t.Fatal(err)
		}
		if _, err := put(t, o, intent("bolt", "b2"), false); !errors.As(err, &full) || !full.All {
			t.Fatalf("a fourth pending intent in all = %v, want the total bound", err)
		}
		if ops, _ := o.Lookup(ctx, "acme", "send_payout", "a3"); len(ops) != 0 {
			t.Fatal("a refused intent was recorded")
		}
		ops, err := o.Claim(ctx, "w1", 1, time.Minute)
		if err != nil || len(ops) != 1 {
			t.Fatalf("Claim = %+v, %v", ops, err)
		}
		if err := o.Deliver(ctx, ops[0], "w1", outbox.Answer{Verdict: outbox.Acknowledged, Status: 200}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := put(t, o, intent(ops[0].Tenant, "again"), false); err != nil {
			t.Fatalf("after a delivery made room: %v", err)
		}
	})
}

// A claimed intent is its dispatcher's while its lease lasts: no other
// claims it; once the lease expired another does (its attempt counted),
// and the first one's late answer changes nothing.
func TestClaimLeaseAndTakeover(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, nil)
		clk := newClock()
		outbox.SetClock(o, clk.Now)
		op, err := put(t, o, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		first, err := o.Claim(ctx, "w1", 10, 10*time.Second)
		if err != nil || len(first) != 1 || first[0].ID != op.ID || first[0].Attempts != 1 {
			t.Fatalf("w1's claim = %+v, %v", first, err)
		}
		if again, err := o.Claim(ctx, "w2", 10, 10*time.Second); err != nil || len(again) != 0 {
			t.Fatalf("w2 claimed a leased intent: %+v, %v", again, err)
		}
		clk.Advance(10 * time.Second)
		second, err := o.Claim(ctx, "w2", 10, 10*time.Second)
		if err != nil || len(second) != 1 || second[0].Attempts != 2 {
			t.Fatalf("w2's claim after the lease = %+v, %v", second, err)
		}
		if err := o.Deliver(ctx, first[0], "w1", outbox.Answer{Verdict: outbox.Acknowledged}, time.Time{}); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("w1's late answer = %v, want ErrLeaseLost", err)
		}
		if err := o.Renew(ctx, first[0], "w1", 10*time.Second); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("w1's renewal = %v, want ErrLeaseLost", err)
		}
		// w1 stopping gives up its leases, not w2's.
		if err := o.Release(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		if again, err := o.Claim(ctx, "w5", 10, 10*time.Second); err != nil || len(again) != 0 {
			t.Fatalf("w1's release freed w2's lease: w5 claimed %+v, %v", again, err)
		}
		// A retry leaves it pending until its next attempt.
		if err := o.Deliver(ctx, second[0], "w2", outbox.Answer{Verdict: outbox.Retry, Status: 503}, clk.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if due, _ := o.Claim(ctx, "w3", 10, 10*time.Second); len(due) != 0 {
			t.Fatalf("an intent was claimed before its next attempt: %+v", due)
		}
		clk.Advance(time.Minute)
		third, _ := o.Claim(ctx, "w3", 10, 10*time.Second)
		if len(third) != 1 || third[0].Attempts != 3 {
			t.Fatalf("the retry's claim = %+v", third)
		}
		if err := o.Deliver(ctx, third[0], "w3", outbox.Answer{Verdict: outbox.Refused, Status: 422, Body: json.RawMessage(`{"error":"key reused"}`)}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		got, _ := o.Get(ctx, "acme", op.ID)
		if got.State != outbox.Failed || got.Attempts != 3 || got.EndedAt.IsZero() || !jsonHas(got.Answer, `"status":422`) {
			t.Fatalf("after a refusal: %+v %s", got, got.Answer)
		}
		if due, _ := o.Claim(ctx, "w4", 10, 10*time.Second); len(due) != 0 {
			t.Fatalf("a failed intent was claimed again: %+v", due)
		}
	})
}

func jsonHas(b json.RawMessage, s string) bool {
	return len(b) > 0 && json.Valid(b) && contains(string(b), s)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A dispatcher whose lease expired answers while another claims the
// intent, in either order: one of them holds it, and the loser writes
// nothing (on PostgreSQL the claim commits between the answer's read and
// its write; SQLite's writers take turns).
func TestLateAnswerRacesATakeover(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, nil)
		other := open(t, dsn, nil)
		clk := newClock()
		outbox.SetClock(o, clk.Now)
		outbox.SetClock(other, clk.Now)
		op, err := put(t, o, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		first, _ := o.Claim(ctx, "w1", 1, 10*time.Second)
		if len(first) != 1 {
			t.Fatal("no claim")
		}
		clk.Advance(9 * time.Second) // w1's lease is still live when its answer reads it
		var once sync.Once
		var taken []outbox.Operation
		done := make(chan struct{})
		outbox.SetBeforeWrite(o, func(op string) {
			if op != "deliver" {
				return
			}
			once.Do(func() {
				clk.Advance(2 * time.Second) // now it has expired
				go func() {
					defer close(done)
					taken, _ = other.Claim(ctx, "w2", 1, 10*time.Second)
				}()
				if o.DB().Dialect() == store.Postgres {
					<-done
				}
			})
		})
		deliverErr := o.Deliver(ctx, first[0], "w1", outbox.Answer{Verdict: outbox.Acknowledged, Status: 200}, time.Time{})
		<-done
		outbox.SetBeforeWrite(o, nil)
		got, _ := o.Get(ctx, "acme", op.ID)
		switch {
		case deliverErr == nil:
			if got.State != outbox.Delivered || len(taken) != 0 {
				t.Fatalf("w1 recorded its answer, yet the intent is %s and w2 took %d", got.State, len(taken))
			}
		case errors.Is(deliverErr, outbox.ErrLeaseLost):
			if got.State != outbox.Pending || len(taken) != 1 || got.Attempts != 2 {
				t.Fatalf("w1 lost its lease, yet the intent is %s (attempt %d) and w2 took %d", got.State, got.Attempts, len(taken))
			}
		default:
			t.Fatal(deliverErr)
		}
		if o.DB().Dialect() == store.Postgres && deliverErr == nil {
			t.Fatal("on PostgreSQL the takeover commits first: w1's answer must lose")
		}
	})
}
