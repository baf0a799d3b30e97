package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
)

// A notification that comes after a listen stream is registered but before
// its acknowledgement is sent is neither lost nor sent first: it follows
// the acknowledgement. (Found under load: the stream used to be registered
// after the acknowledgement, and such a notification was lost.)
func TestNotificationBetweenRegisterAndAck(t *testing.T) {
	srv, err := New(mcp.Implementation{Name: "t", Version: "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.AddTool(Tool{Name: "x"}, func(context.Context, *CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
	srv.testHooks.listenTracked = func() { srv.listChanged(kindTools) }
	sess := srv.newSession(conn.Config{Modern: true, StreamPerRequest: true})
	out := outbound.New(8)
	params, _ := json.Marshal(map[string]any{
		"notifications": map[string]any{"toolsListChanged": true},
		"_meta":         map[string]any{mcp.MetaProtocolVersion: mcp.Version20260728, mcp.MetaClientCapabilities: map[string]any{}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sess.Handle(ctx, jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.IntID(1), Method: mcp.MethodListen, Params: params}, out)
	var got []string
	for f, ok := out.TryNext(); ok; f, ok = out.TryNext() {
		got = append(got, string(f.Data))
	}
	if len(got) != 2 || !strings.Contains(got[0], mcp.NotificationSubscriptionAck) || !strings.Contains(got[1], mcp.NotificationToolsListChanged) {
		t.Fatalf("the stream carried %q, want the acknowledgement, then the change", got)
	}
}
