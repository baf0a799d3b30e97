package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// stopWatch is an observer that tells a test which upstreams a reload
// stopped.
type stopWatch struct{ stopped chan string }

func newStopWatch() *stopWatch { return &stopWatch{stopped: make(chan string, 64)} }

func (s *stopWatch) Forwarded(gateway.ForwardRecord) {}

func (s *stopWatch) UpstreamEvent(e gateway.UpstreamEvent) {
	if e.Kind == gateway.EventStopped {
		s.stopped <- e.Upstream
	}
}

// stdioUp is a stdio upstream (this test binary) named name whose tool
// "secret" answers secret.
func stdioUp(name, secret string) gateway.Upstream {
	return gateway.Upstream{Name: name, Command: []string{os.Args[0], "-test.run=^$"},
		Env: []string{stdioUpstreamEnv + "=1", "UPSTREAM_SECRET=" + secret}}
}

func httpUp(name string, u *upstream) gateway.Upstream {
	return gateway.Upstream{Name: name, URL: u.url}
}

// callText calls tool and returns its text, failing the test on any
// failure.
func callText(t *testing.T, c *client.Client, tool string) string {
	t.Helper()
	res, err := c.CallTool(context.Background(), tool, nil, nil)
	if err != nil || res.IsError {
		t.Fatalf("%s: %+v, %v", tool, res, err)
	}
	return text(res)
}

func toolNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	tools, err := c.ListTools(context.Background())
	must(t, err)
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

func upstreamNames(g *gateway.Gateway) []string {
	var names []string
	for _, s := range g.Upstreams() {
		names = append(names, s.Name)
	}
	return names
}

func reload(t *testing.T, g *gateway.Gateway, ups []gateway.Upstream, p *gateway.Policy) gateway.Changes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch, err := g.Reload(ctx, ups, p)
	must(t, err)
	return ch
}

func isUnknownTool(err error) bool {
	var rpc *jsonrpc.Error
	return errors.As(err, &rpc) && rpc.Code == jsonrpc.CodeInvalidParams && strings.Contains(rpc.Message, "unknown tool")
}

// An upstream a reload adds is started and listed before Reload returns,
// its tools served and clients told the list changed; those it keeps are
// the same processes as before.
func TestReloadAddsUpstream(t *testing.T) {
	u := newUpstream(t)
	v := newUpstream(t)
	ups := []gateway.Upstream{stdioUp("a", "one"), httpUp("b", u)}
	f := newFront(t, gateway.Options{Upstreams: ups}, nil)
	told := make(chan string, 64)
	c := f.dial(t, mcp.Legacy, &client.Options{OnNotification: func(method string, _ json.RawMessage) {
		if method == mcp.NotificationToolsListChanged {
			told <- method
		}
	}})
	pid := callText(t, c, "a_pid")

	ch := reload(t, f.gw, append(ups, httpUp("c", v)), nil)
	if !slices.Equal(ch.Added, []string{"c"}) || !slices.Equal(ch.Unchanged, []string{"a", "b"}) ||
		len(ch.Removed)+len(ch.Restarted) != 0 || ch.PolicyChanged {
		t.Fatalf("changes %+v", ch)
	}
	recv(t, told, "the list_changed notification")
	if !slices.Contains(toolNames(t, c), "c_echo") {
		t.Fatalf("the added upstream's tools are not listed: %v", toolNames(t, c))
	}
	res, err := c.CallTool(context.Background(), "c_echo", map[string]any{"text": "hi"}, nil)
	if err != nil || !strings.Contains(structured(res), `"hi"`) {
		t.Fatalf("c_echo: %+v, %v", res, err)
	}
	if got := callText(t, c, "a_pid"); got != pid {
		t.Fatalf("an unchanged upstream was restarted: pid %s, then %s", pid, got)
	}
	if got := upstreamNames(f.gw); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("upstreams %v", got)
	}
}

