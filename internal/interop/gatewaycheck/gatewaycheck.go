// Package gatewaycheck holds the checks every peer server faces behind
// mcprel's gateway, so that each is held to the same standard: the
// official Go SDK's and mcp-go's servers (internal/interop/goservers), the
// TypeScript SDK's (internal/interop/ts). A peer serves three tools:
// echo {text}, progress {steps, intervalMs} (a report after each step)
// and wait (blocks until cancelled), and writes "handler-started wait"
// and "handler-cancelled wait" on its stderr as its handler starts and
// sees its cancellation.
package gatewaycheck

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// Downstream is one way a client reaches the gateway: its transport and
// era.
type Downstream struct {
	Name string
	HTTP bool
	Era  mcp.Era
}

// Downstreams are every transport and era a client reaches the gateway
// by, each with its own cancellation: notifications/cancelled on stdio
// (both eras) and POSTed in the 2025 era over HTTP, the closed request
// stream in the 2026-07-28 era over HTTP.
var Downstreams = []Downstream{
	{Name: "stdio-2026", Era: mcp.Modern},
	{Name: "stdio-2025", Era: mcp.Legacy},
	{Name: "http-2026", HTTP: true, Era: mcp.Modern},
	{Name: "http-2025", HTTP: true, Era: mcp.Legacy},
}

// WaitIdle and WaitMax are the clocks the gateway's policy gives the
// peers' wait tool: the deadline check fires the maximum.
const (
	WaitIdle = 5 * time.Second
	WaitMax  = 300 * time.Millisecond
)

// CancelWait is both clocks of wait behind the gateway the cancellation
// check runs through: far past the round trip of a loaded machine (the
// peer's stderr, the gateway's log, the check's cancel), so that only the
// downstream's cancellation ends the call, never the gateway's clock.
const CancelWait = 30 * time.Second

// Peer is what a check needs of one upstream.
type Peer struct {
	// Upstream says how the gateway reaches it.
	Upstream gateway.Upstream
	// Log collects the peer's stderr: an HTTP peer's as its process
	// writes it, a stdio peer's through the gateway's log, which Start
	// writes here.
	Log *mcptest.Lines
	// CancelSeen says whether the peer's handler sees a cancellation on
	// this transport and era (a peer defect otherwise, said in Gap).
	CancelSeen bool
	Gap        string
}

// Front is a gateway in front of one peer, served to downstream clients.
type Front struct {
	Gateway *gateway.Gateway
	srv     *server.Server
	url     string
	listed  chan struct{} // a listing of the peer was served
}

// Start puts a gateway in front of p.
func Start(t *testing.T, p Peer, opts gateway.Options) *Front {
	t.Helper()
	return StartOn(t, mcptest.NewServer(t, &server.Options{ProgressInterval: time.Millisecond}), p, opts)
}

// StartOn is Start on srv, which the test prepared: a task server on it,
// say, for opts.Tasks.
func StartOn(t *testing.T, srv *server.Server, p Peer, opts gateway.Options) *Front {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(stderrLines{p.Log})
	}
	opts.Upstreams = []gateway.Upstream{p.Upstream}
	if opts.Policy == nil {
		opts.Policy = &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"wait": {Server: server.Policy{IdleTimeout: WaitIdle, MaxTimeout: WaitMax}}}}
	}
	f := &Front{srv: srv, listed: make(chan struct{}, 1)}
	if opts.Observer == nil {
		opts.Observer = listings{f.listed}
	}
	gw, err := gateway.New(f.srv, &opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mcptest.Timeout)
	defer cancel()
	if err := gw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	if st := gw.Upstreams()[0]; !st.Connected {
		t.Fatalf("the gateway did not connect to %s within %v", p.Upstream.Name, gateway.DefaultStartWait)
	}
	f.Gateway = gw
	h, err := streamhttp.NewHandler(f.srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f
}

