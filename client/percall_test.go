package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/stdio"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// askServer is an mcprel server with a tool that asks its client for a
// name, the way each era asks: a request on the call's stream (2025), an
// input_required result (2026-07-28).
func askServer(t *testing.T) *server.Server {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		p := mcp.ElicitParams{Message: "your name?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}
		var answer json.RawMessage
		if call.Era == mcp.Modern {
			var ok bool
			if answer, ok = call.InputResponses["name"]; !ok {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": server.ElicitRequest(p)}, State: []byte("round-1")}
			}
			if string(call.RequestState) != "round-1" {
				return nil, fmt.Errorf("requestState %q", call.RequestState)
			}
		} else {
			res, err := call.Elicit(ctx, p)
			if err != nil {
				return nil, err
			}
			answer, _ = json.Marshal(res)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("answered " + string(answer))}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// answering is a request handler that answers an elicitation with who.
func answering(who string) client.RequestHandler {
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if method != mcp.MethodElicit {
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "not %s", method)
		}
		return map[string]any{"action": "accept", "content": map[string]any{"name": who}}, nil
	}
}

// A call's own request handler answers what the server asks during that
// call, in both eras over both transports, in place of the connection's.
func TestCallAnswersItsOwnRequests(t *testing.T) {
	for _, tg := range targets {
		for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
			t.Run(tg.name+"-"+era.String(), func(t *testing.T) {
				srv := askServer(t)
				c := dialAsker(t, tg.name, srv, era, answering("connection"))
				res, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{OnRequest: answering("call")})
				if err != nil {
					t.Fatal(err)
				}
				if got := textOf(t, res); !strings.Contains(got, `"call"`) {
					t.Fatalf("the call's handler did not answer: %s", got)
				}
				res, err = c.CallTool(context.Background(), "ask", nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := textOf(t, res); !strings.Contains(got, `"connection"`) {
					t.Fatalf("without a handler of its own the connection's did not answer: %s", got)
				}
			})
		}
	}
}

// dialAsker connects to srv declaring elicitation, with onRequest as the
// connection's handler.
func dialAsker(t *testing.T, over string, srv *server.Server, era mcp.Era, onRequest client.RequestHandler) *client.Client {
	t.Helper()
	o := client.Options{Era: era, OnRequest: onRequest, Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}}
	if over == "stdio" {
		toServer, fromClient := ioPipe()
		toClient, fromServer := ioPipe()
		done := make(chan struct{})
		go func() {
			stdio.NewConn(srv, toServer, fromServer, nil).Serve(context.Background())
			fromServer.Close()
			close(done)
		}()
		c, err := client.Connect(context.Background(), toClient, fromClient, &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); <-done })
		return c
	}
	return dialHTTPWith(t, srv, o)
}

// stdio carries nothing that ties a server's request to a call: it is the
// call's only while that call is the one in flight. With two in flight the
// connection's handler answers, never a guess between them.
func TestStdioRequestIsTheSoleCallsOnly(t *testing.T) {
	asked := make(chan jsonrpc.Message, 4)
	c, f := dialOpts(t, &client.Options{Era: mcp.Legacy, OnRequest: answering("connection")}, func(f *fakeServer, m jsonrpc.Message) {
		switch {
		case m.Method == mcp.MethodToolsCall && name(m) == "ask":
			f.send(`{"jsonrpc":"2.0","id":"s-%s","method":"elicitation/create","params":{"message":"who?","requestedSchema":{"type":"object"}}}`, m.ID)
			asked <- m
		case m.Method == mcp.MethodToolsCall:
			asked <- m // "hold": answered by the test
		case m.Kind == jsonrpc.KindResponse:
			asked <- m
		}
	}, true)
	answerOf := func() string {
		m := <-asked
		if m.Kind != jsonrpc.KindResponse {
			t.Fatalf("waited for an answer, got %s", m.Method)
		}
		return string(m.Result)
	}

	// One call in flight: its own handler answers.
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{OnRequest: answering("call")})
		done <- err
	}()
	ask := <-asked
	if got := answerOf(); !strings.Contains(got, `"call"`) {
		t.Fatalf("the sole call's handler did not answer: %s", got)
	}
	result(f, ask, "ok")
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Two in flight: the connection's answers.
	go func() {
		c.CallTool(context.Background(), "hold", nil, &client.CallOptions{OnRequest: answering("hold")})
	}()
	hold := <-asked
	go func() {
		_, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{OnRequest: answering("call")})
		done <- err
	}()
	ask = <-asked
	if got := answerOf(); !strings.Contains(got, `"connection"`) {
		t.Fatalf("with two calls in flight the request was not the connection's: %s", got)
	}
	result(f, ask, "ok")
	result(f, hold, "ok")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// dialOpts is dial with options, and the fake server's own record of