// An upstream a reload removes while a call of its tool is in flight
// takes no new call — its tools are unknown at once — but the call in
// flight finishes with its own result; then the upstream is closed.
func TestReloadDrainsRemovedUpstream(t *testing.T) {
	u := newUpstream(t)
	t.Cleanup(u.gate.Release)
	v := newUpstream(t)
	w := newUpstream(t)
	stops := newStopWatch()
	ups := []gateway.Upstream{httpUp("a", v), httpUp("b", u), httpUp("c", w)}
	f := newFront(t, gateway.Options{Upstreams: ups, Observer: stops}, nil)
	c := f.dial(t, mcp.Modern, nil)

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "b_hang", nil, nil)
		done <- answer{res, err}
	}()
	id := u.gate.WaitEntered(t)

	ch := reload(t, f.gw, []gateway.Upstream{ups[0], ups[2]}, nil)
	if !slices.Equal(ch.Removed, []string{"b"}) || !slices.Equal(ch.Unchanged, []string{"a", "c"}) {
		t.Fatalf("changes %+v", ch)
	}
	if _, err := c.CallTool(context.Background(), "b_echo", map[string]any{"text": "x"}, nil); !isUnknownTool(err) {
		t.Fatalf("a removed upstream's tool was called: %v", err)
	}
	if names := toolNames(t, c); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "b_") }) {
		t.Fatalf("a removed upstream's tools are listed: %v", names)
	}
	if got := upstreamNames(f.gw); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("upstreams %v", got)
	}
	select {
	case name := <-stops.stopped:
		t.Fatalf("upstream %s was stopped with a call in flight", name)
	default:
	}
	u.gate.Release()
	a := recv(t, done, "the call in flight's answer")
	if a.err != nil || a.res.IsError || text(a.res) != "released "+id.String() {
		t.Fatalf("the call in flight ended with %+v, %v", a.res, a.err)
	}
	if name := recv(t, stops.stopped, "the removed upstream's stop"); name != "b" {
		t.Fatalf("upstream %s was stopped", name)
	}
	res, err := c.CallTool(context.Background(), "c_echo", map[string]any{"text": "on"}, nil)
	if err != nil || !strings.Contains(structured(res), `"on"`) {
		t.Fatalf("the upstreams kept stopped serving: %+v, %v", res, err)
	}
}

// A drain that outlasts Options.ReloadGrace closes the upstream: the
// call still in flight fails. Going from several upstreams to one, the
// one kept has its tools renamed without their prefix.
func TestReloadGraceCutsDrainShort(t *testing.T) {
	u := newUpstream(t)
	t.Cleanup(u.gate.Release)
	v := newUpstream(t)
	stops := newStopWatch()
	ups := []gateway.Upstream{httpUp("a", v), httpUp("b", u)}
	f := newFront(t, gateway.Options{Upstreams: ups, Observer: stops, ReloadGrace: 20 * time.Millisecond}, nil)
	told := make(chan struct{}, 64)
	c := f.dial(t, mcp.Legacy, &client.Options{OnNotification: func(method string, _ json.RawMessage) {
		if method == mcp.NotificationToolsListChanged {
			told <- struct{}{}
		}
	}})
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "b_hang", nil, nil)
		done <- answer{res, err}
	}()
	u.gate.WaitEntered(t)

	ch := reload(t, f.gw, ups[:1], nil)
	if !slices.Equal(ch.Removed, []string{"b"}) || !slices.Equal(ch.Unchanged, []string{"a"}) {
		t.Fatalf("changes %+v", ch)
	}
	// The gate is never released: only the grace ends the call.
	a := recv(t, done, "the call cut short's answer")
	// It was in flight upstream: whether it acted is unknown.
	if a.err != nil || !a.res.IsError || !strings.Contains(text(a.res), mcp.FailureOutcomeUnknown) ||
		!strings.Contains(text(a.res), "gateway: closing") {
		t.Fatalf("a call outlasting the grace ended with %+v, %v; want its outcome unknown, the gateway closing", a.res, a.err)
	}
	u.gate.WaitExited(t) // and the upstream was told it is cancelled
	if name := recv(t, stops.stopped, "the removed upstream's stop"); name != "b" {
		t.Fatalf("upstream %s was stopped", name)
	}
	recv(t, told, "the list_changed notification")
	names := toolNames(t, c)
	if !slices.Contains(names, "echo") || slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "_") }) {
		t.Fatalf("with one upstream left, tools are %v; want its names unprefixed", names)
	}
	res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": "hi"}, nil)
	if err != nil || !strings.Contains(structured(res), `"hi"`) {
		t.Fatalf("echo: %+v, %v", res, err)
	}
	if _, err := c.CallTool(context.Background(), "a_echo", map[string]any{"text": "hi"}, nil); !isUnknownTool(err) {
		t.Fatalf("a tool's old name still answers: %v", err)
	}

	// And back to two: every tool gets its prefix again.
	ch = reload(t, f.gw, ups, nil)
	if !slices.Equal(ch.Added, []string{"b"}) || !slices.Equal(ch.Unchanged, []string{"a"}) {
		t.Fatalf("changes %+v", ch)
	}
	names = toolNames(t, c)
	if !slices.Contains(names, "a_echo") || !slices.Contains(names, "b_echo") || slices.Contains(names, "echo") {
		t.Fatalf("with two upstreams, tools are %v", names)
	}
}

