package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/store"
)

// Counts counts the pending and the failed intents, every tenant's.
func TestCounts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, nil)
		clk := newClock()
		outbox.SetClock(o, clk.Now)
		if c, err := o.Counts(ctx); err != nil || c != (outbox.Counts{}) {
			t.Fatalf("an empty outbox: %+v, %v", c, err)
		}
		for _, in := range []outbox.Intent{intent("acme", "k1"), intent("acme", "k2"), intent("other", "k3")} {
			if _, err := put(t, o, in, false); err != nil {
				t.Fatal(err)
			}
		}
		ops, err := o.Claim(ctx, "d1", 2, time.Minute)
		if err != nil || len(ops) != 2 {
			t.Fatalf("claimed %d, %v", len(ops), err)
		}
		if err := o.Deliver(ctx, ops[0], "d1", outbox.Answer{Verdict: outbox.Refused, Status: 400}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if err := o.Deliver(ctx, ops[1], "d1", outbox.Answer{Verdict: outbox.Acknowledged, Status: 200}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if c, err := o.Counts(ctx); err != nil || c != (outbox.Counts{Pending: 1, Failed: 1}) {
			t.Errorf("counts %+v, %v", c, err)
		}
	})
}

// Each count reads a partial index of the outbox, not the table.
func TestCountsReadTheIndexes(t *testing.T) {
	o := open(t, storetest.SQLite(t), nil)
	for q, index := range map[string]string{
		`SELECT COUNT(*) FROM (SELECT 1 FROM mcprel_outbox WHERE state = 1 LIMIT 10) t`:               "mcprel_outbox_due",
		`SELECT COUNT(*) FROM (SELECT 1 FROM mcprel_outbox WHERE state > 1 AND state = 3 LIMIT 10) t`: "mcprel_outbox_ended",
	} {
		var plan []string
		err := o.DB().ReadTx(context.Background(), func(tx *store.Tx) error {
			rows, err := tx.Query(context.Background(), `EXPLAIN QUERY PLAN `+q)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					return err
				}
				plan = append(plan, detail)
			}
			return rows.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(plan, "; "); !strings.Contains(p, index) {
			t.Errorf("%s: plan %s", q, p)
		}
	}
}
