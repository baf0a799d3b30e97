package server_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// tagObserver is an observer that hands each request a context carrying
// its tag, and checks that it gets the same context back at the end.
type tagObserver struct {
	tag string
	mu  sync.Mutex
	bad []string
}

type tagKey struct{ tag string }

func (o *tagObserver) RequestStarted(ctx context.Context, info server.RequestInfo) context.Context {
	return context.WithValue(ctx, tagKey{o.tag}, info.ID)
}

func (o *tagObserver) RequestEnded(ctx context.Context, rec server.RequestRecord) {
	if got := ctx.Value(tagKey{o.tag}); got != rec.ID {
		o.mu.Lock()
		o.bad = append(o.bad, fmt.Sprintf("%s: request %v ended with the context of %v", o.tag, rec.ID, got))
		o.mu.Unlock()
	}
}

// Two observers at once each see every start and every end, in both eras
// over both transports, with the record's new fields; the context an
// observer returns at the start is the one the handler runs in and the one
// it gets back at the end.
func TestObservers(t *testing.T) {
	first, second := mcptest.NewRecorder(), mcptest.NewRecorder()
	tags := []*tagObserver{{tag: "a"}, {tag: "b"}}
	opts := first.Hook(second.Hook(&server.Options{MaxConcurrentCalls: 1, Observers: []server.Observer{tags[0], tags[1]}}))
	srv := mcptest.NewServer(t, opts)
	gate := mcptest.NewGate(t, srv, "gate")
	srv.AddTool(server.Tool{Name: "annotated"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		req.Annotate("idempotency", "replayed")
		for _, o := range tags {
			if ctx.Value(tagKey{o.tag}) != req.ID {
				return nil, fmt.Errorf("the handler's context lacks observer %s's value", o.tag)
			}
		}
		return &mcp.CallToolResult{}, nil
	})

	// stdio, both eras; the gated call makes the next one wait.
	c := mcptest.Stdio(t, srv, nil)
	c.Initialize(mcp.Version20251125)
	c.Request(2, mcp.MethodToolsCall, map[string]any{"name": "gate"})
	gate.WaitEntered(t)
	c.Request(3, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "annotated"}))
	for l := srv.Load(); l.Queued == 0; l = srv.Load() {
	}
	gate.Release()
	c.Await(2)
	c.Await(3)

	// HTTP, both eras, as a tenant.
	h := mcptest.HTTP(t, srv, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok": "alice"}}).As("tok")
	h.Initialize(nil)
	mcptest.ReadJSON(t, h.Legacy(context.Background(), 5, mcp.MethodToolsList, nil))
	mcptest.ReadJSON(t, h.Modern(context.Background(), 6, mcp.MethodToolsCall, map[string]any{"name": "annotated"}))

	for _, rec := range []*mcptest.Recorder{first, second} {
		for _, w := range []struct {
			id        int64
			transport string
			era       mcp.Era
			tenant    string
			session   bool // named (a legacy HTTP session)
		}{
			{0, "stdio", mcp.Legacy, "", false}, {2, "stdio", mcp.Legacy, "", false}, {3, "stdio", mcp.Modern, "", false},
			{0, "http", mcp.Legacy, "alice", true}, {5, "http", mcp.Legacy, "alice", true}, {6, "http", mcp.Modern, "alice", false},
		} {
			r := rec.WaitRecord(t, fmt.Sprintf("record of %s request %d", w.transport, w.id), func(r server.RequestRecord) bool {
				return r.ID == jsonrpc.IntID(w.id) && r.Transport == w.transport
			})
			if r.Era != w.era || r.Tenant != w.tenant || (r.Session != "") != w.session {
				t.Errorf("%s request %d: %+v, want era %v, tenant %q, session named %v", w.transport, w.id, r, w.era, w.tenant, w.session)
			}
		}
		all := rec.AllRequests()
		for _, r := range all {
			if r.Tool == "annotated" && (r.Annotations["idempotency"] != "replayed" || r.Outcome != server.Completed || r.IsError) {
				t.Errorf("the annotated call's record: %+v", r)
			}
			if r.Tool == "annotated" && r.Transport == "stdio" && r.Queued <= 0 {
				t.Errorf("the queued stdio call's record: %+v, want a queue wait", r)
			}
		}
		// Every request that ended also started, with the same facts.
		started := rec.Started()
		for _, r := range all {
			if !slices.ContainsFunc(started, func(s server.RequestInfo) bool {
				return s.ID == r.ID && s.Method == r.Method && s.Transport == r.Transport && s.Tenant == r.Tenant && s.Session == r.Session
			}) {
				t.Errorf("request %v %s ended without a matching start", r.ID, r.Method)
			}
		}
	}
	for _, o := range tags {
		if len(o.bad) > 0 {
			t.Error(o.bad)
		}
	}
}

