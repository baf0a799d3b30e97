package everything_test

import (
	"context"
	"encoding/json"
	"path/filepath"
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
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
)

// server-everything runs simulate-research-query only as a task of its
// own (2025-11-25 taskSupport "required"). Behind the gateway, a client
// of either era gets a task of the gateway's that follows the server's:
// the server's stage messages are its status, its report the result, and
// the server is sent the call once, as a task, then polled.
func TestGatewayFollowsServerEverythingsTask(t *testing.T) {
	everything.Require(t)
	for _, tc := range []struct {
		mode everything.Mode
		down gatewaycheck.Downstream
	}{
		{everything.Stdio, gatewaycheck.Downstreams[2]},          // http-2026
		{everything.StreamableHTTP, gatewaycheck.Downstreams[1]}, // stdio-2025
	} {
		t.Run(string(tc.mode)+"-from-"+tc.down.Name, func(t *testing.T) {
			peer, w, logger := upstream(t, tc.mode)
			srv := mcptest.NewServer(t, &server.Options{ProgressInterval: time.Millisecond})
			db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "gateway.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			st, err := tasks.Open(context.Background(), db, &tasks.Options{PollInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ts, err := taskserver.New(srv, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ts.Shutdown(context.Background()) })
			f := gatewaycheck.StartOn(t, srv, peer, gateway.Options{Logger: logger, Tasks: ts})
			f.AwaitTool(t, "simulate-research-query")
			c := f.Dial(t, tc.down, client.Options{Capabilities: mcp.ClientCapabilities{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}})
			var mu sync.Mutex
			var messages []string
			res, err := c.CallToolTask(t.Context(), "simulate-research-query", map[string]any{"topic": "tides"}, nil, func(_, message string) {
				mu.Lock()
				messages = append(messages, message)
				mu.Unlock()
			})
			if err != nil || res.IsError || !strings.Contains(textIn(res), "Research Report: tides") {
				t.Fatalf("the research task: %+v, %v", res, err)
			}
			// The server's stages last a second each, and the gateway
			// polls at the server's interval: under load it may see only
			// some of them, never none.
			mu.Lock()
			seen := slices.ContainsFunc(messages, func(m string) bool {
				return slices.Contains([]string{"Gathering sources...", "Analyzing content...", "Synthesizing findings...", "Generating report..."}, m)
			})
			mu.Unlock()
			if !seen {
				t.Errorf("the server's stage messages never reached the client: %q", messages)
			}
			sent := w.await(t, "a tasks/get", func(m jsonrpc.Message) bool { return m.Method == mcp.MethodTasksGet })
			calls := 0
			for _, m := range sent {
				if m.Method == mcp.MethodToolsCall && strings.Contains(string(m.Params), `"simulate-research-query"`) {
					calls++
					if !strings.Contains(string(m.Params), `"task"`) {
						t.Errorf("the call reached the server without asking for a task: %s", m.Params)
					}
				}
			}
			if calls != 1 {
				t.Fatalf("the server was sent %d research calls, want 1", calls)
			}
			// A client that cannot take a task gets a call's result: the
			// gateway follows the server's task within the call's clocks.
			plain := f.Dial(t, tc.down, client.Options{})
			res, err = plain.CallTool(t.Context(), "simulate-research-query", map[string]any{"topic": "waves"}, nil)
			if err != nil || res.IsError || !strings.Contains(textIn(res), "Research Report: waves") {
				t.Fatalf("the research call from a client without tasks: %+v, %v", res, err)
			}
		})
	}
}
