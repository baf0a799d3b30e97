package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
)

// The test binary doubles as a stdio upstream: with this variable set in
// its environment (which the gateway gives it through Upstream.Env, the
// way an operator gives an upstream its credentials), it serves the tools
// below over stdin and stdout instead of running tests.
const stdioUpstreamEnv = "MCPREL_GATEWAY_TEST_UPSTREAM"

func TestMain(m *testing.M) {
	switch os.Getenv(stdioUpstreamEnv) {
	case "":
		os.Exit(m.Run())
	case "late":
		serveLateUpstream()
	case "crash":
		serveCrashingUpstream()
	case "roots":
		serveRootsUpstream()
	default:
		serveStdioUpstream()
	}
}

// serveCrashingUpstream answers the handshake and the listing, then
// exits: a server in a crash loop.
func serveCrashingUpstream() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m, err := jsonrpc.Decode(append([]byte(nil), sc.Bytes()...))
		if err != nil || m.Kind != jsonrpc.KindRequest {
			continue
		}
		id := string(m.ID.AppendJSON(nil))
		switch m.Method {
		case mcp.MethodInitialize:
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"crash","version":"1"}}}`+"\n", id)
		case mcp.MethodToolsList:
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}`+"\n", id)
			os.Exit(1)
		default:
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`+"\n", id)
		}
	}
}

// serveLateUpstream is a hand-written 2025-era stdio server whose tool
// "stubborn" reports progress, ignores its cancellation and answers right
// after it; "echo" answers at once. It answers in the order it reads.
func serveLateUpstream() {
	out := bufio.NewWriter(os.Stdout)
	write := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...); out.Flush() }
	var stubborn jsonrpc.ID
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m, err := jsonrpc.Decode(append([]byte(nil), sc.Bytes()...))
		if err != nil {
			continue
		}
		id := string(m.ID.AppendJSON(nil))
		var p struct {
			Name      string
			RequestID jsonrpc.ID `json:"requestId"`
			Meta      struct {
				ProgressToken json.RawMessage `json:"progressToken"`
			} `json:"_meta"`
		}
		json.Unmarshal(m.Params, &p)
		switch {
		case m.Method == mcp.MethodInitialize:
			write(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"late","version":"1"}}}`, id)
		case m.Method == mcp.MethodToolsList:
			write(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"stubborn","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}]}}`, id)
		case m.Method == mcp.MethodToolsCall && p.Name == "stubborn":
			stubborn = m.ID
			write(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":1}}`, p.Meta.ProgressToken)
		case m.Method == mcp.MethodToolsCall:
			write(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"echo"}]}}`, id)
		case m.Method == mcp.NotificationCancelled && p.RequestID == stubborn:
			write(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"too late"}]}}`, stubborn.AppendJSON(nil))
		case m.Kind == jsonrpc.KindRequest && m.Method != mcp.MethodDiscover:
			write(`{"jsonrpc":"2.0","id":%s,"result":{}}`, id)
		case m.Kind == jsonrpc.KindRequest:
			write(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, id)
		}
	}
}

func serveStdioUpstream() {
	srv, err := server.New(mcp.Implementation{Name: "stdio-upstream", Version: "1"}, &server.Options{Logger: slog.New(slog.DiscardHandler), MaxConcurrentCalls: 256})
	if err != nil {
		panic(err)
	}
	srv.AddTool(server.Tool{Name: "secret"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(os.Getenv("UPSTREAM_SECRET"))}}, nil
	})
	srv.AddTool(server.Tool{Name: "complain"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		fmt.Fprintln(os.Stderr, "upstream complaint: disk is full")
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("complained")}}, nil
	})
	server.AddTypedTool(srv, server.Tool{Name: "getenv"}, func(ctx context.Context, call *server.CallRequest, in struct {
		Name string `json:"name"`
	}) (string, error) {
		return os.Getenv(in.Name), nil
	})
	server.AddTypedTool(srv, server.Tool{Name: "echo"}, func(ctx context.Context, call *server.CallRequest, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	srv.AddTool(server.Tool{Name: "pid"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(fmt.Sprint(os.Getpid()))}}, nil
	})
	srv.AddTool(server.Tool{Name: "die"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		os.Exit(3) // mid-call, as a crashing server does
		return nil, nil
	})
	if _, err := os.Stat(os.Getenv("UPSTREAM_OFFER_FILE")); err == nil {
		// What it offers besides tools, while the file exists when it
		// starts.
		srv.AddPrompt(mcp.Prompt{Name: "greet"}, func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.Text("hello")}}}, nil
		})
		read := func(ctx context.Context, req *server.ReadRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: req.URI, Text: ptr("note")}}}, nil
		}
		srv.AddResource(mcp.Resource{URI: "file:///note", Name: "note"}, read)
		srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "note://{id}", Name: "notes"}, read)
	}
	stdio.NewConn(srv, os.Stdin, os.Stdout, nil).Serve(context.Background())
}

