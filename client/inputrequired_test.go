package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// dialModern connects a 2026-07-28 client with opts to srv over stdio or
// HTTP (in-process).
func dialModern(t *testing.T, srv *server.Server, over string, opts client.Options) *client.Client {
	t.Helper()
	opts.Era = mcp.Modern
	opts.Capabilities.Elicitation = json.RawMessage(`{}`)
	opts.Capabilities.Roots = json.RawMessage(`{}`)
	var c *client.Client
	var err error
	switch over {
	case "stdio":
		toServer, fromClient := ioPipe()
		toClient, fromServer := ioPipe()
		conn := stdio.NewConn(srv, toServer, fromServer, nil)
		done := make(chan struct{})
		go func() { conn.Serve(context.Background()); fromServer.Close(); close(done) }()
		c, err = client.Connect(context.Background(), toClient, fromClient, &opts)
		if err == nil {
			t.Cleanup(func() { c.Close(); <-done })
		}
	case "http":
		h, herr := streamhttp.NewHandler(srv, nil)
		if herr != nil {
			t.Fatal(herr)
		}
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		c, err = client.DialHTTP(context.Background(), hs.URL, &opts)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ids records the JSON-RPC id of every run of a tool.
type ids struct {
	mu  sync.Mutex
	ids []jsonrpc.ID
}

func (r *ids) add(id jsonrpc.ID) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
}

func (r *ids) distinct(t *testing.T, want int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[jsonrpc.ID]bool{}
	for _, id := range r.ids {
		seen[id] = true
	}
	if len(r.ids) != want || len(seen) != want {
		t.Fatalf("the tool ran under ids %v; want %d runs, each under an id of its own", r.ids, want)
	}
}

// elicitName is an elicitation of one field.
func elicitName(msg string) mcp.InputRequest {
	return server.ElicitRequest(mcp.ElicitParams{Message: msg, RequestedSchema: json.RawMessage(`{"type":"object","properties":{"v":{"type":"string"}}}`)})
}

// answerWith is an OnRequest that accepts each elicitation with the value
// the message asks for ("name?" → "Ada") and lists one root; it records
// what it was asked.
func answerWith(values map[string]string, asked *[]string) client.RequestHandler {
	var mu sync.Mutex
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		mu.Lock()
		*asked = append(*asked, method)
		mu.Unlock()
		switch method {
		case mcp.MethodElicit:
			var p mcp.ElicitParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			return mcp.ElicitResult{Action: "accept", Content: map[string]any{"v": values[p.Message]}}, nil
		case mcp.MethodListRoots:
			return map[string]any{"roots": []map[string]any{{"uri": "file:///work", "name": "work"}}}, nil
		}
		return nil, fmt.Errorf("not served: %s", method)
	}
}

// firstText is a result's first content block's text ("" when it has
// none, or no result).
func firstText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// accepted is the value an elicitation answer carries.
func accepted(t *testing.T, raw json.RawMessage) string {
	var r mcp.ElicitResult
	if err := json.Unmarshal(raw, &r); err != nil || r.Action != "accept" {
		t.Errorf("answer %s, want an accepted elicitation", raw)
	}
	v, _ := r.Content["v"].(string)
	return v
}

