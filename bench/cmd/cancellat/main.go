// Command cancellat measures cancellation latency over Streamable HTTP: the
// time from a client cancelling a tools/call's HTTP request (which closes
// its stream) to the server's tool handler seeing its context end.
//
// Servers run in this process, each behind a real http.Server on a loopback
// listener, so that both timestamps come from one monotonic clock. The tool
// "wait" signals that it has started, then blocks until its context ends
// and records when. Calls are sequential, one at a time.
//
// Latency targets, measured over -n cancels: mcprel, mcp-go and go-sdk with
// PropagateRequestCancellation, all in the 2026-07-28 era, where closing the
// stream is the cancellation. Reach targets send -reach cancels and count
// how many end the handler's context within -reach-wait at all.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/mcprel/mcprel/bench/internal/machine"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// probe connects the tool handler with the measuring loop. Calls are
// sequential, so one probe serves every call of a target.
type probe struct {
	entered chan struct{}  // the handler started
	ended   chan time.Time // when its context ended
	release chan struct{}  // ends a handler whose context never does
	exited  chan struct{}  // the handler returned
}

func newProbe() *probe {
	return &probe{make(chan struct{}, 1), make(chan time.Time, 1), make(chan struct{}, 1), make(chan struct{}, 1)}
}

// wait is the tool's body in every SDK.
func (p *probe) wait(ctx context.Context) {
	defer func() { p.exited <- struct{}{} }()
	p.entered <- struct{}{}
	select {
	case <-ctx.Done():
		p.ended <- time.Now()
	case <-p.release:
	}
}

// target is one server configuration.
type target struct {
	name    string
	modern  bool // else a legacy session: initialize first
	latency bool // measure -n cancels; else count reach over -reach
	build   func(*probe) http.Handler
}

var targets = []target{
	{"mcprel", true, true, mcprelHandler},
	{"mcp-go", true, true, mcpgoHandler},
	// JSONResponse, like mcprel's answer to a call without a progress
	// token; go-sdk's default, an SSE stream, once for comparison.
	{"go-sdk (propagate)", true, true, gosdkHandler(gosdk.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true, JSONResponse: true})},
	{"go-sdk (propagate, SSE)", true, true, gosdkHandler(gosdk.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})},
	{"go-sdk (stateless, no propagate)", true, false, gosdkHandler(gosdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})},
	{"go-sdk (stateful, 2025-11-25)", false, false, gosdkHandler(gosdk.StreamableHTTPOptions{JSONResponse: true})},
	{"mcprel (2025-11-25)", false, false, mcprelHandler},
	{"mcp-go (stateful, 2025-11-25)", false, false, mcpgoHandler},
}

func mcprelHandler(p *probe) http.Handler {
	srv, err := server.New(mcp.Implementation{Name: "x", Version: "1"}, &server.Options{Logger: slog.New(slog.DiscardHandler)})
	check(err)
	check(srv.AddTool(server.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			p.wait(ctx)
			return &mcp.CallToolResult{}, nil
		}))
	h, err := streamhttp.NewHandler(srv, nil)
	check(err)
	return h
}

func mcpgoHandler(p *probe) http.Handler {
	s := mcpgoserver.NewMCPServer("x", "1")
	s.AddTool(mcpgo.NewTool("wait"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		p.wait(ctx)
		return mcpgo.NewToolResultText(""), nil
	})
	// Stateful matters only to legacy requests; modern ones are stateless.
	return mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStateful(true),
		mcpgoserver.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)))
}

func gosdkHandler(opts gosdk.StreamableHTTPOptions) func(*probe) http.Handler {
	return func(p *probe) http.Handler {
		s := gosdk.NewServer(&gosdk.Implementation{Name: "x", Version: "1"}, nil)
		gosdk.AddTool(s, &gosdk.Tool{Name: "wait"}, func(ctx context.Context, req *gosdk.CallToolRequest, _ struct{}) (*gosdk.CallToolResult, any, error) {
			p.wait(ctx)
			return &gosdk.CallToolResult{}, nil, nil
		})
		return gosdk.NewStreamableHTTPHandler(func(*http.Request) *gosdk.Server { return s }, &opts)
	}
}

// result is one target's outcome.
type result struct {
	name      string
	sent      int
	lat       []time.Duration // one per cancel that reached the handler
	otherCPUs float64         // load on the machine besides us, while measuring; -1 if too short to tell
}

