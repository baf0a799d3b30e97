package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// call --metrics-file writes the client's metrics at exit, whatever the
// call's end: a conditional call retried after its response was lost,
// and an unsafe one declined a retry (reconcile first).
func TestCallMetricsFile(t *testing.T) {
	url, _ := startHTTP(t, nil, "--db", filepath.Join(t.TempDir(), "metrics.db"))
	if _, errs, code := mcprelCall(t, "--url", url, "set_stock", "sku=m1", "quantity=10", "expectedVersion=0"); code != 0 {
		t.Fatalf("set_stock: %d %s", code, errs)
	}
	for _, tc := range []struct {
		tool string
		args []string
		code int
		want []string
	}{
		{"reserve_inventory", []string{"--auto-key", "reserve_inventory", "sku=m1", "quantity=3"}, 0, []string{
			`mcprel_client_attempts_total{class="conditional",tool="reserve_inventory"} 2`,
			`mcprel_client_retries_total{class="conditional",failure="lost",tool="reserve_inventory"} 1`,
			`mcprel_client_late_responses_total 0`,
			`mcprel_client_requests_total{kind="lost",method="tools/call",outcome="unknown",tool="reserve_inventory"} 1`,
			`mcprel_client_requests_total{kind="succeeded",method="tools/call",outcome="answered",tool="reserve_inventory"} 1`,
			`mcprel_client_requests_total{kind="succeeded",method="tools/list",outcome="answered",tool=""} 1`,
		}},
		{"charge_account", []string{"charge_account", "account=alice", "cents=500"}, exitReconcile, []string{
			`mcprel_client_attempts_total{class="unsafe",tool="charge_account"} 1`,
			`mcprel_client_retries_declined_total{class="unsafe",reason="reconcile",tool="charge_account"} 1`,
			`mcprel_client_requests_total{kind="lost",method="tools/call",outcome="unknown",tool="charge_account"} 1`,
		}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "client.prom")
			args := append([]string{"--url", lossyProxy(t, url, tc.tool), "--metrics-file", file}, tc.args...)
			out, errs, code := mcprelCall(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, out, errs)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w+"\n") {
					t.Errorf("the metrics file lacks %s", w)
				}
			}
			if t.Failed() {
				t.Log(string(b))
			}
		})
	}
}