// events collects a gateway's upstream events for a test to wait on.
type events struct {
	mu  sync.Mutex
	got []gateway.UpstreamEvent
	ch  chan gateway.UpstreamEvent
}

func newEvents() *events { return &events{ch: make(chan gateway.UpstreamEvent, 256)} }

func (e *events) Forwarded(gateway.ForwardRecord) {}
func (e *events) UpstreamEvent(ev gateway.UpstreamEvent) {
	select {
	case e.ch <- ev:
	default:
	}
}

// waitFor returns once an event of kind arrives.
func (e *events) waitFor(t *testing.T, kind gateway.EventKind) { t.Helper(); e.next(t, kind) }

// next returns the next event of kind.
func (e *events) next(t *testing.T, kind gateway.EventKind) gateway.UpstreamEvent {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event within %v", kind, wait)
		}
	}
}

// logLines records log records as "message key=value ..." lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
	attrs []slog.Attr
	ch    chan string // every line, for a test to wait on
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range l.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	select {
	case l.ch <- b.String():
	default:
	}
	return nil
}

// waitLine returns once a line holding every sub arrives (or has).
func (l *logLines) waitLine(t *testing.T, sub ...string) {
	t.Helper()
	deadline := time.After(wait)
	for !l.has(sub...) {
		select {
		case <-l.ch:
		case <-deadline:
			t.Fatalf("no log line holds %q: %q", sub, l.lines)
		}
	}
}
func (l *logLines) WithAttrs(as []slog.Attr) slog.Handler {
	return &logChild{parent: l, attrs: as}
}
func (l *logLines) WithGroup(string) slog.Handler { return l }

func (l *logLines) has(sub ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, s := range sub {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			return true
		}
	}
	return false
}

type logChild struct {
	parent *logLines
	attrs  []slog.Attr
}

func (c *logChild) Enabled(context.Context, slog.Level) bool { return true }
func (c *logChild) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(c.attrs...)
	return c.parent.Handle(ctx, r)
}
func (c *logChild) WithAttrs(as []slog.Attr) slog.Handler {
	return &logChild{parent: c.parent, attrs: append(append([]slog.Attr(nil), c.attrs...), as...)}
}
func (c *logChild) WithGroup(string) slog.Handler { return c }

// A stdio upstream is started with the environment its operator gave it,
// its stderr goes to the gateway's log under its name, and when it dies
// mid-call the call's outcome is reported unknown, the process is started
// again, and its tools are served again.
func TestStdioUpstreamSupervised(t *testing.T) {
	ev := newEvents()
	logs := &logLines{ch: make(chan string, 1024)}
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "local", Command: []string{os.Args[0], "-test.run=^$"},
			Env: []string{stdioUpstreamEnv + "=1", "UPSTREAM_SECRET=from-env"}}},
		Observer:    ev,
		Logger:      slog.New(logs),
		RestartBase: time.Millisecond,
		RestartCap:  10 * time.Millisecond,
	}, nil)
	c := f.dial(t, 0, nil)
	res, err := c.CallTool(context.Background(), "secret", nil, nil)
	must(t, err)
	if text(res) != "from-env" {
		t.Fatalf("the upstream's environment gave %q", text(res))
	}
	_, err = c.CallTool(context.Background(), "complain", nil, nil)
	must(t, err)

	res, err = c.CallTool(context.Background(), "die", nil, nil)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureOutcomeUnknown || fail.Retryable {
		t.Fatalf("a call whose upstream died answered %+v, want a non-retryable outcome_unknown", fail)
	}
	ev.waitFor(t, gateway.EventReconnected)
	res, err = c.CallTool(context.Background(), "secret", nil, nil)
	must(t, err)
	if text(res) != "from-env" {
		t.Fatalf("after the restart the upstream answered %q", text(res))
	}
	if st := f.gw.Upstreams()[0]; st.Restarts != 1 {
		t.Fatalf("restarts %d, want 1", st.Restarts)
	}
	// The stderr line was written before the call answered; the gateway's
	// reader may log it just after.
	logs.waitLine(t, "upstream stderr", "upstream=local", "disk is full")
}

