package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

type ctxTag struct{}

// tracer is an interceptor that records the order it wraps calls in, and
// what it was told of the tool.
type tracer struct {
	name  string
	mu    *sync.Mutex
	order *[]string
}

func (tr tracer) intercept(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
	if t.Meta == nil {
		t.Meta = mcp.Meta{}
	}
	t.Meta["seen-by-"+tr.name] = t.Name
	return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
		tr.mu.Lock()
		*tr.order = append(*tr.order, tr.name)
		tr.mu.Unlock()
		return next(ctx, call)
	}, nil
}

// Interceptors wrap a tool's handler at registration: the server's first,
// outermost, then the tool's own; each is given the declaration and may
// add to it, and what they add is what tools/list shows. The caller's own
// _meta map is left alone.
func TestInterceptorsWrapInOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	outer, inner, own := tracer{"server-1", &mu, &order}, tracer{"server-2", &mu, &order}, tracer{"tool", &mu, &order}
	srv := mcptest.NewServer(t, &server.Options{Interceptors: []server.ToolInterceptor{outer.intercept, inner.intercept}})
	callerMeta := mcp.Meta{"mine": true}
	err := srv.AddTool(server.Tool{Name: "wrapped", Meta: callerMeta}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		order = append(order, "handler")
		mu.Unlock()
		return &mcp.CallToolResult{}, nil
	}, own.intercept)
	if err != nil {
		t.Fatal(err)
	}
	if len(callerMeta) != 1 {
		t.Errorf("the caller's _meta was written to: %v", callerMeta)
	}
	c := mcptest.Stdio(t, srv, nil)
	if f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "wrapped"})); f.Error != nil {
		t.Fatal(f.Raw)
	}
	if want := []string{"server-1", "server-2", "tool", "handler"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	var list struct{ Tools []mcp.Tool }
	json.Unmarshal(c.Call(2, mcp.MethodToolsList, mcptest.ModernParams(nil)).Result, &list)
	if len(list.Tools) != 1 {
		t.Fatalf("tools: %+v", list.Tools)
	}
	for _, k := range []string{"mine", "seen-by-server-1", "seen-by-server-2", "seen-by-tool"} {
		if list.Tools[0].Meta[k] == nil {
			t.Errorf("tools/list _meta lacks %q: %v", k, list.Tools[0].Meta)
		}
	}
}

// An interceptor that refuses a tool keeps it from being registered.
func TestInterceptorRefusesRegistration(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	refuse := func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		return nil, errors.New("no tools named " + t.Name)
	}
	err := srv.AddTool(server.Tool{Name: "nope"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }, refuse)
	if err == nil || !strings.Contains(err.Error(), "no tools named nope") {
		t.Fatalf("AddTool = %v", err)
	}
	if srv.RemoveTool("nope") {
		t.Fatal("the refused tool was registered")
	}
}

