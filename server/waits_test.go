package server_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
)

// A tool whose handler Waits (on another server) is never run on a
// transport's reading goroutine when that transport must go on reading
// (it gave Begin: stdio): its call starts on a goroutine of its own. A
// tool that computes is still run there, and either is run on the calling
// goroutine of a transport that has nothing else to read (no Begin: one
// HTTP request).
func TestWaitingToolLeavesTheReaderReading(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	h := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
	}
	must(t, srv.AddTool(server.Tool{Name: "computes"}, h))
	must(t, srv.AddTool(server.Tool{Name: "waits", Policy: server.Policy{Waits: true}}, h))
	sess := srv.NewSession(conn.Stdio())
	defer sess.Close(nil)
	out := sess.NewQueue()
	call := func(id int64, tool string, p conn.Prepared) {
		params, _ := json.Marshal(mcptest.ModernParams(map[string]any{"name": tool}))
		sess.HandleRequest(context.Background(), jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.IntID(id), Method: mcp.MethodToolsCall, Params: params}, p, out)
	}
	for i, tc := range []struct {
		tool string
		here bool
	}{{"computes", true}, {"waits", false}} {
		var begun atomic.Bool
		call(int64(i+1), tc.tool, conn.Prepared{RunHere: true, Begin: func() { begun.Store(true) }})
		if _, err := out.Next(context.Background()); err != nil {
			t.Fatalf("%s: no answer: %v", tc.tool, err)
		}
		if begun.Load() != tc.here {
			t.Errorf("%s: ran on the reading goroutine = %v, want %v", tc.tool, begun.Load(), tc.here)
		}
	}
	// Without Begin, nothing else is read on the calling goroutine: the
	// call runs there, its answer queued before HandleRequest returns.
	call(3, "waits", conn.Prepared{RunHere: true})
	if _, ok := out.TryNext(); !ok {
		t.Error("a waiting tool's call with no reading to go on was not run on the calling goroutine")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
