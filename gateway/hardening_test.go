package gateway_test

// What an adversarial reading of the gateway found, each pinned by the
// test that failed before its fix.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
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

// A 504 from an HTTP intermediary says the request was forwarded and no
// answer came in time: the upstream may well have acted. The gateway must
// not call it upstream_unavailable ("the request never reached it",
// retryable whatever the tool), which invites the client to run a
// mutation twice.
func TestGatewayTimeoutIsNotProofTheCallNeverRan(t *testing.T) {
	u := newUpstream(t)
	var charged atomic.Int32
	must(t, u.srv.AddTool(server.Tool{Name: "charge"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		charged.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("charged")}}, nil
	}))
	inner := proxyTo(u.url)
	endpoint := u.inFront(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !bytes.Contains(body, []byte(`"tools/call"`)) {
			return false
		}
		// Forwarded, and the upstream acted; the proxy's own timeout
		// fired before it passed the answer on.
		inner.ServeHTTP(httptest.NewRecorder(), r)
		w.WriteHeader(http.StatusGatewayTimeout)
		return true
	})
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: endpoint}}}, nil)
	c := f.dial(t, mcp.Modern, nil)
	res, err := c.CallTool(context.Background(), "charge", nil, nil)
	must(t, err)
	fail := failureOf(t, res)
	if n := charged.Load(); n != 1 {
		t.Fatalf("the upstream charged %d times, want once", n)
	}
	if fail.Code != mcp.FailureOutcomeUnknown || fail.Retryable {
		t.Fatalf("the upstream charged once, and the client was told %s (retryable %v): %s", fail.Code, fail.Retryable, fail.Message)
	}
}

// A 429 says the upstream refused the request unread, and a 503 that it
// is unavailable and probably did not act on it: for a read, either is a
// retryable upstream_unavailable with the upstream's Retry-After passed
// on — within bounds, whatever it says. A proxy can answer 503 after
// passing a request on, so for a tool that cannot be sent again a 503
// leaves the outcome unknown, not retryable; a 429 proves nothing ran.
func TestUpstreamRefusalPassesItsRetryAfterOn(t *testing.T) {
	u := newUpstream(t)
	var status atomic.Int32
	var retryAfter atomic.Value
	endpoint := u.inFront(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !bytes.Contains(body, []byte(`"tools/call"`)) {
			return false
		}
		w.Header().Set("Retry-After", retryAfter.Load().(string))
		w.WriteHeader(int(status.Load()))
		return true
	})
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: endpoint}},
		Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"echo": {Server: server.Policy{Retry: mcp.RetrySafe}, MaxAttempts: 1}}}}, nil)
	c := f.dial(t, mcp.Modern, nil)
	for _, tc := range []struct {
		status     int
		retryAfter string
		wantMs     int64
	}{
		{http.StatusServiceUnavailable, "7", 7000},
		{http.StatusTooManyRequests, "99999999999", 600000}, // centuries: ten minutes at most
		{http.StatusServiceUnavailable, "0", 10},
		{http.StatusTooManyRequests, "soon", 1000}, // unreadable: the default
	} {
		status.Store(int32(tc.status))
		retryAfter.Store(tc.retryAfter)
		res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
		must(t, err)
		fail := failureOf(t, res)
		if fail.Code != mcp.FailureUpstreamUnavailable || !fail.Retryable || fail.RetryAfterMs != tc.wantMs {
			t.Fatalf("%d with Retry-After %q gave %+v, want a retryable upstream_unavailable after %d ms", tc.status, tc.retryAfter, fail, tc.wantMs)
		}
		if !strings.Contains(fail.Message, fmt.Sprint(tc.status)) {
			t.Errorf("the failure does not say what the upstream answered: %q", fail.Message)
		}
	}
	// "progress" is named by no policy: unsafe.
	retryAfter.Store("1")
	status.Store(http.StatusServiceUnavailable)
	res, err := c.CallTool(context.Background(), "progress", map[string]any{"steps": 1}, nil)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureOutcomeUnknown || fail.Retryable || !strings.Contains(fail.Message, "503") {
		t.Fatalf("an unsafe tool answered 503 gave %+v, want outcome_unknown, not retryable", fail)
	}
	status.Store(http.StatusTooManyRequests)
	res, err = c.CallTool(context.Background(), "progress", map[string]any{"steps": 1}, nil)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureUpstreamUnavailable || !fail.Retryable {
		t.Fatalf("an unsafe tool answered 429 gave %+v, want a retryable upstream_unavailable", fail)
	}
}

