package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/store"
)

// histogramCount is the sample count of the histogram name whose labels
// include want.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// The ledger's operations are timed by result, and each committed write
// transaction is counted with the operations it carried.
func TestStoreMetrics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewStore(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, storetest.SQLite(t), &store.Options{OnCommit: m.Committed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := ledger.Open(ctx, db, &ledger.Options{Observers: []ledger.Observer{m}})
	if err != nil {
		t.Fatal(err)
	}
	commitsBefore := histogramCount(t, reg, "mcprel_store_commit_operations", nil)
	if commitsBefore == 0 {
		t.Fatal("the ledger's migrations committed nothing that was counted")
	}
	op := func(n int) ledger.Op {
		f, err := ledger.FingerprintOf(map[string]any{"n": json.Number(strconv.Itoa(n))}, nil, "idempotencyKey")
		if err != nil {
			t.Fatal(err)
		}
		return ledger.Op{Tool: "reserve", Key: "k1", Fingerprint: f}
	}
	effect := func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
	if _, err := l.Do(ctx, op(1), effect); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Do(ctx, op(1), effect); err != nil {
		t.Fatal(err)
	}
	var conflict *ledger.ConflictError
	if _, err := l.Do(ctx, op(2), effect); !errors.As(err, &conflict) {
		t.Fatalf("want a conflict, got %v", err)
	}
	for _, c := range []struct {
		result string
		want   uint64
	}{{"ok", 2}, {"conflict", 1}, {"error", 0}} {
		if got := histogramCount(t, reg, "mcprel_ledger_operation_seconds", map[string]string{"op": "do", "result": c.result}); got != c.want {
			t.Errorf("ledger do %s: %d observations, want %d", c.result, got, c.want)
		}
	}
	// The first Do and the replay commit (on SQLite a lone caller reads
	// its replay inside the write transaction, which commits nothing
	// written); the conflict rolls back and is not counted.
	if got := histogramCount(t, reg, "mcprel_store_commit_operations", nil) - commitsBefore; got != 2 {
		t.Errorf("%d commits counted for three operations, want 2", got)
	}
	if got := histogramCount(t, reg, "mcprel_store_commit_seconds", nil); got != commitsBefore+2 {
		t.Errorf("commit seconds has %d observations, commit operations %d", got, commitsBefore+2)
	}
}

// gauges is the values of the gauge name by its tool label.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// The gauge of unknown outcomes names the tools with the most and sums
// the rest under "other", so its label set stays bounded; a tool whose
// outcomes were all resolved reads 0.
func TestUnknownOutcomesGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	sm, err := metrics.NewStore(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{"pay": 100, "ship": 3}
	for i := range 50 {
		counts["tool"+strconv.Itoa(i)] = 1
	}
	sm.SetUnknownOutcomes(counts)
	got := gauges(t, reg, "mcprel_ledger_unknown_outcomes")
	if len(got) != metrics.MaxUnknownTools+1 || got["pay"] != 100 || got["ship"] != 3 {
		t.Fatalf("gauge = %v", got)
	}
	total := 0.0
	for _, n := range got {
		total += n
	}
	if total != 153 || got["other"] != 32 {
		t.Errorf("gauge sums to %v, other %v: %v", total, got["other"], got)
	}

	sm.SetUnknownOutcomes(map[string]int{"ship": 1})
	if got := gauges(t, reg, "mcprel_ledger_unknown_outcomes"); got["ship"] != 1 || got["pay"] != 0 || len(got) > metrics.MaxUnknownTools+1 {
		t.Errorf("after resolving: %v", got)
	} else if _, ok := got["pay"]; !ok {
		t.Errorf("pay's series vanished instead of reading 0: %v", got)
	}
}