// An upstream whose configuration changed — a credential in its
// environment — is restarted: a new process serves its tools, with the
// new value; the one unchanged is left as it is.
func TestReloadRestartsChangedUpstream(t *testing.T) {
	u := newUpstream(t)
	stops := newStopWatch()
	ups := []gateway.Upstream{stdioUp("a", "one"), httpUp("b", u)}
	f := newFront(t, gateway.Options{Upstreams: ups, Observer: stops}, nil)
	c := f.dial(t, mcp.Modern, nil)
	if got := callText(t, c, "a_secret"); got != "one" {
		t.Fatalf("secret %q", got)
	}
	pid := callText(t, c, "a_pid")

	ch := reload(t, f.gw, []gateway.Upstream{stdioUp("a", "two"), httpUp("b", u)}, nil)
	if !slices.Equal(ch.Restarted, []string{"a"}) || !slices.Equal(ch.Unchanged, []string{"b"}) ||
		len(ch.Added)+len(ch.Removed) != 0 {
		t.Fatalf("changes %+v", ch)
	}
	if got := callText(t, c, "a_secret"); got != "two" {
		t.Fatalf("after the reload the secret is %q", got)
	}
	if got := callText(t, c, "a_pid"); got == pid {
		t.Fatal("the changed upstream's process was kept")
	}
	if name := recv(t, stops.stopped, "the old process's stop"); name != "a" {
		t.Fatalf("upstream %s was stopped", name)
	}
	// The same configuration again changes nothing.
	ch = reload(t, f.gw, []gateway.Upstream{stdioUp("a", "two"), httpUp("b", u)}, nil)
	if !slices.Equal(ch.Unchanged, []string{"a", "b"}) || len(ch.Added)+len(ch.Removed)+len(ch.Restarted) != 0 {
		t.Fatalf("changes %+v", ch)
	}
}

