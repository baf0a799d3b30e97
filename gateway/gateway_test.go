package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
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

// Every downstream era to every upstream era over HTTP: the tools keep
// their names and schemas with one upstream, a result comes back as the
// upstream sent it, and a failed result passes through unchanged.
func TestForwardsAcrossEras(t *testing.T) {
	eraPairs(t, func(t *testing.T, up, down eraCase) {
		u := newUpstream(t)
		f := newFront(t, u.options(up.era), nil)
		c := f.dial(t, down.era, nil)
		tools, err := c.ListTools(context.Background())
		must(t, err)
		var names []string
		for _, tl := range tools {
			names = append(names, tl.Name)
			if tl.Name == "echo" && (tl.Annotations == nil || tl.Annotations.ReadOnlyHint == nil || !*tl.Annotations.ReadOnlyHint) {
				t.Errorf("echo's annotations were not passed on: %+v", tl.Annotations)
			}
			if tl.Name == "echo" && !strings.Contains(string(tl.InputSchema), `"text"`) {
				t.Errorf("echo's schema was not passed on: %s", tl.InputSchema)
			}
		}
		slices.Sort(names)
		if want := []string{"ask", "echo", "fail", "hang", "progress", "refuse", "roots"}; !slices.Equal(names, want) {
			t.Fatalf("tools %v, want %v", names, want)
		}
		for _, tl := range tools {
			// echo's upstream calls it read-only; the policy says
			// nothing of it, so it is unsafe all the same.
			if tl.Name == "echo" && tl.Meta[mcp.MetaRetryClass] != mcp.RetryClassUnsafe {
				t.Errorf("echo's retry class is %v: an upstream's annotation widened it", tl.Meta[mcp.MetaRetryClass])
			}
		}
		res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "hello"}, nil)
		must(t, err)
		if !strings.Contains(structured(res), `"hello"`) {
			t.Fatalf("echo answered %+v", res)
		}
		// What the upstream's era added for its own hop stays there: a
		// 2025 client sees no resultType and no serverInfo, a 2026 one
		// the gateway's.
		raw, err := c.CallToolRaw(context.Background(), "echo", map[string]any{"text": "hello"}, nil)
		must(t, err)
		var hop struct {
			Meta       map[string]json.RawMessage `json:"_meta"`
			ResultType *string                    `json:"resultType"`
		}
		must(t, json.Unmarshal(raw, &hop))
		info, _ := json.Marshal(c.ServerInfo())
		switch {
		case down.era == mcp.Legacy && (hop.ResultType != nil || hop.Meta[mcp.MetaServerInfo] != nil):
			t.Errorf("a 2025 client got members of the 2026 era: %s", raw)
		case down.era == mcp.Modern && (hop.ResultType == nil || *hop.ResultType != mcp.ResultComplete || string(hop.Meta[mcp.MetaServerInfo]) != string(info)):
			t.Errorf("a 2026 client got %s; want resultType complete and the gateway's serverInfo %s", raw, info)
		}
		res, err = c.CallTool(context.Background(), "fail", nil, nil)
		must(t, err)
		if !res.IsError || !strings.Contains(text(res), "card_declined") {
			t.Fatalf("the upstream's failed result was not passed through: %+v", res)
		}
		// An upstream's JSON-RPC error stays one, its code, message
		// and data kept; one that speaks of the gateway's own
		// framing becomes an internal error.
		for code, want := range map[int64]int64{-32602: -32602, -32042: -32042, 4242: 4242, jsonrpc.CodeParseError: jsonrpc.CodeInternalError, jsonrpc.CodeInvalidRequest: jsonrpc.CodeInternalError} {
			_, err := c.CallTool(context.Background(), "refuse", map[string]any{"code": code}, nil)
			var rpc *jsonrpc.Error
			if !errors.As(err, &rpc) || rpc.Code != want || !strings.Contains(rpc.Message, fmt.Sprintf("refused with %d", code)) {
				t.Errorf("upstream error %d reached the client as %v, want code %d", code, err, want)
			}
		}
	})
}

// A downstream cancellation reaches the upstream handler as the
// upstream's own cancellation of its own request, in every era pair;
// the connection keeps serving afterwards.
func TestDownstreamCancellationReachesUpstream(t *testing.T) {
	eraPairs(t, func(t *testing.T, up, down eraCase) {
		u := newUpstream(t)
		f := newFront(t, u.options(up.era), nil)
		c := f.dial(t, down.era, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := c.CallTool(ctx, "hang", nil, nil)
			done <- err
		}()
		u.gate.WaitEntered(t)
		cancel()
		cause := u.gate.WaitExited(t)
		if !upstreamCancelled(up.era, cause) {
			t.Fatalf("the upstream handler ended with %v, want a cancellation by its client (the gateway)", cause)
		}
		u.gate.Release()
		var ce *client.CancelledError
		if err := <-done; !errors.As(err, &ce) {
			t.Fatalf("the downstream call ended with %v", err)
		}
		if r := f.awaitForward(t, "hang"); r.Outcome != gateway.OutcomeCancelled || !r.CancelPropagated {
			t.Fatalf("the cancelled call was recorded %+v, want cancelled and carried upstream", r)
		}
		res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "after"}, nil)
		must(t, err)
		if !strings.Contains(structured(res), "after") {
			t.Fatalf("not serving after a cancellation: %+v", res)
		}
	})
}

