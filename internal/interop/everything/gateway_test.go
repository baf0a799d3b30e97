package everything_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/interop/everything"
	"github.com/mcprel/mcprel/internal/interop/gatewaycheck"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// The test binary doubles as a recording pipe in front of the stdio
// server: with teeCommand set in its environment (the gateway gives it
// through Upstream.Env), it runs that command and copies its stdin to
// it, writing every line on its own stderr too, which the gateway logs.
const teeCommand = "MCPREL_EVERYTHING_TEE"

// teePrefix starts each line the tee copies onto its stderr.
const teePrefix = "tee> "

func TestMain(m *testing.M) {
	if argv := os.Getenv(teeCommand); argv != "" {
		os.Exit(tee(argv))
	}
	os.Exit(m.Run())
}

func tee(argv string) int {
	var words []string
	if err := json.Unmarshal([]byte(argv), &words); err != nil || len(words) == 0 {
		fmt.Fprintln(os.Stderr, "tee: bad command", argv)
		return 2
	}
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "tee:", err)
		return 1
	}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, teePrefix+sc.Text())
			in.Write(append(sc.Bytes(), '\n'))
		}
		in.Close()
	}()
	if err := cmd.Wait(); err != nil {
		return 1
	}
	return 0
}

// wire is what the gateway sent its upstream, as a recorder saw it.
type wire struct {
	mu      sync.Mutex
	sent    []jsonrpc.Message
	changed chan struct{}
}

func newWire() *wire { return &wire{changed: make(chan struct{})} }

func (w *wire) add(m jsonrpc.Message) {
	w.mu.Lock()
	w.sent = append(w.sent, m)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// await returns what was sent once it holds a message that done accepts.
func (w *wire) await(t *testing.T, what string, done func(jsonrpc.Message) bool) []jsonrpc.Message {
	t.Helper()
	deadline := time.After(mcptest.Timeout)
	for {
		w.mu.Lock()
		sent, ch := slices.Clone(w.sent), w.changed
		w.mu.Unlock()
		if slices.ContainsFunc(sent, done) {
			return sent
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the gateway never sent its upstream %s", what)
		}
	}
}

// upstream starts server-everything in mode and returns the gateway's
// view of it, with a recorder on what the gateway sends it, and the
// gateway's logger for it (nil: the check's own).
func upstream(t *testing.T, mode everything.Mode) (gatewaycheck.Peer, *wire, *slog.Logger) {
	t.Helper()
	w := newWire()
	log := mcptest.NewLines()
	if mode == everything.Stdio {
		argv, _ := json.Marshal(everything.Command(t))
		u := gateway.Upstream{Name: "everything", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{teeCommand + "=" + string(argv)}}
		return gatewaycheck.Peer{Upstream: u, Log: log}, w, slog.New(teeHandler{w})
	}
	url, posts := record(t, everything.Start(t, mode))
	go func() {
		for p := range posts {
			w.add(p.m)
		}
	}()
	u := gateway.Upstream{Name: "everything", URL: url}
	if mode == everything.SSE {
		u.Transport = gateway.SSE
	}
	return gatewaycheck.Peer{Upstream: u, Log: log}, w, nil
}

// teeHandler reads the gateway's log of the tee's stderr (one record per
// line) into the wire.
type teeHandler struct{ w *wire }

func (h teeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h teeHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "upstream stderr" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if rest, ok := strings.CutPrefix(a.Value.String(), teePrefix); a.Key == "line" && ok {
			if m, err := jsonrpc.Decode([]byte(rest)); err == nil {
				h.w.add(m)
			}
		}
		return true
	})
	return nil
}
func (h teeHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h teeHandler) WithGroup(string) slog.Handler      { return h }

