package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// One Server.Shutdown drains every transport attached to the server: a
// stdio connection and Streamable HTTP in both eras stop taking requests
// (unavailable; 503 over HTTP), their listens are ended by the server,
// the calls running on each finish within the grace and are answered, a
// call still waiting for a slot runs too, and then the stdio connection
// ends and the legacy HTTP session is gone.
func TestServerShutdownDrainsEveryTransport(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{MaxConcurrentCalls: 3})
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	h := mcptest.HTTP(t, srv, nil)
	h.Initialize(nil)
	ctx := context.Background()

	c.Request(1, mcp.MethodListen, mcptest.ModernParams(map[string]any{"notifications": map[string]any{"toolsListChanged": true}}))
	c.Next() // acknowledgement
	listen := mcptest.ReadSSE(t, h.Modern(ctx, 2, mcp.MethodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true}}))
	listen.Next() // acknowledgement

	c.Request(3, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	modern := make(chan mcptest.Frame, 1)
	go func() {
		modern <- mcptest.ReadJSON(t, h.Modern(ctx, 4, mcp.MethodToolsCall, map[string]any{"name": "gate"}))
	}()
	legacy := make(chan mcptest.Frame, 1)
	go func() {
		legacy <- mcptest.ReadJSON(t, h.Legacy(ctx, 5, mcp.MethodToolsCall, map[string]any{"name": "gate"}))
	}()
	for range 3 {
		gate.WaitEntered(t)
	}
	c.Request(6, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"})) // waits for a slot
	for l := srv.Load(); l.Queued == 0; l = srv.Load() {
	}

	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()

	if end := c.Next(); end.Method != mcp.NotificationCancelled {
		t.Fatalf("stdio listen end = %s, want notifications/cancelled", end.Raw)
	}
	if rest := listen.Rest(); len(rest) != 1 || !rest[0].IsResponseTo(jsonrpc.IntID(2)) {
		t.Fatalf("HTTP listen end = %s, want its result", mcptest.Raws(rest))
	}
	c.Request(7, mcp.MethodToolsList, mcptest.ModernParams(nil))
	if f, _ := c.Await(7); f.Error == nil || f.Error.Code != mcp.CodeUnavailable {
		t.Errorf("stdio request during shutdown = %s, want unavailable", f.Raw)
	}
	resp := h.Modern(ctx, 8, mcp.MethodToolsList, nil)
	if f := mcptest.ReadJSON(t, resp); resp.StatusCode != http.StatusServiceUnavailable || f.Error == nil || f.Error.Code != mcp.CodeUnavailable {
		t.Errorf("HTTP request during shutdown = %d %s, want 503 unavailable", resp.StatusCode, f.Raw)
	}
	resp, _ = h.TryInitialize(nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a new legacy session during shutdown = %d, want 503", resp.StatusCode)
	}

	gate.Release()
	// The stdio connection answers both its calls (the queued one may
	// finish first), then ends.
	var stdio []mcptest.Frame
	for f := range c.Frames() {
		stdio = append(stdio, f)
	}
	if len(stdio) != 2 {
		t.Errorf("stdio frames after the release: %s, want the answers to 3 and 6", mcptest.Raws(stdio))
	}
	for _, f := range append(stdio, <-modern, <-legacy) {
		if f.Error != nil || !strings.Contains(f.Raw, "released") {
			t.Errorf("a call in flight during shutdown = %s, want its result", f.Raw)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	select {
	case <-srv.Stopped():
	default:
		t.Fatal("Stopped is open after Shutdown returned")
	}
	// The legacy session takes nothing more.
	resp = h.Legacy(ctx, 9, mcp.MethodToolsList, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the legacy session after the shutdown: %d", resp.StatusCode)
	}
}

// Calls still running when the server's grace ends are cancelled with
// ErrShutdown, on every transport, and get no response.
func TestServerShutdownCancelsAfterGrace(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	h := mcptest.HTTP(t, srv, nil)
	c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	go func() {
		// Cancelled without a response: the stream just ends.
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": mcp.MethodToolsCall,
			"params": mcptest.ModernParams(map[string]any{"name": "gate"})})
		req, _ := http.NewRequest(http.MethodPost, h.URL, bytes.NewReader(body))
		for k, v := range mcptest.ModernHeaders(mcp.MethodToolsCall, "gate") {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if resp, err := h.Client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	gate.WaitEntered(t)
	gate.WaitEntered(t)
	grace, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(grace) }()
	cancel() // the grace ends with both calls running
	if err := <-done; err == nil {
		t.Fatal("Shutdown returned nil though calls had to be cancelled")
	}
	for _, tr := range []string{"stdio", "http"} {
		r := rec.WaitRecord(t, tr+" call", func(r server.RequestRecord) bool {
			return r.Transport == tr && r.Method == mcp.MethodToolsCall
		})
		if r.Outcome != server.Cancelled || r.Cause != server.ErrShutdown {
			t.Errorf("%s call: %+v, want cancelled by the shutdown", tr, r)
		}
	}
	gate.Release() // the cancelled handlers may return now
	c.ExpectEOF()
}
