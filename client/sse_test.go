package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// sseServer scripts a 2024-11-05 HTTP+SSE server: a GET opens a stream
// (a new session each time) whose first event names the endpoint for
// POSTs; what the client POSTs there is recorded, initialize answered on
// the stream, and every other message handed to handle, which sends on
// the stream what the test wants the client to see.
type sseServer struct {
	t        *testing.T
	endpoint func(session int) string // the endpoint event's data
	version  string                   // what initialize answers
	handle   func(s *sseServer, m jsonrpc.Message)
	// hold, when set and true for a message, holds its POST open until
	// the client gives up on it.
	hold func(m jsonrpc.Message) bool
	// initGate, when set, holds the answer to every initialize but the
	// first session's until it is closed: a restarted server still
	// starting.
	initGate chan struct{}

	mu      sync.Mutex
	streams int           // GETs answered
	events  chan string   // the current stream's events
	end     chan struct{} // closing it ends the current stream
	posts   []seenPost
	gets    []http.Header
}

// seenPost is one POST as the server saw it.
type seenPost struct {
	host, target string // Host and path?query
	header       http.Header
	m            jsonrpc.Message
}

func newSSEServer(t *testing.T, handle func(s *sseServer, m jsonrpc.Message)) *sseServer {
	return &sseServer{t: t, version: "2024-11-05", handle: handle,
		endpoint: func(session int) string { return fmt.Sprintf("/message?sessionId=s%d", session) }}
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		s.stream(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	m, derr := jsonrpc.Decode(body)
	if derr != nil {
		s.t.Errorf("the client POSTed a broken message %s: %v", body, derr)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.posts = append(s.posts, seenPost{host: r.Host, target: r.URL.RequestURI(), header: r.Header.Clone(), m: m})
	s.mu.Unlock()
	if s.hold != nil && s.hold(m) {
		<-r.Context().Done()
		return
	}
	w.WriteHeader(http.StatusAccepted)
	switch m.Method {
	case mcp.MethodInitialize:
		if s.initGate != nil && r.URL.Query().Get("sessionId") != "s1" {
			<-s.initGate
		}
		s.send(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"old","version":"1"}}}`, m.ID, s.version)
	case mcp.NotificationInitialized:
	default:
		if s.handle != nil {
			s.handle(s, m)
		}
	}
}

// stream serves one GET: the endpoint event, then what send queues,
// until end is closed or the client goes.
func (s *sseServer) stream(w http.ResponseWriter, r *http.Request) {
	events, end := make(chan string, 64), make(chan struct{})
	s.mu.Lock()
	s.streams++
	session := s.streams
	s.events, s.end = events, end
	s.gets = append(s.gets, r.Header.Clone())
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: endpoint\ndata: %s\n\n", s.endpoint(session))
	w.(http.Flusher).Flush()
	for {
		select {
		case e := <-events:
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		case <-end:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// send queues a message event on the current stream.
func (s *sseServer) send(format string, args ...any) {
	s.sendRaw("event: message\ndata: " + fmt.Sprintf(format, args...) + "\n\n")
}

func (s *sseServer) sendRaw(event string) {
	s.mu.Lock()
	events := s.events
	s.mu.Unlock()
	events <- event
}

// endStream ends the current stream, as a server that restarts does.
func (s *sseServer) endStream() {
	s.mu.Lock()
	close(s.end)
	s.mu.Unlock()
}

func (s *sseServer) seen() []seenPost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenPost(nil), s.posts...)
}

// methods lists the POSTed messages' methods ("result" for an answer).
func (s *sseServer) methods() []string {
	var out []string
	for _, p := range s.seen() {
		if p.m.Method == "" {
			out = append(out, "result")
			continue
		}
		out = append(out, p.m.Method)
	}
	return out
}

// answerText answers a tools/call with a text result.
func (s *sseServer) answerText(id jsonrpc.ID, text string) {
	b, _ := json.Marshal(text)
	s.send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}`, id, b)
}

// dialSSE connects to s over an in-memory network, at url.
func dialSSE(t *testing.T, s *sseServer, url string, o *client.Options) (*client.Client, error) {
	t.Helper()
	var opts client.Options
	if o != nil {
		opts = *o
	}
	opts.HTTPClient = servePipe(t, s)
	c, err := client.DialSSE(context.Background(), url, &opts)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) != 1 {
		t.Fatalf("the result: %+v", res)
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("the result holds %T", res.Content[0])
	}
	return text.Text
}

