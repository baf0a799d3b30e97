package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
)

// mcprel's client against a server built with the official TypeScript SDK
// (1.32.2) over stdio: it falls back to the 2025 handshake (the SDK does
// not serve 2026-07-28), lists, calls, follows progress, cancels — the
// SDK's handler sees the abort — and fires both deadlines.
func TestClientAgainstTypeScriptServer(t *testing.T) {
	requireNode(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			log := mcptest.NewLines()
			var c *client.Client
			var err error
			if transport == "stdio" {
				c, err = client.DialStdio(context.Background(), []string{"node", "ts-server.mjs"}, &client.Options{Stderr: log})
			} else {
				c, err = client.DialHTTP(context.Background(), startTSServer(t, log), nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			againstTSServer(t, c, log)
		})
	}
}

// startTSServer runs ts-server.mjs --http and returns its URL.
func startTSServer(t *testing.T, log *mcptest.Lines) string {
	t.Helper()
	cmd := exec.Command("node", "ts-server.mjs", "--http")
	cmd.Stderr = log
	return mcptest.StartURL(t, cmd)
}

func againstTSServer(t *testing.T, c *client.Client, log *mcptest.Lines) {
	ctx := context.Background()
	if c.Era() != mcp.Legacy || c.ServerInfo().Name != "ts-server" {
		t.Fatalf("era %v, server %+v", c.Era(), c.ServerInfo())
	}
	tools, err := c.ListTools(ctx)
	if err != nil || len(tools) != 4 {
		t.Fatalf("tools/list: %d, %v", len(tools), err)
	}
	res, err := c.CallTool(ctx, "echo", map[string]any{"text": "hello"}, nil)
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("echo: %+v, %v", res, err)
	}
	var seen []float64
	if _, err := c.CallTool(ctx, "progress", map[string]any{"steps": 3, "intervalMs": 20},
		&client.CallOptions{OnProgress: func(p client.Progress) { seen = append(seen, p.Progress) }}); err != nil || len(seen) != 3 {
		t.Fatalf("progress: %v, seen %v", err, seen)
	}
	cctx, cancel := context.WithCancel(ctx)
	errs := make(chan error, 1)
	go func() { _, err := c.CallTool(cctx, "wait", nil, nil); errs <- err }()
	if !log.Await("handler-started wait") {
		t.Fatal("the wait handler never started")
	}
	cancel()
	if err := <-errs; !errors.As(err, new(*client.CancelledError)) {
		t.Fatalf("the cancelled call: %v", err)
	}
	if !log.Await("handler-cancelled wait") {
		t.Fatal("the SDK's handler did not see the cancellation")
	}
	var de *client.DeadlineError
	if _, err := c.CallTool(ctx, "progress", map[string]any{"steps": 5, "intervalMs": 2000}, &client.CallOptions{Idle: 200 * time.Millisecond}); !errors.As(err, &de) || de.Clock != client.IdleClock {
		t.Fatalf("idle deadline: %v", err)
	}
	if _, err := c.CallTool(ctx, "progress", map[string]any{"steps": 1000, "intervalMs": 20}, &client.CallOptions{Idle: 5 * time.Second, Max: 300 * time.Millisecond}); !errors.As(err, &de) || de.Clock != client.MaxClock {
		t.Fatalf("max deadline: %v", err)
	}
	if _, err := c.CallTool(ctx, "echo", map[string]any{"text": "still here"}, nil); err != nil {
		t.Fatalf("after the deadlines: %v", err)
	}
}

// A server built with the TypeScript SDK asks mcprel's client for input in
// the middle of a call (elicitation/create, the 2025 era's way, since the
// SDK does not serve 2026-07-28): the client's OnRequest answers, and the
// SDK's handler gets the answer, over stdio and HTTP.
func TestClientAnswersTypeScriptServersElicitation(t *testing.T) {
	requireNode(t)
	answer := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if method != mcp.MethodElicit || !strings.Contains(string(params), "What is your name?") {
			return nil, fmt.Errorf("unexpected %s %s", method, params)
		}
		return map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}, nil
	}
	for _, tc := range []struct{ transport, handler string }{
		{"stdio", "connection"}, {"http", "connection"}, {"stdio", "call"}, {"http", "call"},
	} {
		transport := tc.transport
		t.Run(transport+"/"+tc.handler, func(t *testing.T) {
			// The call's own handler answers when it is the call in flight:
			// the SDK asks on the session's stream over HTTP, which names
			// no call.
			opts := &client.Options{OnRequest: answer, Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}}
			var co *client.CallOptions
			if tc.handler == "call" {
				opts.OnRequest = nil
				co = &client.CallOptions{OnRequest: answer}
			}
			var c *client.Client
			var err error
			if transport == "stdio" {
				c, err = client.DialStdio(context.Background(), []string{"node", "ts-server.mjs"}, opts)
			} else {
				c, err = client.DialHTTP(context.Background(), startTSServer(t, mcptest.NewLines()), opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			res, err := c.CallTool(context.Background(), "ask", nil, co)
			if err != nil || res.IsError || len(res.Content) != 1 {
				t.Fatalf("ask: %+v, %v", res, err)
			}
			if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, `"action":"accept"`) || !strings.Contains(text, `"name":"Ada"`) {
				t.Fatalf("the SDK's handler got %s", text)
			}
		})
	}
}

// mcprel call answers the TypeScript SDK server's mid-call elicitation as
// its README says: from --answers without a terminal, and by declining,
// with a hint on stderr, when it has neither.
func TestCallAnswersTypeScriptServersElicitation(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	answers := filepath.Join(t.TempDir(), "answers.json")
	if err := os.WriteFile(answers, []byte(`{"elicitation/create": {"action": "accept", "content": {"name": "Grace"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	call := func(args ...string) (string, string) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"call", "--stdio", "node ts-server.mjs"}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("mcprel call %v: %v\n%s", args, err, errb.String())
		}
		return out.String(), errb.String()
	}
	if out, _ := call("--answers", answers, "ask"); !strings.Contains(out, `\"action\":\"accept\"`) || !strings.Contains(out, `\"name\":\"Grace\"`) {
		t.Fatalf("with --answers the SDK's handler got %s", out)
	}
	out, errOut := call("ask")
	if !strings.Contains(out, `\"action\":\"decline\"`) || !strings.Contains(errOut, "--answers FILE") {
		t.Fatalf("without a terminal: stdout %s, stderr %s", out, errOut)
	}
}