// AwaitTool waits until the gateway serves a tool of that name: one a
// peer registers after the handshake and announces with list_changed.
func (f *Front) AwaitTool(t *testing.T, name string) {
	t.Helper()
	deadline := time.After(mcptest.Timeout)
	for !f.srv.HasTool(name) {
		select {
		case <-f.listed:
		case <-deadline:
			t.Fatalf("the gateway never served %s", name)
		}
	}
}

// listings tells a Front when the peer was listed.
type listings struct{ listed chan struct{} }

func (l listings) Forwarded(gateway.ForwardRecord) {}
func (l listings) UpstreamEvent(e gateway.UpstreamEvent) {
	if e.Kind == gateway.EventListed {
		select {
		case l.listed <- struct{}{}:
		default:
		}
	}
}

// Dial connects a client to the gateway as d says.
func (f *Front) Dial(t *testing.T, d Downstream, o client.Options) *client.Client {
	t.Helper()
	o.Era = d.Era
	var c *client.Client
	var err error
	if d.HTTP {
		c, err = client.DialHTTP(context.Background(), f.url, &o)
	} else {
		toServer, fromClient := pipe()
		toClient, fromServer := pipe()
		done := make(chan struct{})
		go func() {
			stdio.NewConn(f.srv, toServer, fromServer, nil).Serve(context.Background())
			fromServer.Close()
			close(done)
		}()
		c, err = client.Connect(context.Background(), toClient, fromClient, &o)
		if err == nil {
			t.Cleanup(func() { <-done })
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Forwarding checks a peer behind the gateway from every downstream: its
// tools keep their names and schemas, a call comes back as the peer
// answered it, progress arrives strictly increasing, a downstream
// cancellation reaches the peer's handler as its own cancellation, and a
// deadline that fires at the gateway cancels the peer's handler and
// gives the client the gateway's timeout result; the connection serves
// on after each. The cancellation runs through a gateway whose clocks for
// wait are CancelWait, the deadline through a second one in front of the
// same peer, with the default WaitMax. upstream configures the gateway's connection to the peer
// (its era, when the peer serves two).
func Forwarding(t *testing.T, upstream client.Options, start func(t *testing.T) Peer) {
	for _, d := range Downstreams {
		t.Run(d.Name, func(t *testing.T) {
			p := start(t)
			f := Start(t, p, gateway.Options{Client: upstream, Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
				"wait": {Server: server.Policy{IdleTimeout: CancelWait, MaxTimeout: CancelWait}},
			}}})
			c := f.Dial(t, d, client.Options{})
			ctx := context.Background()
			tools, err := c.ListTools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools {
				names = append(names, tl.Name)
				if tl.Name == "echo" && !strings.Contains(string(tl.InputSchema), `"text"`) {
					t.Errorf("echo's schema did not come through: %s", tl.InputSchema)
				}
			}
			for _, want := range []string{"echo", "progress", "wait"} {
				if !slices.Contains(names, want) {
					t.Fatalf("tools %v lack %s", names, want)
				}
			}
			Echo(t, c, "through the gateway")

			var seen []float64
			res, err := c.CallTool(ctx, "progress", map[string]any{"steps": 3, "intervalMs": 20},
				&client.CallOptions{OnProgress: func(p client.Progress) { seen = append(seen, p.Progress) }})
			if err != nil || res.IsError {
				t.Fatalf("progress: %+v, %v", res, err)
			}
			if len(seen) == 0 || !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
				t.Fatalf("progress %v: want strictly increasing reports", seen)
			}

			// The client gives up; the peer's handler is told.
			before := p.Log.Count("handler-cancelled wait")
			started := p.Log.Count("handler-started wait")
			cctx, cancel := context.WithCancel(ctx)
			errs := make(chan error, 1)
			go func() { _, err := c.CallTool(cctx, "wait", nil, nil); errs <- err }()
			if !p.Log.AwaitCount("handler-started wait", started+1) {
				t.Fatalf("the peer's wait handler never started:\n%s", p.Log)
			}
			cancel()
			if err := <-errs; !errors.As(err, new(*client.CancelledError)) {
				t.Fatalf("the cancelled call returned %v", err)
			}
			if p.CancelSeen && !p.Log.AwaitCount("handler-cancelled wait", before+1) {
				t.Fatalf("the peer's handler did not see the cancellation:\n%s", p.Log)
			}
			Echo(t, c, "after the cancellation")

			// The gateway's maximum clock for wait fires: the client gets
			// the gateway's timeout result, the peer's handler is cancelled.
			// A second gateway in front of the same peer gives wait the
			// short clocks (WaitMax), which the first's would not fire.
			c = Start(t, p, gateway.Options{Client: upstream}).Dial(t, d, client.Options{})
			before = p.Log.Count("handler-cancelled wait")
			res, err = c.CallTool(ctx, "wait", nil, &client.CallOptions{Max: mcptest.Timeout})
			if err != nil {
				t.Fatalf("wait past the gateway's deadline: %v", err)
			}
			if fail := Failure(t, res); fail.Code != mcp.FailureTimeout {
				t.Fatalf("wait past the gateway's deadline answered %+v, want code %s", fail, mcp.FailureTimeout)
			}
			if p.CancelSeen && !p.Log.AwaitCount("handler-cancelled wait", before+1) {
				t.Fatalf("the gateway's deadline did not cancel the peer's handler:\n%s", p.Log)
			}
			if !p.CancelSeen {
				t.Logf("peer gap: %s", p.Gap)
			}
			Echo(t, c, "after the deadline")
		})
	}
}