// A tool that asks once: the client answers through OnRequest and calls
// again under a new id, with the answer and the state echoed; the caller
// sees only the final result.
func TestInputRequiredOneRound(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			var runs ids
			srv.AddTool(server.Tool{Name: "greet"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				runs.add(req.ID)
				if string(req.RequestState) == "asked-name" {
					return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("hello " + accepted(t, req.InputResponses["name"]))}}, nil
				}
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName("name?")}, State: []byte("asked-name")}
			})
			var asked []string
			c := dialModern(t, srv, over, client.Options{OnRequest: answerWith(map[string]string{"name?": "Ada"}, &asked)})
			res, err := c.CallTool(context.Background(), "greet", map[string]any{}, nil)
			if err != nil || len(res.Content) != 1 || firstText(res) != "hello Ada" {
				t.Fatalf("greet = %+v, %v; want hello Ada", res, err)
			}
			if len(asked) != 1 || asked[0] != mcp.MethodElicit {
				t.Fatalf("OnRequest was asked %v", asked)
			}
			runs.distinct(t, 2)
			// Request (a method with no helper) follows the rounds too, and
			// never changes the caller's params.
			params := map[string]any{"name": "greet"}
			raw, err := c.Request(context.Background(), mcp.MethodToolsCall, "greet", params, nil)
			if err != nil || !strings.Contains(string(raw), "hello Ada") {
				t.Fatalf("Request = %s, %v", raw, err)
			}
			if len(params) != 1 {
				t.Fatalf("the caller's params became %v", params)
			}
		})
	}
}

// A tool that asks twice, the second time for two things at once (an
// elicitation and the roots): the state evolves between rounds and each
// round carries only its own answers.
func TestInputRequiredTwoRounds(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			var runs ids
			srv.AddTool(server.Tool{Name: "profile"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				runs.add(req.ID)
				state := string(req.RequestState)
				switch {
				case state == "":
					return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName("name?")}, State: []byte("1")}
				case strings.HasPrefix(state, "1") && len(req.InputResponses) == 1:
					name := accepted(t, req.InputResponses["name"])
					return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
						"color": elicitName("color?"), "roots": server.RootsRequest(),
					}, State: []byte("2:" + name)}
				case strings.HasPrefix(state, "2:") && len(req.InputResponses) == 2:
					var roots struct{ Roots []struct{ URI string } }
					json.Unmarshal(req.InputResponses["roots"], &roots)
					if len(roots.Roots) != 1 {
						return nil, fmt.Errorf("roots answer %s", req.InputResponses["roots"])
					}
					text := fmt.Sprintf("%s likes %s in %s", state[2:], accepted(t, req.InputResponses["color"]), roots.Roots[0].URI)
					return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(text)}}, nil
				}
				return nil, fmt.Errorf("unexpected round: state %q, %d responses", state, len(req.InputResponses))
			})
			var asked []string
			c := dialModern(t, srv, over, client.Options{OnRequest: answerWith(map[string]string{"name?": "Ada", "color?": "blue"}, &asked)})
			res, err := c.CallTool(context.Background(), "profile", nil, nil)
			if err != nil || len(res.Content) != 1 || firstText(res) != "Ada likes blue in file:///work" {
				t.Fatalf("profile = %+v, %v", res, err)
			}
			// Answered in key order: color, then roots.
			if strings.Join(asked, ",") != "elicitation/create,elicitation/create,roots/list" {
				t.Fatalf("OnRequest was asked %v", asked)
			}
			runs.distinct(t, 3)
		})
	}
}

// Two calls in flight at once, both between their rounds: each retry
// carries its own state and answers. mcprel's server binds a state to the
// call's arguments and refuses it for others, so a crossed state would
// fail the call, not pass unnoticed.
func TestInputRequiredParallelCallsKeepTheirState(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			srv.AddTool(server.Tool{Name: "transfer"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				var args struct{ To string }
				json.Unmarshal(req.Arguments, &args)
				if req.RequestState == nil {
					return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"ok": elicitName("confirm " + args.To)}, State: []byte("for " + args.To)}
				}
				text := fmt.Sprintf("%s: %s, confirmed %s", args.To, req.RequestState, accepted(t, req.InputResponses["ok"]))
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(text)}}, nil
			})
			// Neither answer is given before both calls are waiting for one.
			var entered sync.WaitGroup
			entered.Add(2)
			both := make(chan struct{})
			go func() { entered.Wait(); close(both) }()
			onRequest := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				var p mcp.ElicitParams
				json.Unmarshal(params, &p)
				entered.Done()
				<-both
				return mcp.ElicitResult{Action: "accept", Content: map[string]any{"v": strings.TrimPrefix(p.Message, "confirm ")}}, nil
			}
			c := dialModern(t, srv, over, client.Options{OnRequest: onRequest})
			out := make(chan string, 2)
			for _, to := range []string{"carol", "dave"} {
				go func() {
					res, err := c.CallTool(context.Background(), "transfer", map[string]any{"to": to}, nil)
					if err != nil {
						out <- err.Error()
						return
					}
					out <- firstText(res)
				}()
			}
			got := map[string]bool{<-out: true, <-out: true}
			if !got["carol: for carol, confirmed carol"] || !got["dave: for dave, confirmed dave"] {
				t.Fatalf("got %v", got)
			}
		})
	}
}