// The gateway's own environment holds what authenticates its clients
// (MCPREL_AUTH_TOKEN) and the bearer tokens of its HTTP upstreams
// (--upstream-token-env NAME=VAR). A stdio upstream — often an npx
// package the operator does not control — inherits neither: no MCPREL_*
// variable, none that Options.HideEnv names; the rest it does, and what
// its Upstream.Env gives it.
func TestStdioUpstreamDoesNotInheritTheGatewaysSecrets(t *testing.T) {
	t.Setenv("MCPREL_AUTH_TOKEN", "the-gateway's-own-token")
	t.Setenv("GITHUB_TOKEN", "another-upstream's-token")
	t.Setenv("LANG_OF_THE_TEST", "kept")
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "local", Command: []string{os.Args[0], "-test.run=^$"},
			Env: []string{stdioUpstreamEnv + "=1", "GIVEN=by-the-operator"}}},
		HideEnv: []string{"GITHUB_TOKEN"},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	for name, want := range map[string]string{"MCPREL_AUTH_TOKEN": "", "GITHUB_TOKEN": "", "LANG_OF_THE_TEST": "kept", "GIVEN": "by-the-operator"} {
		res, err := c.CallTool(context.Background(), "getenv", map[string]any{"name": name}, nil)
		must(t, err)
		if got := text(res); got != want {
			t.Errorf("the stdio upstream reads %s = %q, want %q", name, got, want)
		}
	}
}

// A held call resumed by a 2026-07-28 client's retry must report the
// upstream's progress on the retry (the request now serving it): that is
// what the client sees and what resets the retry's idle clock.
func TestHeldCallProgressReachesTheRetry(t *testing.T) {
	u := newUpstream(t)
	seen := make(chan struct{})
	must(t, u.srv.AddTool(server.Tool{Name: "askwork"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		if _, err := call.Elicit(ctx, mcp.ElicitParams{Message: "go?", RequestedSchema: json.RawMessage(`{"type":"object"}`)}); err != nil {
			return nil, err
		}
		for i := 1; i <= 3; i++ {
			_ = call.ReportProgress(float64(i), 3, "working")
			time.Sleep(20 * time.Millisecond)
		}
		select { // the downstream saw progress, or it never will
		case <-seen:
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
	}))
	f := newFront(t, u.options(mcp.Legacy), nil)
	c := f.dial(t, mcp.Modern, &client.Options{
		Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			return map[string]any{"action": "accept", "content": map[string]any{}}, nil
		},
	})
	var progress atomic.Int32
	var once atomic.Bool
	res, err := c.CallTool(context.Background(), "askwork", nil, &client.CallOptions{OnProgress: func(client.Progress) {
		progress.Add(1)
		if once.CompareAndSwap(false, true) {
			close(seen)
		}
	}})
	must(t, err)
	if text(res) != "done" {
		t.Fatalf("result %q", text(res))
	}
	if progress.Load() == 0 {
		t.Fatal("the upstream reported progress after the answer, and none reached the retry that served the held call")
	}
}

