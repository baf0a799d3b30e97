package streamhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

func gated(t *testing.T) (*mcptest.Recorder, *mcptest.Gate, *mcptest.HTTPClient) {
	t.Helper()
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	gate := mcptest.NewGate(t, srv, "gate")
	return rec, gate, mcptest.HTTP(t, srv, nil)
}

// TestModernCloseThenComplete: in the 2026-07-28 era closing the request's
// stream is the cancellation. The handler's context ends with
// ErrDisconnected, the request is recorded cancelled, and the result the
// handler returns afterwards is discarded. Both response modes.
func TestModernCloseThenComplete(t *testing.T) {
	for _, mode := range []string{"json", "sse"} {
		t.Run(mode, func(t *testing.T) {
			rec, gate, c := gated(t)
			params := map[string]any{"name": "gate"}
			if mode == "sse" {
				params["_meta"] = map[string]any{"progressToken": "p"}
			}
			ctx, closeStream := context.WithCancel(context.Background())
			done := make(chan *http.Response, 1)
			go func() {
				req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodToolsCall, "params": mcptest.ModernParams(params)})
				resp, err := c.Client.Do(mustRequest(t, ctx, c.URL, req, mcptest.ModernHeaders(mcp.MethodToolsCall, "gate")))
				if err == nil {
					done <- resp
				} else {
					done <- nil
				}
			}()
			gate.WaitEntered(t)
			if resp := <-doneOrNil(mode, done); resp != nil {
				// SSE: headers arrive before any event; now close.
				resp.Body.Close()
			}
			closeStream()
			if cause := gate.WaitExited(t); !errors.Is(cause, server.ErrDisconnected) {
				t.Fatalf("handler saw %v, want ErrDisconnected", cause)
			}
			r := rec.WaitRequest(t, jsonrpc.IntID(1))
			if r.Outcome != server.Cancelled || !errors.Is(r.Cause, server.ErrDisconnected) {
				t.Fatalf("record = %+v, want cancelled by disconnect", r)
			}
			gate.Release()
			if h := rec.WaitHandler(t, jsonrpc.IntID(1)); !h.Discarded {
				t.Fatalf("handler record = %+v, want its result discarded", h)
			}
			if n := len(rec.Requests(jsonrpc.IntID(1))); n != 1 {
				t.Fatalf("%d terminal records, want 1", n)
			}
		})
	}
}

// doneOrNil returns the response channel in SSE mode (headers come at once)
// and a closed nil channel in JSON mode (no headers until the result).
func doneOrNil(mode string, done chan *http.Response) <-chan *http.Response {
	if mode == "sse" {
		return done
	}
	ch := make(chan *http.Response, 1)
	ch <- nil
	return ch
}

func mustRequest(t *testing.T, ctx context.Context, url string, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// TestModernCompleteThenClose: the result is delivered once; closing the
// connection afterwards changes nothing.
func TestModernCompleteThenClose(t *testing.T) {
	rec, gate, c := gated(t)
	resp := make(chan *http.Response, 1)
	go func() { resp <- c.Modern(context.Background(), 1, mcp.MethodToolsCall, map[string]any{"name": "gate"}) }()
	gate.WaitEntered(t)
	gate.Release()
	f := mcptest.ReadJSON(t, <-resp)
	if f.Error != nil || !strings.Contains(string(f.Result), "released 1") || !strings.Contains(string(f.Result), `"resultType":"complete"`) {
		t.Fatalf("response = %s", f.Raw)
	}
	c.Client.CloseIdleConnections()
	if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Completed {
		t.Fatalf("record = %+v", r)
	}
	if recs := rec.Requests(jsonrpc.IntID(1)); len(recs) != 1 {
		t.Fatalf("records = %+v", recs)
	}
}

// TestLegacyCancelThenComplete: in the 2025 era a POSTed
// notifications/cancelled cancels the call (202), its stream ends without
// a response, and the handler's late result is discarded.
func TestLegacyCancelThenComplete(t *testing.T) {
	rec, gate, c := gated(t)
	c.Initialize(nil)
	stream := mcptest.ReadSSE(t, c.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("gate")))
	gate.WaitEntered(t)
	c.LegacyNotify(context.Background(), mcp.NotificationCancelled, map[string]any{"requestId": 1, "reason": "stop"})
	if cause := gate.WaitExited(t); !errors.Is(cause, server.ErrPeerCancelled) {
		t.Fatalf("handler saw %v", cause)
	}
	if frames := stream.Rest(); len(frames) > 0 {
		t.Fatalf("the cancelled call's stream carried:%s", mcptest.Raws(frames))
	}
	gate.Release()
	if h := rec.WaitHandler(t, jsonrpc.IntID(1)); !h.Discarded {
		t.Fatalf("handler record = %+v", h)
	}
	if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Cancelled {
		t.Fatalf("record = %+v", r)
	}
}