// An upstream that comes back without prompts or resources (a new
// version, started again) has them withdrawn downstream, not forwarded
// to a server that no longer has them.
func TestRestartedUpstreamWithdrawsWhatItNoLongerOffers(t *testing.T) {
	offer := filepath.Join(t.TempDir(), "offer")
	must(t, os.WriteFile(offer, nil, 0o600))
	ev := newEvents()
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "local", Command: []string{os.Args[0], "-test.run=^$"},
			Env: []string{stdioUpstreamEnv + "=1", "UPSTREAM_OFFER_FILE=" + offer}}},
		Observer:    ev,
		RestartBase: time.Millisecond,
		RestartCap:  10 * time.Millisecond,
	}, nil)
	c := f.dial(t, mcp.Legacy, nil)
	ctx := context.Background()
	count := func() (prompts, resources, templates int) {
		t.Helper()
		p, err := c.ListPrompts(ctx)
		must(t, err)
		r, err := c.ListResources(ctx)
		must(t, err)
		tm, err := c.ListResourceTemplates(ctx)
		must(t, err)
		return len(p), len(r), len(tm)
	}
	if p, r, tm := count(); p != 1 || r != 1 || tm != 1 {
		t.Fatalf("the upstream's offer listed %d prompts, %d resources, %d templates, want 1 each", p, r, tm)
	}
	must(t, os.Remove(offer))
	_, err := c.CallTool(ctx, "die", nil, nil)
	must(t, err)
	ev.waitFor(t, gateway.EventReconnected)
	ev.waitFor(t, gateway.EventListed)
	if p, r, tm := count(); p != 0 || r != 0 || tm != 0 {
		t.Fatalf("after a restart without them %d prompts, %d resources, %d templates are still served", p, r, tm)
	}
	if _, err := c.Request(ctx, mcp.MethodPromptsGet, "greet", map[string]any{"name": "greet"}, nil); err == nil {
		t.Fatal("prompts/get of a withdrawn prompt succeeded")
	}
}

// A stdio upstream in a crash loop is started again after a backoff that
// grows with each death in a row, never at a fixed pace.
func TestCrashLoopBacksOff(t *testing.T) {
	ev := newEvents()
	newFront(t, gateway.Options{
		Upstreams:   []gateway.Upstream{{Name: "crash", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=crash"}}},
		Observer:    ev,
		RestartBase: time.Millisecond,
		RestartCap:  time.Hour, // no connection lives long enough to count as recovered
	}, nil)
	backoff := retry.Backoff{Base: time.Millisecond, Cap: time.Hour}
	for want := 1; want <= 4; want++ {
		e := ev.next(t, gateway.EventDied)
		if e.Failures != want || e.Next >= backoff.Bound(want-1) {
			t.Fatalf("death %d: failures %d, next try after %v; want %d, under %v", want, e.Failures, e.Next, want, backoff.Bound(want-1))
		}
	}
}

// An answer past the gateway's message limit from a stdio upstream is
// dropped unread, and the call it answers ends at once with its outcome
// unknown — the upstream acted — as it does over HTTP, not when its idle
// clock (an hour here) runs out. The upstream goes on serving.
func TestStdioUpstreamAnswerTooLargeIsUnknownAtOnce(t *testing.T) {
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "local", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=1"}}},
		Policy:    &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"echo": {Server: server.Policy{IdleTimeout: time.Hour, MaxTimeout: time.Hour}}}},
		Client:    client.Options{MaxMessageBytes: 4096},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": strings.Repeat("x", 8192)}, nil)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureOutcomeUnknown || !strings.Contains(fail.Message, "more than the gateway takes in (4096 bytes)") {
		t.Fatalf("an answer past the limit = %+v, want outcome_unknown naming the limit", fail)
	}
	if res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "small"}, nil); err != nil || text(res) != "small" {
		t.Fatalf("the next call = %v %+v", err, res)
	}
}

// A read whose first attempt reached the upstream — it died with the call
// in flight — and whose retries found the connection down (the client
// starts it again only after its pause) ends with its outcome unknown,
// not "never reached": the call as a whole may have run. Before, the last
// attempt alone was judged.
func TestLostThenNotSentIsUnknown(t *testing.T) {
	f := newFront(t, gateway.Options{
		Upstreams:   []gateway.Upstream{{Name: "local", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=1"}}},
		RestartBase: time.Hour,
		RestartCap:  time.Hour,
		RetryBase:   time.Millisecond,
		Policy:      &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"die": {Server: server.Policy{Retry: mcp.RetrySafe}}}},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	res, err := c.CallTool(context.Background(), "die", nil, nil)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureOutcomeUnknown || !fail.Retryable {
		t.Fatalf("the call the upstream died in ended %+v; want outcome_unknown, retryable (a read)", fail)
	}
	if rec := f.awaitForward(t, "die"); rec.Retries < 1 || rec.Outcome != gateway.OutcomeLost {
		t.Fatalf("the forward was recorded %+v; want retries, its outcome lost", rec)
	}
}
