package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/server"
	"github.com/prometheus/client_golang/prometheus"
)

// With Options.Tenants, requests are counted per tenant (the operator's
// names; "" for none); without it, no tenant label exists.
func TestTenantLabelOptIn(t *testing.T) {
	for _, tenants := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		obs, err := metrics.New(reg, &metrics.Options{Tenants: tenants})
		if err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"acme", "acme", "globex", ""} {
			rec := server.RequestRecord{Method: mcp.MethodToolsList, Era: mcp.Modern, Transport: "http", Tenant: tenant, Outcome: server.Completed}
			obs.RequestEnded(obs.RequestStarted(context.Background(), server.RequestInfo{Method: rec.Method}), rec)
		}
		got := map[string]float64{}
		families, _ := reg.Gather()
		for _, f := range families {
			if f.GetName() != "mcprel_requests_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				tenant := "(no label)"
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" {
						tenant = l.GetValue()
					}
				}
				got[tenant] += m.GetCounter().GetValue()
			}
		}
		want := map[string]float64{"(no label)": 4}
		if tenants {
			want = map[string]float64{"acme": 2, "globex": 1, "": 1}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Tenants=%v: counted %v, want %v", tenants, got, want)
		}
	}
}
