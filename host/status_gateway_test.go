package host_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// The status page shows each upstream's state, circuit and recent
// latency, and the last error of one nobody listens for, without the
// secrets the gateway gives it: its URL's query and its header.
func TestStatusOfUpstreams(t *testing.T) {
	up := mcptest.NewServer(t, nil)
	if err := up.AddTool(server.Tool{Name: "echo"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("echoed")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(up, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	// An address nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close()

	const querySecret, headerSecret = "q-s3cret-in-the-url", "h-s3cret-in-the-header"
	opts := &host.Options{
		Implementation: mcp.Implementation{Name: "gateway-test", Version: "1"},
		Server:         server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		DB:             storetest.SQLite(t),
		Addr:           "127.0.0.1:0",
		Metrics:        host.MetricsOptions{Addr: "127.0.0.1:0", Token: metricsToken},
		Gateway: &gateway.Options{Upstreams: []gateway.Upstream{
			{Name: "good", URL: hs.URL, KeepNames: true},
			{Name: "dead", URL: "http://" + deadAddr + "/mcp?api_key=" + querySecret,
				Header: http.Header{"Authorization": {"Bearer " + headerSecret}, "X-Api-Key": {headerSecret}}},
		}, StartWait: mcptest.Timeout, Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
			"echo": {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, AtMostOnce: true, ReconcileWith: "list_echoes"}},
		}}},
	}
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := running(t, rt)
	defer stop()

	c, err := client.DialHTTP(context.Background(), rt.Endpoint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.CallTool(context.Background(), "echo", map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// An unknown outcome of the keyed tool shows the read the policy
	// reconciles it with.
	leaveUnknown(t, rt.Ledger(), "", "echo", "e-1")

	var snap status.Snapshot
	var body string
	deadline := time.Now().Add(mcptest.Timeout)
	for {
		got := fetch(t, rt.StatusURL()+".json", metricsToken)
		body = got.body
		snap = status.Snapshot{}
		if err := json.Unmarshal([]byte(body), &snap); err != nil {
			t.Fatalf("%d %v: %s", got.code, err, body)
		}
		if ups := snap.Upstreams; ups != nil && len(ups.Upstreams) == 2 && ups.Upstreams[1].LastError != "" && ups.Upstreams[0].Latency.Samples == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the dead upstream's error and the good one's calls: %s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The replicas' board lists this replica with the gateway's
	// upstreams in brief.
	if err := host.PublishReplica(rt); err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(t, rt); len(r.Replicas) != 1 || !r.Replicas[0].This || len(r.Replicas[0].Upstreams) != 2 ||
		r.Replicas[0].Upstreams[0] != (status.ReplicaUpstream{Name: "good", State: "connected", Circuit: "closed"}) ||
		r.Replicas[0].Upstreams[1].Name != "dead" || r.Replicas[0].Upstreams[1].State != "down" {
		t.Errorf("the replicas: %+v", r)
	}
	good, dead := snap.Upstreams.Upstreams[0], snap.Upstreams.Upstreams[1]
	if good.Name != "good" || good.State != "connected" || good.Circuit != "closed" || good.Transport != "http" || good.Era == "" || good.Latency.MaxMs <= 0 {
		t.Errorf("the good upstream: %+v", good)
	}
	if dead.Name != "dead" || dead.State != "down" || dead.LastErrorAt == nil || !strings.Contains(dead.LastError, "could not connect") ||
		!strings.Contains(dead.LastError, deadAddr+"/mcp") {
		t.Errorf("the dead upstream: %+v", dead)
	}
	if testing.Verbose() {
		t.Logf("the dead upstream's last error: %s", dead.LastError)
	}
	if u := snap.Unknown; u == nil || len(u.Outcomes) != 1 || u.Outcomes[0].ReconcileWith != "list_echoes" ||
		u.Outcomes[0].Resolve != "mcprel ledger resolve --db "+opts.DB+" --tool echo --key e-1" {
		t.Errorf("unknown outcomes: %+v", u)
	}
	html := fetch(t, rt.StatusURL(), metricsToken).body
	for _, page := range []string{body, html} {
		for _, secret := range []string{querySecret, headerSecret, "api_key"} {
			if strings.Contains(page, secret) {
				t.Errorf("the page shows %q:\n%s", secret, page)
			}
		}
	}
	if !strings.Contains(html, "dead") || !strings.Contains(html, ">down<") {
		t.Errorf("the HTML does not show the dead upstream down:\n%s", html)
	}
}