// A Check runs before the input schema and before admission: its refusal
// comes back at once even while every slot is taken, ahead of what is
// wrong with the arguments; the context it returns is the handler's; the
// arguments it reads are decoded once with exact numbers, and an argument
// it supplies satisfies a schema that declares it, never one that does
// not.
func TestCheckRunsFirst(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{MaxConcurrentCalls: 1, MaxQueuedCalls: 1})
	gate := mcptest.NewGate(t, srv, "gate")
	var seen json.Number
	check := func(ctx context.Context, call *server.CallRequest) (context.Context, error) {
		args := call.DecodedArguments()
		if args["refuse"] == true {
			return ctx, &mcp.ToolError{Code: "refused_by_check", Message: "no"}
		}
		if n, ok := args["n"].(json.Number); ok {
			seen = n
		}
		call.SupplyArgument("token", "from-check")
		call.SupplyArgument("undeclared", "x")
		return context.WithValue(ctx, ctxTag{}, "from-check"), nil
	}
	err := srv.AddTool(server.Tool{
		Name: "checked",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"refuse":{"type":"boolean"},
			"token":{"type":"string"}},"required":["n","token"],"additionalProperties":false}`),
		Check: check,
	}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		if ctx.Value(ctxTag{}) != "from-check" {
			return nil, errors.New("the handler's context lacks the check's value")
		}
		if req.DecodedArguments() != nil {
			return nil, errors.New("a running call still holds its decoded arguments")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ran")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	gate.WaitEntered(t)
	c.Request(2, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"})) // fills the queue

	// The check refuses ahead of the schema (n is a string) and the full queue.
	f := c.Call(3, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "checked", "arguments": map[string]any{"refuse": true, "n": "x"}}))
	if got := mcptest.Failure(t, f.Result); got.Code != "refused_by_check" {
		t.Fatalf("refused call: %s", f.Raw)
	}
	gate.Release()
	c.Await(1)
	c.Await(2)

	f = c.Call(4, mcp.MethodToolsCall, json.RawMessage(`{"name":"checked","arguments":{"n":12345678901234567890},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`))
	if !strings.Contains(f.Raw, `"ran"`) {
		t.Fatalf("checked call: %s", f.Raw)
	}
	if seen != "12345678901234567890" {
		t.Errorf("the check read n as %q, want the exact text", seen)
	}
}

// A Check narrows one call's retry class: its timeout is then not
// retryable, while the tool's other calls keep the class it declared.
func TestCheckNarrowsRetry(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{
		Name:   "versioned",
		Policy: server.Policy{Retry: mcp.RetryConditional, MaxTimeout: 20 * time.Millisecond},
		Check: func(ctx context.Context, call *server.CallRequest) (context.Context, error) {
			if _, ok := call.DecodedArguments()["version"]; !ok {
				call.NarrowRetry(mcp.RetryUnsafe)
			}
			call.NarrowRetry(mcp.RetrySafe) // wider: ignored
			return ctx, nil
		},
	}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	for i, tc := range []struct {
		args map[string]any
		want bool
	}{{map[string]any{"version": 3}, true}, {nil, false}} {
		f := c.Call(int64(i+1), mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "versioned", "arguments": tc.args}))
		if got := mcptest.Failure(t, f.Result); got.Code != mcp.FailureTimeout || got.Retryable != tc.want {
			t.Errorf("%v: %+v, want a timeout retryable %v", tc.args, got, tc.want)
		}
	}
}

// An interceptor may answer with a result of its own kind (a created
// task, later): it reaches the wire as it is.
func TestInterceptorAnswersWithItsOwnResult(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	type ownResult struct {
		mcp.ResultBase
		Ticket string `json:"ticket"`
	}
	answer := func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			return &ownResult{Ticket: "t-1"}, nil
		}, nil
	}
	err := srv.AddTool(server.Tool{Name: "ticketed"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("not reached")
	}, answer)
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "ticketed"}))
	if !strings.Contains(string(f.Result), `"ticket":"t-1"`) || strings.Contains(string(f.Result), "not reached") {
		t.Fatalf("result: %s", f.Raw)
	}
}

type labelKey struct{}

// A detached call — a task's worker running a handler after its request
// ended — carries what the handler reads, and everything that would talk
// to a client is a no-op or a clear error, never a crash.
func TestDetachedCall(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	call := srv.Detached(server.CallRequest{Name: "job", Arguments: json.RawMessage(`{"n":1}`),
		Request: server.Request{Tenant: "acme", Era: mcp.Modern}})
	if call.Server() != srv || call.Tenant != "acme" || call.Name != "job" || call.KnownMeta == nil {
		t.Fatalf("detached call = %+v", call)
	}
	if call.HasProgressToken() {
		t.Error("a detached call has a progress token")
	}
	if err := call.ReportProgress(1, 2, "half"); err != nil {
		t.Errorf("ReportProgress = %v", err)
	}
	if err := call.Log(mcp.LevelInfo, "job", "hello"); err != nil {
		t.Errorf("Log = %v", err)
	}
	call.Annotate("k", "v") // dropped: there is no record
	if _, err := call.Elicit(context.Background(), mcp.ElicitParams{Message: "name?"}); !errors.Is(err, server.ErrDetached) {
		t.Errorf("Elicit = %v, want ErrDetached", err)
	}
	if call.Attached(labelKey{}) != nil {
		t.Error("a fresh call has an attachment")
	}
	call.Attach(labelKey{}, "first")
	call.Attach(labelKey{}, "second")
	if got := call.Attached(labelKey{}); got != "second" {
		t.Errorf("Attached = %v, want the later value", got)
	}
	type other struct{}
	if call.Attached(other{}) != nil {
		t.Error("one policy's key found another's value")
	}
}

// What a policy attaches to a call in its Check reaches the handler: the
// Check and the handler see the same call.
func TestAttachFromCheckReachesTheHandler(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	tag := func(tt *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		tt.Check = func(ctx context.Context, call *server.CallRequest) (context.Context, error) {
			call.Attach(labelKey{}, "checked")
			return ctx, nil
		}
		return next, nil
	}
	err := srv.AddTool(server.Tool{Name: "t"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		label, _ := req.Attached(labelKey{}).(string)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(label)}}, nil
	}, tag)
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	if f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "t"})); !strings.Contains(string(f.Result), `"checked"`) {
		t.Fatalf("the handler saw %s", f.Raw)
	}
}

// mark is a policy's mark, of a type only its package could make.
type mark struct{ by string }

// A policy sees the marks of the policies inside it, and only theirs:
// not a mark the tool's author put on the declaration before AddTool, not
// one a policy made in another registration of the same declaration. A
// later mark of the same type replaces the earlier one.
func TestToolMarksAreTheWrappingPolicies(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	marking := func(by string) server.ToolInterceptor {
		return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
			t.Mark(mark{by})
			return next, nil
		}
	}
	var seen []string
	reading := func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		m, ok := server.Marked[mark](t)
		if _, other := server.Marked[string](t); other {
			return nil, errors.New("a mark of another type was found")
		}
		seen = append(seen, fmt.Sprintf("%s %v", m.by, ok))
		return next, nil
	}
	h := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	decl := server.Tool{Name: "marked"}
	decl.Mark(mark{"the author"})
	for _, chain := range [][]server.ToolInterceptor{
		{reading},
		{reading, marking("inner")},
		{reading, marking("outer"), marking("inner")},
		{marking("outer"), reading, marking("inner")},
		{reading},
	} {
		if err := srv.AddTool(decl, h, chain...); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{" false", "inner true", "outer true", "inner true", " false"}; !slices.Equal(seen, want) {
		t.Errorf("marks seen %q, want %q", seen, want)
	}
}
