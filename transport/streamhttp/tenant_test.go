package streamhttp_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

var twoTenants = map[string]string{"tok-a": "alice", "tok-b": "bob", "tok-c": "carol"}

// Legacy sessions are capped per tenant: a tenant at its cap gets its
// longest-idle session ended to make room, or, with every session busy,
// 429 and the retryable overload; another tenant opens sessions beside it;
// the server-wide cap answers 503 with the same overload, not the
// shutting-down code.
func TestSessionsPerTenant(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	gate := mcptest.NewGate(t, srv, "gate")
	base := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: twoTenants, MaxSessions: 4, MaxSessionsPerTenant: 2})

	// alice's two sessions, each with a call in flight.
	a1, a2 := base.As("tok-a"), base.As("tok-a")
	a1.Initialize(nil)
	a2.Initialize(nil)
	streams := []*mcptest.SSE{
		mcptest.ReadSSE(t, a1.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("gate"))),
		mcptest.ReadSSE(t, a2.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("gate"))),
	}
	gate.WaitEntered(t)
	gate.WaitEntered(t)
	a3 := base.As("tok-a")
	resp, f := a3.TryInitialize(nil)
	if resp.StatusCode != http.StatusTooManyRequests || f.Error == nil || f.Error.Code != mcp.CodeOverloaded || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("alice's third session with both busy: %d %s, want 429 with -31001 and Retry-After", resp.StatusCode, f.Raw)
	}
	// bob is not affected by alice's sessions.
	b1, b2 := base.As("tok-b"), base.As("tok-b")
	b1.Initialize(nil)
	b2.Initialize(nil)
	// The server holds 4: carol gets the server-wide refusal.
	resp, f = base.As("tok-c").TryInitialize(nil)
	if resp.StatusCode != http.StatusServiceUnavailable || f.Error == nil || f.Error.Code != mcp.CodeOverloaded {
		t.Fatalf("a session past the server's cap: %d %s, want 503 with -31001", resp.StatusCode, f.Raw)
	}

	// Once alice's calls end, her sessions are idle: a third one ends the
	// one unused the longest.
	gate.Release()
	for _, s := range streams {
		s.Rest()
		s.Close()
	}
	if f := mcptest.ReadJSON(t, a2.Legacy(context.Background(), 2, mcp.MethodToolsList, nil)); f.Error != nil { // a2 used last
		t.Fatal(f.Raw)
	}
	a3.Initialize(nil)
	resp = a1.Legacy(context.Background(), 3, mcp.MethodToolsList, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("alice's idlest session after a new one replaced it: %d, want 404", resp.StatusCode)
	}
	for _, c := range []*mcptest.HTTPClient{a2, a3, b1, b2} {
		if f := mcptest.ReadJSON(t, c.Legacy(context.Background(), 4, mcp.MethodToolsList, nil)); f.Error != nil {
			t.Fatalf("a session that should live: %s", f.Raw)
		}
	}
}

// subscriptions/listen streams are counted per tenant across the shared
// stateless session: alice at her cap does not keep bob from listening;
// past the server-wide ceiling a listen gets the retryable overload.
func TestListensPerTenant(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{MaxSubscriptions: 2, MaxSubscriptionsTotal: 3})
	base := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: twoTenants})
	listen := func(c *mcptest.HTTPClient, id int64) (*http.Response, *mcptest.SSE, mcptest.Frame) {
		t.Helper()
		resp := c.Modern(context.Background(), id, mcp.MethodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true}})
		if resp.StatusCode != http.StatusOK {
			return resp, nil, mcptest.ReadJSON(t, resp)
		}
		s := mcptest.ReadSSE(t, resp)
		return resp, s, s.Next() // the acknowledgement
	}
	alice, bob, carol := base.As("tok-a"), base.As("tok-b"), base.As("tok-c")
	var open []*mcptest.SSE
	for id := int64(1); id <= 2; id++ {
		_, s, ack := listen(alice, id)
		if s == nil || ack.Method != mcp.NotificationSubscriptionAck {
			t.Fatalf("alice's listen %d: %s", id, ack.Raw)
		}
		open = append(open, s)
	}
	if resp, _, f := listen(alice, 3); resp.StatusCode != http.StatusBadRequest || f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidRequest {
		t.Fatalf("alice's third listen: %d %s, want 400 with -32600", resp.StatusCode, f.Raw)
	}
	_, s, ack := listen(bob, 4)
	if s == nil || ack.Method != mcp.NotificationSubscriptionAck {
		t.Fatalf("bob's listen beside alice's: %s", ack.Raw)
	}
	open = append(open, s)
	if resp, _, f := listen(carol, 5); resp.StatusCode != http.StatusTooManyRequests || f.Error == nil || f.Error.Code != mcp.CodeOverloaded {
		t.Fatalf("a listen past the server's ceiling: %d %s, want 429 with -31001", resp.StatusCode, f.Raw)
	}
	// Closing one of alice's streams gives its place back.
	open[0].Close()
	waitFor(t, "alice's closed listen to end", func() bool {
		resp, s, _ := listen(carol, 6)
		if s != nil {
			s.Close()
		}
		return resp.StatusCode == http.StatusOK
	})
	for _, s := range open[1:] {
		s.Close()
	}
}
