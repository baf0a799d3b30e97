package server

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// A handler goroutine outlives its call to take the session's next one,
// and exits when no call came for workerIdle, or when the session closes.
func TestWorkersAreKeptThenLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := New(mcp.Implementation{Name: "t", Version: "1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv.AddTool(Tool{Name: "noop"}, func(context.Context, *CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
		call := func(ss *session, id int64) {
			out := outbound.New(4)
			params := []byte(`{"name":"noop","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`)
			ss.Handle(context.Background(), jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.IntID(id), Method: mcp.MethodToolsCall, Params: params}, out)
			if f, err := out.Next(context.Background()); err != nil || f.Kind != outbound.Final {
				t.Fatalf("call %d: %+v, %v", id, f, err)
			}
			synctest.Wait() // the worker is idle again
		}
		ss := srv.newSession(conn.Config{Modern: true, TrackIDs: true})
		call(ss, 1)
		call(ss, 2)
		if n := ss.workers.live.Load(); n != 1 {
			t.Fatalf("%d workers after two calls in turn, want 1 kept", n)
		}
		time.Sleep(workerIdle + time.Second)
		synctest.Wait()
		if n := ss.workers.live.Load(); n != 0 {
			t.Fatalf("%d workers after %v idle, want 0", n, workerIdle)
		}
		call(ss, 3)
		ss.Close(nil)
		synctest.Wait()
		if n := ss.workers.live.Load(); n != 0 {
			t.Fatalf("%d workers after the session closed, want 0", n)
		}
	})
}