// the client's responses when keepResponses is set.
func dialOpts(t *testing.T, o *client.Options, handle func(f *fakeServer, m jsonrpc.Message), keepResponses bool) (*client.Client, *fakeServer) {
	t.Helper()
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	f := &fakeServer{t: t, out: fromServer, legacy: o != nil && o.Era == mcp.Legacy}
	f.handle = func(m jsonrpc.Message) {
		if m.Kind == jsonrpc.KindResponse && !keepResponses {
			return
		}
		handle(f, m)
	}
	go f.serve(toServer)
	c, err := client.Connect(context.Background(), toClient, fromClient, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); fromServer.Close() })
	return c, f
}

// While the call's own handler answers the server (a person filling a
// form), the call's idle clock waits; it starts over once the answer is
// given, and fires if the server then goes quiet.
func TestIdleClockWaitsForTheCallsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Second
		answered := make(chan jsonrpc.Message, 1)
		c, _ := dialOpts(t, &client.Options{Era: mcp.Legacy}, func(f *fakeServer, m jsonrpc.Message) {
			switch m.Kind {
			case jsonrpc.KindRequest:
				f.send(`{"jsonrpc":"2.0","id":"s-1","method":"elicitation/create","params":{"message":"who?","requestedSchema":{"type":"object"}}}`)
			case jsonrpc.KindResponse:
				answered <- m
			}
		}, true)
		slow := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			time.Sleep(5 * idle) // the person takes their time
			return map[string]any{"action": "accept", "content": map[string]any{}}, nil
		}
		errs := make(chan error, 1)
		go func() {
			_, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Idle: idle, Max: time.Minute, OnRequest: slow})
			errs <- err
		}()
		<-answered
		select {
		case err := <-errs:
			t.Fatalf("the call ended while its handler answered: %v", err)
		default:
		}
		// The server heard the answer and now goes quiet: the idle clock,
		// started over at the answer, fires one idle later.
		start := time.Now()
		err := <-errs
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.IdleClock {
			t.Fatalf("the quiet call ended with %v, want its idle clock", err)
		}
		if waited := time.Since(start); waited != idle {
			t.Fatalf("the idle clock fired %v after the answer, want %v", waited, idle)
		}
	})
}

// A server's pings are no progress of the call in flight: answered on
// its behalf or not, they leave its idle clock running.
func TestPingsLeaveTheIdleClockRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Second
		ended := make(chan struct{})
		c, _ := dialOpts(t, &client.Options{Era: mcp.Legacy}, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method != mcp.MethodToolsCall {
				return
			}
			go func() {
				for i := 0; ; i++ {
					select {
					case <-ended:
						return
					case <-time.After(idle / 2):
						f.send(`{"jsonrpc":"2.0","id":"ping-%d","method":"ping"}`, i)
					}
				}
			}()
		}, false)
		answer := func(context.Context, string, json.RawMessage) (any, error) { return map[string]any{}, nil }
		start := time.Now()
		_, err := c.CallTool(context.Background(), "quiet", nil, &client.CallOptions{Idle: idle, Max: 10 * idle, OnRequest: answer})
		close(ended)
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.IdleClock {
			t.Fatalf("a call that only saw pings ended with %v, want its idle clock", err)
		}
		if took := time.Since(start); took != idle {
			t.Fatalf("the idle clock fired after %v, want %v", took, idle)
		}
	})
}

