package host_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
)

// A running runtime counts its ledger's unresolved unknown outcomes into
// mcprel_ledger_unknown_outcomes, by tool, and counts again after one is
// resolved.
func TestUnknownOutcomesGauge(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		host.SetUnknownRefresh(t, 20*time.Millisecond)
		opts := options(t, dsn, &steps{})
		opts.Addr = "127.0.0.1:0"
		opts.Metrics.Addr = "127.0.0.1:0"
		opts.Metrics.Open = true
		rt, err := host.New(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := running(t, rt)
		defer stop()

		for _, key := range []string{"a", "b"} {
			c, _, err := rt.Ledger().ClaimOnce(ctx, ledger.Op{Tenant: "acme", Tool: "send_email", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Unknown(ctx, "lost"); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, rt.MetricsURL(), `mcprel_ledger_unknown_outcomes{tool="send_email"} 2`)
		if err := rt.Ledger().Forget(ctx, "acme", "send_email", "a"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, rt.MetricsURL(), `mcprel_ledger_unknown_outcomes{tool="send_email"} 1`)
	})
}

// waitFor scrapes url until it shows line, for up to ten seconds.
func waitFor(t *testing.T, url, line string) {
	t.Helper()
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), line+"\n") {
			return
		}
	}
	t.Fatalf("the metrics never showed %s:\n%s", line, body)
}
