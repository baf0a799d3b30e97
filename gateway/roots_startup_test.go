package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// serveRootsUpstream is a hand-written 2025-era stdio server that asks
// the client for its roots as soon as it is initialized — outside any
// call, as server-everything and the filesystem server do — and again
// when its tool "ask" is called. Its tools answer with what it was told
// the last time: roots_answer at once (or once an answer came), "hold"
// and "ask" once the next answer comes. It says on stderr when it holds
// a call.
func serveRootsUpstream() {
	out := bufio.NewWriter(os.Stdout)
	write := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...); out.Flush() }
	answer, asked := "", 0
	var pending []string
	askRoots := func() { asked++; write(`{"jsonrpc":"2.0","id":"up-roots-%d","method":"roots/list"}`, asked) }
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m, err := jsonrpc.Decode(append([]byte(nil), sc.Bytes()...))
		if err != nil {
			continue
		}
		id := string(m.ID.AppendJSON(nil))
		var call struct {
			Name string `json:"name"`
		}
		json.Unmarshal(m.Params, &call)
		switch {
		case m.Kind == jsonrpc.KindNotification && m.Method == mcp.NotificationInitialized:
			askRoots()
		case m.Kind == jsonrpc.KindResponse:
			if m.Error != nil {
				answer = "refused: " + m.Error.Message
				fmt.Fprintln(os.Stderr, "Failed to request roots from client:", m.Error.Message)
			} else {
				answer = "answered: " + string(m.Result)
			}
			for _, p := range pending {
				write(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, p, answer)
			}
			pending = nil
		case m.Kind != jsonrpc.KindRequest:
		case m.Method == mcp.MethodInitialize:
			write(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"roots","version":"1"}}}`, id)
		case m.Method == mcp.MethodToolsList:
			write(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"roots_answer","inputSchema":{"type":"object"}},{"name":"hold","inputSchema":{"type":"object"}},{"name":"ask","inputSchema":{"type":"object"}}]}}`, id)
		case m.Method == mcp.MethodToolsCall && call.Name == "roots_answer" && answer != "":
			write(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, id, answer)
		case m.Method == mcp.MethodToolsCall:
			pending = append(pending, id)
			if call.Name == "hold" {
				fmt.Fprintln(os.Stderr, "holding a call")
			}
			if call.Name == "ask" {
				askRoots()
			}
		default:
			write(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, id)
		}
	}
}

// leveled keeps each record's level and text.
type leveled struct {
	mu   sync.Mutex
	recs []string
}

func (l *leveled) Enabled(context.Context, slog.Level) bool { return true }
func (l *leveled) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *leveled) WithGroup(string) slog.Handler            { return l }
func (l *leveled) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}

// An upstream that asks for roots at start-up, outside any call, is
// answered quietly: an empty list (the gateway has no roots of its own,
// and no downstream client asked anything), logged at debug — not refused,
// which every such upstream then reports as a failure at each start.
func TestRootsAskedAtStartUpAnsweredQuietly(t *testing.T) {
	logs := &leveled{}
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "asks", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=roots"}}},
		Logger:    slog.New(logs),
	}, nil)
	c := f.dial(t, 0, nil)
	res, err := c.CallTool(context.Background(), "roots_answer", nil, nil)
	must(t, err)
	if got := text(res); got != `answered: {"roots":[]}` {
		t.Fatalf("the upstream's roots/list at start-up got %q, want an empty list", got)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	debug := false
	for _, r := range logs.recs {
		if !strings.Contains(r, "roots") {
			continue
		}
		if !strings.HasPrefix(r, "DEBUG ") {
			t.Errorf("a record about roots above debug: %s", r)
		}
		debug = true
	}
	if !debug {
		t.Errorf("no debug record says roots/list was answered: %q", logs.recs)
	}
}

// A roots/list the gateway cannot attribute while calls are in flight
// (two, over one stdio connection) is still refused, not answered with no
// roots: the upstream may be asking for a call whose client has some.
func TestRootsAskedDuringCallsNotAnsweredEmpty(t *testing.T) {
	logs := &logLines{ch: make(chan string, 1024)}
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "asks", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=roots"}}},
		Logger:    slog.New(logs),
	}, nil)
	c := f.dial(t, 0, nil)
	held := make(chan string, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "hold", nil, nil)
		if err != nil {
			held <- err.Error()
			return
		}
		held <- text(res)
	}()
	logs.waitLine(t, "upstream stderr", "holding a call")
	res, err := c.CallTool(context.Background(), "ask", nil, nil)
	must(t, err)
	if got := text(res); !strings.HasPrefix(got, "refused: ") {
		t.Fatalf("a roots/list asked with two calls in flight got %q, want it refused", got)
	}
	if got := <-held; !strings.HasPrefix(got, "refused: ") {
		t.Fatalf("the held call ended with %q", got)
	}
}
