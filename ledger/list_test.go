package ledger_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// toolOp is an operation of tenant on tool with key.
func toolOp(tenant, tool, key string) ledger.Op {
	o := op(tenant, key, `{"quantity":1}`)
	o.Tool = tool
	return o
}

// makeUnknown leaves o's outcome unknown, as a gateway whose forward lost
// its answer does.
func makeUnknown(t testing.TB, l *ledger.Ledger, o ledger.Op) {
	t.Helper()
	ctx := context.Background()
	c, _, err := l.ClaimOnce(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unknown(ctx, "the connection broke with the request sent"); err != nil {
		t.Fatal(err)
	}
}

// listAll pages through q, limit records a page, and returns the keys in
// the order listed, as tenant/tool/key.
func listAll(t testing.TB, l *ledger.Ledger, q ledger.ListQuery) []string {
	t.Helper()
	var keys []string
	for pages := 0; ; pages++ {
		page, err := l.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if limit := cmp.Or(q.Limit, ledger.DefaultListLimit); len(page.Records) > limit {
			t.Fatalf("a page of %d records, over its limit of %d", len(page.Records), limit)
		}
		for _, r := range page.Records {
			keys = append(keys, r.Tenant+"/"+r.Tool+"/"+r.Key)
		}
		if page.Next == "" {
			return keys
		}
		if len(page.Records) == 0 {
			t.Fatal("an empty page with a cursor after it")
		}
		q.Cursor = page.Next
	}
}

// List filters by state, tenant, tool and age, newest first; failed
// results are told from committed ones.
func TestListFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		now := time.UnixMilli(1_800_000_000_000)
		ledger.SetClock(l, func() time.Time { return now })
		step := func() { now = now.Add(time.Second) }

		makeUnknown(t, l, toolOp("acme", "pay", "u1"))
		step()
		makeUnknown(t, l, toolOp("", "ship", "u2"))
		step()
		if _, _, err := l.Claim(ctx, toolOp("acme", "pay", "p1")); err != nil {
			t.Fatal(err)
		}
		step()
		c1 := toolOp("acme", "pay", "c1")
		if _, err := l.Do(ctx, c1, reserve(nil, c1, 1)); err != nil {
			t.Fatal(err)
		}
		step()
		makeUnknown(t, l, toolOp("acme", "pay", "f1"))
		if err := l.Resolve(ctx, "acme", "pay", "f1", json.RawMessage(`{"content":[],"isError":true}`)); err != nil {
			t.Fatal(err)
		}
		step()
		makeUnknown(t, l, toolOp("acme", "ship", "u3"))
		step()
		// A NUL in a result, which PostgreSQL's JSON cannot read.
		makeUnknown(t, l, toolOp("beta", "pay", "n1"))
		if err := l.Resolve(ctx, "beta", "pay", "n1", json.RawMessage(`{"content":[{"type":"text","text":"a\u0000b"}],"isError":true}`)); err != nil {
			t.Fatal(err)
		}
		n2 := toolOp("beta", "pay", "n2")
		if _, err := l.Do(ctx, n2, func(context.Context, *store.Tx) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[{"type":"text","text":"a\u0000b"}]}`), nil
		}); err != nil {
			t.Fatal(err)
		}
		step()

		acme, none, beta := "acme", "", "beta"
		for _, tc := range []struct {
			q    ledger.ListQuery
			want string
		}{
			{ledger.ListQuery{Tenant: &beta, State: ledger.ListFailed}, "beta/pay/n1"},
			{ledger.ListQuery{Tenant: &beta, State: ledger.ListCommitted}, "beta/pay/n2"},
			{ledger.ListQuery{Tenant: &acme}, "acme/ship/u3 acme/pay/f1 acme/pay/c1 acme/pay/p1 acme/pay/u1"},
			{ledger.ListQuery{}, "beta/pay/n2 beta/pay/n1 acme/ship/u3 acme/pay/f1 acme/pay/c1 acme/pay/p1 /ship/u2 acme/pay/u1"},
			{ledger.ListQuery{State: ledger.ListUnknown}, "acme/ship/u3 /ship/u2 acme/pay/u1"},
			{ledger.ListQuery{State: ledger.ListInProgress}, "acme/pay/p1"},
			{ledger.ListQuery{State: ledger.ListCommitted}, "beta/pay/n2 acme/pay/c1"},
			{ledger.ListQuery{State: ledger.ListFailed}, "beta/pay/n1 acme/pay/f1"},
			{ledger.ListQuery{State: ledger.ListUnknown, Tenant: &acme}, "acme/ship/u3 acme/pay/u1"},
			{ledger.ListQuery{State: ledger.ListUnknown, Tenant: &none}, "/ship/u2"},
			{ledger.ListQuery{State: ledger.ListUnknown, Tool: "ship"}, "acme/ship/u3 /ship/u2"},
			{ledger.ListQuery{Before: now.Add(-6 * time.Second)}, "/ship/u2 acme/pay/u1"},
			{ledger.ListQuery{State: ledger.ListUnknown, Before: now.Add(-6 * time.Second)}, "/ship/u2 acme/pay/u1"},
			{ledger.ListQuery{Tool: "none"}, ""},
		} {
			if got := strings.Join(listAll(t, l, tc.q), " "); got != tc.want {
				t.Errorf("List(%+v) = %q, want %q", tc.q, got, tc.want)
			}
		}
		page, err := l.List(ctx, ledger.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			if want := map[string]string{"u1": "unknown", "u2": "unknown", "u3": "unknown", "p1": "in_progress", "c1": "committed", "f1": "failed", "n1": "failed", "n2": "committed"}[r.Key]; r.ListState() != want {
				t.Errorf("%s is listed %s, want %s", r.Key, r.ListState(), want)
			}
		}
		counts, err := l.UnknownByTool(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(counts) != "map[pay:1 ship:2]" {
			t.Errorf("UnknownByTool = %v", counts)
		}

		// An expired record is neither listed nor counted.
		now = now.Add(ledger.DefaultRetention + time.Hour)
		if got := listAll(t, l, ledger.ListQuery{}); len(got) != 0 {
			t.Errorf("expired records listed: %v", got)
		}
		if counts, err := l.UnknownByTool(ctx); err != nil || len(counts) != 0 {
			t.Errorf("UnknownByTool after expiry = %v, %v", counts, err)
		}

		for _, bad := range []ledger.ListQuery{{State: "done"}, {Limit: -1}, {Limit: ledger.MaxListLimit + 1}} {
			if _, err := l.List(ctx, bad); err == nil {
				t.Errorf("List(%+v) succeeded", bad)
			}
		}
		if _, err := l.List(ctx, ledger.ListQuery{Cursor: "not a cursor"}); !errors.Is(err, ledger.ErrBadCursor) {
			t.Errorf("a bad cursor: %v", err)
		}
	})
}

// Records of the same millisecond are paged through in a stable order,
// each once, whatever the page size.
func TestListPagesWithoutGapsOrRepeats(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		l := open(t, dsn, nil)
		now := time.UnixMilli(1_800_000_000_000)
		ledger.SetClock(l, func() time.Time { return now })
		want := map[string]bool{}
		for i := range 23 {
			if i%5 == 0 {
				now = now.Add(time.Millisecond) // runs of equal times
			}
			o := toolOp([]string{"", "acme", "beta"}[i%3], []string{"pay", "ship"}[i%2], fmt.Sprintf("k%02d", i))
			makeUnknown(t, l, o)
			want[o.Tenant+"/"+o.Tool+"/"+o.Key] = true
		}
		whole := listAll(t, l, ledger.ListQuery{State: ledger.ListUnknown, Limit: ledger.MaxListLimit})
		for _, limit := range []int{1, 2, 3, 7, 22, 23, 24} {
			for _, state := range []string{"", ledger.ListUnknown} {
				got := listAll(t, l, ledger.ListQuery{State: state, Limit: limit})
				if strings.Join(got, " ") != strings.Join(whole, " ") {
					t.Errorf("state %q, pages of %d: %v, want %v", state, limit, got, whole)
				}
			}
		}
		if len(whole) != len(want) {
			t.Fatalf("listed %d records, want %d", len(whole), len(want))
		}
		for _, k := range whole {
			if !want[k] {
				t.Errorf("listed %s, which is not a record", k)
			}
			delete(want, k)
		}
	})
}

// 10,000 unknown outcomes are paged through by the index of unknown
// outcomes, which orders them: each page reads what it returns, not the
// ledger.
func TestListTenThousandUnknownByIndex(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		l := open(t, dsn, nil)
		now := time.Now()
		// Records written directly, a thousand a transaction: the
		// listing is under test, not the claims.
		const n = 10_000
		for start := 0; start < n; start += 1000 {
			err := l.DB().WriteTx(ctx, func(tx *store.Tx) error {
				for i := start; i < start+1000; i++ {
					// Some committed records between them, which the
					// index leaves out.
					for _, state := range []int{3, 2} {
						_, err := tx.Exec(ctx, `INSERT INTO mcprel_ledger (tenant, tool, idem_key, fingerprint, state, result, created_at, executed_at, expires_at, executions)
							VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
							"acme", fmt.Sprintf("tool%d", i%7), fmt.Sprintf("k%05d-%d", i, state), []byte("fp"), state, `{"reason":"lost"}`,
							now.UnixMilli(), now.Add(-time.Duration(i/3)*time.Millisecond).UnixMilli(), now.Add(time.Hour).UnixMilli())
						if err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if l.DB().Dialect() == store.Postgres {
			if err := l.DB().WriteTx(ctx, func(tx *store.Tx) error { _, err := tx.Exec(ctx, `ANALYZE mcprel_ledger`); return err }); err != nil {
				t.Fatal(err)
			}
		}
		got, pages := map[string]bool{}, 0
		q := ledger.ListQuery{State: ledger.ListUnknown, Limit: 500}
		for {
			page, err := l.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, r := range page.Records {
				if r.State != ledger.OutcomeUnknown || got[r.Key] {
					t.Fatalf("listed %s (%v) again or of another state", r.Key, r.State)
				}
				got[r.Key] = true
			}
			if page.Next == "" {
				break
			}
			q.Cursor = page.Next
		}
		if len(got) != n || pages != n/500 {
			t.Fatalf("listed %d unknown outcomes in %d pages, want %d in %d", len(got), pages, n, n/500)
		}
		// A page after the first goes on from its cursor through the
		// index, with nothing to sort.
		plan := ledger.ListPlan(t, l, ledger.ListQuery{State: ledger.ListUnknown, Tool: "tool3", Cursor: q.Cursor})
		if !strings.Contains(plan, "mcprel_ledger_unknown") {
			t.Errorf("the listing of unknown outcomes does not use their index:\n%s", plan)
		}
		if strings.Contains(strings.ToUpper(plan), "TEMP B-TREE") || strings.Contains(plan, "Sort") {
			t.Errorf("the listing of unknown outcomes sorts them:\n%s", plan)
		}
		counts, err := l.UnknownByTool(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		if total != n || len(counts) != 7 {
			t.Errorf("UnknownByTool = %v", counts)
		}
		// PostgreSQL counts half a table by a scan, as it should: its
		// cost model decides, where unknown outcomes are this many.
		plan = ledger.CountPlan(t, l)
		if l.DB().Dialect() == store.SQLite && !strings.Contains(plan, "mcprel_ledger_unknown") {
			t.Errorf("the count of unknown outcomes does not use their index:\n%s", plan)
		}
	})
}

// A ledger opened read-only lists beside a writer that goes on making
// outcomes unknown, and never writes.
func TestListReadOnlyBesideAWriter(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		w := open(t, dsn, nil)
		r := ledgertestOpenReadOnly(t, dsn)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		var written atomic.Int64
		go func() {
			defer close(done)
			for i := 0; ctx.Err() == nil && i < 200; i++ {
				c, _, err := w.ClaimOnce(ctx, toolOp("acme", "pay", fmt.Sprintf("w%03d", i)))
				if err == nil {
					err = c.Unknown(ctx, "lost")
				}
				if err != nil {
					if ctx.Err() == nil {
						done <- err
					}
					return
				}
				written.Add(1)
			}
		}()
		for range 20 {
			before := written.Load()
			keys := listAll(t, r, ledger.ListQuery{State: ledger.ListUnknown, Limit: 7})
			if int64(len(keys)) < before {
				t.Fatalf("listed %d records, %d were written before", len(keys), before)
			}
			seen := map[string]bool{}
			for _, k := range keys {
				if seen[k] {
					t.Fatalf("%s listed twice", k)
				}
				seen[k] = true
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func ledgertestOpenReadOnly(t *testing.T, dsn string) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dsn, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := ledger.Open(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
