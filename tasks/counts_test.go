package tasks_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
)

// Counts counts the tasks of each status, every tenant's, and finds the
// oldest working one.
func TestCounts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, nil)
		c, err := s.Counts(ctx)
		if err != nil || len(c.ByStatus) != len(tasks.Statuses) || c.ByStatus[tasks.Working] != 0 || !c.OldestWorking.IsZero() {
			t.Fatalf("an empty store: %+v, %v", c, err)
		}
		first := clk.Now()
		create(t, s, "acme", "w1")
		clk.Advance(time.Minute)
		create(t, s, "other", "w1")
		done := create(t, s, "acme", "w1")
		if err := s.Finish(ctx, done.ID, "w1", tasks.Completed, "", json.RawMessage(`{"content":[]}`), nil); err != nil {
			t.Fatal(err)
		}
		c, err = s.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.ByStatus[tasks.Working] != 2 || c.ByStatus[tasks.Completed] != 1 || c.ByStatus[tasks.Failed] != 0 || len(c.Capped) != 0 {
			t.Errorf("counts %+v", c)
		}
		if !c.OldestWorking.Equal(first.Truncate(time.Millisecond)) {
			t.Errorf("oldest working %v, want %v", c.OldestWorking, first)
		}
	})
}

// The counts read the index of tasks by status, not the table.
func TestCountsReadTheIndex(t *testing.T) {
	s, _ := open(t, storetest.SQLite(t), nil)
	for _, q := range []string{`SELECT COUNT(*) FROM (SELECT 1 FROM mcprel_tasks WHERE status = 1 LIMIT 10) t`,
		`SELECT MIN(created_at) FROM mcprel_tasks WHERE status = 1`} {
		if p := queryPlan(t, s.DB(), q); !strings.Contains(p, "mcprel_tasks_status") {
			t.Errorf("%s: plan %s", q, p)
		}
	}
}

// queryPlan is SQLite's plan of query.
func queryPlan(t *testing.T, db *store.DB, query string) string {
	t.Helper()
	var plan []string
	err := db.ReadTx(context.Background(), func(tx *store.Tx) error {
		rows, err := tx.Query(context.Background(), `EXPLAIN QUERY PLAN `+query)
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
	return strings.Join(plan, "; ")
}