// And that progress resets the retry's idle clock: a held call that works
// for longer than its idle clock after the answer, reporting progress all
// along, completes.
func TestHeldCallProgressResetsTheRetrysIdleClock(t *testing.T) {
	u := newUpstream(t)
	must(t, u.srv.AddTool(server.Tool{Name: "askslow"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		if _, err := call.Elicit(ctx, mcp.ElicitParams{Message: "go?", RequestedSchema: json.RawMessage(`{"type":"object"}`)}); err != nil {
			return nil, err
		}
		for i := 1; i <= 30; i++ { // 1.5 s of work, progress every 50 ms
			_ = call.ReportProgress(float64(i), 30, "working")
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
	}))
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:    client.Options{Era: mcp.Legacy},
		Policy:    &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"askslow": {Server: server.Policy{IdleTimeout: time.Second, MaxTimeout: time.Minute}}}},
	}, nil)
	c := f.dial(t, mcp.Modern, &client.Options{
		Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			return map[string]any{"action": "accept", "content": map[string]any{}}, nil
		},
	})
	res, err := c.CallTool(context.Background(), "askslow", nil, &client.CallOptions{Idle: 10 * time.Second, Max: time.Minute})
	must(t, err)
	if text(res) != "done" {
		b, _ := json.Marshal(res)
		t.Fatalf("a held call reporting progress every 50 ms under a 1 s idle clock ended with %s", b)
	}
}

// A 2025 Streamable HTTP server may send a notification on the response
// stream of the request it relates to — here, a tool that adds a tool
// says the list changed on its own call's stream. The gateway must still
// relist.
func TestListChangedOnACallsStream(t *testing.T) {
	var unlocked atomic.Bool
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		if m.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		reply := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Mcp-Session-Id", "s1")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result)
		}
		switch m.Method {
		case "initialize":
			reply(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"fake","version":"1"}}`)
		case "tools/list":
			tools := `[{"name":"unlock","inputSchema":{"type":"object"}}]`
			if unlocked.Load() {
				tools = `[{"name":"unlock","inputSchema":{"type":"object"}},{"name":"secret_tool","inputSchema":{"type":"object"}}]`
			}
			reply(`{"tools":` + tools + `}`)
		case "tools/call":
			unlocked.Store(true)
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Mcp-Session-Id", "s1")
			fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"unlocked\"}]}}\n\n", m.ID)
		default:
			reply(`{}`)
		}
	}))
	t.Cleanup(hs.Close)
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: hs.URL}}}, nil)
	recv(t, f.listed, "the first listing")
	c := f.dial(t, mcp.Legacy, nil)
	res, err := c.CallTool(context.Background(), "unlock", nil, nil)
	must(t, err)
	if text(res) != "unlocked" {
		t.Fatalf("unlock: %q", text(res))
	}
	select {
	case <-f.listed:
	case <-time.After(wait):
		t.Fatal("the upstream said its tools changed, on the call's stream, and the gateway never listed them again")
	}
}

// An upstream's URL is the operator's: hosted MCP servers commonly take
// their key in the query string, and an internal address is topology.
// A downstream client told the upstream is unreachable must not be told
// where it is.
func TestUpstreamsURLIsNotShownDownstream(t *testing.T) {
	u := newUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	proxy := &http.Server{Handler: proxyTo(u.url)}
	go proxy.Serve(ln)
	secretURL := "http://" + ln.Addr().String() + "/mcp?api_key=sk-live-123"
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: secretURL}},
		Client:    client.Options{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	proxy.Close()
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
	must(t, err)
	fail := failureOf(t, res)
	if strings.Contains(fail.Message, "sk-live-123") || strings.Contains(fail.Message, ln.Addr().String()) {
		t.Fatalf("the downstream client was told the upstream's URL: %q", fail.Message)
	}
}

// An upstream that answers a call with HTTP 200 and a body that is no
// JSON-RPC response (cut short here) took the request: the call's outcome
// is unknown, not an upstream error, and the downstream client is told
// neither the upstream's URL nor what the body held.
func TestUnreadableAnswerIsOutcomeUnknown(t *testing.T) {
	u := newUpstream(t)
	front := u.inFront(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !bytes.Contains(body, []byte(`"tools/call"`)) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","internal":"db-7.corp","id":`))
		return true
	})
	secretURL := front + "/mcp?api_key=sk-live-123"
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: secretURL}}}, nil)
	c := f.dial(t, mcp.Modern, nil)
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
	must(t, err)
	fail := failureOf(t, res)
	if fail.Code != mcp.FailureOutcomeUnknown || !strings.Contains(fail.Message, "HTTP 200") {
		t.Fatalf("an unreadable 200 answer failed the call with %+v, want outcome_unknown naming it", fail)
	}
	for _, secret := range []string{"sk-live-123", strings.TrimPrefix(front, "http://"), "db-7.corp"} {
		if strings.Contains(fail.Message, secret) {
			t.Fatalf("the downstream client was told %q: %q", secret, fail.Message)
		}
	}
	if rec := f.awaitForward(t, "echo"); rec.Outcome != gateway.OutcomeLost {
		t.Fatalf("the call was recorded %+v, want lost", rec)
	}
}