// A deadline that fires at the gateway cancels the upstream's request,
// and the downstream gets the server's standard timeout result.
func TestGatewayDeadlineCancelsUpstream(t *testing.T) {
	for _, up := range eras {
		t.Run(up.name, func(t *testing.T) {
			u := newUpstream(t)
			f := newFront(t, gateway.Options{
				Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
				Client:    client.Options{Era: up.era},
				Policy:    &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"hang": {Server: server.Policy{IdleTimeout: 50 * time.Millisecond, MaxTimeout: 100 * time.Millisecond}}}},
			}, nil)
			c := f.dial(t, mcp.Modern, nil)
			res, err := c.CallTool(context.Background(), "hang", nil, &client.CallOptions{Idle: wait, Max: wait})
			must(t, err)
			fail := failureOf(t, res)
			if fail.Code != mcp.FailureTimeout {
				t.Fatalf("the downstream got %+v, want the server's timeout result", fail)
			}
			if cause := u.gate.WaitExited(t); !upstreamCancelled(up.era, cause) {
				t.Fatalf("the upstream handler ended with %v, want its client's cancellation", cause)
			}
			u.gate.Release()
		})
	}
}

// Upstream progress reaches the downstream increasing: a report that
// does not increase is dropped, and the final result comes last.
func TestProgressArrivesIncreasing(t *testing.T) {
	eraPairs(t, func(t *testing.T, up, down eraCase) {
		u := newUpstream(t)
		f := newFront(t, u.options(up.era), nil)
		c := f.dial(t, down.era, nil)
		var got []float64
		res, err := c.CallTool(context.Background(), "progress", map[string]any{"values": []float64{1, 2, 2, 1.5, 3, 10}},
			&client.CallOptions{OnProgress: func(p client.Progress) { got = append(got, p.Progress) }})
		must(t, err)
		if res.IsError {
			t.Fatalf("progress failed: %s", text(res))
		}
		if len(got) == 0 {
			t.Fatal("no progress reached the downstream client")
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("progress %v is not strictly increasing", got)
			}
		}
		if got[len(got)-1] != 10 {
			t.Fatalf("progress %v: the last report (10) was lost", got)
		}
	})
}

// An upstream that cannot be reached gives a retryable
// upstream_unavailable failure with retryAfterMs; after repeated
// failures its circuit opens.
func TestUnreachableUpstream(t *testing.T) {
	u := newUpstream(t)
	// The upstream is listed once, then goes away.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	proxy := &http.Server{Handler: proxyTo(u.url)}
	go proxy.Serve(ln)
	f := newFront(t, gateway.Options{
		Upstreams:       []gateway.Upstream{{Name: "up", URL: "http://" + ln.Addr().String()}},
		CircuitFailures: 2,
		CircuitCooldown: time.Hour, // no probe during the test
		// No pooled connection: a request on a connection the closed
		// proxy dropped may have been written, and is rightly an unknown
		// outcome, not an unreachable upstream.
		Client: client.Options{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	proxy.Close()
	for i := 0; i < 3; i++ {
		res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
		must(t, err)
		fail := failureOf(t, res)
		if fail.Code != mcp.FailureUpstreamUnavailable || !fail.Retryable || fail.RetryAfterMs <= 0 {
			t.Fatalf("call %d: %+v, want a retryable upstream_unavailable with retryAfterMs", i+1, fail)
		}
	}
	if st := f.gw.Upstreams()[0]; st.Circuit != gateway.CircuitOpen {
		t.Fatalf("after repeated failures the circuit is %s", st.Circuit)
	}
}

// Downstream credentials never reach the upstream, and the upstream's
// reach it on every request.
func TestCredentialsNeverCross(t *testing.T) {
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url, Header: http.Header{"Authorization": {"Bearer upstream-secret"}}}},
	}, &streamhttp.HandlerOptions{AuthToken: "downstream-secret"})
	c := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer downstream-secret"}, "X-Downstream": {"private"}}})
	_, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
	must(t, err)
	hs := u.seenHeaders()
	if len(hs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	for i, h := range hs {
		if got := h.Get("Authorization"); got != "Bearer upstream-secret" {
			t.Fatalf("upstream request %d carried Authorization %q", i, got)
		}
		if h.Get("X-Downstream") != "" {
			t.Fatalf("upstream request %d carried a downstream header", i)
		}
	}
}

