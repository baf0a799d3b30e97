package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/server"
)

// Every way a progress report is lost has its reason: refused, thinned by
// the rate limit, replaced in the outbox, dropped, or reported after the
// end.
func TestProgressDiscardedByReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := server.RequestRecord{Method: mcp.MethodToolsCall, Tool: "x", Era: mcp.Modern, Transport: "stdio", Outcome: server.Completed,
		ProgressRefused: 1, ProgressRateLimited: 2, ProgressCoalesced: 3, ProgressDropped: 4}
	obs.RequestEnded(obs.RequestStarted(context.Background(), server.RequestInfo{Method: rec.Method}), rec)
	obs.ObserveEvent(server.Event{Kind: server.EventProgressAfterEnd, Transport: "stdio"})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "mcprel_progress_discarded_total" {
			for _, m := range f.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"not_increasing": 1, "rate_limited": 2, "coalesced": 3, "dropped": 4, "after_end": 1}
	for reason, n := range want {
		if got[reason] != n {
			t.Errorf("reason %s: %v, want %v (all: %v)", reason, got[reason], n, got)
		}
	}
}
