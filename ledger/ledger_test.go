package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// effectsSchema is the business table the tests' effects write: one row per
// execution, so a duplicate effect shows as a second row.
var effectsSchema = []store.Migration{{
	Version: 1,
	SQL:     `CREATE TABLE effects (tenant TEXT NOT NULL, idem_key TEXT NOT NULL, quantity INTEGER NOT NULL)`,
}}

// open returns a ledger on dsn with the effects table, closed after the
// test. Each call is an independent handle: its own connections.
func open(t testing.TB, dsn string, opts *ledger.Options) *ledger.Ledger {
	t.Helper()
	return ledgertest.Open(t, dsn, nil, opts, "ledger-test", effectsSchema...)
}

func op(tenant, key string, args string) ledger.Op {
	fp, err := fingerprintJSON(args, nil, "idempotencyKey")
	if err != nil {
		panic(err)
	}
	return ledger.Op{Tenant: tenant, Tool: "reserve", Key: key, Fingerprint: fp}
}

// reserve is the business effect: it writes one effects row and returns a
// result naming it.
func reserve(executed *atomic.Int64, o ledger.Op, quantity int) func(context.Context, *store.Tx) (json.RawMessage, error) {
	return func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
		if executed != nil {
			executed.Add(1)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (tenant, idem_key, quantity) VALUES (?, ?, ?)`, o.Tenant, o.Key, quantity); err != nil {
			return nil, err
		}
		return json.RawMessage(fmt.Sprintf(`{"reserved":%d,"key":%q}`, quantity, o.Key)), nil
	}
}

func countEffects(t testing.TB, l *ledger.Ledger, tenant, key string) int {
	t.Helper()
	var n int
	err := l.DB().ReadTx(context.Background(), func(tx *store.Tx) error {
		q := `SELECT COUNT(*) FROM effects WHERE tenant = ?`
		args := []any{tenant}
		if key != "" {
			q += ` AND idem_key = ?`
			args = append(args, key)
		}
		return tx.QueryRow(context.Background(), q, args...).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFirstCallThenReplay(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		o := op("acme", "k1", `{"sku":"A","quantity":2}`)
		var executed atomic.Int64
		first, err := l.Do(ctx, o, reserve(&executed, o, 2))
		if err != nil {
			t.Fatal(err)
		}
		if first.Replayed || first.Executions != 1 || first.ExecutedAt.IsZero() {
			t.Fatalf("first call: %+v", first)
		}
		again, err := l.Do(ctx, o, reserve(&executed, o, 2))
		if err != nil {
			t.Fatal(err)
		}
		if !again.Replayed || string(again.Data) != string(first.Data) || !again.ExecutedAt.Equal(first.ExecutedAt) {
			t.Fatalf("replay = %+v, want the first result %s replayed", again, first.Data)
		}
		if executed.Load() != 1 || countEffects(t, l, "acme", "k1") != 1 {
			t.Fatalf("effect ran %d times, %d rows", executed.Load(), countEffects(t, l, "acme", "k1"))
		}
	})
}

// Two independent handles released at one barrier with the same key and
// arguments: one execution, one committed result, both callers get it.
func TestBarrierRaceOnTwoHandles(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		a, b := open(t, dsn, nil), open(t, dsn, nil)
		for round := range 20 {
			key := fmt.Sprintf("race-%d", round)
			o := op("acme", key, `{"quantity":1}`)
			var executed atomic.Int64
			barrier := make(chan struct{})
			results := make([]ledger.Result, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, l := range []*ledger.Ledger{a, b} {
				wg.Go(func() {
					<-barrier
					results[i], errs[i] = l.Do(context.Background(), o, reserve(&executed, o, 1))
				})
			}
			close(barrier)
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("round %d: errors %v, %v", round, errs[0], errs[1])
			}
			if executed.Load() != 1 || countEffects(t, a, "acme", key) != 1 {
				t.Fatalf("round %d: %d executions, %d effect rows", round, executed.Load(), countEffects(t, a, "acme", key))
			}
			if string(results[0].Data) != string(results[1].Data) || results[0].Replayed == results[1].Replayed {
				t.Fatalf("round %d: results %+v and %+v: want one execution and one replay of it", round, results[0], results[1])
			}
		}
	})
}

// 200 keys, each raced by 8 callers on 8 separate handles: exactly 200
// executions and no errors. On one shared handle the racers' operations
// share group commits on SQLite, same keys included.
func TestManyKeysManyRacers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		t.Run("separate handles", func(t *testing.T) { manyRacers(t, dsn, false) })
		t.Run("one handle", func(t *testing.T) { manyRacers(t, dsn, true) })
	})
}

func manyRacers(t *testing.T, dsn string, shared bool) {
	const keys, racers = 200, 8
	handles := make([]*ledger.Ledger, racers)
	for i := range handles {
		if shared && i > 0 {
			handles[i] = handles[0]
			continue
		}
		handles[i] = open(t, dsn, nil)
	}
	tenant := fmt.Sprintf("acme-%v", shared)
	var executed, replayed, failed atomic.Int64
	barrier := make(chan struct{})
	var wg sync.WaitGroup
	for r, l := range handles {
		wg.Go(func() {
			<-barrier
			for k := range keys {
				// Each racer walks the keys from a different start so
				// the collisions spread over the run.
				key := fmt.Sprintf("k%03d", (k+r*keys/racers)%keys)
				o := op(tenant, key, `{"quantity":3}`)
				res, err := l.Do(context.Background(), o, reserve(&executed, o, 3))
				switch {
				case err != nil:
					failed.Add(1)
					t.Error(err)
				case res.Replayed:
					replayed.Add(1)
				}
			}
		})
	}
	close(barrier)
	wg.Wait()
	if executed.Load() != keys || failed.Load() != 0 || replayed.Load() != keys*(racers-1) {
		t.Fatalf("executed %d, replayed %d, failed %d; want %d, %d, 0", executed.Load(), replayed.Load(), failed.Load(), keys, keys*(racers-1))
	}
	if n := countEffects(t, handles[0], tenant, ""); n != keys {
		t.Fatalf("%d effect rows, want %d", n, keys)
	}
}

func TestConflictRunsNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		o := op("acme", "k1", `{"sku":"A","quantity":2}`)
		if _, err := l.Do(ctx, o, reserve(nil, o, 2)); err != nil {
			t.Fatal(err)
		}
		changed := op("acme", "k1", `{"sku":"A","quantity":5}`)
		var executed atomic.Int64
		_, err := l.Do(ctx, changed, reserve(&executed, changed, 5))
		var conflict *ledger.ConflictError
		if !errors.As(err, &conflict) || conflict.Key != "k1" {
			t.Fatalf("Do with changed arguments: %v, want a ConflictError", err)
		}
		if executed.Load() != 0 || countEffects(t, l, "acme", "k1") != 1 {
			t.Fatalf("conflict ran the effect: %d executions, %d rows", executed.Load(), countEffects(t, l, "acme", "k1"))
		}
		// A two-phase claim is refused the same way.
		if _, _, err := l.Claim(ctx, changed); !errors.As(err, &conflict) {
			t.Fatalf("Claim with changed arguments: %v", err)
		}
	})
}

func TestFailedEffectStoresNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		o := op("acme", "k1", `{"quantity":1}`)
		boom := errors.New("provider unreachable")
		_, err := l.Do(ctx, o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			if _, err := reserve(nil, o, 1)(ctx, tx); err != nil {
				return nil, err
			}
			return nil, boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Do = %v, want the effect's error", err)
		}
		if _, err := l.Lookup(ctx, "acme", "reserve", "k1"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Lookup after a failed effect = %v, want ErrNotFound", err)
		}
		if n := countEffects(t, l, "acme", "k1"); n != 0 {
			t.Fatalf("the rolled-back effect left %d rows", n)
		}
		// The key is free: a retry runs.
		res, err := l.Do(ctx, o, reserve(nil, o, 1))
		if err != nil || res.Replayed {
			t.Fatalf("retry after a failed effect: %+v, %v", res, err)
		}
		// A result that is not JSON is a failure too, and stores nothing.
		bad := op("acme", "k2", `{}`)
		if _, err := l.Do(ctx, bad, func(context.Context, *store.Tx) (json.RawMessage, error) { return json.RawMessage(`{`), nil }); err == nil {
			t.Fatal("Do stored a result that is not JSON")
		}
		if _, err := l.Lookup(ctx, "acme", "reserve", "k2"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Lookup after an invalid result = %v", err)
		}
	})
}

func TestReplayIsACopy(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		o := op("acme", "k1", `{"quantity":4}`)
		first, err := l.Do(ctx, o, reserve(nil, o, 4))
		if err != nil {
			t.Fatal(err)
		}
		want := string(first.Data)
		for i := range first.Data {
			first.Data[i] = 'x'
		}
		again, err := l.Do(ctx, o, reserve(nil, o, 4))
		if err != nil {
			t.Fatal(err)
		}
		if string(again.Data) != want {
			t.Fatalf("replay after mutating the first result = %s, want %s", again.Data, want)
		}
		for i := range again.Data {
			again.Data[i] = 'y'
		}
		third, _ := l.Do(ctx, o, reserve(nil, o, 4))
		if string(third.Data) != want {
			t.Fatalf("replay after mutating a replay = %s, want %s", third.Data, want)
		}
	})
}

func TestReopenAndReconcile(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := store.Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ledger.Open(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Migrate(ctx, "ledger-test", effectsSchema); err != nil {
			t.Fatal(err)
		}
		o := op("acme", "lost-response", `{"quantity":7}`)
		first, err := l.Do(ctx, o, reserve(nil, o, 7))
		if err != nil {
			t.Fatal(err)
		}
		db.Close() // the response is lost with the process

		l2 := open(t, dsn, nil)
		rec, err := l2.Lookup(ctx, "acme", "reserve", "lost-response")
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != ledger.Committed || string(rec.Result) != string(first.Data) || rec.Executions != 1 ||
			!rec.ExecutedAt.Equal(first.ExecutedAt) || rec.Fingerprint != o.Fingerprint {
			t.Fatalf("record after reopen = %+v, want the committed result %s", rec, first.Data)
		}
		if countEffects(t, l2, "acme", "lost-response") != 1 {
			t.Fatal("the effect did not survive the reopen")
		}
		if _, err := l2.Lookup(ctx, "acme", "reserve", "never-used"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Lookup of an unknown key = %v", err)
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		a := op("tenant-a", "shared-key", `{"quantity":1}`)
		b := op("tenant-b", "shared-key", `{"quantity":9}`) // another fingerprint: still no conflict
		ra, err := l.Do(ctx, a, reserve(nil, a, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Lookup(ctx, "tenant-b", "reserve", "shared-key"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("tenant-b read tenant-a's record: %v", err)
		}
		rb, err := l.Do(ctx, b, reserve(nil, b, 9))
		if err != nil {
			t.Fatal(err)
		}
		if rb.Replayed || string(rb.Data) == string(ra.Data) {
			t.Fatalf("tenant-b got tenant-a's result: %+v", rb)
		}
		if countEffects(t, l, "tenant-a", "") != 1 || countEffects(t, l, "tenant-b", "") != 1 {
			t.Fatal("want one effect per tenant")
		}
		// The same key under another tool is another operation too.
		other := a
		other.Tool = "charge"
		if res, err := l.Do(ctx, other, reserve(nil, a, 1)); err != nil || res.Replayed {
			t.Fatalf("same key, other tool: %+v, %v", res, err)
		}
	})
}

func TestInvalidKeys(t *testing.T) {
	l := open(t, storetest.SQLite(t), nil)
	long := make([]byte, ledger.MaxKeyLength+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, key := range []string{"", string(long), "a\nb", "nul\x00", "bad\xff"} {
		o := op("acme", key, `{}`)
		if _, err := l.Do(context.Background(), o, reserve(nil, o, 1)); !errors.Is(err, ledger.ErrInvalidKey) {
			t.Errorf("Do with key %q = %v, want ErrInvalidKey", key, err)
		}
		if _, _, err := l.Claim(context.Background(), o); !errors.Is(err, ledger.ErrInvalidKey) {
			t.Errorf("Claim with key %q = %v, want ErrInvalidKey", key, err)
		}
	}
	if !ledger.ValidKey(string(long[:ledger.MaxKeyLength])) || !ledger.ValidKey("order-7f3a é") {
		t.Error("ValidKey refused a good key")
	}
}

// A duplicate that cannot wait as long as the first call takes is told the
// operation is in progress, not failed. It really waits: on PostgreSQL for
// the first call's row lock, on SQLite in the handle's queue for the
// writer (another handle's wait is SQLite's busy timeout, which does not
// watch the context).
func TestWaitBoundedByContext(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		l := open(t, dsn, nil)
		other := l
		if l.DB().Dialect() == store.Postgres {
			other = open(t, dsn, nil)
		}
		o := op("acme", "slow", `{}`)
		inEffect, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := l.Do(context.Background(), o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
				if _, err := reserve(nil, o, 1)(ctx, tx); err != nil {
					return nil, err
				}
				close(inEffect)
				<-release
				return json.RawMessage(`{"ok":true}`), nil
			})
			done <- err
		}()
		var once sync.Once
		finish := func() error {
			var err error
			once.Do(func() { close(release); err = <-done })
			return err
		}
		t.Cleanup(func() { finish() }) // never leave the first transaction open
		<-inEffect
		// The first call commits only after the duplicate has returned,
		// so the duplicate's wait can only end with its deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		var executed atomic.Int64
		_, err := other.Do(ctx, o, reserve(&executed, o, 1))
		var busy *ledger.InProgressError
		if !errors.As(err, &busy) || busy.RetryAfter <= 0 || ctx.Err() == nil {
			t.Fatalf("duplicate whose deadline passed while waiting = %v, want InProgressError", err)
		}
		if err := finish(); err != nil {
			t.Fatal(err)
		}
		res, err := other.Do(context.Background(), o, reserve(&executed, o, 1))
		if err != nil || !res.Replayed || executed.Load() != 0 {
			t.Fatalf("retry after the first committed: %+v, %v, %d executions", res, err, executed.Load())
		}
	})
}

// The zero State is no state: it must not read as committed.
func TestZeroStateIsUnknown(t *testing.T) {
	if got := ledger.State(0).String(); got != "unknown" {
		t.Fatalf("State(0) = %q, want unknown", got)
	}
}

// A lookup by a key, tool or tenant no record can hold (a NUL, which
// PostgreSQL refuses in text) is answered on every store without asking
// the database: an invalid key is ErrInvalidKey, the rest not found —
// never a storage failure.
func TestLookupOfTextNoStoreHolds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		if _, err := l.Lookup(ctx, "acme", "pay", "k\x00"); !errors.Is(err, ledger.ErrInvalidKey) {
			t.Errorf("a NUL in the key = %v, want ErrInvalidKey", err)
		}
		for _, scope := range [][2]string{{"acme", "pay\x00"}, {"ac\x00me", "pay"}, {"acme", "\xff"}} {
			if _, err := l.Lookup(ctx, scope[0], scope[1], "k-1"); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("Lookup(%q, %q) = %v, want ErrNotFound", scope[0], scope[1], err)
			}
		}
	})
}