// With several upstreams, names are prefixed with the upstream's;
// a call reaches the right one.
func TestSeveralUpstreamsArePrefixed(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	long := strings.Repeat("x", 120)
	must(t, b.srv.AddTool(server.Tool{Name: long}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("long")}}, nil
	}))
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "a", URL: a.url}, {Name: "b", URL: b.url}}}, nil)
	c := f.dial(t, 0, nil)
	tools, err := c.ListTools(context.Background())
	must(t, err)
	var longName string
	names := map[string]bool{}
	for _, tl := range tools {
		names[tl.Name] = true
		if len(tl.Name) > 128 {
			t.Errorf("tool name %q is longer than 128 characters", tl.Name)
		}
		if strings.HasPrefix(tl.Name, "b_xxx") {
			longName = tl.Name
		}
	}
	for _, want := range []string{"a_echo", "b_echo", "a_hang", "b_hang"} {
		if !names[want] {
			t.Fatalf("tools %v lack %s", names, want)
		}
	}
	if longName == "" {
		t.Fatalf("the 120-character tool of b is not listed: %v", names)
	}
	res, err := c.CallTool(context.Background(), longName, nil, nil)
	must(t, err)
	if text(res) != "long" {
		t.Fatalf("the mended name reached %q", text(res))
	}
	res, err = c.CallTool(context.Background(), "b_echo", map[string]any{"text": "to b"}, nil)
	must(t, err)
	if !strings.Contains(structured(res), "to b") {
		t.Fatalf("b_echo answered %+v", res)
	}
}

// A 2025-era HTTP upstream gets one session per tenant: one tenant never
// shares the session (and its server-initiated requests) of another.
func TestLegacyUpstreamSessionPerTenant(t *testing.T) {
	u := newUpstream(t)
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:    client.Options{Era: mcp.Legacy},
	}, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	before := u.sessionCount() // the gateway's own session, which lists
	for _, tok := range []string{"tok-a", "tok-b", "tok-a"} {
		c := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer " + tok}}})
		_, err := c.CallTool(context.Background(), "echo", map[string]any{"text": tok}, nil)
		must(t, err)
	}
	if got := u.sessionCount() - before; got != 2 {
		t.Fatalf("two tenants used %d upstream sessions, want 2", got)
	}
	if st := f.gw.Upstreams()[0]; st.Sessions != 2 {
		t.Fatalf("the gateway holds %d tenant sessions, want 2", st.Sessions)
	}
}

// Tenants' 2025-era sessions with one upstream share one pool of HTTP
// connections: a connection a session left idle carries the next
// session's requests, so tenants cost sessions, not sockets. (The
// upstream offers no session stream here, which would hold a connection
// per session.)
func TestTenantSessionsShareTheUpstreamsConnections(t *testing.T) {
	u := newUpstream(t)
	u.noStream.Store(true)
	const tenants = 6
	tokens := map[string]string{}
	for i := range tenants {
		tokens[fmt.Sprint("tok-", i)] = fmt.Sprint("tenant-", i)
	}
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Client:    client.Options{Era: mcp.Legacy},
	}, &streamhttp.HandlerOptions{Tokens: tokens})
	before := u.conns.Load()
	for tok := range tokens {
		c := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer " + tok}}})
		_, err := c.CallTool(context.Background(), "echo", map[string]any{"text": tok}, nil)
		must(t, err)
	}
	if st := f.gw.Upstreams()[0]; st.Sessions != tenants {
		t.Fatalf("the gateway holds %d tenant sessions, want %d", st.Sessions, tenants)
	}
	// Apart, each session would open one at least; shared, no more are
	// opened than requests were ever in flight at once.
	if got := u.conns.Load() - before; got > 3 {
		t.Fatalf("%d tenant sessions opened %d connections to the upstream: they do not share a pool", tenants, got)
	}
}

// A tenant's 2025-era upstream session is dialled for every call of the
// tenant's that waits for it: the first call's cancellation ends that
// call alone, and the one waiting beside it is served once the session
// is up.
func TestTenantSessionDialOutlivesTheCallThatBeganIt(t *testing.T) {
	u := newUpstream(t)
	var armed atomic.Bool
	dialing, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	endpoint := u.inFront(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if armed.Load() && bytes.Contains(body, []byte(`"initialize"`)) {
			dialing <- struct{}{}
			<-release // the tenant's session is being dialled
		}
		return false
	})
	t.Cleanup(open) // before the proxy's Close, which waits for its handlers
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: endpoint}},
		Client:    client.Options{Era: mcp.Legacy},
	}, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice"}})
	armed.Store(true) // the gateway's own session is up: what comes now is alice's
	c := f.dial(t, mcp.Modern, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-a"}}})

	first, cancel := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.CallTool(first, "echo", map[string]any{"text": "first"}, nil)
		firstDone <- err
	}()
	select {
	case <-dialing:
	case <-time.After(wait):
		t.Fatal("alice's session was never dialled")
	}
	second := make(chan error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "second"}, nil)
		if err == nil && !strings.Contains(text(res), "second") {
			err = fmt.Errorf("answered %q", text(res))
		}
		second <- err
	}()
	awaitRunning(t, f.srv, 2) // both wait for the session
	cancel()
	if err := <-firstDone; err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	awaitRunning(t, f.srv, 1) // the first has ended, the dial goes on
	open()
	select {
	case err := <-second:
		must(t, err)
	case <-time.After(wait):
		t.Fatal("the call waiting for the session never ended")
	}
}

