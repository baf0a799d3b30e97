package streamhttp_test

import (
	"context"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// In the 2025 era every session numbers its requests from 0, so the log
// names the session of each request; a modern listen stream closed by its
// client, the way every modern client leaves, is logged at debug.
func TestRequestLogNamesSessions(t *testing.T) {
	var logs mcptest.LogBuffer
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{Logger: logs.Logger()}))
	a := mcptest.HTTP(t, srv, nil)
	b := &mcptest.HTTPClient{URL: a.URL, Handler: a.Handler, Client: a.Client}
	b.SetT(t)
	a.Initialize(nil)
	b.Initialize(nil)
	for _, c := range []*mcptest.HTTPClient{a, b} {
		if f := mcptest.ReadJSON(t, c.Legacy(context.Background(), 7, mcp.MethodToolsList, nil)); f.Error != nil {
			t.Fatalf("tools/list: %s", f.Raw)
		}
	}
	ctx, leave := context.WithCancel(context.Background())
	listen := mcptest.ReadSSE(t, a.Modern(ctx, 9, mcp.MethodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true}}))
	listen.Next() // the acknowledgement: the stream is open
	leave()
	listen.Close()
	if r := rec.WaitRequest(t, jsonrpc.IntID(9)); r.Outcome != server.Cancelled {
		t.Fatalf("listen ended %v, want cancelled", r.Outcome)
	}

	sessions := map[string]bool{}
	sawListen := false
	for _, l := range logs.Records(t) {
		switch {
		case l["msg"] == "request" && l["method"] == mcp.MethodToolsList:
			s, _ := l["session"].(string)
			sessions[s] = true
		case l["msg"] == "request" && l["method"] == mcp.MethodListen:
			sawListen = true
			if l["level"] != "DEBUG" || l["session"] != nil {
				t.Errorf("listen closed by its client logged as %v", l)
			}
		}
	}
	if !sawListen {
		t.Error("no log line for the listen")
	}
	if len(sessions) != 2 || !sessions[a.SessionID[:8]] || !sessions[b.SessionID[:8]] {
		t.Errorf("tools/list logged with sessions %v, want %q and %q", sessions, a.SessionID[:8], b.SessionID[:8])
	}
}
