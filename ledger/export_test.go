package ledger

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/store"
)

// SetClock makes l read time from now, so tests can move past leases and
// retention without waiting.
func SetClock(l *Ledger, now func() time.Time) { l.now = now }

// OnRoute calls f with each decision l makes to answer a call from a read
// before it queues for the writer, or not.
func OnRoute(l *Ledger, f func(readFirst bool)) { l.onRoute = f }

// SetReapPace makes the SQLite reaper read chunk records at a time and at
// least minVisit a tick, until the test ends.
func SetReapPace(t interface{ Cleanup(func()) }, chunk, minVisit int) {
	oldChunk, oldMin := reapChunk, reapMinVisit
	reapChunk, reapMinVisit = chunk, minVisit
	t.Cleanup(func() { reapChunk, reapMinVisit = oldChunk, oldMin })
}

// SweepBudget is sweepBudget, for tests.
var SweepBudget = sweepBudget

// OnScanned calls f when Reap, on SQLite, has read a chunk of records and
// is about to delete the expired ones.
func OnScanned(l *Ledger, f func()) { l.onScanned = f }

// Migrations are the ledger's schema steps, for a test that builds an
// older schema.
var Migrations = migrations

// ListPlan is the database's plan of the listing q.
func ListPlan(t testing.TB, l *Ledger, q ListQuery) string {
	t.Helper()
	query, args, err := l.listQuery(q, DefaultListLimit+1)
	if err != nil {
		t.Fatal(err)
	}
	return plan(t, l, query, args...)
}

// CountPlan is the database's plan of UnknownByTool's count.
func CountPlan(t testing.TB, l *Ledger) string {
	t.Helper()
	return plan(t, l, countUnknown, ms(l.now()))
}

func plan(t testing.TB, l *Ledger, query string, args ...any) string {
	t.Helper()
	explain := "EXPLAIN "
	if l.db.Dialect() == store.SQLite {
		explain = "EXPLAIN QUERY PLAN "
	}
	var out []string
	err := l.db.ReadTx(context.Background(), func(tx *store.Tx) error {
		rows, err := tx.Query(context.Background(), explain+query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return err
			}
			out = append(out, fmt.Sprint(vals[len(vals)-1]))
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}