// CallOptions.Input continues a 2026-07-28 call begun elsewhere: the
// input_required result one client saw is answered, and the call
// completed, by another request carrying the answers and the state.
func TestInputContinuesARound(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			srv := askServer(t)
			c := dialAsker(t, tg.name, srv, mcp.Modern, nil)
			_, err := c.CallTool(context.Background(), "ask", nil, nil)
			var ie *client.InputError
			if !errors.As(err, &ie) || len(ie.Result) == 0 {
				t.Fatalf("a call with nobody to answer: %v, want an InputError with the round", err)
			}
			var round struct {
				RequestState json.RawMessage `json:"requestState"`
			}
			if err := json.Unmarshal(ie.Result, &round); err != nil || len(round.RequestState) == 0 {
				t.Fatalf("the round %s has no requestState", ie.Result)
			}
			res, err := c.CallTool(context.Background(), "ask", nil, &client.CallOptions{Input: &client.InputAnswers{
				Responses:    map[string]json.RawMessage{"name": json.RawMessage(`{"action":"accept","content":{"name":"Ada"}}`)},
				RequestState: round.RequestState,
			}})
			if err != nil {
				t.Fatal(err)
			}
			if got := textOf(t, res); !strings.Contains(got, "Ada") {
				t.Fatalf("the continued call answered %q", got)
			}
			// A 2025 connection has no rounds to continue.
			legacy := dialAsker(t, tg.name, srv, mcp.Legacy, nil)
			if _, err := legacy.CallTool(context.Background(), "ask", nil, &client.CallOptions{Input: &client.InputAnswers{}}); err == nil || !strings.Contains(err.Error(), "2026-07-28") {
				t.Fatalf("Input on a 2025 connection: %v", err)
			}
		})
	}
}

// Notifications that belong to no call reach Options.OnNotification: on
// stdio, and on a 2025 HTTP session's own stream.
func TestConnectionNotifications(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		got := make(chan string, 4)
		_, f := dialOpts(t, &client.Options{Era: mcp.Legacy, OnNotification: func(method string, params json.RawMessage) {
			got <- method + " " + string(params)
		}}, func(*fakeServer, jsonrpc.Message) {}, false)
		f.send(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
		f.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"nobody","progress":1}}`)
		f.send(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}`)
		if m := <-got; m != "notifications/tools/list_changed " {
			t.Fatalf("first notification %q", m)
		}
		if m := <-got; !strings.HasPrefix(m, "notifications/resources/updated") || !strings.Contains(m, "file:///a") {
			t.Fatalf("second notification %q (progress must not reach it)", m)
		}
	})
	t.Run("http-2025", func(t *testing.T) {
		srv := mcptest.NewServer(t, nil)
		got := make(chan string, 4)
		c := dialHTTPWith(t, srv, client.Options{Era: mcp.Legacy, OnNotification: func(method string, _ json.RawMessage) { got <- method }})
		if err := srv.AddTool(server.Tool{Name: "added"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != mcp.NotificationToolsListChanged {
				t.Fatalf("got %q", m)
			}
		case <-time.After(mcptest.Timeout):
			t.Fatal("the session's list change never reached OnNotification")
		}
		if _, err := c.CallTool(context.Background(), "added", nil, nil); err != nil {
			t.Fatal(err)
		}
	})
}