// Echo calls the peer's echo and checks it answered text.
func Echo(t *testing.T, c *client.Client, text string) {
	t.Helper()
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": text}, nil)
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("echo answered %+v", res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != text {
		t.Fatalf("echo answered %+v, want %q", res.Content[0], text)
	}
	// What an upstream's era adds for its own hop stays there: a 2025
	// client gets no resultType and no serverInfo, a 2026 one the
	// gateway's own.
	info, _ := res.Meta[mcp.MetaServerInfo].(map[string]any)
	switch c.Era() {
	case mcp.Legacy:
		if res.ResultType != "" || res.Meta[mcp.MetaServerInfo] != nil {
			t.Fatalf("echo answered a 2025 client with 2026 members: resultType %q, _meta %v", res.ResultType, res.Meta)
		}
	case mcp.Modern:
		if res.ResultType != mcp.ResultComplete || info == nil || info["name"] != c.ServerInfo().Name {
			t.Fatalf("echo answered a 2026 client with resultType %q, _meta %v; want complete and the gateway's serverInfo %q", res.ResultType, res.Meta, c.ServerInfo().Name)
		}
	}
}

// Failure decodes a failed result's structured body.
func Failure(t *testing.T, res *mcp.CallToolResult) mcp.Failure {
	t.Helper()
	if !res.IsError || len(res.Content) == 0 {
		t.Fatalf("want a failed result, got %+v", res)
	}
	tc, _ := res.Content[0].(*mcp.TextContent)
	var f mcp.Failure
	if tc == nil || json.Unmarshal([]byte(tc.Text), &f) != nil {
		t.Fatalf("the failed result is not structured: %+v", res.Content[0])
	}
	return f
}

// stderrLines writes a stdio upstream's stderr, which the gateway logs a
// line at a time, to a Lines; other records are dropped.
type stderrLines struct{ l *mcptest.Lines }

func (s stderrLines) Enabled(context.Context, slog.Level) bool { return true }
func (s stderrLines) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "upstream stderr" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			s.l.Write([]byte(a.Value.String() + "\n"))
		}
		return true
	})
	return nil
}
func (s stderrLines) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s stderrLines) WithGroup(string) slog.Handler      { return s }

func pipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }
