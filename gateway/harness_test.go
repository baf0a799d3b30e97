package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// wait bounds every wait of these tests on something that must happen:
// failing after it is a finding, not a timing assertion.
const wait = mcptest.Timeout

// upstream is an mcprel server standing in for an MCP server the gateway
// cannot change, served over Streamable HTTP. Its tools tell the test
// what their handlers saw.
type upstream struct {
	srv  *server.Server
	url  string
	gate *mcptest.Gate // tool "hang": blocks until released or cancelled

	askEnded chan error // why tool "ask" stopped waiting for its answer

	mu       sync.Mutex
	headers  []http.Header // every request's headers, in order
	sessions map[string]bool

	conns    atomic.Int64 // TCP connections accepted
	noStream atomic.Bool  // a 2025 session's GET stream is refused (405)
}

// askCancelled returns why the upstream's "ask" stopped waiting for its
// client's answer.
func (u *upstream) askCancelled(t *testing.T) error {
	t.Helper()
	select {
	case err := <-u.askEnded:
		return err
	case <-time.After(wait):
		t.Fatal("the upstream's ask never stopped waiting")
		return nil
	}
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{sessions: map[string]bool{}, askEnded: make(chan error, 16)}
	u.srv = mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond})
	u.gate = mcptest.NewGate(t, u.srv, "hang")
	must(t, server.AddTypedTool(u.srv, server.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ptr(true)}},
		func(ctx context.Context, call *server.CallRequest, in struct {
			Text string `json:"text"`
		}) (struct {
			Text string `json:"text"`
		}, error) {
			return struct {
				Text string `json:"text"`
			}{in.Text}, nil
		}))
	must(t, server.AddTypedTool(u.srv, server.Tool{Name: "progress"},
		func(ctx context.Context, call *server.CallRequest, in struct {
			Values []float64 `json:"values"`
		}) (struct {
			Done int `json:"done"`
		}, error) {
			for _, v := range in.Values {
				_ = call.ReportProgress(v, 0, fmt.Sprint("at ", v))
			}
			return struct {
				Done int `json:"done"`
			}{len(in.Values)}, nil
		}))
	must(t, u.srv.AddTool(server.Tool{Name: "fail"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return nil, &mcp.ToolError{Code: "card_declined", Message: "the card was declined"}
	}))
	// roots asks the client for its roots, the way each era asks.
	must(t, u.srv.AddTool(server.Tool{Name: "roots"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		var raw json.RawMessage
		if call.Era == mcp.Modern {
			var ok bool
			if raw, ok = call.InputResponses["roots"]; !ok {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"roots": server.RootsRequest()}}
			}
		} else {
			var err error
			if raw, err = call.CallClient(ctx, mcp.MethodListRoots, struct{}{}); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("roots " + string(raw))}}, nil
	}))
	// refuse answers with a JSON-RPC error of the code it is given.
	must(t, server.AddTypedTool(u.srv, server.Tool{Name: "refuse"}, func(ctx context.Context, call *server.CallRequest, in struct {
		Code int64 `json:"code"`
	}) (string, error) {
		return "", jsonrpc.NewError(in.Code, "refused with %d", in.Code).WithData(map[string]any{"why": "asked to"})
	}))
	must(t, u.srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		p := mcp.ElicitParams{Message: "your name?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}
		if call.Era == mcp.Modern {
			ans, ok := call.InputResponses["name"]
			if !ok {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": server.ElicitRequest(p)}, State: []byte("upstream-round-1")}
			}
			if string(call.RequestState) != "upstream-round-1" {
				return nil, fmt.Errorf("requestState %q came back altered", call.RequestState)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("answered " + string(ans))}}, nil
		}
		res, err := call.Elicit(ctx, p)
		if err != nil {
			cause := err
			if ctx.Err() != nil {
				cause = context.Cause(ctx)
			}
			u.askEnded <- cause
			return nil, err
		}
		b, _ := json.Marshal(res)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("answered " + string(b))}}, nil
	}))
	h, err := streamhttp.NewHandler(u.srv, nil)
	must(t, err)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			u.sessions[id] = true
		}
		u.mu.Unlock()
		if r.Method == http.MethodGet && u.noStream.Load() {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			u.conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func (u *upstream) seenHeaders() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.headers...)
}

