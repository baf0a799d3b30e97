package streamhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log records written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// In the 2025 era every session numbers its requests from 0, so the log
// names the session of each request; a modern listen stream closed by its
// client, the way every modern client leaves, is logged at debug.
func TestRequestLogNamesSessions(t *testing.T) {
	var logs syncBuffer
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}))
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
	for _, l := range logs.lines(t) {
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
