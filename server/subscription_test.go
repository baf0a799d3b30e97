package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

func subscriptionID(t *testing.T, f mcptest.Frame) jsonrpc.ID {
	t.Helper()
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(f.Params, &p); err != nil {
		t.Fatalf("%s: %v", f.Raw, err)
	}
	id, err := jsonrpc.ParseID(p.Meta[mcp.MetaSubscriptionID])
	if err != nil {
		t.Fatalf("frame without a subscription id: %s", f.Raw)
	}
	return id
}

func addNoop(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	if err := srv.AddTool(server.Tool{Name: name}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
}

// TestListen checks subscriptions/listen: the acknowledgement comes first
// with the honoured filter, every message carries the subscription id, only
// requested kinds are sent, and a cancelled subscription gets nothing more.
func TestListen(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	c := mcptest.Stdio(t, srv, nil)

	c.Request(1, mcp.MethodListen, mcptest.ModernParams(map[string]any{"notifications": map[string]any{"toolsListChanged": true, "promptsListChanged": true}}))
	ack := c.Next()
	if ack.Method != mcp.NotificationSubscriptionAck || subscriptionID(t, ack) != jsonrpc.IntID(1) {
		t.Fatalf("first frame = %s, want the acknowledgement for subscription 1", ack.Raw)
	}
	var ackParams mcp.SubscriptionAckParams
	json.Unmarshal(ack.Params, &ackParams)
	if !ackParams.Notifications.ToolsListChanged || ackParams.Notifications.PromptsListChanged {
		t.Fatalf("acknowledged %+v, want only toolsListChanged (there are no prompts)", ackParams.Notifications)
	}
	// A second subscription that did not ask for tool changes.
	c.Request(2, mcp.MethodListen, mcptest.ModernParams(map[string]any{"notifications": map[string]any{}}))
	if ack2 := c.Next(); ack2.Method != mcp.NotificationSubscriptionAck || subscriptionID(t, ack2) != jsonrpc.IntID(2) {
		t.Fatalf("second ack = %s", ack2.Raw)
	}

	addNoop(t, srv, "new_tool")
	changed := c.Next()
	if changed.Method != mcp.NotificationToolsListChanged || subscriptionID(t, changed) != jsonrpc.IntID(1) {
		t.Fatalf("after AddTool got %s, want tools/list_changed on subscription 1", changed.Raw)
	}
	if before := c.Sync(10, mcp.Modern); len(before) > 0 {
		t.Fatalf("subscription 2 got notifications it did not ask for:%s", mcptest.Raws(before))
	}

	c.Cancel(1, "")
	if before := c.Sync(11, mcp.Modern); len(before) > 0 {
		t.Fatalf("frames after cancelling the subscription:%s", mcptest.Raws(before))
	}
	addNoop(t, srv, "another_tool")
	if before := c.Sync(12, mcp.Modern); len(before) > 0 {
		t.Fatalf("a cancelled subscription still receives notifications:%s", mcptest.Raws(before))
	}
}

// TestListenRequiresFilter: a listen without params.notifications is an
// invalid-params error.
func TestListenRequiresFilter(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	c := mcptest.Stdio(t, srv, nil)
	if f := c.Call(1, mcp.MethodListen, mcptest.ModernParams(nil)); f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("listen without a filter = %s", f.Raw)
	}
}

// TestLegacyToolsListChanged: an initialized legacy client hears about tool
// list changes on the connection.
func TestLegacyToolsListChanged(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	c := mcptest.Stdio(t, srv, nil)
	c.Initialize(mcp.Version20251125)
	addNoop(t, srv, "new_tool")
	if f := c.Next(); f.Method != mcp.NotificationToolsListChanged || f.ID != nil {
		t.Fatalf("got %s, want notifications/tools/list_changed", f.Raw)
	}
}

// TestShutdownEndsSubscriptionsAndDrains: on a graceful shutdown the server
// ends a stdio subscription with notifications/cancelled (the one message it
// may send that way), refuses new requests as unavailable, and lets a running
// call finish.
func TestShutdownEndsSubscriptionsAndDrains(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	c.Request(1, mcp.MethodListen, mcptest.ModernParams(map[string]any{"notifications": map[string]any{"toolsListChanged": true}}))
	c.Next() // acknowledgement
	c.Request(2, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	gate.WaitEntered(t)

	done := make(chan error, 1)
	go func() { done <- c.Conn().Shutdown(context.Background()) }()

	end := c.Next()
	var p mcp.CancelledParams
	if end.Method != mcp.NotificationCancelled || json.Unmarshal(end.Params, &p) != nil || p.RequestID != jsonrpc.IntID(1) {
		t.Fatalf("subscription end = %s, want notifications/cancelled for request 1", end.Raw)
	}
	c.Request(3, mcp.MethodToolsList, mcptest.ModernParams(nil))
	if f := c.Next(); f.Error == nil || f.Error.Code != mcp.CodeUnavailable {
		t.Fatalf("request during shutdown = %s, want unavailable", f.Raw)
	}
	gate.Release()
	if f, _ := c.Await(2); f.Error != nil {
		t.Fatalf("running call during shutdown = %s, want its result", f.Raw)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	c.ExpectEOF()
}

// TestShutdownCancelsAfterGrace: calls still running when the grace ends are
// cancelled with ErrShutdown and get no response.
func TestShutdownCancelsAfterGrace(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	gate.WaitEntered(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace at all
	if err := c.Conn().Shutdown(ctx); err == nil {
		t.Fatal("Shutdown with an expired grace returned nil while a call was running")
	}
	if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Cancelled || r.Cause != server.ErrShutdown {
		t.Fatalf("record = %+v, want cancelled by shutdown", r)
	}
	gate.Release()
	c.ExpectEOF()
}
