package host_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tracing"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A runtime with a gateway in front of an upstream: the forwarded calls
// are counted per upstream and outcome in the runtime's metrics, the
// cancellation carried upstream among them, and the upstream's state is
// read at the scrape; the forwarded request's span is a child of the
// gateway's, and the upstream's own span continues the same trace.
func TestGatewayRuntime(t *testing.T) {
	upSpans := tracetest.NewInMemoryExporter()
	upTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(upSpans))
	t.Cleanup(func() { upTP.Shutdown(context.Background()) })
	upTracer := tracing.New(upTP, nil)
	up := mcptest.NewServer(t, &server.Options{Observers: []server.Observer{upTracer}})
	upTracer.Attach(up)
	gate := mcptest.NewGate(t, up, "hang")
	if err := up.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
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

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	forwarded := recordForwards(make(chan gateway.ForwardRecord, 16))
	opts := &host.Options{
		Implementation: mcp.Implementation{Name: "gateway-test", Version: "1"},
		Server:         server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		DB:             storetest.SQLite(t),
		TracerProvider: tp,
		Addr:           "127.0.0.1:0",
		Metrics:        host.MetricsOptions{Path: "/metrics", Open: true},
		Gateway:        &gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: hs.URL}}, Observer: forwarded},
	}
	rt, err := host.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	defer func() { stop(); <-ran }()

	c, err := client.DialHTTP(context.Background(), rt.Endpoint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.CallTool(context.Background(), "echo", nil, nil)
	if err != nil || text(t, res) != "echoed" {
		t.Fatalf("echo through the gateway: %+v, %v", res, err)
	}
	nextForward(t, forwarded)
	callCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.CallTool(callCtx, "hang", nil, nil); done <- err }()
	gate.WaitEntered(t)
	cancel()
	if cause := gate.WaitExited(t); !errors.Is(cause, server.ErrDisconnected) {
		t.Fatalf("the upstream's handler ended with %v, want its stream closed", cause)
	}
	gate.Release()
	select {
	case <-done:
	case <-time.After(mcptest.Timeout):
		t.Fatalf("the cancelled call did not return within %v", mcptest.Timeout)
	}
	if r := nextForward(t, forwarded); r.Outcome != gateway.OutcomeCancelled || !r.CancelPropagated {
		t.Fatalf("the cancelled call was recorded %+v", r)
	}

	// The metrics are told after the observer the caller gave (observeBoth),
	// so having the record does not mean they have it yet, and nothing
	// signals when they do: the scrape is read again until it shows every
	// line, within mcptest.Timeout.
	metricsURL := strings.TrimSuffix(rt.Endpoint(), "/mcp") + "/metrics"
	awaitScrape(t, metricsURL, []string{
		`mcprel_gateway_forwarded_total{method="tools/call",name="echo",outcome="ok",upstream="up"} 1`,
		`mcprel_gateway_forwarded_total{method="tools/call",name="hang",outcome="cancelled",upstream="up"} 1`,
		`mcprel_gateway_cancellations_propagated_total{upstream="up"} 1`,
		`mcprel_gateway_circuit_open{upstream="up"} 0`,
		`mcprel_gateway_upstream_in_flight{upstream="up"} 0`,
		`mcprel_gateway_upstream_seconds_count{method="tools/call",upstream="up"} 2`,
	})

	// The gateway's server span, its upstream client span, and the
	// upstream's server span, all of one trace.
	var gwServer, gwClient, upServer sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		switch {
		case s.Name() == "tools/call echo" && s.SpanKind().String() == "server":
			gwServer = s
		case s.Name() == "tools/call echo" && s.SpanKind().String() == "client":
			gwClient = s
		}
	}
	for _, s := range upSpans.GetSpans().Snapshots() {
		if s.Name() == "tools/call echo" {
			upServer = s
		}
	}
	if gwServer == nil || gwClient == nil || upServer == nil {
		t.Fatalf("spans: gateway server %v, gateway client %v, upstream server %v", gwServer != nil, gwClient != nil, upServer != nil)
	}
	if gwClient.Parent().SpanID() != gwServer.SpanContext().SpanID() {
		t.Errorf("the forwarded request's span is not a child of the gateway's")
	}
	if upServer.SpanContext().TraceID() != gwServer.SpanContext().TraceID() || upServer.Parent().SpanID() != gwClient.SpanContext().SpanID() {
		t.Errorf("the upstream's span does not continue the gateway's trace from its client span")
	}
}

// recordForwards is a gateway observer that hands each forwarded
// request's record to the test.
type recordForwards chan gateway.ForwardRecord

func (r recordForwards) Forwarded(rec gateway.ForwardRecord) { r <- rec }
func (recordForwards) UpstreamEvent(gateway.UpstreamEvent)   {}

// nextForward returns the next forwarded request's record, failing the
// test if none comes within mcptest.Timeout.
func nextForward(t *testing.T, forwarded recordForwards) gateway.ForwardRecord {
	t.Helper()
	select {
	case r := <-forwarded:
		return r
	case <-time.After(mcptest.Timeout):
		t.Fatalf("the gateway's observer was told of no forwarded request within %v", mcptest.Timeout)
		return gateway.ForwardRecord{}
	}
}

// awaitScrape scrapes the metrics until their text holds every line of
// wants, failing the test with the last scrape if it does not within
// mcptest.Timeout.
func awaitScrape(t *testing.T, url string, wants []string) {
	t.Helper()
	deadline := time.Now().Add(mcptest.Timeout)
	for {
		scraped := scrapeText(t, url)
		var missing []string
		for _, want := range wants {
			if !strings.Contains(scraped, want+"\n") {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %v, the metrics never showed %s:\n%s", mcptest.Timeout, strings.Join(missing, ", "), scraped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scrapeText reads the metrics' text.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The runtime's gateway is reachable for a reload while it runs: an
// upstream the reload adds is served through the runtime's endpoint.
func TestGatewayRuntimeReloads(t *testing.T) {
	serve := func() string {
		up := mcptest.NewServer(t, nil)
		if err := up.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
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
		return hs.URL
	}
	first := gateway.Upstream{Name: "one", URL: serve()}
	rt, err := host.New(context.Background(), &host.Options{
		Implementation: mcp.Implementation{Name: "gateway-test", Version: "1"},
		Server:         server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		DB:             storetest.SQLite(t),
		Addr:           "127.0.0.1:0",
		Gateway:        &gateway.Options{Upstreams: []gateway.Upstream{first}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	defer func() { stop(); <-ran }()
	c, err := client.DialHTTP(context.Background(), rt.Endpoint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if res, err := c.CallTool(context.Background(), "echo", nil, nil); err != nil || text(t, res) != "echoed" {
		t.Fatalf("echo through the gateway: %+v, %v", res, err) // and so the gateway has started
	}
	rctx, cancel := context.WithTimeout(context.Background(), mcptest.Timeout)
	defer cancel()
	ch, err := rt.Gateway().Reload(rctx, []gateway.Upstream{first, {Name: "two", URL: serve()}}, nil)
	if err != nil || len(ch.Added) != 1 || ch.Added[0] != "two" {
		t.Fatalf("reload: %+v, %v", ch, err)
	}
	if res, err := c.CallTool(context.Background(), "two_echo", nil, nil); err != nil || text(t, res) != "echoed" {
		t.Fatalf("the added upstream's tool: %+v, %v", res, err)
	}
}