func main() {
	n := flag.Int("n", 1000, "cancels per latency target")
	warmup := flag.Int("warmup", 100, "unmeasured cancels before each latency target's")
	reach := flag.Int("reach", 50, "cancels per reach target (0: skip them)")
	reachWait := flag.Duration("reach-wait", time.Second, "how long a reach target's handler may take to see a cancel")
	only := flag.String("only", "", "run only targets whose name contains this")
	flag.Parse()

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("cancellat: %d CPUs, GOMAXPROCS %d, %s, load %s\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), strings.TrimSpace(string(load)))
	var lat, rch []result
	for _, t := range targets {
		if !strings.Contains(t.name, *only) || !t.latency && *reach == 0 {
			continue
		}
		if _, idle := machine.WaitIdle(time.Second, 0.1, 10*time.Minute); !idle {
			fmt.Fprintln(os.Stderr, "machine still busy; measuring anyway")
		}
		var r result
		var err error
		if t.latency {
			r, err = run(t, *warmup, *n, 5*time.Second)
			lat = append(lat, r)
		} else {
			r, err = run(t, 0, *reach, *reachWait)
			rch = append(rch, r)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", t.name, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "  %-34s %d/%d reached the handler, other load %s CPUs\n", t.name, len(r.lat), r.sent, cpus(r.otherCPUs))
	}

	us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(lat) > 0 {
		fmt.Fprintln(tw, "latency target\tcancels\tp50 µs\tp90 µs\tp99 µs\tmax µs\tmissed\tother load (CPUs)\t")
		for _, r := range lat {
			l := r.lat
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t\n", r.name, r.sent,
				us(pct(l, 0.50)), us(pct(l, 0.90)), us(pct(l, 0.99)), us(pct(l, 1)), r.sent-len(l), cpus(r.otherCPUs))
		}
		tw.Flush()
		fmt.Println()
	}
	if len(rch) > 0 {
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "reach target\tcancels\treached within %v\tp50 µs of those\t\n", *reachWait)
		for _, r := range rch {
			p50 := "-"
			if len(r.lat) > 0 {
				p50 = us(pct(r.lat, 0.50))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t\n", r.name, r.sent, len(r.lat), p50)
		}
		tw.Flush()
	}
}

// run serves t on a loopback listener and cancels n calls after warmup
// unmeasured ones. A cancel that does not reach the handler within wait is
// counted as missed, and the handler is released.
func run(t target, warmup, n int, wait time.Duration) (result, error) {
	r := result{name: t.name, sent: n}
	p := newProbe()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", t.build(p))
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	defer hs.Close()
	c := &client{url: "http://" + ln.Addr().String() + "/mcp", modern: t.modern,
		hc: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, DisableCompression: true}}}
	defer c.hc.CloseIdleConnections()
	if !t.modern {
		if err := c.initialize(); err != nil {
			return r, err
		}
	}

	var sys0, self0 time.Duration
	var t0 time.Time
	for i := range warmup + n {
		if i == warmup {
			sys0, _ = machine.SysBusy()
			self0, t0 = machine.SelfCPU(), time.Now()
		}
		d, ok, err := c.cancelOne(p, wait)
		if err != nil {
			return r, fmt.Errorf("call %d: %w", i, err)
		}
		if ok && i >= warmup {
			r.lat = append(r.lat, d)
		}
	}
	sys1, _ := machine.SysBusy()
	r.otherCPUs = -1
	if wall := time.Since(t0); wall >= 250*time.Millisecond { // /proc/stat counts 10 ms ticks
		r.otherCPUs = max(0, (sys1-sys0-(machine.SelfCPU()-self0)).Seconds()/wall.Seconds())
	}
	return r, nil
}

// client makes the calls of one target.
type client struct {
	url     string
	modern  bool
	session string // Mcp-Session-Id of a legacy session
	hc      *http.Client
	id      int
}

const modernMeta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// cancelOne starts a wait call, cancels its request once the handler has
// started, and returns how long the handler's context took to end.
func (c *client) cancelOne(p *probe, wait time.Duration) (d time.Duration, reached bool, err error) {
	c.id++
	meta := ""
	if c.modern {
		meta = modernMeta
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := c.request(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait","arguments":{}%s}}`, c.id, meta), "tools/call", "wait")
	finished := make(chan error, 1)
	go func() {
		// An SSE response may start before the result; then the
		// cancel ends the body instead of Do.
		resp, err := c.hc.Do(req)
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				err = fmt.Errorf("call ended before it was cancelled: HTTP %s %.300q", resp.Status, b)
			}
		}
		finished <- err
	}()
	select {
	case <-p.entered:
	case err := <-finished:
		return 0, false, err
	case <-time.After(5 * time.Second):
		return 0, false, errors.New("handler not entered within 5 s")
	}

	start := time.Now()
	cancel()
	select {
	case end := <-p.ended:
		d, reached = end.Sub(start), true
	case <-time.After(wait):
		p.release <- struct{}{}
	}
	// Next call only once this one is over on both sides, and nothing of
	// it is left in the probe.
	if err := <-finished; !errors.Is(err, context.Canceled) {
		return 0, false, fmt.Errorf("cancelled call ended with %v", err)
	}
	<-p.exited
	select {
	case <-p.release:
	default:
	}
	select {
	case <-p.ended:
	default:
	}
	return d, reached, nil
}

// request builds a POST with the headers the era requires.
func (c *client) request(ctx context.Context, body, method, name string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader([]byte(body)))
	check(err)
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	switch {
	case c.modern:
		h.Set(mcp.HeaderProtocolVersion, mcp.Version20260728)
		h.Set(mcp.HeaderMethod, method)
		if name != "" {
			h.Set(mcp.HeaderName, name)
		}
	case c.session != "":
		h.Set(mcp.HeaderSessionID, c.session)
		h.Set(mcp.HeaderProtocolVersion, mcp.Version20251125)
	}
	return req
}

// initialize opens a legacy session.
func (c *client) initialize() error {
	post := func(body string) (*http.Response, error) {
		resp, err := c.hc.Do(c.request(context.Background(), body, "", ""))
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("%.40s…: HTTP %s", body, resp.Status)
		}
		return resp, nil
	}
	resp, err := post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cancellat","version":"1"}}}`)
	if err != nil {
		return err
	}
	if c.session = resp.Header.Get(mcp.HeaderSessionID); c.session == "" {
		return errors.New("initialize: no Mcp-Session-Id")
	}
	_, err = post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return err
}

// pct is the nearest-rank percentile q of d (sorted in place); q = 1 is the
// maximum.
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999) - 1
	return d[max(i, 0)]
}

// cpus formats an other-load figure.
func cpus(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "cancellat:", err)
		os.Exit(1)
	}
}
