package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// An upstream's elicitation during a call reaches the downstream client
// that made it and the answer goes back, for every pair of eras: as a
// request on a 2025 session, as the gateway's own input_required round
// for a 2026-07-28 client — relaying a 2026-07-28 upstream's round, or,
// for a 2025-era upstream that asks mid-call, holding its call open until
// the client's retry brings the answer.
func TestInputIsRelayedAcrossEras(t *testing.T) {
	eraPairs(t, func(t *testing.T, up, down eraCase) {
		u := newUpstream(t)
		f := newFront(t, u.options(up.era), nil)
		var asked atomic.Int32
		c := f.dial(t, down.era, &client.Options{
			Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`), Roots: json.RawMessage(`{}`)},
			OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				asked.Add(1)
				switch {
				case method == mcp.MethodListRoots:
					return map[string]any{"roots": []any{map[string]any{"uri": "file:///work", "name": "work"}}}, nil
				case method != mcp.MethodElicit || !strings.Contains(string(params), "your name?"):
					return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unexpected %s %s", method, params)
				}
				return map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}, nil
			},
		})
		res, err := c.CallTool(context.Background(), "ask", nil, nil)
		must(t, err)
		if asked.Load() != 1 || !strings.Contains(text(res), "Ada") {
			t.Fatalf("asked %d times; result %q", asked.Load(), text(res))
		}
		res, err = c.CallTool(context.Background(), "roots", nil, nil)
		must(t, err)
		if asked.Load() != 2 || !strings.Contains(text(res), "file:///work") {
			t.Fatalf("roots: asked %d times in all; result %q", asked.Load(), text(res))
		}
		// A client that did not declare elicitation is not asked: the
		// upstream's request is refused, and its tool passes the refusal
		// on as its own error.
		plain := f.dial(t, down.era, nil)
		_, err = plain.CallTool(context.Background(), "ask", nil, nil)
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeMethodNotFound || !strings.Contains(rpc.Message, "did not declare the capability elicitation/create needs") {
			t.Fatalf("a client without elicitation: %v, want the gateway's refusal passed on", err)
		}
	})
}

// A held call whose 2026-07-28 client never comes back with the answer is
// cancelled upstream once the gateway's wait for it is over; the client's
// late retry learns the call is gone and that its outcome is unknown.
func TestHeldCallExpires(t *testing.T) {
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:    client.Options{Era: mcp.Legacy},
		InputWait: 50 * time.Millisecond,
	}, nil)
	c := f.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
	// No handler: the client returns the round to its caller, who never
	// answers it.
	_, err := c.CallTool(context.Background(), "ask", nil, nil)
	var ie *client.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("the call ended with %v, want the gateway's input round", err)
	}
	cause := u.askCancelled(t)
	if !errors.Is(cause, server.ErrPeerCancelled) {
		t.Fatalf("the upstream's waiting handler ended with %v, want its client's cancellation", cause)
	}
	var round struct {
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  json.RawMessage            `json:"requestState"`
	}
	must(t, json.Unmarshal(ie.Result, &round))
	answers := map[string]json.RawMessage{}
	for k := range round.InputRequests {
		answers[k] = json.RawMessage(`{"action":"accept","content":{"name":"late"}}`)
	}
	res, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Input: &client.InputAnswers{Responses: answers, RequestState: round.RequestState}})
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureOutcomeUnknown || fail.Retryable {
		t.Fatalf("a retry after the wait expired got %+v, want outcome_unknown", fail)
	}
}

// A held call whose upstream stops asking and answers while the call
// waits for its client is recorded as lost when the wait expires — its
// answer reached nobody — not as cancelled.
func TestHeldCallThatEndedWhileWaitingIsLost(t *testing.T) {
	u := newUpstream(t)
	release, returned := make(chan struct{}), make(chan struct{})
	must(t, u.srv.AddTool(server.Tool{Name: "impatient"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		actx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case <-release:
				stop()
			case <-actx.Done():
			}
		}()
		_, err := call.Elicit(actx, mcp.ElicitParams{Message: "still there?", RequestedSchema: json.RawMessage(`{"type":"object"}`)})
		defer close(returned)
		if ctx.Err() != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("went ahead without an answer")}}, nil
	}))
	opts := u.options(mcp.Legacy)
	// Long against what it waits for: a local HTTP response.
	opts.InputWait = time.Second
	f := newFront(t, opts, nil)
	c := f.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
	_, err := c.CallTool(context.Background(), "impatient", nil, nil)
	var ie *client.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("the call ended with %v, want the gateway's input round", err)
	}
	if rec := f.awaitForward(t, "impatient"); rec.Outcome != gateway.OutcomeInput {
		t.Fatalf("the parked request was recorded %+v", rec)
	}
	close(release)
	recv(t, returned, "the upstream's elicitation returning")
	rec := f.awaitForward(t, "impatient")
	if rec.Outcome != gateway.OutcomeLost || rec.CancelPropagated {
		t.Fatalf("a held call that answered while it waited was recorded %+v, want lost and not cancelled", rec)
	}
}

// A held call's round belongs to the tenant and the call it was issued
// for: another tenant's retry with the same state is refused before the
// gateway sees it, and the owner's retry still completes the call.
func TestHeldCallIsTheTenants(t *testing.T) {
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:    client.Options{Era: mcp.Legacy},
	}, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	opts := func(tok string) *client.Options {
		return &client.Options{Header: http.Header{"Authorization": {"Bearer " + tok}},
			Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}}
	}
	alice, bob := f.dial(t, mcp.Modern, opts("tok-a")), f.dial(t, mcp.Modern, opts("tok-b"))
	_, err := alice.CallTool(context.Background(), "ask", nil, nil)
	var ie *client.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("alice's call: %v", err)
	}
	var round struct {
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  json.RawMessage            `json:"requestState"`
	}
	must(t, json.Unmarshal(ie.Result, &round))
	answers := map[string]json.RawMessage{}
	for k := range round.InputRequests {
		answers[k] = json.RawMessage(`{"action":"accept","content":{"name":"Ada"}}`)
	}
	in := &client.CallOptions{Input: &client.InputAnswers{Responses: answers, RequestState: round.RequestState}}
	_, err = bob.CallTool(context.Background(), "ask", nil, in)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("bob's retry with alice's state: %v, want -32602", err)
	}
	res, err := alice.CallTool(context.Background(), "ask", nil, in)
	must(t, err)
	if !strings.Contains(text(res), "Ada") {
		t.Fatalf("alice's retry answered %q", text(res))
	}
	// The held call's round is answered once: the same retry again finds
	// the call gone.
	res, err = alice.CallTool(context.Background(), "ask", nil, in)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureOutcomeUnknown {
		t.Fatalf("a second retry of one round got %+v", fail)
	}
}

// The gateway holds at most MaxHeldPerTenant calls of one tenant waiting
// for answers: past it the upstream's question is refused (overloaded),
// the call goes on without waiting, and other calls are served.
func TestHeldCallsAreBounded(t *testing.T) {
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams:        []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:           client.Options{Era: mcp.Legacy},
		MaxHeldPerTenant: 2,
		InputWait:        time.Hour,
	}, nil)
	c := f.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
	for i := range 2 {
		_, err := c.CallTool(context.Background(), "ask", nil, nil)
		if !errors.As(err, new(*client.InputError)) {
			t.Fatalf("held call %d: %v", i+1, err)
		}
	}
	// This upstream passes the refusal of its question on as its own
	// protocol error, which the gateway forwards as it came.
	res, err := c.CallTool(context.Background(), "ask", nil, nil)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != mcp.CodeOverloaded || !strings.Contains(rpc.Message, "as many calls waiting") {
		t.Fatalf("a third question past the bound: %+v, %v; want the upstream's error after the gateway refused its question", res, err)
	}
	if cause := u.askCancelled(t); !strings.Contains(cause.Error(), "as many calls waiting") {
		t.Fatalf("the upstream saw %v, want the gateway's refusal", cause)
	}
	res, err = c.CallTool(context.Background(), "echo", map[string]any{"text": "still served"}, nil)
	must(t, err)
	if !strings.Contains(structured(res), "still served") {
		t.Fatalf("echo after the bound: %+v", res)
	}
}

// Held calls hold up to the gateway's documented bounds, not the client's
// smaller one for a server's requests answered at once on a connection:
// twenty calls of one tenant held at once on one upstream session each
// get their input round and, once answered, their result. Past the
// gateway's bounds the upstream's question is refused at once, and its
// call goes on.
func TestHeldCallsHoldToTheGatewaysBounds(t *testing.T) {
	const calls = 20 // more than the client's 16 server requests at once
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:    client.Options{Era: mcp.Legacy},
	}, nil)
	c := f.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
	rounds := make(chan *client.InputError, calls)
	for range calls {
		go func() {
			_, err := c.CallTool(context.Background(), "ask", nil, nil)
			var ie *client.InputError
			if !errors.As(err, &ie) {
				t.Errorf("a held call ended with %v, want its input round", err)
			}
			rounds <- ie
		}()
	}
	// Every call is held before any is answered.
	held := make([]*client.InputError, 0, calls)
	for range calls {
		ie := recv(t, rounds, "a held call's input round")
		if ie == nil {
			t.FailNow()
		}
		held = append(held, ie)
	}
	done := make(chan string, calls)
	for _, ie := range held {
		var round struct {
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  json.RawMessage            `json:"requestState"`
		}
		must(t, json.Unmarshal(ie.Result, &round))
		answers := map[string]json.RawMessage{}
		for k := range round.InputRequests {
			answers[k] = json.RawMessage(`{"action":"accept","content":{"name":"Ada"}}`)
		}
		go func() {
			res, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Input: &client.InputAnswers{Responses: answers, RequestState: round.RequestState}})
			if err != nil {
				t.Error(err)
				done <- ""
				return
			}
			done <- text(res)
		}()
	}
	for range calls {
		if got := recv(t, done, "a held call's result"); !strings.Contains(got, "Ada") {
			t.Fatalf("a held call answered %q", got)
		}
	}

	// One tenant may hold one call: a second's question is refused to the
	// upstream at once, and the upstream's tool passes the refusal on.
	small := newFront(t, gateway.Options{
		Upstreams:        []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:           client.Options{Era: mcp.Legacy},
		MaxHeldPerTenant: 1,
	}, nil)
	sc := small.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
	_, err := sc.CallTool(context.Background(), "ask", nil, nil)
	var ie *client.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("the first held call ended with %v, want its input round", err)
	}
	_, err = sc.CallTool(context.Background(), "ask", nil, nil)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, "already holds as many calls") {
		t.Fatalf("a call past the bound ended with %v, want the upstream's refusal passed on", err)
	}
	// So is a question past the bound in bytes.
	tiny := newFront(t, gateway.Options{
		Upstreams:             []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:                client.Options{Era: mcp.Legacy},
		MaxHeldBytesPerTenant: 16,
	}, nil)
	tc := tiny.dial(t, mcp.Modern, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}})
	_, err = tc.CallTool(context.Background(), "ask", nil, nil)
	if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, "as many bytes of questions") {
		t.Fatalf("a question past the bound in bytes ended with %v, want the upstream's refusal passed on", err)
	}
}