// The endpoint event names where to POST, relative to the stream's URL or
// absolute on the same origin. The client POSTs everything there, with
// the caller's headers on the GET and every POST, speaks the handshake
// (never server/discover), and accepts the 2024-11-05 the server answers.
func TestSSEEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, url, endpoint, want string
	}{
		{"relative to the root", "http://127.0.0.1/sse", "/message?sessionId=s1", "/message?sessionId=s1"},
		{"relative to the path", "http://127.0.0.1/mcp/sse", "messages?sessionId=s1", "/mcp/messages?sessionId=s1"},
		{"absolute, same origin", "http://127.0.0.1/sse", "http://127.0.0.1/elsewhere?id=1", "/elsewhere?id=1"},
		{"absolute, default port spelled out", "http://127.0.0.1/sse", "http://127.0.0.1:80/p", "/p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSSEServer(t, func(s *sseServer, m jsonrpc.Message) {
					if m.Method == mcp.MethodToolsCall {
						s.answerText(m.ID, "done")
					}
				})
				s.endpoint = func(int) string { return tc.endpoint }
				c, err := dialSSE(t, s, tc.url, &client.Options{Header: http.Header{"Authorization": {"Bearer secret"}}})
				if err != nil {
					t.Fatal(err)
				}
				if c.Era() != mcp.Legacy || c.ProtocolVersion() != "2024-11-05" {
					t.Fatalf("era %v, version %q; want the handshake era in 2024-11-05", c.Era(), c.ProtocolVersion())
				}
				res, err := c.CallTool(context.Background(), "work", nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := textOf(t, res); got != "done" {
					t.Fatalf("the call answered %q", got)
				}
				if got, want := strings.Join(s.methods(), ","), "initialize,notifications/initialized,tools/call"; got != want {
					t.Fatalf("the client POSTed %s; want %s", got, want)
				}
				for _, p := range s.seen() {
					if p.target != tc.want {
						t.Errorf("%s was POSTed to %s; want %s", p.m.Method, p.target, tc.want)
					}
					if p.header.Get("Authorization") != "Bearer secret" || p.header.Get("Content-Type") != "application/json" {
						t.Errorf("%s was POSTed with headers %v", p.m.Method, p.header)
					}
				}
				s.mu.Lock()
				gets := s.gets
				s.mu.Unlock()
				if len(gets) != 1 || gets[0].Get("Authorization") != "Bearer secret" || gets[0].Get("Accept") != "text/event-stream" {
					t.Fatalf("the GETs carried %v", gets)
				}
			})
		})
	}
}

// An endpoint on another origin (host, port or scheme) is refused before
// anything is POSTed: the caller's credentials go only where the caller
// named. The in-memory network would deliver to any host, so a POST that
// left would be seen here.
func TestSSEEndpointOnAnotherOriginRefused(t *testing.T) {
	for _, endpoint := range []string{
		"http://evil.example/message",
		"//evil.example/message",
		"http://127.0.0.1:8080/message",
		"https://127.0.0.1/message",
		"http://user@127.0.0.1/message",
	} {
		t.Run(endpoint, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSSEServer(t, nil)
				s.endpoint = func(int) string { return endpoint }
				_, err := dialSSE(t, s, "http://127.0.0.1/sse", &client.Options{Header: http.Header{"Authorization": {"Bearer secret"}}})
				if err == nil || !strings.Contains(err.Error(), "origin") {
					t.Fatalf("DialSSE: %v; want the endpoint refused for its origin", err)
				}
				if posts := s.seen(); len(posts) != 0 {
					t.Fatalf("the client POSTed %d messages, the first to %s%s", len(posts), posts[0].host, posts[0].target)
				}
			})
		})
	}
}

// A server that never names its endpoint holds the dial no longer than
// the probe timeout.
func TestSSEWithoutEndpointEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		start := time.Now()
		_, err := client.DialSSE(context.Background(), "http://127.0.0.1/sse", &client.Options{HTTPClient: servePipe(t, h), ProbeTimeout: 3 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "endpoint") {
			t.Fatalf("DialSSE: %v; want an error about the missing endpoint event", err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("DialSSE gave up after %v; want the probe timeout, 3s", took)
		}
	})
}

// DialSSE never speaks the stateless era: that transport has only the
// handshake.
func TestSSERefusesTheModernEra(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSSEServer(t, nil)
		if _, err := dialSSE(t, s, "http://127.0.0.1/sse", &client.Options{Era: mcp.Modern}); err == nil {
			t.Fatal("DialSSE with Era Modern connected")
		}
		if n := len(s.seen()); n != 0 {
			t.Fatalf("the client POSTed %d messages", n)
		}
	})
}