func dialHTTPWith(t *testing.T, srv *server.Server, o client.Options) *client.Client {
	t.Helper()
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := client.DialHTTP(context.Background(), hs.URL, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Capabilities that are not JSON fail the connection with an error that
// names them, not every request after it.
func TestCapabilitiesThatAreNotJSON(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
		toServer, fromClient := io.Pipe()
		toClient, fromServer := io.Pipe()
		f := &fakeServer{t: t, out: fromServer, legacy: era == mcp.Legacy, handle: func(jsonrpc.Message) {}}
		go f.serve(toServer)
		_, err := client.Connect(context.Background(), toClient, fromClient, &client.Options{Era: era,
			Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{"form":`)}})
		fromServer.Close()
		if err == nil || !strings.Contains(err.Error(), "Options.Capabilities") {
			t.Fatalf("%v: connecting with broken capabilities: %v", era, err)
		}
		f.mu.Lock()
		n := len(f.got)
		f.mu.Unlock()
		if n != 0 {
			t.Fatalf("%v: %d requests were sent with them", era, n)
		}
	}
}

// Done is closed when the connection ends: a stdio server's output ends
// (it exited), or Close is called over Streamable HTTP.
func TestDone(t *testing.T) {
	c, f := dialOpts(t, &client.Options{Era: mcp.Legacy}, func(*fakeServer, jsonrpc.Message) {}, false)
	select {
	case <-c.Done():
		t.Fatal("Done is closed on a live connection")
	default:
	}
	f.out.Close() // the server's output ends
	select {
	case <-c.Done():
	case <-time.After(mcptest.Timeout):
		t.Fatal("Done was not closed after the server's output ended")
	}

	// Close closes it too, over streams the caller gave and over HTTP.
	sc, _ := dialOpts(t, &client.Options{Era: mcp.Legacy}, func(*fakeServer, jsonrpc.Message) {}, false)
	hc := dialHTTPWith(t, mcptest.NewServer(t, nil), client.Options{})
	for name, c := range map[string]*client.Client{"stdio": sc, "http": hc} {
		select {
		case <-c.Done():
			t.Fatalf("Done is closed on a live %s connection", name)
		default:
		}
		c.Close()
		select {
		case <-c.Done():
		case <-time.After(mcptest.Timeout):
			t.Fatalf("Done was not closed by Close over %s", name)
		}
	}
}

// Prompts, resources and templates are listed whole over both transports
// in both eras, and a listing's bounds hold for them as for tools.
func TestListsOtherThanTools(t *testing.T) {
	for _, tg := range targets {
		for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
			t.Run(tg.name+"-"+era.String(), func(t *testing.T) {
				srv := mcptest.NewServer(t, nil)
				for i := range 3 {
					must(t, srv.AddPrompt(mcp.Prompt{Name: fmt.Sprintf("p%d", i)}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
						return &mcp.GetPromptResult{}, nil
					}))
					must(t, srv.AddResource(mcp.Resource{URI: fmt.Sprintf("file:///r%d", i), Name: "r"}, func(context.Context, *server.ReadRequest) (*mcp.ReadResourceResult, error) {
						return &mcp.ReadResourceResult{}, nil
					}))
				}
				must(t, srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "file:///t/{x}", Name: "t"}, func(context.Context, *server.ReadRequest) (*mcp.ReadResourceResult, error) {
					return &mcp.ReadResourceResult{}, nil
				}))
				c := tg.dial(t, srv, era)
				ctx := context.Background()
				prompts, err := c.ListPrompts(ctx)
				must(t, err)
				resources, err := c.ListResources(ctx)
				must(t, err)
				templates, err := c.ListResourceTemplates(ctx)
				must(t, err)
				var names []string
				for _, p := range prompts {
					names = append(names, p.Name)
				}
				for _, r := range resources {
					names = append(names, r.URI)
				}
				for _, tp := range templates {
					names = append(names, tp.URITemplate)
				}
				slices.Sort(names)
				want := []string{"file:///r0", "file:///r1", "file:///r2", "file:///t/{x}", "p0", "p1", "p2"}
				if !slices.Equal(names, want) {
					t.Fatalf("listed %v, want %v", names, want)
				}
			})
		}
	}
}

// A server that answers a cursor with itself is refused at once rather
// than followed to the page bound; one that pages past the bound is
// refused at the bound.
func TestListCursorBounds(t *testing.T) {
	pages := 0
	c, _ := dialOpts(t, &client.Options{Era: mcp.Legacy, MaxListPages: 5}, func(f *fakeServer, m jsonrpc.Message) {
		switch m.Method {
		case mcp.MethodPromptsList:
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"prompts":[{"name":"p"}],"nextCursor":"same"}}`, m.ID)
		case mcp.MethodResourcesList:
			pages++
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resources":[],"nextCursor":"c%d"}}`, m.ID, pages)
		}
	}, false)
	if _, err := c.ListPrompts(context.Background()); err == nil || !strings.Contains(err.Error(), "with itself") {
		t.Fatalf("a cursor answered with itself: %v", err)
	}
	_, err := c.ListResources(context.Background())
	var le *client.ListLimitError
	if !errors.As(err, &le) || le.Method != mcp.MethodResourcesList || le.Limit != "pages" || pages != 5 {
		t.Fatalf("an endless listing: %v after %d pages", err, pages)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A call cancelled while its own handler answers the server sends no
// answer for it: the cancellation is all the server needs, so the
// server's handler ends by the cancellation, never by an error answer
// that could overtake it.
func TestCancelledCallSendsNoAnswer(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			srv := mcptest.NewServer(t, nil)
			ended := make(chan error, 1)
			must(t, srv.AddTool(server.Tool{Name: "ask"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
				_, err := call.Elicit(ctx, mcp.ElicitParams{Message: "who?", RequestedSchema: json.RawMessage(`{"type":"object"}`)})
				if ctx.Err() != nil {
					err = context.Cause(ctx)
				}
				ended <- err
				return nil, err
			}))
			c := dialAsker(t, tg.name, srv, mcp.Legacy, nil)
			ctx, cancel := context.WithCancel(context.Background())
			asking := make(chan struct{})
			errs := make(chan error, 1)
			go func() {
				_, err := c.CallTool(ctx, "ask", nil, &client.CallOptions{OnRequest: func(hctx context.Context, method string, params json.RawMessage) (any, error) {
					close(asking)
					<-hctx.Done() // a person still at the form when the call is given up
					return nil, context.Cause(hctx)
				}})
				errs <- err
			}()
			<-asking
			cancel()
			if err := <-errs; !errors.As(err, new(*client.CancelledError)) {
				t.Fatalf("the cancelled call: %v", err)
			}
			if err := <-ended; !errors.Is(err, server.ErrPeerCancelled) {
				t.Fatalf("the server's handler ended with %v, want the client's cancellation", err)
			}
		})
	}
}

