package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

func textContents(uri, text string) *mcp.ReadResourceResult {
	return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: uri, MimeType: "text/plain", Text: &text}}}
}

func resourceServer(t *testing.T) *server.Server {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.AddResource(mcp.Resource{URI: "test://static", Name: "static"}, func(ctx context.Context, req *server.ReadRequest) (*mcp.ReadResourceResult, error) {
		return textContents(req.URI, "static text"), nil
	}))
	must(srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "test://items/{id}/data", Name: "item"}, func(ctx context.Context, req *server.ReadRequest) (*mcp.ReadResourceResult, error) {
		return textContents(req.URI, "item "+req.Vars["id"]), nil
	}))
	must(srv.AddPrompt(mcp.Prompt{Name: "greet", Arguments: []mcp.PromptArgument{{Name: "who", Required: true}}}, func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.Text("hello " + req.Arguments["who"])}}}, nil
	}))
	srv.SetCompletionHandler(func(ctx context.Context, req *server.CompleteRequest) (*mcp.CompleteResult, error) {
		return &mcp.CompleteResult{Completion: mcp.Completion{Values: []string{req.Params.Argument.Value + "-1", req.Params.Argument.Value + "-2"}}}, nil
	})
	return srv
}

func TestResourcesPromptsAndCompletion(t *testing.T) {
	for _, era := range eras {
		t.Run(era.String(), func(t *testing.T) {
			c := mcptest.Stdio(t, resourceServer(t), nil)
			if era == mcp.Legacy {
				init := c.Initialize(mcp.Version20251125)
				if !strings.Contains(string(init.Result), `"resources":{"subscribe":true,"listChanged":true}`) || !strings.Contains(string(init.Result), `"completions":{}`) {
					t.Fatalf("capabilities in %s", init.Raw)
				}
			}
			p := func(extra map[string]any) map[string]any { return mcptest.Params(era, extra) }

			list := c.Call(1, mcp.MethodResourcesList, p(nil))
			if !strings.Contains(string(list.Result), `"uri":"test://static"`) || (era == mcp.Modern) != strings.Contains(string(list.Result), `"ttlMs"`) {
				t.Fatalf("resources/list = %s", list.Raw)
			}
			if f := c.Call(2, mcp.MethodResourceTempls, p(nil)); !strings.Contains(string(f.Result), `"uriTemplate":"test://items/{id}/data"`) {
				t.Fatalf("templates = %s", f.Raw)
			}
			if f := c.Call(3, mcp.MethodResourcesRead, p(map[string]any{"uri": "test://items/42/data"})); !strings.Contains(string(f.Result), `"text":"item 42"`) {
				t.Fatalf("read through template = %s", f.Raw)
			}
			wantNotFound := mcp.CodeResourceNotFoundLegacy
			if era == mcp.Modern {
				wantNotFound = jsonrpc.CodeInvalidParams
			}
			if f := c.Call(4, mcp.MethodResourcesRead, p(map[string]any{"uri": "test://nope"})); f.Error == nil || f.Error.Code != wantNotFound {
				t.Fatalf("missing resource = %s, want code %d", f.Raw, wantNotFound)
			}
			if f := c.Call(5, mcp.MethodPromptsGet, p(map[string]any{"name": "greet", "arguments": map[string]string{"who": "ada"}})); !strings.Contains(string(f.Result), `"text":"hello ada"`) {
				t.Fatalf("prompts/get = %s", f.Raw)
			}
			if f := c.Call(6, mcp.MethodPromptsGet, p(map[string]any{"name": "greet"})); f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("prompt without its required argument = %s", f.Raw)
			}
			f := c.Call(7, mcp.MethodComplete, p(map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "greet"}, "argument": map[string]any{"name": "who", "value": "a"}}))
			var res mcp.CompleteResult
			if json.Unmarshal(f.Result, &res) != nil || strings.Join(res.Completion.Values, ",") != "a-1,a-2" {
				t.Fatalf("completion = %s", f.Raw)
			}
		})
	}
}

func TestResourceUpdatedNotifications(t *testing.T) {
	srv := resourceServer(t)
	legacy := mcptest.Stdio(t, srv, nil)
	legacy.Initialize(mcp.Version20251125)
	legacy.Call(1, mcp.MethodSubscribe, map[string]any{"uri": "test://static"})
	modern := mcptest.Stdio(t, srv, nil)
	modern.Request(1, mcp.MethodListen, mcptest.ModernParams(map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{"test://static"}}}))
	modern.Next() // acknowledgement

	srv.NotifyResourceUpdated("test://static")
	if f := legacy.Next(); f.Method != mcp.NotificationResourceUpdated || !strings.Contains(string(f.Params), `"uri":"test://static"`) {
		t.Fatalf("legacy got %s", f.Raw)
	}
	if f := modern.Next(); f.Method != mcp.NotificationResourceUpdated || subscriptionID(t, f) != jsonrpc.IntID(1) {
		t.Fatalf("modern got %s", f.Raw)
	}
	srv.NotifyResourceUpdated("test://other")
	legacy.Call(2, mcp.MethodUnsubscribe, map[string]any{"uri": "test://static"})
	srv.NotifyResourceUpdated("test://static")
	if before := legacy.Sync(3, mcp.Legacy); len(before) > 0 {
		t.Fatalf("legacy got notifications after unsubscribing or for other URIs:%s", mcptest.Raws(before))
	}
}

// A handler may return one shared result value to every call: the server
// never writes into it (under -race, concurrent modern reads would show
// it), and a nil result is a clear error, not a crash.
func TestSharedAndNilResults(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	shared := &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: "test://shared"}}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.AddResource(mcp.Resource{URI: "test://shared", Name: "shared"}, func(context.Context, *server.ReadRequest) (*mcp.ReadResourceResult, error) {
		return shared, nil
	}))
	must(srv.AddPrompt(mcp.Prompt{Name: "nothing"}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
		return nil, nil
	}))
	c := mcptest.Stdio(t, srv, nil)
	for id := int64(1); id <= 20; id++ {
		c.Request(id, mcp.MethodResourcesRead, mcptest.ModernParams(map[string]any{"uri": "test://shared"}))
	}
	for range 20 { // answered in any order
		if f := c.Next(); f.Error != nil || !strings.Contains(string(f.Result), `"resultType":"complete"`) {
			t.Fatalf("read: %s", f.Raw)
		}
	}
	if shared.ResultType != "" || shared.Meta != nil || shared.TTLMs != nil {
		t.Fatalf("the handler's shared result was written to: %+v", shared)
	}
	f := c.Call(21, mcp.MethodPromptsGet, mcptest.ModernParams(map[string]any{"name": "nothing"}))
	if f.Error == nil || f.Error.Code != jsonrpc.CodeInternalError {
		t.Fatalf("nil prompt result: %s, want an internal error", f.Raw)
	}
	if f := c.Call(22, mcp.MethodResourcesRead, mcptest.ModernParams(map[string]any{"uri": "test://shared"})); f.Error != nil {
		t.Fatalf("the server stopped serving: %s", f.Raw)
	}
}