// Progress arrives on the stream, by the call's token, in order, before
// its response.
func TestSSEProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSSEServer(t, func(s *sseServer, m jsonrpc.Message) {
			var p struct {
				Meta struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			}
			json.Unmarshal(m.Params, &p)
			for i := 1; i <= 3; i++ {
				s.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":%d,"total":3}}`, p.Meta.ProgressToken, i)
			}
			s.answerText(m.ID, "done")
		})
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		if _, err := c.CallTool(context.Background(), "work", nil, &client.CallOptions{OnProgress: func(p client.Progress) { got = append(got, p.Progress) }}); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[1 2 3]" {
			t.Fatalf("progress %v; want [1 2 3]", got)
		}
	})
}

// A cancelled call is cancelled with a POSTed notifications/cancelled for
// its own id, not another call's; the other call goes on.
func TestSSECancellationPostsTheRequestsID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := make(chan jsonrpc.Message, 2)
		s := newSSEServer(t, func(s *sseServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				calls <- m
			}
		})
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", nil)
		if err != nil {
			t.Fatal(err)
		}
		kept := make(chan error, 1)
		go func() {
			res, err := c.CallTool(context.Background(), "kept", nil, nil)
			if err == nil && textOf(t, res) != "kept" {
				err = fmt.Errorf("the kept call answered %+v", res)
			}
			kept <- err
		}()
		keptCall := <-calls
		ctx, cancel := context.WithCancel(context.Background())
		cancelled := make(chan error, 1)
		go func() {
			_, err := c.CallTool(ctx, "cancelled", nil, nil)
			cancelled <- err
		}()
		cancelledCall := <-calls
		cancel()
		err = <-cancelled
		var ce *client.CancelledError
		if !errors.As(err, &ce) || ce.Cancel != client.CancelQueued {
			t.Fatalf("%v; want a CancelledError with its cancellation POSTed", err)
		}
		synctest.Wait()
		var ids []jsonrpc.ID
		for _, p := range s.seen() {
			if p.m.Method == mcp.NotificationCancelled {
				var cp mcp.CancelledParams
				json.Unmarshal(p.m.Params, &cp)
				ids = append(ids, cp.RequestID)
			}
		}
		if len(ids) != 1 || ids[0] != cancelledCall.ID {
			t.Fatalf("the cancellations named %v; want only %v (the kept call is %v)", ids, cancelledCall.ID, keptCall.ID)
		}
		// A late response to the cancelled call is dropped and counted.
		s.answerText(cancelledCall.ID, "late")
		s.answerText(keptCall.ID, "kept")
		if err := <-kept; err != nil {
			t.Fatal(err)
		}
		if n := c.Stats().LateResponses; n != 1 {
			t.Fatalf("%d late responses counted; want 1", n)
		}
	})
}

// When the stream ends, the calls in flight fail with ErrConnectionLost
// at once (the transport has no resumption), and the next call opens a
// new stream and a new session, with the handshake again.
func TestSSEStreamEndLosesCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := make(chan jsonrpc.Message, 2)
		s := newSSEServer(t, func(s *sseServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				calls <- m
			}
		})
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", nil)
		if err != nil {
			t.Fatal(err)
		}
		lost := make(chan error, 1)
		go func() {
			_, err := c.CallTool(context.Background(), "first", nil, &client.CallOptions{Max: time.Hour})
			lost <- err
		}()
		<-calls
		start := time.Now()
		s.endStream()
		if err := <-lost; !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("%v; want ErrConnectionLost", err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("the lost call failed after %v; want at once", took)
		}
		next := make(chan error, 1)
		go func() {
			res, err := c.CallTool(context.Background(), "second", nil, nil)
			if err == nil && textOf(t, res) != "again" {
				err = fmt.Errorf("the second call answered %+v", res)
			}
			next <- err
		}()
		m := <-calls
		s.answerText(m.ID, "again")
		if err := <-next; err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(s.methods(), ","),
			"initialize,notifications/initialized,tools/call,initialize,notifications/initialized,tools/call"; got != want {
			t.Fatalf("the client POSTed %s; want %s", got, want)
		}
		posts := s.seen()
		if last := posts[len(posts)-1].target; last != "/message?sessionId=s2" {
			t.Fatalf("the second call went to %s; want the new session's endpoint", last)
		}
		if st := c.Stats(); st.Reconnects != 1 || st.Restarts != 0 {
			t.Fatalf("stats %+v; want one reconnect and no restart", st)
		}
	})
}

