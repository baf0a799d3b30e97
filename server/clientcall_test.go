package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

func samplingServer(t *testing.T, got chan<- error) *server.Server {
	srv := mcptest.NewServer(t, nil)
	srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		res, err := req.CreateMessage(ctx, mcp.CreateMessageParams{
			Messages:  []mcp.SamplingMessage{{Role: "user", Content: mcp.Text("2+2?")}},
			MaxTokens: 10,
		})
		if got != nil {
			got <- err
		}
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("model said " + string(res.Content))}}, nil
	})
	return srv
}

func initWithSampling(c *mcptest.Client) {
	c.Call(0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.Version20251125,
		"capabilities":    map[string]any{"sampling": map[string]any{}},
		"clientInfo":      map[string]any{"name": "t", "version": "1"},
	})
}

// TestSamplingRoundTrip: in the legacy era a tool asks the client to sample
// and gets the answer; the request travels on the connection and the
// client's response is routed back to the waiting tool.
func TestSamplingRoundTrip(t *testing.T) {
	c := mcptest.Stdio(t, samplingServer(t, nil), nil)
	initWithSampling(c)
	c.Request(1, mcp.MethodToolsCall, map[string]any{"name": "ask"})
	req := c.Next()
	if req.Method != mcp.MethodCreateMessage || req.ID == nil || !strings.Contains(string(req.Params), `"2+2?"`) {
		t.Fatalf("expected a sampling request, got %s", req.Raw)
	}
	c.SendJSON(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
		"role": "assistant", "content": map[string]any{"type": "text", "text": "4"}, "model": "m",
	}})
	resp, _ := c.Await(1)
	if !strings.Contains(string(resp.Result), `model said {`) || !strings.Contains(string(resp.Result), `\"text\":\"4\"`) {
		t.Fatalf("tool result = %s", resp.Raw)
	}
}

// TestSamplingErrors: a client error reaches the tool as *jsonrpc.Error; a
// client without the capability is never asked; a modern request cannot
// call the client at all.
func TestSamplingErrors(t *testing.T) {
	got := make(chan error, 1)
	c := mcptest.Stdio(t, samplingServer(t, got), nil)
	initWithSampling(c)
	c.Request(1, mcp.MethodToolsCall, map[string]any{"name": "ask"})
	req := c.Next()
	c.SendJSON(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -1, "message": "user rejected"}})
	var rpcErr *jsonrpc.Error
	if err := <-got; !errors.As(err, &rpcErr) || rpcErr.Message != "user rejected" {
		t.Fatalf("tool saw %v, want the client's error", err)
	}
	c.Await(1)

	c2 := mcptest.Stdio(t, samplingServer(t, got), nil)
	c2.Initialize(mcp.Version20251125) // no sampling capability
	c2.Request(1, mcp.MethodToolsCall, map[string]any{"name": "ask"})
	if err := <-got; !errors.Is(err, server.ErrNoCapability) {
		t.Fatalf("without the capability: %v", err)
	}
	c2.Await(1)

	c3 := mcptest.Stdio(t, samplingServer(t, got), nil)
	c3.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "ask"}))
	if err := <-got; !errors.Is(err, server.ErrModernEra) {
		t.Fatalf("modern era: %v", err)
	}
	c3.Await(1)
}

// TestCancelledCallCancelsItsClientRequest: when the call is cancelled
// while waiting for the client, the server tells the client it no longer
// needs the answer, and a late answer is ignored.
func TestCancelledCallCancelsItsClientRequest(t *testing.T) {
	got := make(chan error, 1)
	c := mcptest.Stdio(t, samplingServer(t, got), nil)
	initWithSampling(c)
	c.Request(1, mcp.MethodToolsCall, map[string]any{"name": "ask"})
	req := c.Next()
	c.Cancel(1, "")
	if err := <-got; !errors.Is(err, server.ErrPeerCancelled) {
		t.Fatalf("tool saw %v", err)
	}
	f := c.Next()
	var p mcp.CancelledParams
	if f.Method != mcp.NotificationCancelled || json.Unmarshal(f.Params, &p) != nil || p.RequestID != *req.ID {
		t.Fatalf("got %s, want notifications/cancelled for the sampling request", f.Raw)
	}
	c.SendJSON(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{}})
	if before := c.Sync(2, mcp.Legacy); len(before) > 0 {
		t.Fatalf("unexpected frames:%s", mcptest.Raws(before))
	}
}
