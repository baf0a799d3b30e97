package gateway_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// With several upstreams every name is prefixed, unless one upstream keeps
// its names (KeepNames): then adding a second upstream renames nothing of
// the first's. A kept name that begins with an upstream's name and "_" —
// another's, which would meet that upstream's tools, or its own — is
// prefixed after all, so that no two names ever meet. At most one upstream
// keeps its names.
func TestKeepNames(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	for _, name := range []string{"b_echo", "a_echo"} {
		must(t, a.srv.AddTool(server.Tool{Name: name}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("a's " + name)}}, nil
		}))
	}
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "a", URL: a.url, KeepNames: true}, {Name: "b", URL: b.url}}}, nil)
	c := f.dial(t, 0, nil)
	ctx := context.Background()
	tools, err := c.ListTools(ctx)
	must(t, err)
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"echo", "progress", "a_b_echo", "a_a_echo", "b_echo", "b_progress"} {
		if !slices.Contains(names, want) {
			t.Errorf("the gateway lists %v; want %s among them", names, want)
		}
	}
	for name, want := range map[string]string{"echo": `"text":"kept"`, "a_b_echo": "a's b_echo", "a_a_echo": "a's a_echo", "b_echo": `"text":"kept"`} {
		raw, err := c.CallToolRaw(ctx, name, map[string]any{"text": "kept"}, nil)
		must(t, err)
		if !strings.Contains(string(raw), want) || strings.Contains(string(raw), `"isError":true`) {
			t.Errorf("%s answered %s, want %q", name, raw, want)
		}
	}
	_, err = gateway.CheckUpstreams([]gateway.Upstream{{Name: "a", URL: a.url, KeepNames: true}, {Name: "b", URL: b.url, KeepNames: true}})
	if err == nil || !strings.Contains(err.Error(), "only one upstream may keep its names") {
		t.Errorf("two upstreams keeping their names: %v", err)
	}
}
