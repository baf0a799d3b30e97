package mcptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// HTTPClient drives a Streamable HTTP endpoint at the wire level.
type HTTPClient struct {
	t         testing.TB
	URL       string
	Handler   *streamhttp.Handler
	Client    *http.Client
	SessionID string // set by Initialize
	// Token, when set, is sent as a bearer token with every request.
	Token string
}

// As returns a client of the same endpoint that authenticates with token,
// with no session of its own yet.
func (c *HTTPClient) As(token string) *HTTPClient {
	return &HTTPClient{t: c.t, URL: c.URL, Handler: c.Handler, Client: c.Client, Token: token}
}

// SetT binds a client built by hand (over a custom transport) to a test.
func (c *HTTPClient) SetT(t testing.TB) { c.t = t }

// HTTP serves srv on a loopback test server and returns a client for it.
func HTTP(t testing.TB, srv *server.Server, opts *streamhttp.HandlerOptions) *HTTPClient {
	t.Helper()
	h, err := streamhttp.NewHandler(srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		h.Shutdown(ctx)
		ts.Close()
	})
	return &HTTPClient{t: t, URL: ts.URL, Handler: h, Client: ts.Client()}
}

// PipeHTTP is HTTP on an in-memory network, for a synctest bubble: the
// connections, the server's goroutines and their timers all live inside
// it. Call it inside the bubble; everything stops when the test ends.
func PipeHTTP(t testing.TB, srv *server.Server, opts *streamhttp.HandlerOptions) *HTTPClient {
	t.Helper()
	h, err := streamhttp.NewHandler(srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := NewPipeNetwork()
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	client := &http.Client{Transport: &http.Transport{DialContext: ln.DialContext}}
	t.Cleanup(func() { // inside the bubble: every goroutine must end
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		h.Shutdown(ctx)
		hs.Close()
		ln.Close()
		client.CloseIdleConnections()
	})
	return &HTTPClient{t: t, URL: "http://127.0.0.1/mcp", Handler: h, Client: client}
}

// Do sends a raw POST body with the given headers (Content-Type and Accept
// default to what MCP requires unless set).
func (c *HTTPClient) Do(ctx context.Context, method string, body []byte, hdr map[string]string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, c.URL, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		c.t.Fatalf("mcptest: %s: %v", method, err)
	}
	return resp
}

// ModernHeaders are the routing headers a 2026-07-28 request needs.
func ModernHeaders(method, name string) map[string]string {
	h := map[string]string{mcp.HeaderProtocolVersion: mcp.Version20260728, mcp.HeaderMethod: method}
	if name != "" {
		h[mcp.HeaderName] = name
	}
	return h
}

// Modern POSTs a 2026-07-28 request with correct headers.
func (c *HTTPClient) Modern(ctx context.Context, id int64, method string, params map[string]any) *http.Response {
	c.t.Helper()
	name, _ := params["name"].(string)
	if uri, ok := params["uri"].(string); ok {
		name = uri
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": ModernParams(params)})
	return c.Do(ctx, http.MethodPost, body, ModernHeaders(method, name))
}

// Initialize opens a legacy session.
func (c *HTTPClient) Initialize(extraCaps map[string]any) {
	c.t.Helper()
	if resp, f := c.TryInitialize(extraCaps); resp.StatusCode != http.StatusOK || f.Error != nil || c.SessionID == "" {
		c.t.Fatalf("mcptest: initialize: %d %s", resp.StatusCode, f.Raw)
	}
}

// TryInitialize sends initialize and returns the answer, whatever it is;
// when it opened a session, the client is in it (initialized sent).
func (c *HTTPClient) TryInitialize(extraCaps map[string]any) (*http.Response, Frame) {
	c.t.Helper()
	caps := map[string]any{}
	for k, v := range extraCaps {
		caps[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": mcp.MethodInitialize, "params": map[string]any{
		"protocolVersion": mcp.Version20251125, "capabilities": caps, "clientInfo": map[string]any{"name": "mcptest", "version": "1"},
	}})
	resp := c.Do(context.Background(), http.MethodPost, body, nil)
	f := ReadJSON(c.t, resp)
	if sid := resp.Header.Get(mcp.HeaderSessionID); resp.StatusCode == http.StatusOK && f.Error == nil && sid != "" {
		c.SessionID = sid
		c.LegacyNotify(context.Background(), mcp.NotificationInitialized, nil)
	}
	return resp, f
}