// A server that asks for ever is stopped after MaxInputRounds answers
// (DefaultMaxInputRounds when zero), with an error that says so.
func TestInputRequiredRoundsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		limit, want int
	}{{3, 3}, {0, client.DefaultMaxInputRounds}} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			var runs atomic.Int64
			srv.AddTool(server.Tool{Name: "again"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				runs.Add(1)
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"x": elicitName("x?")}, State: []byte("more")}
			})
			var asked []string
			c := dialModern(t, srv, "stdio", client.Options{MaxInputRounds: tc.limit, OnRequest: answerWith(nil, &asked)})
			_, err := c.CallTool(context.Background(), "again", nil, nil)
			var re *client.InputRoundsError
			if !errors.As(err, &re) || re.Limit != tc.want || !strings.Contains(err.Error(), "MaxInputRounds") {
				t.Fatalf("err = %v; want an *InputRoundsError at %d", err, tc.want)
			}
			if runs.Load() != int64(tc.want+1) || len(asked) != tc.want {
				t.Fatalf("the tool ran %d times and OnRequest answered %d; want %d and %d", runs.Load(), len(asked), tc.want+1, tc.want)
			}
		})
	}
}

// Input the client cannot give fails the call at once, saying why: no
// handler, a handler's error, an answer that is not an object. The
// request is not sent again.
func TestInputRequiredUnanswered(t *testing.T) {
	refused := errors.New("the user closed the form")
	for _, tc := range []struct {
		name      string
		onRequest client.RequestHandler
		is        error
		says      string
	}{
		{"no handler", nil, client.ErrNoRequestHandler, "Options.OnRequest is not set"},
		{"handler error", func(context.Context, string, json.RawMessage) (any, error) { return nil, refused }, refused, "the user closed the form"},
		{"not an object", func(context.Context, string, json.RawMessage) (any, error) { return []int{1}, nil }, nil, "is not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			var runs atomic.Int64
			srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				runs.Add(1)
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName("name?")}, State: []byte("s")}
			})
			c := dialModern(t, srv, "stdio", client.Options{OnRequest: tc.onRequest})
			_, err := c.CallTool(context.Background(), "ask", nil, nil)
			var ie *client.InputError
			if !errors.As(err, &ie) || ie.Key != "name" || ie.Request != mcp.MethodElicit || ie.Round != 1 || ie.Method != mcp.MethodToolsCall {
				t.Fatalf("err = %#v; want an *InputError for the name elicitation", err)
			}
			if (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v; want it to be %v and say %q", err, tc.is, tc.says)
			}
			// The question as the server asked it, for a caller that
			// answers (or relays) it on its own.
			var ir mcp.InputRequiredResult
			if json.Unmarshal(ie.Result, &ir) != nil || ir.RequestState == "" || ir.InputRequests["name"].Method != mcp.MethodElicit {
				t.Fatalf("InputError.Result = %s; want the input_required result", ie.Result)
			}
			if runs.Load() != 1 {
				t.Fatalf("the tool ran %d times; want once", runs.Load())
			}
		})
	}
}

