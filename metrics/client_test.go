package metrics_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A client against an mcprel server over stdio, in each era, inside a
// synctest bubble: a call the client gives up on whose response arrives
// anyway, a safe call retried once, an unsafe call not retried (reconcile
// first), a call refused a retry by the spent budget. The scrape then has
// exactly these counts, a tool the caller did not name is "other", and the
// counts survive the client being unwatched.
func TestClientScenarioCounters(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
		t.Run(era.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { clientScenario(t, era) })
		})
	}
}

func clientScenario(t *testing.T, era mcp.Era) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewClient(reg, &metrics.ClientOptions{Tools: []string{"flaky", "charge", "gate"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := mcptest.NewServer(t, nil)
	gate := mcptest.NewGate(t, srv, "gate")
	ok := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
	}
	busy := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return nil, &mcp.ToolError{Code: "busy", Message: "try again", Retryable: true}
	}
	var flakyCalls atomic.Int32
	for name, h := range map[string]server.ToolHandler{
		"flaky": func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			if flakyCalls.Add(1) == 1 {
				return busy(ctx, req)
			}
			return ok(ctx, req)
		},
		"charge": busy,
		"busy":   busy,
	} {
		if err := srv.AddTool(server.Tool{Name: name}, h); err != nil {
			t.Fatal(err)
		}
	}
	c, hold := dialHolding(t, srv, era)
	stop := m.Watch(c)
	ctx := context.Background()

	// A late response: the client gives up on a call while its
	// cancellation is held on the way, the tool finishes, and its
	// response reaches a client that no longer waits for it.
	hold.set(true)
	cctx, cancel := context.WithCancel(ctx)
	errs := make(chan error, 1)
	go func() { _, err := c.CallTool(cctx, "gate", nil, nil); errs <- err }()
	gate.WaitEntered(t)
	cancel()
	if err := <-errs; !errors.As(err, new(*client.CancelledError)) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	synctest.Wait()
	if n := hold.count(); n != 1 {
		t.Fatalf("%d cancellations held, want 1", n)
	}
	gate.Release()
	synctest.Wait() // the server answered; the client read and ignored it
	hold.set(false) // the server now hears of the cancellation, too late

	// Retries, planned with a budget of one retry.
	p := retry.NewPlanner(retry.Options{
		Table: retry.Table{Tools: map[string]retry.Rule{
			"flaky": {Class: mcp.RetrySafe}, "busy": {Class: mcp.RetrySafe}, "charge": {Class: mcp.RetryUnsafe},
		}},
		Budget:  &retry.Budget{Ratio: -1, MinPerSecond: 1e-9},
		Observe: m.Observe,
	})
	if err := callPlanned(ctx, c, p, "flaky"); err != nil {
		t.Fatalf("flaky, retried once: %v", err)
	}
	if err := callPlanned(ctx, c, p, "charge"); !errors.As(err, new(*retry.ReconcileError)) {
		t.Fatalf("charge: %v, want reconcile first", err)
	}
	if err := callPlanned(ctx, c, p, "busy"); !errors.Is(err, retry.ErrBudgetExhausted) {
		t.Fatalf("busy: %v, want the budget spent", err)
	}

	want := map[string]float64{
		`mcprel_client_attempts_total{class="safe",tool="flaky"}`:                                   2,
		`mcprel_client_attempts_total{class="unsafe",tool="charge"}`:                                1,
		`mcprel_client_attempts_total{class="safe",tool="other"}`:                                   1,
		`mcprel_client_retries_total{class="safe",failure="tool_failed",tool="flaky"}`:              1,
		`mcprel_client_retries_declined_total{class="unsafe",reason="reconcile",tool="charge"}`:     1,
		`mcprel_client_retries_declined_total{class="safe",reason="budget_exhausted",tool="other"}`: 1,
		`mcprel_client_late_responses_total`:                                                        1,
		`mcprel_client_cancellations_total`:                                                         1,
		`mcprel_client_progress_discarded_total{reason="not_increasing"}`:                           0,
		`mcprel_client_progress_discarded_total{reason="dropped"}`:                                  0,
		`mcprel_client_resumptions_total`:                                                           0,
		`mcprel_client_reconnects_total`:                                                            0,
		`mcprel_client_restarts_total`:                                                              0,
		`mcprel_client_refetches_total`:                                                             0,
		`mcprel_client_server_requests_discarded_total{reason="refused"}`:                           0,
		`mcprel_client_server_requests_discarded_total{reason="dropped"}`:                           0,
	}
	expectScrape(t, reg, want)
	stop()
	stop()
	expectScrape(t, reg, want) // an unwatched client's counts stay
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
	c.Close()
}