// LegacyHeaders are the headers of a request in the open legacy session.
func (c *HTTPClient) LegacyHeaders() map[string]string {
	return map[string]string{mcp.HeaderSessionID: c.SessionID, mcp.HeaderProtocolVersion: mcp.Version20251125}
}

// Legacy POSTs a request in the open legacy session.
func (c *HTTPClient) Legacy(ctx context.Context, id int64, method string, params map[string]any) *http.Response {
	c.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	body, _ := json.Marshal(msg)
	return c.Do(ctx, http.MethodPost, body, c.LegacyHeaders())
}

// LegacyNotify POSTs a notification in the open legacy session and checks
// it was accepted with 202.
func (c *HTTPClient) LegacyNotify(ctx context.Context, method string, params map[string]any) {
	c.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	body, _ := json.Marshal(msg)
	resp := c.Do(ctx, http.MethodPost, body, c.LegacyHeaders())
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		c.t.Fatalf("mcptest: notification %s got %d, want 202", method, resp.StatusCode)
	}
}

// ReadJSON reads a JSON response body as one frame.
func ReadJSON(t testing.TB, resp *http.Response) Frame {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("mcptest: reading a response body: %v", err)
	}
	return parseFrame(string(b))
}

func parseFrame(line string) Frame {
	var raw struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *jsonrpc.Error  `json:"error"`
	}
	f := Frame{Raw: line}
	if err := json.Unmarshal([]byte(line), &raw); err != nil {
		f.Method = "!invalid JSON: " + err.Error()
		return f
	}
	if raw.ID != nil {
		if id, err := jsonrpc.ParseID(raw.ID); err == nil {
			f.ID = &id
		}
	}
	f.Method, f.Params, f.Result, f.Error = raw.Method, raw.Params, raw.Result, raw.Error
	return f
}

// SSE reads a text/event-stream response: data events become frames,
// comment lines are counted as keepalives.
type SSE struct {
	t          testing.TB
	resp       *http.Response
	events     chan Frame
	Keepalives chan struct{}
}

// ReadSSE starts reading an SSE response.
func ReadSSE(t testing.TB, resp *http.Response) *SSE {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("mcptest: want an SSE response, got %d %s: %s", resp.StatusCode, ct, b)
	}
	s := &SSE{t: t, resp: resp, events: make(chan Frame, 1024), Keepalives: make(chan struct{}, 1024)}
	go s.read()
	return s
}

func (s *SSE) read() {
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(nil, 16<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				s.events <- parseFrame(data.String())
				data.Reset()
			}
		case strings.HasPrefix(line, ":"):
			select {
			case s.Keepalives <- struct{}{}:
			default:
			}
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// Next returns the next event, failing the test if the stream ends.
func (s *SSE) Next() Frame {
	s.t.Helper()
	select {
	case f, ok := <-s.events:
		if !ok {
			s.t.Fatalf("mcptest: the SSE stream ended")
		}
		return f
	case <-time.After(Timeout):
		s.t.Fatalf("mcptest: no SSE event within %v", Timeout)
	}
	return Frame{}
}

// Rest returns every event until the stream ends.
func (s *SSE) Rest() []Frame {
	s.t.Helper()
	var out []Frame
	for {
		select {
		case f, ok := <-s.events:
			if !ok {
				return out
			}
			out = append(out, f)
		case <-time.After(Timeout):
			s.t.Fatalf("mcptest: the SSE stream did not end within %v", Timeout)
		}
	}
}

// Close closes the response body: in the modern era, the cancellation.
func (s *SSE) Close() { s.resp.Body.Close() }
