package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// An upstream's Limits bound its tools together: with one slot and one
// place in the queue, a call of one tool waits behind another tool's, and
// a third is refused at once, retryably; a second upstream's tools are
// not held up by them.
func TestUpstreamLimitsBoundItsToolsTogether(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{
		{Name: "a", URL: a.url, Limits: server.Limits{MaxConcurrent: 1, MaxQueued: 1}},
		{Name: "b", URL: b.url},
	}}, nil)
	c := f.dial(t, 0, nil)
	held := make(chan error, 1)
	go func() { _, err := c.CallTool(context.Background(), "a_hang", nil, nil); held <- err }()
	a.gate.WaitEntered(t)
	queued := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := c.CallTool(context.Background(), "a_echo", map[string]any{"text": "queued"}, nil)
		queued <- res
	}()
	deadline := time.After(wait)
	for l := f.srv.Load(); l.Queued < 1; l = f.srv.Load() {
		select {
		case res := <-queued:
			t.Fatalf("a_echo ran beside a_hang past the upstream's one slot: %+v", res)
		case <-deadline:
			t.Fatalf("a_echo never waited in the upstream's queue: %+v", l)
		default:
			runtime.Gosched() // the call is on its way to admission
		}
	}
	_, err := c.CallTool(context.Background(), "a_echo", map[string]any{"text": "refused"}, nil)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != mcp.CodeOverloaded {
		t.Fatalf("a third call to upstream a: %v, want the retryable overload refusal", err)
	}
	res, err := c.CallTool(context.Background(), "b_echo", map[string]any{"text": "b runs"}, nil)
	if err != nil || !strings.Contains(structured(res), "b runs") {
		t.Fatalf("upstream b's tool while a is full: %+v, %v", res, err)
	}
	a.gate.Release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if res := <-queued; res == nil || !strings.Contains(structured(res), "queued") {
		t.Fatalf("the queued call: %+v", res)
	}
}

// With PerTenant a stdio upstream runs one process per tenant, within
// MaxSessions: a tenant's calls go to its own process, another tenant's
// to another, and past the bound the least recently used idle one is
// closed to make room.
func TestStdioUpstreamPerTenant(t *testing.T) {
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "local", Command: []string{os.Args[0], "-test.run=^$"},
			Env: []string{stdioUpstreamEnv + "=1"}, PerTenant: true}},
		MaxSessions: 2,
	}, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob", "tok-c": "carol"}})
	pid := func(tok string) string {
		t.Helper()
		c := f.dial(t, 0, &client.Options{Header: http.Header{"Authorization": {"Bearer " + tok}}})
		res, err := c.CallTool(context.Background(), "pid", nil, nil)
		must(t, err)
		return text(res)
	}
	alice, bob := pid("tok-a"), pid("tok-b")
	if alice == bob || alice == "" {
		t.Fatalf("alice's process %s, bob's %s: want two", alice, bob)
	}
	if again := pid("tok-a"); again != alice {
		t.Fatalf("alice's second call went to process %s, not her %s", again, alice)
	}
	carol := pid("tok-c") // bob's is the least recently used: closed
	if carol == alice || carol == bob {
		t.Fatalf("carol shares a process: %s (alice %s, bob %s)", carol, alice, bob)
	}
	if st := f.gw.Upstreams()[0]; st.Sessions != 2 {
		t.Fatalf("%d tenant processes, want 2", st.Sessions)
	}
	if again := pid("tok-b"); again == bob {
		t.Fatalf("bob's closed process %s still answered", bob)
	}
}