// Two calls share a stdio server; the caller of one gives up on it just as
// the server, working on it, asks a question (written before the server
// read the cancellation). The question is the given-up call's: it must not
// be shown to the other call's handler, though that call is now the only
// one in flight. It is the connection's to answer (here: nobody's).
func TestGivenUpCallsQuestionIsNotAnothersToAnswer(t *testing.T) {
	bystanderAsked := make(chan string, 1)
	held := make(chan jsonrpc.Message, 2)
	answered := make(chan jsonrpc.Message, 1)
	c, f := dialOpts(t, &client.Options{Era: mcp.Legacy}, func(f *fakeServer, m jsonrpc.Message) {
		switch {
		case m.Method == mcp.MethodToolsCall:
			held <- m // both are held by the server
		case m.Method == mcp.NotificationCancelled:
			f.send(`{"jsonrpc":"2.0","id":"s-1","method":"elicitation/create","params":{"message":"victim's card ending 4242: confirm?","requestedSchema":{"type":"object"}}}`)
		case m.Kind == jsonrpc.KindResponse:
			answered <- m
		}
	}, true)
	bystander := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		bystanderAsked <- string(params)
		return map[string]any{"action": "accept", "content": map[string]any{}}, nil
	}
	go c.CallTool(context.Background(), "bystander", nil, &client.CallOptions{OnRequest: bystander})
	first := <-held
	vctx, cancel := context.WithCancel(context.Background())
	verr := make(chan error, 1)
	go func() {
		_, err := c.CallTool(vctx, "victim", nil, &client.CallOptions{OnRequest: answering("victim")})
		verr <- err
	}()
	<-held
	cancel()
	<-verr
	if m := <-answered; m.Error == nil {
		t.Fatalf("the given-up call's question was answered %s", m.Result)
	}
	select {
	case p := <-bystanderAsked:
		t.Fatalf("the given-up call's question was shown to the other call's handler: %s", p)
	default:
	}
	result(f, first, "ok")
}

