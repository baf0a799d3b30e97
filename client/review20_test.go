package client_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// A tool the server added after the client's last listing is a tool the
// client has not listed: when the server refuses a call to it for a
// missing Mcp-Param header, the client lists again and sends it once
// more, with the header, as it does before any listing.
func TestParamHeadersToolAddedAfterListing(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	ok := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
	}
	if err := srv.AddTool(server.Tool{Name: "other", InputSchema: json.RawMessage(`{"type":"object"}`)}, ok); err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &paramRecorder{}
	hs := httptest.NewServer(rec.wrap(h))
	t.Cleanup(hs.Close)
	c := dialHTTP(t, hs.URL, 0)
	if _, err := c.ListTools(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(server.Tool{Name: "route", InputSchema: json.RawMessage(routeSchema)}, ok); err != nil {
		t.Fatal(err)
	}
	res, err := c.CallTool(context.Background(), "route", map[string]any{"region": "eu"}, nil)
	if err != nil || res.IsError {
		t.Fatalf("call to a tool added after the listing: %v %+v", err, res)
	}
	if got := rec.last(t); got.Get("Mcp-Param-Region") != "eu" {
		t.Fatalf("headers %v, want Region", got)
	}
}