// A reload the gateway refuses changes nothing: the upstreams, their
// processes and the tools served are those of before.
func TestReloadRefusedChangesNothing(t *testing.T) {
	u := newUpstream(t)
	ups := []gateway.Upstream{stdioUp("a", "one"), httpUp("b", u)}
	f := newFront(t, gateway.Options{Upstreams: ups}, nil)
	c := f.dial(t, mcp.Modern, nil)
	pid := callText(t, c, "a_pid")
	before := toolNames(t, c)

	keyed := &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"b_echo": {
		Server: server.Policy{Retry: mcp.RetryConditional},
		Keyed:  &idempotency.Policy{Key: idempotency.KeyRequired, External: true},
	}}}
	v := newUpstream(t)
	for name, try := range map[string]struct {
		ups []gateway.Upstream
		p   *gateway.Policy
	}{
		"duplicate names":           {[]gateway.Upstream{stdioUp("a", "two"), httpUp("c", v), httpUp("c", u)}, nil},
		"no upstream":               {nil, nil},
		"bad limits":                {[]gateway.Upstream{stdioUp("a", "two"), {Name: "c", URL: v.url, Limits: server.Limits{MaxConcurrent: -1}}}, nil},
		"conditional with noledger": {[]gateway.Upstream{stdioUp("a", "two"), httpUp("c", v)}, keyed},
	} {
		ch, err := f.gw.Reload(context.Background(), try.ups, try.p)
		if err == nil {
			t.Errorf("%s: the reload was taken: %+v", name, ch)
			continue
		}
		if fmt.Sprint(ch) != fmt.Sprint(gateway.Changes{}) {
			t.Errorf("%s: refused, but reports changes %+v", name, ch)
		}
	}
	if got := callText(t, c, "a_pid"); got != pid {
		t.Fatal("a refused reload restarted an upstream")
	}
	if got := callText(t, c, "a_secret"); got != "one" {
		t.Fatalf("a refused reload changed the secret: %q", got)
	}
	if after := toolNames(t, c); !slices.Equal(after, before) {
		t.Fatalf("a refused reload changed the tools: %v, then %v", before, after)
	}
	if got := upstreamNames(f.gw); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("upstreams %v", got)
	}

	must(t, f.gw.Close())
	if _, err := f.gw.Reload(context.Background(), ups, nil); err == nil {
		t.Fatal("a closed gateway took a reload")
	}
	idle, err := gateway.New(mcptest.NewServer(t, nil), &gateway.Options{Upstreams: ups, StartWait: time.Hour})
	must(t, err)
	if _, err := idle.Reload(context.Background(), ups, nil); err == nil {
		t.Fatal("a gateway not started took a reload")
	}
	// Closed before it started, it starts nothing and waits for nothing.
	must(t, idle.Close())
	sctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := idle.Start(sctx); err != nil {
		t.Fatalf("Start after Close: %v", err)
	}
}

// A policy a reload brings applies to the calls that begin after it; a
// call in flight keeps the one it began with.
func TestReloadPolicyAppliesToNextCall(t *testing.T) {
	u := newUpstream(t)
	t.Cleanup(u.gate.Release)
	ups := []gateway.Upstream{httpUp("up", u)}
	f := newFront(t, gateway.Options{Upstreams: ups}, nil)
	c := f.dial(t, mcp.Modern, nil)
	done := make(chan error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "hang", nil, nil)
		if err == nil && res.IsError {
			err = fmt.Errorf("failed: %s", text(res))
		}
		done <- err
	}()
	u.gate.WaitEntered(t)

	short := &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
		"hang": {Server: server.Policy{MaxTimeout: 50 * time.Millisecond}},
		"echo": {Server: server.Policy{Retry: mcp.RetrySafe}},
	}}
	ch := reload(t, f.gw, ups, short)
	if !ch.PolicyChanged || !slices.Equal(ch.Unchanged, []string{"up"}) {
		t.Fatalf("changes %+v", ch)
	}
	tools, err := c.ListTools(context.Background())
	must(t, err)
	for _, tl := range tools {
		if tl.Name == "echo" && tl.Meta[mcp.MetaRetryClass] != mcp.RetryClassSafe {
			t.Fatalf("echo's retry class is %v after the reload made it safe", tl.Meta[mcp.MetaRetryClass])
		}
	}
	// A new call runs under the new clock: it ends at 50 ms.
	res, err := c.CallTool(context.Background(), "hang", nil, nil)
	if err == nil && !res.IsError {
		t.Fatalf("a call after the reload outlived its new clock: %+v", res)
	}
	u.gate.WaitExited(t)
	// The call in flight has run longer than that, under the old one.
	u.gate.Release()
	if err := recv(t, done, "the call in flight's answer"); err != nil {
		t.Fatalf("the call in flight took the new policy: %v", err)
	}
	if ch := reload(t, f.gw, ups, short); ch.PolicyChanged {
		t.Fatal("the same policy again is reported changed")
	}
}