// An upstream that cannot be reached at start does not hold the gateway
// up (Start would wait its hour of StartWait for a listing that cannot
// come): a call of one of its tools is told at once that it is
// unavailable, naming it, and when to come back. A name no upstream could
// serve is still an unknown tool, and the other upstream is served.
func TestUpstreamDownAtStartIsToldAtOnce(t *testing.T) {
	u := newUpstream(t)
	down := gateway.Upstream{Name: "bad", Command: []string{"false"}} // starts, and exits before it answers
	slow := gateway.Options{StartWait: time.Hour, RestartBase: time.Hour, RestartCap: time.Hour}
	two := slow
	two.Upstreams = []gateway.Upstream{{Name: "up", URL: u.url}, down}
	one := slow
	one.Upstreams = []gateway.Upstream{down}
	unavailable := func(t *testing.T, c *client.Client, tool string) {
		t.Helper()
		_, err := c.CallTool(context.Background(), tool, nil, nil)
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != mcp.CodeUnavailable || !strings.Contains(rpc.Message, `upstream "bad" is unavailable`) ||
			!strings.Contains(string(rpc.Data), `"code":"upstream_unavailable"`) || !strings.Contains(string(rpc.Data), `"retryAfterMs"`) {
			t.Fatalf("a call of %s = %v, want upstream_unavailable naming bad, with retryAfterMs", tool, err)
		}
	}
	c := newFront(t, two, nil).dial(t, mcp.Modern, nil)
	unavailable(t, c, "bad_anything")
	if res, err := c.CallTool(context.Background(), "up_echo", map[string]any{"text": "hi"}, nil); err != nil || res.IsError {
		t.Fatalf("the other upstream's tool = %v %+v", err, res)
	}
	_, err := c.CallTool(context.Background(), "up_nosuch", nil, nil)
	if rpc := (*jsonrpc.Error)(nil); !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a tool no upstream serves = %v, want unknown tool", err)
	}
	unavailable(t, newFront(t, one, nil).dial(t, mcp.Legacy, nil), "anything")
}

// A stdio upstream whose command is not there is refused when the gateway
// is made, naming it: it would never start, and every call would wait.
func TestUpstreamCommandNotFoundIsRefused(t *testing.T) {
	_, err := gateway.CheckUpstreams([]gateway.Upstream{{Name: "bad", Command: []string{"mcprel-no-such-command"}}})
	if err == nil || !strings.Contains(err.Error(), `upstream "bad": cannot run "mcprel-no-such-command": executable file not found`) {
		t.Fatalf("CheckUpstreams = %v", err)
	}
}

// whoCalls is an upstream tool that answers with what its caller — the
// gateway — declared of itself: its capabilities and its clientInfo.
func whoCalls(t *testing.T, u *upstream) {
	t.Helper()
	must(t, u.srv.AddTool(server.Tool{Name: "who"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		b, _ := json.Marshal(map[string]any{"caps": call.ClientCapabilities, "info": call.ClientInfo})
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(string(b))}}, nil
	}))
}