// The reference server, server-everything, behind the gateway in each of
// its transports (stdio, Streamable HTTP, HTTP+SSE), from every
// downstream transport and era: its tools, the ones it registers once it
// knows the client's capabilities among them; a call; its long-running
// operation's progress, strictly increasing; a downstream cancellation
// that reaches it as notifications/cancelled for the id the gateway gave
// the call, never the downstream's; a deadline at the gateway that does
// the same and gives the client the timeout result; and its sampling and
// elicitation requests relayed to the client that made the call, and the
// answers back.
func TestGatewayInFrontOfServerEverything(t *testing.T) {
	everything.Require(t)
	const longMax = 2 * time.Second
	for _, mode := range []everything.Mode{everything.Stdio, everything.StreamableHTTP, everything.SSE} {
		for _, d := range gatewaycheck.Downstreams {
			t.Run(string(mode)+"/"+d.Name, func(t *testing.T) {
				peer, w, logger := upstream(t, mode)
				f := gatewaycheck.Start(t, peer, gateway.Options{Logger: logger, Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
					"trigger-long-running-operation": {Server: server.Policy{IdleTimeout: 30 * time.Second, MaxTimeout: longMax}},
				}},
					// The server goes on with a cancelled operation (it
					// does not heed its abort signal): once its stdin is
					// closed, it is stopped soon.
					Client: client.Options{StopGrace: 200 * time.Millisecond}})
				f.AwaitTool(t, "trigger-elicitation-request")
				f.AwaitTool(t, "trigger-sampling-request")
				c := f.Dial(t, d, client.Options{
					Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`), Sampling: json.RawMessage(`{}`)},
					OnRequest:    answerEverything,
				})
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				tools, err := c.ListTools(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, tl := range tools {
					names = append(names, tl.Name)
				}
				for _, want := range []string{"echo", "trigger-long-running-operation", "trigger-elicitation-request", "trigger-sampling-request"} {
					if !slices.Contains(names, want) {
						t.Fatalf("tools %v lack %s", names, want)
					}
				}
				echo(t, ctx, c, "through the gateway")
				progress(t, ctx, c)

				// The server's questions, relayed to this client (before
				// any call on the connection is given up: for a moment
				// after one is, a question that names no call is taken for
				// nobody's).
				res, err := c.CallTool(ctx, "trigger-sampling-request", map[string]any{"prompt": "say hi", "maxTokens": 5}, nil)
				if err != nil || res.IsError || !strings.Contains(textIn(res), "sampled by the downstream client") {
					t.Fatalf("sampling through the gateway: %+v, %v", res, err)
				}
				res, err = c.CallTool(ctx, "trigger-elicitation-request", nil, nil)
				if err != nil || res.IsError || !strings.Contains(textIn(res), "Name: Ada") {
					t.Fatalf("elicitation through the gateway: %+v, %v", res, err)
				}

				// The client cancels once the call has reported progress.
				callCtx, cancelCall := context.WithCancel(ctx)
				started := make(chan struct{}, 1)
				_, err = c.CallTool(callCtx, "trigger-long-running-operation", map[string]any{"duration": 60, "steps": 240},
					&client.CallOptions{OnProgress: func(client.Progress) {
						select {
						case started <- struct{}{}:
							cancelCall()
						default:
						}
					}})
				if !errors.As(err, new(*client.CancelledError)) {
					t.Fatalf("the cancelled call: %v", err)
				}
				cancelledUpstream(t, w, `"steps":240`)
				echo(t, ctx, c, "after the cancellation")

				// The gateway's maximum clock fires: the client gets the
				// timeout result, the upstream its own cancellation.
				res, err = c.CallTool(ctx, "trigger-long-running-operation", map[string]any{"duration": 60, "steps": 60}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if fail := gatewaycheck.Failure(t, res); fail.Code != mcp.FailureTimeout {
					t.Fatalf("a call past the gateway's deadline answered %+v", fail)
				}
				cancelledUpstream(t, w, `"steps":60`)

				echo(t, ctx, c, "after the deadline")
			})
		}
	}
}

// cancelledUpstream checks that the gateway sent its upstream
// notifications/cancelled for the tools/call whose params hold marker,
// by the id it gave that call.
func cancelledUpstream(t *testing.T, w *wire, marker string) {
	t.Helper()
	var id jsonrpc.ID
	sent := w.await(t, "the cancellation of "+marker, func(m jsonrpc.Message) bool {
		if m.Method == mcp.MethodToolsCall && strings.Contains(string(m.Params), marker) {
			id = m.ID
		}
		if m.Method != mcp.NotificationCancelled || !id.IsValid() {
			return false
		}
		var p mcp.CancelledParams
		return json.Unmarshal(m.Params, &p) == nil && p.RequestID == id
	})
	for _, m := range sent {
		var p mcp.CancelledParams
		if m.Method == mcp.NotificationCancelled && json.Unmarshal(m.Params, &p) == nil && p.RequestID != id && !slices.ContainsFunc(sent, func(c jsonrpc.Message) bool { return c.ID == p.RequestID && c.Method == mcp.MethodToolsCall }) {
			t.Errorf("the gateway cancelled %v, an id it never sent", p.RequestID)
		}
	}
}

// answerEverything answers server-everything's sampling and elicitation
// requests as a client's user and model would.
func answerEverything(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case mcp.MethodCreateMessage:
		return map[string]any{"role": "assistant", "model": "test", "content": map[string]any{"type": "text", "text": "sampled by the downstream client"}}, nil
	case mcp.MethodElicit:
		return map[string]any{"action": "accept", "content": map[string]any{"name": "Ada", "check": true}}, nil
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "not %s", method)
}

// textIn is every text block of a result, joined.
func textIn(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