// TestLegacyCompleteThenCancel: the response arrives once; a late POSTed
// cancellation is accepted (202) and changes nothing.
func TestLegacyCompleteThenCancel(t *testing.T) {
	rec, gate, c := gated(t)
	c.Initialize(nil)
	stream := mcptest.ReadSSE(t, c.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("gate")))
	gate.WaitEntered(t)
	gate.Release()
	frames := stream.Rest()
	if len(frames) != 1 || !frames[0].IsResponseTo(jsonrpc.IntID(1)) || frames[0].Error != nil {
		t.Fatalf("stream = %s", mcptest.Raws(frames))
	}
	rec.WaitRequest(t, jsonrpc.IntID(1)) // the response is pushed before it is recorded
	c.LegacyNotify(context.Background(), mcp.NotificationCancelled, map[string]any{"requestId": 1})
	if recs := rec.Requests(jsonrpc.IntID(1)); len(recs) != 1 || recs[0].Outcome != server.Completed {
		t.Fatalf("records = %+v", recs)
	}
}

// TestLegacyDisconnectIsNotCancellation: in the 2025 era a dropped stream
// does not cancel; the call finishes and its terminal state is recorded.
// logSeen is a log handler that reports when a message is logged.
type logSeen struct {
	msg  string
	seen chan struct{}
	once *sync.Once
}

func (l logSeen) Enabled(context.Context, slog.Level) bool { return true }
func (l logSeen) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logSeen) WithGroup(string) slog.Handler            { return l }
func (l logSeen) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}

func TestLegacyDisconnectIsNotCancellation(t *testing.T) {
	ended := logSeen{msg: "legacy stream ended before its response; the call continues", seen: make(chan struct{}), once: new(sync.Once)}
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{Logger: slog.New(ended)}))
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.HTTP(t, srv, nil)
	c.Initialize(nil)
	stream := mcptest.ReadSSE(t, c.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("gate")))
	gate.WaitEntered(t)
	stream.Close()
	c.Client.CloseIdleConnections()
	select { // the server has seen the stream end, and the call goes on
	case <-ended.seen:
	case <-time.After(mcptest.Timeout):
		t.Fatal("the server never noticed the dropped stream")
	}
	gate.Release()
	if h := rec.WaitHandler(t, jsonrpc.IntID(1)); h.Discarded {
		t.Fatalf("a dropped legacy stream cancelled the call: %+v", h)
	}
	if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Completed {
		t.Fatalf("record = %+v, want completed", r)
	}
	select {
	case err := <-gate.Exited:
		t.Fatalf("handler context ended: %v", err)
	default:
	}
}

// TestLegacySessionLifecycle: DELETE ends the session and cancels what it
// runs; the id then gets 404.
func TestLegacySessionLifecycle(t *testing.T) {
	rec, gate, c := gated(t)
	c.Initialize(nil)
	stream := mcptest.ReadSSE(t, c.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("gate")))
	gate.WaitEntered(t)
	del := c.Do(context.Background(), http.MethodDelete, nil, c.LegacyHeaders())
	del.Body.Close()
	if del.StatusCode != http.StatusOK {
		t.Fatalf("DELETE = %d", del.StatusCode)
	}
	if cause := gate.WaitExited(t); !errors.Is(cause, streamhttp.ErrSessionEnded) {
		t.Fatalf("handler saw %v", cause)
	}
	stream.Rest()
	gate.Release()
	rec.WaitHandler(t, jsonrpc.IntID(1))
	resp := c.Legacy(context.Background(), 2, mcp.MethodToolsList, nil)
	f := mcptest.ReadJSON(t, resp)
	if resp.StatusCode != http.StatusNotFound || f.Error == nil {
		t.Fatalf("after DELETE: %d %s", resp.StatusCode, f.Raw)
	}
}