// A result without resultType is complete, even one whose text says
// input_required: nothing is asked, nothing sent again.
func TestResultWithoutResultTypeIsComplete(t *testing.T) {
	c, f := dial(t, false, func(f *fakeServer, m jsonrpc.Message) {
		f.send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"input_required"}],"inputRequests":{"x":{"method":"elicitation/create","params":{}}}}}`, m.ID)
	})
	res, err := c.CallTool(context.Background(), "plain", nil, nil)
	if err != nil || len(res.Content) != 1 || firstText(res) != "input_required" {
		t.Fatalf("plain = %+v, %v", res, err)
	}
	if n := len(f.sent(mcp.MethodToolsCall)); n != 1 {
		t.Fatalf("tools/call sent %d times; want once", n)
	}
}

// The call's two clocks still hold across rounds: the max clock covers
// the answers (a handler that never answers ends at Max, its context
// done), the idle clock each wait for the server but not the time the
// handler takes.
func TestInputRequiredClocks(t *testing.T) {
	tool := func(srv *server.Server, second func(ctx context.Context) (*mcp.CallToolResult, error)) {
		srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			if req.RequestState == nil {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName("name?")}, State: []byte("s")}
			}
			return second(ctx)
		})
	}
	done := func(ctx context.Context) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
	}
	t.Run("max covers the answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			tool(srv, done)
			handlerErr := make(chan error, 1)
			c := dialModern(t, srv, "stdio", client.Options{OnRequest: func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
				<-ctx.Done()
				handlerErr <- context.Cause(ctx)
				return nil, ctx.Err()
			}})
			start := time.Now()
			_, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Idle: time.Second, Max: 10 * time.Second})
			var de *client.DeadlineError
			if !errors.As(err, &de) || de.Clock != client.MaxClock || time.Since(start) != 10*time.Second {
				t.Fatalf("after %v: %v; want the max deadline at 10s", time.Since(start), err)
			}
			if cause := <-handlerErr; !errors.As(cause, &de) {
				t.Fatalf("the handler's context ended with %v; want the max deadline", cause)
			}
		})
	})
	t.Run("idle does not run while answering", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			tool(srv, done)
			c := dialModern(t, srv, "stdio", client.Options{OnRequest: func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
				time.Sleep(5 * time.Second) // a person, thinking
				return mcp.ElicitResult{Action: "accept"}, nil
			}})
			res, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Idle: time.Second, Max: time.Minute})
			if err != nil || firstText(res) != "done" {
				t.Fatalf("%+v, %v; want done", res, err)
			}
		})
	})
	t.Run("idle runs in the next round", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			cause := make(chan error, 1)
			tool(srv, func(ctx context.Context) (*mcp.CallToolResult, error) {
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil, ctx.Err()
			})
			var asked []string
			c := dialModern(t, srv, "stdio", client.Options{OnRequest: answerWith(nil, &asked)})
			start := time.Now()
			_, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Idle: 2 * time.Second, Max: time.Minute})
			var de *client.DeadlineError
			if !errors.As(err, &de) || de.Clock != client.IdleClock || time.Since(start) != 2*time.Second {
				t.Fatalf("after %v: %v; want the idle deadline at 2s", time.Since(start), err)
			}
			if c := <-cause; !errors.Is(c, server.ErrPeerCancelled) {
				t.Fatalf("the second round ended with %v; want the client's cancellation", c)
			}
		})
	})
	t.Run("caller cancels while answering", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			tool(srv, done)
			ctx, cancel := context.WithCancel(context.Background())
			c := dialModern(t, srv, "stdio", client.Options{OnRequest: func(hctx context.Context, _ string, _ json.RawMessage) (any, error) {
				cancel()
				<-hctx.Done()
				return mcp.ElicitResult{Action: "accept"}, nil // too late
			}})
			_, err := c.CallTool(ctx, "ask", nil, nil)
			var ce *client.CancelledError
			if !errors.As(err, &ce) || !errors.Is(err, context.Canceled) {
				t.Fatalf("%v; want the call cancelled", err)
			}
		})
	})
}

// On the wire: each retry has an id of its own, carries only its round's
// answers, and echoes requestState exactly as it came (or leaves it out
// when the server gave none).
func TestInputRequiredWire(t *testing.T) {
	var asked []string
	c, f, _ := dialWith(t, &client.Options{OnRequest: answerWith(nil, &asked)}, func(f *fakeServer, m jsonrpc.Message) {
		var p struct {
			InputResponses map[string]json.RawMessage `json:"inputResponses"`
			RequestState   *string                    `json:"requestState"`
		}
		json.Unmarshal(m.Params, &p)
		switch {
		case p.InputResponses == nil: // round 1: a state with characters worth escaping
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}},"requestState":"s\u00e9 \"1\""}}`, m.ID)
		case p.RequestState != nil && *p.RequestState == `sé "1"` && p.InputResponses["a"] != nil: // round 2: no state this time
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"input_required","inputRequests":{"b":{"method":"roots/list","params":{}}}}}`, m.ID)
		case p.RequestState == nil && p.InputResponses["b"] != nil && p.InputResponses["a"] == nil:
			result(f, m, "done")
		default:
			f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":%q}}`, m.ID, "unexpected "+string(m.Params))
		}
	})
	res, err := c.CallTool(context.Background(), "wire", nil, nil)
	if err != nil || firstText(res) != "done" {
		t.Fatalf("wire = %+v, %v", res, err)
	}
	calls := f.sent(mcp.MethodToolsCall)
	if len(calls) != 3 || calls[0].ID == calls[1].ID || calls[1].ID == calls[2].ID || calls[0].ID == calls[2].ID {
		t.Fatalf("tools/call sent %d times, ids %v; want 3 ids of their own", len(calls), calls)
	}
	if len(asked) != 2 {
		t.Fatalf("OnRequest was asked %v", asked)
	}
}