type declaredUpstream struct {
	Caps mcp.ClientCapabilities `json:"caps"`
	Info mcp.Implementation     `json:"info"`
}

func who(t *testing.T, c *client.Client) declaredUpstream {
	t.Helper()
	res, err := c.CallTool(context.Background(), "who", nil, nil)
	must(t, err)
	var d declaredUpstream
	must(t, json.Unmarshal([]byte(text(res)), &d))
	return d
}

// The gateway declares upstream what it can relay to the client it calls
// for, never more: a 2026-07-28 upstream is told each call's client's own
// elicitation, sampling and roots (and no sampling for a client without
// it, which the upstream then never asks for); a 2025-era session per
// tenant declares those of the client whose call opened it; a connection
// clients share declares everything the gateway relays — elicitation in
// URL mode too — or what the operator narrows it to. The upstream is told
// the gateway's name and version.
func TestGatewayDeclaresWhatItRelays(t *testing.T) {
	sampling := mcp.ClientCapabilities{Sampling: json.RawMessage(`{}`), Elicitation: json.RawMessage(`{"form":{}}`),
		Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}
	for _, down := range eras {
		t.Run("2026-upstream-from-"+down.name, func(t *testing.T) {
			u := newUpstream(t)
			whoCalls(t, u)
			f := newFront(t, u.options(mcp.Modern), nil)
			plain := who(t, f.dial(t, down.era, nil))
			if plain.Caps.Sampling != nil || plain.Caps.Elicitation != nil || plain.Caps.Roots != nil {
				t.Fatalf("a client that declared nothing was declared upstream as %+v", plain.Caps)
			}
			rich := who(t, f.dial(t, down.era, &client.Options{Capabilities: sampling}))
			if rich.Caps.Sampling == nil || string(rich.Caps.Elicitation) != `{"form":{}}` || rich.Caps.Roots != nil || rich.Caps.Extensions != nil {
				t.Fatalf("a client with sampling and form elicitation was declared upstream as %+v", rich.Caps)
			}
			if rich.Info.Name != f.srv.Info().Name || rich.Info.Version != f.srv.Info().Version {
				t.Fatalf("the upstream was told it is called by %+v, want the gateway's %+v", rich.Info, f.srv.Info())
			}
		})
	}
	t.Run("2025-session-per-tenant", func(t *testing.T) {
		u := newUpstream(t)
		whoCalls(t, u)
		f := newFront(t, u.options(mcp.Legacy), &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
		bearer := func(tok string, caps mcp.ClientCapabilities) *client.Options {
			return &client.Options{Header: http.Header{"Authorization": {"Bearer " + tok}}, Capabilities: caps}
		}
		if a := who(t, f.dial(t, mcp.Modern, bearer("tok-a", sampling))); a.Caps.Sampling == nil || a.Caps.Roots != nil {
			t.Fatalf("alice's session declared %+v", a.Caps)
		}
		if b := who(t, f.dial(t, mcp.Legacy, bearer("tok-b", mcp.ClientCapabilities{Roots: json.RawMessage(`{}`)}))); b.Caps.Sampling != nil || b.Caps.Roots == nil {
			t.Fatalf("bob's session declared %+v", b.Caps)
		}
	})
	t.Run("2025-shared", func(t *testing.T) {
		u := newUpstream(t)
		whoCalls(t, u)
		shared := who(t, newFront(t, u.options(mcp.Legacy), nil).dial(t, mcp.Modern, nil))
		if string(shared.Caps.Elicitation) != `{"form":{},"url":{}}` || shared.Caps.Sampling == nil || shared.Caps.Roots == nil {
			t.Fatalf("a shared connection declared %+v, want everything the gateway relays", shared.Caps)
		}
		opts := u.options(mcp.Legacy)
		opts.Upstreams[0].Capabilities = &mcp.ClientCapabilities{Roots: json.RawMessage(`{}`)}
		narrowed := who(t, newFront(t, opts, nil).dial(t, mcp.Modern, nil))
		if narrowed.Caps.Elicitation != nil || narrowed.Caps.Sampling != nil || narrowed.Caps.Roots == nil {
			t.Fatalf("a shared connection narrowed to roots declared %+v", narrowed.Caps)
		}
	})
}

// An upstream's elicitation in URL mode reaches a client that declared
// that mode, and is refused for one that declared elicitation in form
// mode alone — as the upstream would refuse to ask it.
func TestURLElicitationReachesOnlyWhoTakesIt(t *testing.T) {
	u := newUpstream(t)
	must(t, u.srv.AddTool(server.Tool{Name: "open"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		raw, err := call.CallClient(ctx, mcp.MethodElicit, map[string]any{"mode": "url", "message": "sign in", "url": "https://example.com/login", "elicitationId": "e1"})
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(string(raw))}}, nil
	}))
	f := newFront(t, u.options(mcp.Legacy), nil)
	accept := func(context.Context, string, json.RawMessage) (any, error) {
		return map[string]any{"action": "accept"}, nil
	}
	withURL := f.dial(t, mcp.Legacy, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{"form":{},"url":{}}`)}, OnRequest: accept})
	if res, err := withURL.CallTool(context.Background(), "open", nil, nil); err != nil || !strings.Contains(text(res), "accept") {
		t.Fatalf("a client that takes URL elicitation: %v %+v", err, res)
	}
	formOnly := f.dial(t, mcp.Legacy, &client.Options{Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)}, OnRequest: accept})
	_, err := formOnly.CallTool(context.Background(), "open", nil, nil)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, "URL mode") {
		t.Fatalf("a client with form elicitation only: %v, want the URL mode refused", err)
	}
}

// The _meta members the gateway sets upstream itself — the progress
// token it routes the call's progress by, the trace context, the
// protocol's io.modelcontextprotocol/ members — are its own: a
// downstream member named as one of them spelt another way is not passed
// on, for an upstream that matches names in any case, as Go's
// encoding/json does, would take it for the gateway's. A tenant who named
// another call's progress token so ("progresstoken") had its call's
// progress reported to that call's client. The caller's other members
// pass as they came.
func TestReservedMetaSpeltAnotherWayIsNotPassedOn(t *testing.T) {
	eraPairs(t, func(t *testing.T, up, down eraCase) {
		u := newUpstream(t)
		must(t, u.srv.AddTool(server.Tool{Name: "meta"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(string(call.Meta))}}, nil
		}))
		f := newFront(t, u.options(up.era), nil)
		c := f.dial(t, down.era, nil)
		res, err := c.CallTool(context.Background(), "meta", nil, &client.CallOptions{
			OnProgress: func(client.Progress) {}, // so that the gateway sends a token of its own
			Meta: map[string]any{
				"progresstoken": "p1", "PROGRESSTOKEN": "p2", "progreſsToken": "p3", // ſ folds to s
				"TraceParent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "TRACESTATE": "k=v",
				"IO.ModelContextProtocol/relatedTask": map[string]any{"taskId": "t-1"},
				"x-caller":                            "kept",
			}})
		must(t, err)
		seen := map[string]string{}
		must(t, jsonrpc.Members([]byte(text(res)), func(k, v []byte) bool {
			seen[string(k)] = string(v)
			return true
		}))
		for name := range seen {
			for _, own := range []string{mcp.MetaProgressToken, "traceparent", "tracestate"} {
				if name != own && strings.EqualFold(name, own) {
					t.Errorf("the upstream was sent _meta[%q], %s spelt another way", name, own)
				}
			}
			if p := "io.modelcontextprotocol/"; len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) && !strings.HasPrefix(name, p) {
				t.Errorf("the upstream was sent _meta[%q], one of the protocol's members spelt another way", name)
			}
		}
		if seen["x-caller"] != `"kept"` {
			t.Errorf("the caller's own member was not passed on: the upstream saw %v", seen)
		}
	})
}