// TestLegacyGETStream: the session's GET stream carries list changes; a
// second concurrent GET is refused.
func TestLegacyGETStream(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	c := mcptest.HTTP(t, srv, nil)
	c.Initialize(nil)
	get := func() *http.Response {
		req, _ := http.NewRequest(http.MethodGet, c.URL, nil)
		req.Header.Set("Accept", "text/event-stream")
		for k, v := range c.LegacyHeaders() {
			req.Header.Set(k, v)
		}
		resp, err := c.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	stream := mcptest.ReadSSE(t, get())
	defer stream.Close()
	if second := get(); second.StatusCode != http.StatusConflict {
		t.Fatalf("second GET = %d, want 409", second.StatusCode)
	}
	srv.AddTool(server.Tool{Name: "late"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
	if f := stream.Next(); f.Method != mcp.NotificationToolsListChanged {
		t.Fatalf("GET stream got %s", f.Raw)
	}
}

func jsonrpcID(n int64) jsonrpc.ID { return jsonrpc.IntID(n) }

// TestDisconnectAlwaysWinsOverAPromptHandler: a handler that returns the
// instant its context ends must never have that result taken for a
// completion. Before the handler's context was detached from the HTTP
// request's, the handler could see the disconnect before the server had
// recorded it and "complete" the call; many rounds make that interleaving
// likely if it can happen at all.
func TestDisconnectAlwaysWinsOverAPromptHandler(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	entered := make(chan struct{}, 1)
	srv.AddTool(server.Tool{Name: "prompt"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("returned at once")}}, nil
	})
	c := mcptest.HTTP(t, srv, nil)
	for i := int64(1); i <= 100; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": i, "method": mcp.MethodToolsCall, "params": mcptest.ModernParams(map[string]any{"name": "prompt"})})
			if resp, err := c.Client.Do(mustRequest(t, ctx, c.URL, body, mcptest.ModernHeaders(mcp.MethodToolsCall, "prompt"))); err == nil {
				resp.Body.Close()
			}
		}()
		<-entered
		cancel()
		<-done
		if r := rec.WaitRequest(t, jsonrpc.IntID(i)); r.Outcome != server.Cancelled {
			t.Fatalf("round %d: record %+v, want cancelled", i, r)
		}
		if h := rec.WaitHandler(t, jsonrpc.IntID(i)); !h.Discarded {
			t.Fatalf("round %d: the handler's result was sent after the client closed its stream", i)
		}
	}
}

// streamed is tools/call params that ask for progress, which makes the
// response an SSE stream in either era.
func streamed(tool string) map[string]any {
	return map[string]any{"name": tool, "_meta": map[string]any{"progressToken": "p"}}
}

// TestLegacyCallsStreamOnlyWhenTheyCan: a 2025-era tools/call gets SSE when
// it asked for progress or the client can be asked for input, and plain
// JSON otherwise, which costs one write instead of several.
func TestLegacyCallsStreamOnlyWhenTheyCan(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	addNoopTool(t, srv, "noop")
	plain := mcptest.HTTP(t, srv, nil)
	plain.Initialize(nil)
	sampling := mcptest.HTTP(t, srv, nil)
	sampling.Initialize(map[string]any{"sampling": map[string]any{}})
	for _, tc := range []struct {
		name   string
		c      *mcptest.HTTPClient
		params map[string]any
		want   string
	}{
		{"no capability, no progress", plain, map[string]any{"name": "noop"}, "application/json"},
		{"progress token", plain, streamed("noop"), "text/event-stream"},
		{"sampling declared", sampling, map[string]any{"name": "noop"}, "text/event-stream"},
	} {
		resp := tc.c.Legacy(context.Background(), 1, mcp.MethodToolsCall, tc.params)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tc.want) {
			t.Errorf("%s: Content-Type %q, want %s", tc.name, ct, tc.want)
		}
	}
}

func addNoopTool(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	if err := srv.AddTool(server.Tool{Name: name}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
}