// Reloads, concurrent with each other and with calls: an upstream every
// reload keeps serves every call throughout, and -race finds nothing.
func TestReloadConcurrentWithCalls(t *testing.T) {
	a, b, x := newUpstream(t), newUpstream(t), newUpstream(t)
	base := []gateway.Upstream{httpUp("a", a), httpUp("b", b)}
	more := append(slices.Clone(base), httpUp("x", x))
	safe := &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"a_echo": {Server: server.Policy{Retry: mcp.RetrySafe}}}}
	f := newFront(t, gateway.Options{Upstreams: base}, nil)
	c := f.dial(t, mcp.Modern, nil)

	ctx, cancel := context.WithCancel(context.Background())
	var calls sync.WaitGroup
	failures := make(chan error, 64)
	for range 4 {
		calls.Go(func() {
			for ctx.Err() == nil {
				res, err := c.CallTool(context.Background(), "a_echo", map[string]any{"text": "k"}, nil)
				if err != nil || res.IsError {
					failures <- fmt.Errorf("a_echo: %+v, %v", res, err)
					return
				}
				c.CallTool(context.Background(), "x_echo", map[string]any{"text": "k"}, nil) // served or not
				_ = f.gw.Upstreams()
			}
		})
	}
	var reloads sync.WaitGroup
	for i := range 2 {
		reloads.Go(func() {
			for j := range 4 {
				ups, p := base, (*gateway.Policy)(nil)
				if (i+j)%2 == 0 {
					ups, p = more, safe
				}
				if _, err := f.gw.Reload(context.Background(), ups, p); err != nil {
					failures <- err
					return
				}
			}
		})
	}
	reloads.Wait()
	cancel()
	calls.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
}

// A changed upstream with a call in flight: the new connection serves
// the new calls at once, while the old one finishes the call it has and
// is then stopped.
func TestReloadRestartDrainsOldConnection(t *testing.T) {
	u := newUpstream(t)
	t.Cleanup(u.gate.Release)
	v := newUpstream(t)
	stops := newStopWatch()
	ups := []gateway.Upstream{httpUp("a", v), httpUp("b", u)}
	f := newFront(t, gateway.Options{Upstreams: ups, Observer: stops}, nil)
	c := f.dial(t, mcp.Modern, nil)
	done := make(chan error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "b_hang", nil, nil)
		if err == nil && res.IsError {
			err = fmt.Errorf("failed: %s", text(res))
		}
		done <- err
	}()
	u.gate.WaitEntered(t)

	rotated := httpUp("b", u)
	rotated.Header = map[string][]string{"Authorization": {"Bearer rotated"}}
	ch := reload(t, f.gw, []gateway.Upstream{ups[0], rotated}, nil)
	if !slices.Equal(ch.Restarted, []string{"b"}) || !slices.Equal(ch.Unchanged, []string{"a"}) {
		t.Fatalf("changes %+v", ch)
	}
	res, err := c.CallTool(context.Background(), "b_echo", map[string]any{"text": "new"}, nil)
	if err != nil || !strings.Contains(structured(res), `"new"`) {
		t.Fatalf("b_echo over the new connection: %+v, %v", res, err)
	}
	if !slices.ContainsFunc(u.seenHeaders(), func(h http.Header) bool { return h.Get("Authorization") == "Bearer rotated" }) {
		t.Fatal("the new connection did not send the rotated credential")
	}
	select {
	case name := <-stops.stopped:
		t.Fatalf("upstream %s was stopped with a call in flight", name)
	default:
	}
	u.gate.Release()
	if err := recv(t, done, "the call in flight's answer"); err != nil {
		t.Fatalf("the call in flight over the old connection: %v", err)
	}
	if name := recv(t, stops.stopped, "the old connection's stop"); name != "b" {
		t.Fatalf("upstream %s was stopped", name)
	}
	if got := upstreamNames(f.gw); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("upstreams %v", got)
	}
}