// awaitRunning returns once srv runs n calls: a state with no event to
// wait on, looked at until it holds.
func awaitRunning(t *testing.T, srv *server.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for srv.Load().Running != n {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway runs %d calls, want %d", srv.Load().Running, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// An upstream's elicitation during a call reaches the downstream client
// that made it, and the answer goes back: as a server request in the
// 2025 era, and as the gateway's own input_required round in the
// 2026-07-28 era.
func TestInputIsRelayed(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			u := newUpstream(t)
			f := newFront(t, u.options(era.era), nil)
			asked := 0
			c := f.dial(t, era.era, &client.Options{
				Capabilities: mcp.ClientCapabilities{Elicitation: json.RawMessage(`{}`)},
				OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
					asked++
					if method != mcp.MethodElicit || !strings.Contains(string(params), "your name?") {
						return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unexpected %s %s", method, params)
					}
					return map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}, nil
				},
			})
			res, err := c.CallTool(context.Background(), "ask", nil, nil)
			must(t, err)
			if asked != 1 || !strings.Contains(text(res), "Ada") {
				t.Fatalf("asked %d times; result %q", asked, text(res))
			}
		})
	}
}

// failureOf decodes a failed result's structured body.
func failureOf(t *testing.T, res *mcp.CallToolResult) mcp.Failure {
	t.Helper()
	if !res.IsError {
		t.Fatalf("the call succeeded: %+v", res)
	}
	var f mcp.Failure
	if err := json.Unmarshal([]byte(text(res)), &f); err != nil {
		t.Fatalf("the failed result %q is not structured: %v", text(res), err)
	}
	return f
}

// proxyTo forwards requests to url, so that a test can take an upstream
// away by closing the proxy.
func proxyTo(url string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				if fl, ok := w.(http.Flusher); ok {
					fl.Flush()
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// upstreamCancelled reports whether an upstream handler's context ended
// the way its era cancels over HTTP: a notifications/cancelled in the
// 2025 era, the request's stream closed in the 2026-07-28 era.
func upstreamCancelled(era mcp.Era, cause error) bool {
	if era == mcp.Modern {
		return errors.Is(cause, server.ErrDisconnected)
	}
	return errors.Is(cause, server.ErrPeerCancelled)
}

// An open circuit is probed once its cooldown passes: when the upstream
// answers again, the circuit closes, the upstream is listed again, and
// calls are forwarded.
func TestCircuitClosesWhenTheUpstreamIsBack(t *testing.T) {
	u := newUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	proxy := &http.Server{Handler: proxyTo(u.url)}
	go proxy.Serve(ln)
	ev := newEvents()
	f := newFront(t, gateway.Options{
		Upstreams:       []gateway.Upstream{{Name: "up", URL: "http://" + addr}},
		CircuitFailures: 1,
		CircuitCooldown: 20 * time.Millisecond,
		Observer:        ev,
		Client:          client.Options{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	proxy.Close()
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "x"}, nil)
	must(t, err)
	if fail := failureOf(t, res); fail.Code != mcp.FailureUpstreamUnavailable {
		t.Fatalf("with the upstream gone: %+v", fail)
	}
	if st := f.gw.Upstreams()[0]; st.Circuit != gateway.CircuitOpen {
		t.Fatalf("the circuit is %s after a failure, want open", st.Circuit)
	}
	// The upstream comes back on the same address.
	ln, err = net.Listen("tcp", addr)
	must(t, err)
	back := &http.Server{Handler: proxyTo(u.url)}
	go back.Serve(ln)
	t.Cleanup(func() { back.Close() })
	for st := f.gw.Upstreams()[0]; st.Circuit != gateway.CircuitClosed; st = f.gw.Upstreams()[0] {
		ev.waitFor(t, gateway.EventCircuit) // a probe decided
	}
	res, err = c.CallTool(context.Background(), "echo", map[string]any{"text": "back"}, nil)
	if err != nil || !strings.Contains(structured(res), "back") {
		t.Fatalf("after the circuit closed: %+v, %v", res, err)
	}
}