func (u *upstream) sessionCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.sessions)
}

// front is a gateway with its server, reached by downstream clients over
// Streamable HTTP.
type front struct {
	srv *server.Server
	gw  *gateway.Gateway
	url string
	// When the test set no Observer: a listing was served, a request was
	// forwarded (its record, the last 64 kept).
	listed    chan struct{}
	forwarded chan gateway.ForwardRecord
}

// frontObserver tells a front what its gateway did.
type frontObserver struct{ f *front }

func (o frontObserver) Forwarded(r gateway.ForwardRecord) {
	select {
	case o.f.forwarded <- r:
	default:
	}
}

func (o frontObserver) UpstreamEvent(e gateway.UpstreamEvent) {
	if e.Kind == gateway.EventListed {
		select {
		case o.f.listed <- struct{}{}:
		default:
		}
	}
}

// awaitForward returns the record of the next request forwarded to the
// tool or prompt name.
func (f *front) awaitForward(t *testing.T, name string) gateway.ForwardRecord {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case r := <-f.forwarded:
			if r.Name == name {
				return r
			}
		case <-deadline:
			t.Fatalf("no request to %s was forwarded", name)
		}
	}
}

func newFront(t testing.TB, opts gateway.Options, hopts *streamhttp.HandlerOptions) *front {
	t.Helper()
	return newFrontOn(t, mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond}), opts, hopts)
}

// newFrontOn is newFront on srv, which a test prepared (a task server on
// it, say); a benchmark's too.
func newFrontOn(t testing.TB, srv *server.Server, opts gateway.Options, hopts *streamhttp.HandlerOptions) *front {
	t.Helper()
	f := &front{srv: srv, listed: make(chan struct{}, 1), forwarded: make(chan gateway.ForwardRecord, 64)}
	if opts.Observer == nil {
		opts.Observer = frontObserver{f}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	gw, err := gateway.New(f.srv, &opts)
	must(t, err)
	f.gw = gw
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	must(t, gw.Start(ctx))
	t.Cleanup(func() { gw.Close() })
	h, err := streamhttp.NewHandler(f.srv, hopts)
	must(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f
}

// dial connects a downstream client in era (0: negotiated, the newest).
func (f *front) dial(t *testing.T, era mcp.Era, o *client.Options) *client.Client {
	t.Helper()
	var opts client.Options
	if o != nil {
		opts = *o
	}
	opts.Era = era
	c, err := client.DialHTTP(context.Background(), f.url, &opts)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eras are the two protocol eras, as a client forces them.
var eras = []eraCase{{"2026", mcp.Modern}, {"2025", mcp.Legacy}}

type eraCase struct {
	name string
	era  mcp.Era
}

// eraPairs runs test once for every downstream era in front of every
// upstream era, as subtests named down-to-up.
func eraPairs(t *testing.T, test func(t *testing.T, up, down eraCase)) {
	for _, up := range eras {
		for _, down := range eras {
			t.Run(down.name+"-to-"+up.name, func(t *testing.T) { test(t, up, down) })
		}
	}
}

// inFront serves u through a proxy (proxyTo) that shows intercept each
// POST's body first: when intercept answers the request itself (it
// returns true), u never sees it. It returns the proxy's URL.
func (u *upstream) inFront(t *testing.T, intercept func(w http.ResponseWriter, r *http.Request, body []byte) bool) string {
	t.Helper()
	inner := proxyTo(u.url)
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if intercept(w, r, body) {
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ps.Close)
	return ps.URL
}

// options serves u as the gateway's one upstream "up", reached by a
// client of era.
func (u *upstream) options(era mcp.Era) gateway.Options {
	return gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}}, Client: client.Options{Era: era}}
}

func text(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	b, _ := json.Marshal(res.Content[0])
	var c struct {
		Text string `json:"text"`
	}
	json.Unmarshal(b, &c)
	return c.Text
}

func ptr[T any](v T) *T { return &v }

// recv receives from ch, or fails the test, naming what never came, once
// wait has passed.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("%s never happened", what)
		panic("unreachable")
	}
}

// structured is a result's structuredContent as JSON text.
func structured(res *mcp.CallToolResult) string {
	b, _ := json.Marshal(res.StructuredContent)
	return string(b)
}