// A server that asks for more at once than a client answers is refused
// before any is answered.
func TestInputRequiredTooManyAtOnce(t *testing.T) {
	var asked []string
	c, f, _ := dialWith(t, &client.Options{OnRequest: answerWith(nil, &asked)}, func(f *fakeServer, m jsonrpc.Message) {
		var reqs []string
		for i := range 1000 {
			reqs = append(reqs, fmt.Sprintf(`"k%d":{"method":"roots/list"}`, i))
		}
		f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"input_required","inputRequests":{%s}}}`, m.ID, strings.Join(reqs, ","))
	})
	_, err := c.CallTool(context.Background(), "greedy", nil, nil)
	var ie *client.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "1000") || len(asked) != 0 || len(f.sent(mcp.MethodToolsCall)) != 1 {
		t.Fatalf("err = %v, %d asked; want an *InputError naming the 1000 requests, none answered", err, len(asked))
	}
}

// Input the client did not give is not a lost answer: CallToolWithRetries
// neither asks again (the server would ask for the same input) nor, for
// an unsafe tool, calls for reconciliation.
func TestInputErrorIsNotRetried(t *testing.T) {
	for _, class := range []mcp.RetryClass{mcp.RetrySafe, mcp.RetryUnsafe} {
		t.Run(class.String(), func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			var runs atomic.Int64
			srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				runs.Add(1)
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName("name?")}}
			})
			c := dialModern(t, srv, "stdio", client.Options{})
			_, err := c.CallToolWithRetries(context.Background(), "ask", nil, nil, &client.Retries{Planner: planner("ask", class, retry.Options{})})
			if !errors.Is(err, client.ErrNoRequestHandler) || errors.As(err, new(*retry.ReconcileError)) || runs.Load() != 1 {
				t.Fatalf("err = %v after %d runs; want the *InputError after one", err, runs.Load())
			}
		})
	}
}