// A request's params are encoded in one pass: members the caller gives in
// _meta keep their keys and values exactly, a key or string JSON must
// escape is escaped as JSON does, raw JSON goes as it is, and raw JSON
// that is not JSON is refused before anything is sent.
func TestParamsEncoding(t *testing.T) {
	got := make(chan jsonrpc.Message, 1)
	c, f := dialOpts(t, &client.Options{Era: mcp.Modern}, func(f *fakeServer, m jsonrpc.Message) {
		if m.Method == mcp.MethodToolsCall {
			got <- m
			result(f, m, "ok")
		}
	}, false)
	meta := map[string]any{"plain": "v", "quo\"te\u00e9<": "line\nnext <&>", "raw": json.RawMessage(`{"n":12345678901234567890}`)}
	args := map[string]any{"text": "é\u2028", "n": 1}
	if _, err := c.CallTool(context.Background(), "echo", args, &client.CallOptions{Meta: meta}); err != nil {
		t.Fatal(err)
	}
	m := <-got
	var p struct {
		Name      string
		Arguments map[string]any
		Meta      map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatalf("the params %s are not JSON: %v", m.Params, err)
	}
	if p.Name != "echo" || p.Arguments["text"] != "é\u2028" || p.Arguments["n"] != 1.0 {
		t.Errorf("name %q, arguments %v", p.Name, p.Arguments)
	}
	var s string
	if json.Unmarshal(p.Meta["quo\"te\u00e9<"], &s); s != "line\nnext <&>" {
		t.Errorf("an escaped member came out %s", p.Meta["quo\"te\u00e9<"])
	}
	if string(p.Meta["raw"]) != `{"n":12345678901234567890}` || string(p.Meta["plain"]) != `"v"` {
		t.Errorf("raw members came out %s and %s", p.Meta["raw"], p.Meta["plain"])
	}
	for _, k := range []string{mcp.MetaProtocolVersion, mcp.MetaClientCapabilities, mcp.MetaClientInfo} {
		if len(p.Meta[k]) == 0 {
			t.Errorf("the 2026-07-28 member %s is missing", k)
		}
	}
	_, err := c.CallTool(context.Background(), "echo", json.RawMessage(`{"broken":`), nil)
	if err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Fatalf("broken raw arguments: %v", err)
	}
	if n := len(f.sent(mcp.MethodToolsCall)); n != 1 {
		t.Fatalf("%d calls reached the server, want 1 (the broken one is never sent)", n)
	}
	// Raw arguments as a client sent them, pretty-printed: compacted, or
	// their newlines would end the stdio frame early. Nil is null.
	for raw, want := range map[string]string{"{\n  \"a\": 1,\n\t\"b\": [1, 2]\n}": `{"a":1,"b":[1,2]}`, "": "null"} {
		args := json.RawMessage(raw)
		if raw == "" {
			args = nil
		}
		if _, err := c.CallTool(context.Background(), "echo", args, &client.CallOptions{Max: 10 * time.Second}); err != nil {
			t.Fatalf("raw arguments %q: %v", raw, err)
		}
		var p struct{ Arguments json.RawMessage }
		if err := json.Unmarshal((<-got).Params, &p); err != nil || string(p.Arguments) != want {
			t.Fatalf("raw arguments %q arrived as %s (%v), want %s", raw, p.Arguments, err, want)
		}
	}
}
