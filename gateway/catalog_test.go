package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// A tool the upstream adds while the gateway serves is listed again and
// served, and downstream clients are told the list changed: a 2025
// client on its session, a 2026-07-28 client on its subscription; a tool
// the upstream removes is no longer served. For both upstream eras: a
// 2025 upstream says so on its session, a 2026-07-28 one on the
// subscription the gateway keeps.
func TestListChangesReachDownstream(t *testing.T) {
	for _, up := range eras {
		t.Run("upstream-"+up.name, func(t *testing.T) {
			u := newUpstream(t)
			f := newFront(t, u.options(up.era), nil)
			told := make(chan string, 8)
			legacy := f.dial(t, mcp.Legacy, &client.Options{OnNotification: func(method string, _ json.RawMessage) { told <- "2025 " + method }})
			modern := f.dial(t, mcp.Modern, nil)
			sub, err := modern.Listen(context.Background(), client.ListenOptions{
				Filter:         mcp.SubscriptionFilter{ToolsListChanged: true},
				OnNotification: func(method string, _ json.RawMessage) { told <- "2026 " + method },
			})
			must(t, err)
			defer sub.Close()

			must(t, u.srv.AddTool(server.Tool{Name: "added"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("new")}}, nil
			}))
			for got := map[string]bool{}; !got["2025 "+mcp.NotificationToolsListChanged] || !got["2026 "+mcp.NotificationToolsListChanged]; {
				select {
				case m := <-told:
					got[m] = true
				case <-time.After(wait):
					t.Fatalf("the downstream clients were told %v", got)
				}
			}
			f.awaitTool(t, "added", true)
			for _, c := range []*client.Client{legacy, modern} {
				res, err := c.CallTool(context.Background(), "added", nil, nil)
				if err != nil || text(res) != "new" {
					t.Fatalf("the added tool: %+v, %v", res, err)
				}
			}
			u.srv.RemoveTool("added")
			f.awaitTool(t, "added", false)
			if _, err := modern.CallTool(context.Background(), "added", nil, nil); err == nil {
				t.Fatal("a removed tool is still served")
			}
		})
	}
}

// awaitTool waits until the gateway's server serves name (or no longer
// does), after each listing it reports.
func (f *front) awaitTool(t *testing.T, name string, served bool) {
	t.Helper()
	deadline := time.After(wait)
	for f.srv.HasTool(name) != served {
		select {
		case <-f.listed:
		case <-deadline:
			t.Fatalf("the gateway still serves %s = %v", name, !served)
		}
	}
}

// The upstream's prompts, resources and resource templates are served as
// its tools are: listed, got and read through the gateway, in both eras,
// prompt names prefixed like tools with several upstreams, resource URIs
// never renamed, the first upstream keeping a URI two of them list.
func TestPromptsAndResources(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	for i, u := range []*upstream{a, b} {
		who := []string{"a", "b"}[i]
		must(t, u.srv.AddPrompt(mcp.Prompt{Name: "greet", Arguments: []mcp.PromptArgument{{Name: "name"}}},
			func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.Text(who + " greets " + req.Arguments["name"])}}}, nil
			}))
		for _, uri := range []string{"file:///" + who, "file:///shared"} {
			must(t, u.srv.AddResource(mcp.Resource{URI: uri, Name: uri}, func(ctx context.Context, req *server.ReadRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: req.URI, Text: ptr(who + " has " + req.URI)}}}, nil
			}))
		}
		must(t, u.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "note://" + who + "/{id}", Name: "note"},
			func(ctx context.Context, req *server.ReadRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: req.URI, Text: ptr(who + " note " + req.Vars["id"])}}}, nil
			}))
	}
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "a", URL: a.url}, {Name: "b", URL: b.url}}}, nil)
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			c := f.dial(t, era.era, nil)
			ctx := context.Background()
			prompts, err := c.ListPrompts(ctx)
			must(t, err)
			var names []string
			for _, p := range prompts {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"a_greet", "b_greet"}) {
				t.Fatalf("prompts %v", names)
			}
			raw, err := c.Request(ctx, mcp.MethodPromptsGet, "b_greet", map[string]any{"name": "b_greet", "arguments": map[string]string{"name": "Ada"}}, nil)
			must(t, err)
			if !strings.Contains(string(raw), "b greets Ada") {
				t.Fatalf("prompts/get b_greet: %s", raw)
			}
			resources, err := c.ListResources(ctx)
			must(t, err)
			var uris []string
			for _, r := range resources {
				uris = append(uris, r.URI)
			}
			slices.Sort(uris)
			if !slices.Equal(uris, []string{"file:///a", "file:///b", "file:///shared"}) {
				t.Fatalf("resources %v", uris)
			}
			for uri, want := range map[string]string{"file:///b": "b has file:///b", "file:///shared": "a has file:///shared", "note://b/7": "b note 7"} {
				raw, err := c.Request(ctx, mcp.MethodResourcesRead, uri, map[string]any{"uri": uri}, nil)
				must(t, err)
				if !strings.Contains(string(raw), want) {
					t.Fatalf("resources/read %s: %s, want %q", uri, raw, want)
				}
			}
			templates, err := c.ListResourceTemplates(ctx)
			must(t, err)
			if len(templates) != 2 {
				t.Fatalf("templates %+v", templates)
			}
		})
	}
}

// A response the upstream sends after the gateway gave up on its request
// (it ignores the cancellation) is discarded and counted.
func TestLateResponseIsCounted(t *testing.T) {
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "late", Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{stdioUpstreamEnv + "=late"}}},
	}, nil)
	c := f.dial(t, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	reached := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, "stubborn", nil, &client.CallOptions{OnProgress: func(client.Progress) { reached <- struct{}{} }})
		done <- err
	}()
	recv(t, reached, "the upstream's first progress report") // the upstream has the call
	cancel()
	recv(t, done, "the cancelled call's end")
	// The gateway's handler ends once it has queued the upstream's
	// cancellation; echo is written after it, and the upstream answers in
	// order: by the time echo's answer is read, the late one was too.
	if r := f.awaitForward(t, "stubborn"); r.Outcome != gateway.OutcomeCancelled || !r.CancelPropagated {
		t.Fatalf("the stubborn call was recorded %+v", r)
	}
	res, err := c.CallTool(context.Background(), "echo", nil, nil)
	if err != nil || text(res) != "echo" {
		t.Fatalf("echo after the late answer: %+v, %v", res, err)
	}
	if st := f.gw.Upstreams()[0]; st.LateResponses != 1 {
		t.Fatalf("late responses %d, want 1", st.LateResponses)
	}
}