// countEvents counts events by kind and transport.
func countEvents(evs []server.Event) map[string]int {
	n := map[string]int{}
	for _, ev := range evs {
		n[ev.Kind.String()+"/"+ev.Transport]++
	}
	return n
}

// Events: a progress notification counts as sent when the transport takes
// it, not when it is reported; two reports the transport had no time to
// take become one notification, and the response after them goes out
// flagged for refetch; a cancellation for a request that already ended is
// reported as late, and one for a running request is not.
func TestEventObservers(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{ProgressInterval: time.Nanosecond}))
	srv.AddTool(server.Tool{Name: "twice"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		req.ReportProgress(1, 2, "")
		req.ReportProgress(2, 2, "")
		return &mcp.CallToolResult{}, nil
	})
	sess := srv.NewSession(conn.Stdio())
	out := sess.NewQueue() // nobody takes from it until the test does
	call := jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.IntID(1), Method: mcp.MethodToolsCall,
		Params: []byte(`{"name":"twice","_meta":{"progressToken":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`)}
	sess.HandleRequest(context.Background(), call, conn.Prepared{RunHere: true}, out)
	rec.WaitRequest(t, jsonrpc.IntID(1))
	if n := countEvents(rec.Events()); len(n) != 0 {
		t.Fatalf("events before the transport took anything: %v", n)
	}
	var frames []outbound.Frame
	for f, ok := out.TryNext(); ok; f, ok = out.TryNext() {
		frames = append(frames, f)
	}
	if len(frames) != 2 || frames[0].Kind != outbound.Progress || !strings.Contains(string(frames[1].Data), mcp.MetaRefetch) {
		t.Fatalf("frames: %+v, want one progress and a flagged response", frames)
	}
	if n := countEvents(rec.Events()); len(n) != 2 || n["progress_sent/stdio"] != 1 || n["refetch_flagged/stdio"] != 1 {
		t.Fatalf("events: %v, want one progress sent and one response flagged", n)
	}

	cancel := func(id int64) {
		sess.Handle(context.Background(), jsonrpc.Message{Kind: jsonrpc.KindNotification, Method: mcp.NotificationCancelled,
			Params: []byte(`{"requestId":` + strconv.FormatInt(id, 10) + `}`)}, out)
	}
	cancel(1)  // ended
	cancel(99) // never known
	gate := mcptest.NewGate(t, srv, "gate")
	defer gate.Release()
	sess.Handle(context.Background(), jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.IntID(2), Method: mcp.MethodToolsCall,
		Params: []byte(`{"name":"gate","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`)}, out)
	gate.WaitEntered(t)
	cancel(2) // running: it wins
	if r := rec.WaitRequest(t, jsonrpc.IntID(2)); r.Outcome != server.Cancelled {
		t.Fatalf("the running call: %+v, want cancelled", r)
	}
	gate.Release()
	if h := rec.WaitHandler(t, jsonrpc.IntID(2)); !h.Discarded || h.Outcome != server.Cancelled {
		t.Fatalf("the gate's handler: %+v, want its result discarded after the cancel", h)
	}
	if n := countEvents(rec.Events()); n["late_cancel/stdio"] != 2 {
		t.Fatalf("events: %v, want two late cancellations", n)
	}
}