// callPlanned calls a tool as a client with retries does: each failed
// attempt goes to the planner, which says whether to make another (at
// once here: the pause is the planner's concern, not this test's).
func callPlanned(ctx context.Context, c *client.Client, p *retry.Planner, tool string) error {
	a := p.Start(retry.Call{Tool: tool})
	for {
		res, err := c.CallTool(ctx, tool, nil, nil)
		var f retry.Verdict
		switch {
		case err != nil:
			f = retry.Classify(err)
		case res.IsError:
			f, _ = retry.FromResult(res)
		default:
			return nil
		}
		if d := a.Next(f, time.Now()); !d.Retry {
			return d.Err
		}
	}
}

// holder sits between a client and a server on stdio and, while set, holds
// the client's cancellations back, so that a tool's response can cross
// one.
type holder struct {
	w    io.Writer // to the server
	mu   sync.Mutex
	on   bool
	held []string
}

func (h *holder) set(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on = on
	if !on {
		for _, line := range h.held {
			io.WriteString(h.w, line)
		}
		h.held = nil
	}
}

func (h *holder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// pass copies the client's lines to the server, holding cancellations
// back while set, and closes the server's input when the client closes.
func (h *holder) pass(from io.Reader, to io.Closer) {
	defer to.Close()
	sc := bufio.NewScanner(from)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text() + "\n"
		h.mu.Lock()
		if h.on && strings.Contains(line, `"`+mcp.NotificationCancelled+`"`) {
			h.held = append(h.held, line)
		} else {
			io.WriteString(h.w, line)
		}
		h.mu.Unlock()
	}
}

// dialHolding connects a client to srv over stdio pipes through a holder.
func dialHolding(t *testing.T, srv *server.Server, era mcp.Era) (*client.Client, *holder) {
	t.Helper()
	clientOut, toHolder := io.Pipe()
	serverIn, toServer := io.Pipe()
	clientIn, serverOut := io.Pipe()
	h := &holder{w: toServer}
	go h.pass(clientOut, toServer)
	conn := stdio.NewConn(srv, serverIn, serverOut, nil)
	done := make(chan struct{})
	go func() { conn.Serve(context.Background()); serverOut.Close(); close(done) }()
	c, err := client.Connect(context.Background(), clientIn, toHolder, &client.Options{Era: era})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); <-done })
	return c, h
}

// A listen stream that drops and comes back is one reconnect in the
// scrape, which sums the clients watched (here two, one of them idle).
func TestClientReconnectsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewClient(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := mcptest.NewServer(t, nil)
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	refetched := make(chan struct{}, 16)
	var clients []*client.Client
	for range 2 {
		c, err := client.DialHTTP(context.Background(), hs.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		defer m.Watch(c)()
		clients = append(clients, c)
	}
	sub, err := clients[0].Listen(context.Background(), client.ListenOptions{
		Filter:  mcp.SubscriptionFilter{ToolsListChanged: true},
		Refetch: func(context.Context) { refetched <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	hs.CloseClientConnections() // the stream drops
	select {
	case <-refetched:
	case <-time.After(mcptest.Timeout):
		t.Fatal("no refetch after the stream dropped")
	}
	got := scrape(t, reg)
	if got["mcprel_client_reconnects_total"] != 1 {
		t.Fatalf("mcprel_client_reconnects_total = %v, want 1", got["mcprel_client_reconnects_total"])
	}
}

// The zero options and a nil registry.
func TestNewClientNeedsARegistry(t *testing.T) {
	if _, err := metrics.NewClient(nil, nil); err == nil {
		t.Fatal("NewClient(nil) registered nowhere without an error")
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.NewClient(reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.NewClient(reg, nil); err == nil {
		t.Fatal("registering the client metrics twice with one registry did not fail")
	}
	if _, err := metrics.NewClient(reg, &metrics.ClientOptions{Namespace: "other"}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
}

// expectScrape asserts that the client metrics are exactly want: every
// series with its value, and no other.
func expectScrape(t *testing.T, reg prometheus.Gatherer, want map[string]float64) {
	t.Helper()
	got := scrape(t, reg)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := got[k]; !ok || v != want[k] {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s = %v", k, got[k])
		}
	}
}

// scrape gathers reg into name{labels} → value, labels sorted by name.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				b, _ := json.Marshal(l.GetValue())
				labels = append(labels, l.GetName()+"="+string(b))
			}
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			if _, dup := out[key]; dup {
				t.Fatalf("series %s twice", key)
			}
			out[key] = mt.GetCounter().GetValue()
		}
	}
	return out
}