// A message past Options.MaxMessageBytes is dropped unread: the call it
// answered fails at once with a *ResponseTooLargeError rather than
// waiting for its deadline, and the stream goes on serving the others.
func TestSSEMessageTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4096
		s := newSSEServer(t, func(s *sseServer, m jsonrpc.Message) {
			if m.Method != mcp.MethodToolsCall {
				return
			}
			var p struct{ Name string }
			json.Unmarshal(m.Params, &p)
			switch p.Name {
			case "huge":
				big := strings.Repeat("x", 4*limit)
				s.send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%q}}`, big)
				s.answerText(m.ID, big)
			case "huge-lines": // the same, cut into many data lines each under the limit
				line := strings.Repeat("y", limit/4)
				s.sendRaw(fmt.Sprintf("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"x\":\"%s\ndata: %s\ndata: %s\ndata: %s\ndata: %s\"}}\n\n", m.ID, line, line, line, line, line))
			default:
				s.answerText(m.ID, "small")
			}
		})
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", &client.Options{MaxMessageBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"huge", "huge-lines"} {
			start := time.Now()
			_, err = c.CallTool(context.Background(), name, nil, &client.CallOptions{Max: time.Hour})
			var tl *client.ResponseTooLargeError
			if !errors.As(err, &tl) || tl.Limit != limit {
				t.Fatalf("%s: %v; want a ResponseTooLargeError at %d bytes", name, err, limit)
			}
			if took := time.Since(start); took != 0 {
				t.Fatalf("%s failed after %v; want at once", name, took)
			}
		}
		res, err := c.CallTool(context.Background(), "small", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := textOf(t, res); got != "small" {
			t.Fatalf("the next call answered %q", got)
		}
	})
}

// The server's requests on the stream (elicitation here, and ping) are
// answered through OnRequest with a POST to the endpoint.
func TestSSEServerRequestAnsweredByPOST(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answers := make(chan jsonrpc.Message, 2)
		s := newSSEServer(t, nil)
		var call jsonrpc.Message
		s.handle = func(s *sseServer, m jsonrpc.Message) {
			switch {
			case m.Method == mcp.MethodToolsCall:
				call = m
				s.send(`{"jsonrpc":"2.0","id":"ping-1","method":"ping"}`)
				s.send(`{"jsonrpc":"2.0","id":"ask-1","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}`)
			case m.Kind == jsonrpc.KindResponse:
				answers <- m
				if len(answers) == 2 {
					s.answerText(call.ID, "asked")
				}
			}
		}
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", &client.Options{
			OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				return map[string]any{"action": "accept", "content": map[string]any{}}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.CallTool(context.Background(), "ask", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := textOf(t, res); got != "asked" {
			t.Fatalf("the call answered %q", got)
		}
		got := map[string]string{}
		for range 2 {
			m := <-answers
			got[m.ID.String()] = string(m.Result)
		}
		if got[`"ping-1"`] != `{}` || got[`"ask-1"`] != `{"action":"accept","content":{}}` {
			t.Fatalf("the answers POSTed: %v", got)
		}
	})
}

// A server that floods requests on the stream and holds every answer's
// POST open gets at most 16 answers at once, as on 2025 Streamable HTTP;
// the rest are dropped and counted, and the held POSTs end at their
// timeout. Cancellations meet their own bound the same way: 16 POSTs at
// once, the rest not sent, and every call still ends at its deadline.
func TestSSEPostsAreBounded(t *testing.T) {
	const flood = 500
	synctest.Test(t, func(t *testing.T) {
		var held, peak atomic.Int64
		s := newSSEServer(t, nil)
		s.hold = func(m jsonrpc.Message) bool {
			if m.Kind != jsonrpc.KindResponse && m.Method != mcp.NotificationCancelled {
				return false
			}
			n := held.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			return true
		}
		c, err := dialSSE(t, s, "http://127.0.0.1/sse", nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range flood {
			s.send(`{"jsonrpc":"2.0","id":"ping-%d","method":"ping"}`, i)
		}
		synctest.Wait()
		if p := peak.Load(); p != 16 {
			t.Fatalf("%d answer POSTs held at once; want 16", p)
		}
		if st := c.Stats(); st.ServerRequestsDropped != flood-16 {
			t.Fatalf("ServerRequestsDropped = %d; want %d", st.ServerRequestsDropped, flood-16)
		}
		time.Sleep(30 * time.Second) // the answers' timeout
		synctest.Wait()
		held.Store(0)
		peak.Store(0)

		var wg sync.WaitGroup
		var notSent atomic.Int64
		for range 20 {
			wg.Go(func() {
				_, err := c.CallTool(context.Background(), "never", nil, &client.CallOptions{Max: time.Second})
				var de *client.DeadlineError
				if !errors.As(err, &de) {
					t.Errorf("%v; want the max deadline", err)
				} else if de.Cancel == client.CancelNotSent {
					notSent.Add(1)
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		if p := peak.Load(); p != 16 {
			t.Fatalf("%d cancellation POSTs held at once; want 16", p)
		}
		if n := notSent.Load(); n != 4 {
			t.Fatalf("%d cancellations not sent; want the 4 past the bound", n)
		}
	})
}
