package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/server/conn"
	"github.com/mcprel/mcprel/server/outbound"
	"github.com/mcprel/mcprel/transport/stdio"
)

// TestOverload fills the one running slot and the one queue slot; the next
// call is refused at once with a retryable overload error, and a queued call
// cancelled while it waits never runs.
func TestOverload(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{MaxConcurrentCalls: 1, MaxQueuedCalls: 1, OverloadRetryAfter: 1500 * time.Millisecond}))
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	params := mcptest.ModernParams(map[string]any{"name": "gate"})

	c.Request(1, mcp.MethodToolsCall, params)
	gate.WaitEntered(t)
	c.Request(2, mcp.MethodToolsCall, params) // queued
	c.Request(3, mcp.MethodToolsCall, params) // refused
	f := c.Next()
	if !f.IsResponseTo(jsonrpc.IntID(3)) || f.Error == nil || f.Error.Code != mcp.CodeOverloaded {
		t.Fatalf("third call got %s, want an overload error", f.Raw)
	}
	var data mcp.Failure
	if err := json.Unmarshal(f.Error.Data, &data); err != nil || !data.Retryable || data.RetryAfterMs != 1500 || data.Code != mcp.FailureOverloaded {
		t.Fatalf("overload data = %s, want retryable with retryAfterMs 1500", f.Error.Data)
	}

	c.Cancel(2, "changed my mind")
	if r := rec.WaitRequest(t, jsonrpc.IntID(2)); r.Outcome != server.Cancelled {
		t.Fatalf("queued call record = %+v, want cancelled", r)
	}
	gate.Release()
	if resp, before := c.Await(1); resp.Error != nil || len(before) > 0 {
		t.Fatalf("first call = %s after %s", resp.Raw, mcptest.Raws(before))
	}
	rec.WaitHandler(t, jsonrpc.IntID(1))
	if before := c.Sync(4, mcp.Modern); len(before) > 0 {
		t.Fatalf("frames for the cancelled queued call:%s", mcptest.Raws(before))
	}
	select {
	case id := <-gate.Entered:
		t.Fatalf("call %v ran although it was cancelled while queued", id)
	default:
	}
	// The slot is free again.
	c.Request(5, mcp.MethodToolsCall, params)
	if id := gate.WaitEntered(t); id != jsonrpc.IntID(5) {
		t.Fatalf("entered %v, want 5", id)
	}
}

// TestQueuedCallRunsWhenASlotFrees checks the queue is FIFO and that the
// goroutine of a finished call runs the next queued one.
func TestQueuedCallRunsWhenASlotFrees(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{MaxConcurrentCalls: 1, MaxQueuedCalls: 8})
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	for id := int64(1); id <= 4; id++ {
		c.Request(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	}
	gate.Release()
	for want := int64(1); want <= 4; want++ {
		if id := gate.WaitEntered(t); id != jsonrpc.IntID(want) {
			t.Fatalf("call %v ran, want %d (FIFO)", id, want)
		}
	}
	for i := 0; i < 4; i++ {
		if f := c.Next(); f.Error != nil {
			t.Fatalf("queued call failed: %s", f.Raw)
		}
	}
}

// TestEOFCancelsInFlight checks that closing the input cancels running and
// queued calls (nothing is written for them) and that Serve returns.
func TestEOFCancelsInFlight(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{MaxConcurrentCalls: 1}))
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	gate.WaitEntered(t)
	c.Request(2, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	if before := c.Sync(3, mcp.Modern); len(before) > 0 {
		t.Fatalf("unexpected frames:%s", mcptest.Raws(before))
	}
	c.CloseInput()
	if cause := gate.WaitExited(t); !errors.Is(cause, server.ErrConnectionClosed) {
		t.Fatalf("handler saw %v, want ErrConnectionClosed", cause)
	}
	for _, id := range []int64{1, 2} {
		if r := rec.WaitRequest(t, jsonrpc.IntID(id)); r.Outcome != server.Cancelled || !errors.Is(r.Cause, server.ErrConnectionClosed) {
			t.Fatalf("request %d record = %+v", id, r)
		}
	}
	gate.Release()
	if err := c.ServeResult(); err != nil {
		t.Fatalf("Serve = %v, want nil after a clean EOF", err)
	}
	c.ExpectEOF()
}

// TestStrictlyIncreasingProgress: a tool that reports 1, 1, 3, 2, 5 puts
// 1, 3, 5 on the wire, and the repeats are refused.
func TestStrictlyIncreasingProgress(t *testing.T) {
	for _, era := range eras {
		t.Run(era.String(), func(t *testing.T) {
			rec := mcptest.NewRecorder()
			srv := mcptest.NewServer(t, rec.Hook(nil))
			var errs []error
			addTool(t, srv, "reporter", func(req *server.CallRequest, _ func()) {
				for _, v := range []float64{1, 1, 3, 2, 5} {
					errs = append(errs, req.ReportProgress(v, 5, ""))
				}
			})
			c := mcptest.Stdio(t, srv, nil)
			c.Open(era)
			c.Request(1, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "reporter", "_meta": map[string]any{"progressToken": 77}}))
			defer func() {
				if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.ProgressRefused != 2 {
					t.Errorf("record counts %d refused reports, want 2", r.ProgressRefused)
				}
			}()
			resp, before := c.Await(1)
			if resp.Error != nil {
				t.Fatal(resp.Raw)
			}
			var got []float64
			for _, f := range before {
				var p mcp.ProgressParams
				if f.Method != mcp.NotificationProgress || json.Unmarshal(f.Params, &p) != nil || p.ProgressToken != jsonrpc.IntID(77) {
					t.Fatalf("unexpected frame %s", f.Raw)
				}
				got = append(got, p.Progress)
			}
			// A slow reader could have coalesced values, never reordered them.
			if len(got) == 0 || got[len(got)-1] != 5 {
				t.Fatalf("progress on the wire = %v, want increasing values ending at 5", got)
			}
			for i := 1; i < len(got); i++ {
				if got[i] <= got[i-1] {
					t.Fatalf("progress on the wire = %v, not strictly increasing", got)
				}
			}
			if !errors.Is(errs[1], server.ErrProgressNotIncreasing) || !errors.Is(errs[3], server.ErrProgressNotIncreasing) || errs[0] != nil || errs[2] != nil || errs[4] != nil {
				t.Fatalf("report errors = %v", errs)
			}
		})
	}
}

// TestNoProgressWithoutToken: without a progress token, reports are no-ops.
func TestNoProgressWithoutToken(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	addTool(t, srv, "reporter", func(req *server.CallRequest, _ func()) {
		if req.HasProgressToken() {
			t.Error("HasProgressToken without a token")
		}
		if err := req.ReportProgress(1, 0, ""); err != nil {
			t.Errorf("ReportProgress without a token = %v", err)
		}
	})
	c := mcptest.Stdio(t, srv, nil)
	if f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "reporter"})); f.Error != nil {
		t.Fatal(f.Raw)
	}
}

// TestRequestLogLine checks the one log line per request an operator (or a
// script) reads to see what happened to any request.
func TestRequestLogLine(t *testing.T) {
	var buf syncBuffer
	// What the logger was given goes on every line, the request's too.
	logger := slog.New(slog.NewJSONHandler(&buf, nil)).With("replica", "r1")
	began := time.Now()
	srv := mcptest.NewServer(t, &server.Options{Logger: logger})
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "gate"}))
	gate.WaitEntered(t)
	c.Cancel(1, "stop")
	gate.WaitExited(t)
	gate.Release()
	c.Call(2, mcp.MethodToolsList, mcptest.ModernParams(nil))
	c.Call(3, "nope", mcptest.ModernParams(nil))
	c.SendJSON(map[string]any{"jsonrpc": "2.0", "id": "s-4", "method": "tools/list", "params": mcptest.ModernParams(nil)})
	if f := c.Next(); f.ID == nil || *f.ID != jsonrpc.StringID("s-4") {
		t.Fatalf("response to s-4 = %s", f.Raw)
	}
	c.CloseInput()
	c.ServeResult()

	lines := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == "request" {
			// Integer ids log as JSON numbers, string ids as strings.
			lines[fmt.Sprintf("%T:%v", m["id"], m["id"])] = m
		}
	}
	for id, want := range map[string]map[string]any{
		"float64:1":  {"method": "tools/call", "tool": "gate", "outcome": "cancelled", "cause": "cancelled by the client: stop"},
		"float64:2":  {"method": "tools/list", "outcome": "completed"},
		"float64:3":  {"method": "nope", "outcome": "error", "code": float64(jsonrpc.CodeMethodNotFound)},
		"string:s-4": {"method": "tools/list", "outcome": "completed"},
	} {
		got := lines[id]
		if got == nil {
			t.Fatalf("no log line for request %s in:\n%s", id, buf.String())
		}
		if _, ok := got["duration"]; !ok {
			t.Errorf("request %s: no duration field", id)
		}
		if got["replica"] != "r1" {
			t.Errorf("request %s: the logger's own attributes are missing: %v", id, got)
		}
		// Timed when the request ended: within the test, never zero.
		if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["time"])); err != nil || at.Before(began) || at.After(time.Now()) {
			t.Errorf("request %s: time %v (%v), want between the test's start and now", id, got["time"], err)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("request %s: %s = %v, want %v", id, k, got[k], v)
			}
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPanickingToolKeepsServing: a panic becomes an internal_error result.
func TestPanickingToolKeepsServing(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	srv.AddTool(server.Tool{Name: "boom"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		panic("kaboom")
	})
	c := mcptest.Stdio(t, srv, nil)
	f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "boom"}))
	if !strings.Contains(string(f.Result), `"isError":true`) || !strings.Contains(string(f.Result), mcp.FailureInternal) {
		t.Fatalf("panicking tool = %s", f.Raw)
	}
	if f := c.Call(2, mcp.MethodDiscover, mcptest.ModernParams(nil)); f.Error != nil {
		t.Fatal(f.Raw)
	}
}

// TestHandlerErrorMapping checks the one documented mapping of handler
// errors onto the wire.
func TestHandlerErrorMapping(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	errs := map[string]error{
		"plain":    errors.New("disk full"),
		"tool":     &mcp.ToolError{Code: "quota", Message: "over quota", Retryable: true, RetryAfter: 2 * time.Second, Alternatives: []string{"smaller_job"}},
		"wrapped":  wrapErr{&mcp.ToolError{Code: "nested", Message: "inner"}},
		"protocol": jsonrpc.NewError(jsonrpc.CodeInvalidParams, "bad thing"),
	}
	for name, err := range errs {
		srv.AddTool(server.Tool{Name: name}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, err })
	}
	c := mcptest.Stdio(t, srv, nil)
	call := func(id int64, name string) mcptest.Frame {
		return c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": name}))
	}
	failure := func(f mcptest.Frame) mcp.Failure {
		t.Helper()
		return mcptest.Failure(t, f.Result)
	}
	if got := failure(call(1, "plain")); got.Code != mcp.FailureToolError || got.Message != "disk full" || got.Retryable {
		t.Errorf("plain error → %+v", got)
	}
	if got := failure(call(2, "tool")); got.Code != "quota" || !got.Retryable || got.RetryAfterMs != 2000 || got.Alternatives[0] != "smaller_job" {
		t.Errorf("tool error → %+v", got)
	}
	if got := failure(call(3, "wrapped")); got.Code != "nested" {
		t.Errorf("wrapped tool error → %+v", got)
	}
	if f := call(4, "protocol"); f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("protocol error → %s", f.Raw)
	}
}

type wrapErr struct{ err error }

func (w wrapErr) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapErr) Unwrap() error { return w.err }

// TestSlowToolCannotStarveOthers: a tool with its own limit and queue is
// refused when its queue is full, while other tools keep being served.
func TestSlowToolCannotStarveOthers(t *testing.T) {
	srv := mcptest.NewServer(t, &server.Options{MaxConcurrentCalls: 4, MaxQueuedCalls: 16})
	entered := make(chan jsonrpc.ID, 8)
	err := srv.AddTool(server.Tool{Name: "slow", Policy: server.Policy{MaxConcurrent: 1, MaxQueued: 1}},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			entered <- req.ID
			<-ctx.Done()
			return nil, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	addNoop(t, srv, "fast")
	c := mcptest.Stdio(t, srv, nil)
	slowCall := mcptest.ModernParams(map[string]any{"name": "slow"})
	c.Request(1, mcp.MethodToolsCall, slowCall)
	<-entered
	c.Request(2, mcp.MethodToolsCall, slowCall) // waits in the slow tool's queue
	c.Request(3, mcp.MethodToolsCall, slowCall) // its queue is full
	if f := c.Next(); !f.IsResponseTo(jsonrpc.IntID(3)) || f.Error == nil || f.Error.Code != mcp.CodeOverloaded {
		t.Fatalf("third slow call = %s, want overloaded", f.Raw)
	}
	for id := int64(4); id < 10; id++ {
		if f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "fast"})); f.Error != nil {
			t.Fatalf("fast call while the slow tool is saturated = %s", f.Raw)
		}
	}
	select {
	case id := <-entered:
		t.Fatalf("slow call %v ran past the tool's limit of 1", id)
	default:
	}
	c.Cancel(1, "")
	if id := <-entered; id != jsonrpc.IntID(2) {
		t.Fatalf("after the first slow call ended, %v ran; want the queued 2", id)
	}
}

func TestPolicyValidation(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "x", Policy: server.Policy{MaxConcurrent: -1}},
		func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
	if err == nil {
		t.Fatal("a negative limit was accepted")
	}
	if _, err := server.New(mcp.Implementation{Name: "x", Version: "1"}, &server.Options{MaxQueuedCalls: -1}); err == nil {
		t.Fatal("a negative server option was accepted")
	}
}

// A tool's own rate (Policy.Rate, Burst) refuses calls past its bucket
// before they run, with a retryable rate-limit error.
func TestToolRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, nil)
		var runs int
		err := srv.AddTool(server.Tool{Name: "metered", Policy: server.Policy{Rate: 1, Burst: 2}},
			func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { runs++; return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
		c := mcptest.Stdio(t, srv, nil)
		params := mcptest.ModernParams(map[string]any{"name": "metered"})
		for id := int64(1); id <= 3; id++ {
			f := c.Call(id, mcp.MethodToolsCall, params)
			switch {
			case id <= 2 && f.Error != nil:
				t.Fatalf("call %d within the burst: %s", id, f.Raw)
			case id == 3 && (f.Error == nil || f.Error.Code != mcp.CodeRateLimited):
				t.Fatalf("call past the burst: %s, want a rate-limit error", f.Raw)
			}
		}
		time.Sleep(time.Second) // fake time: one token back
		if f := c.Call(4, mcp.MethodToolsCall, params); f.Error != nil {
			t.Fatalf("call after a token came back: %s", f.Raw)
		}
		if runs != 3 {
			t.Fatalf("%d calls ran, want 3", runs)
		}
		c.CloseInput()
		c.ServeResult()
	})
}

// A request whose context ended before it was dispatched (its HTTP stream
// already closed, say) is recorded cancelled, never runs and gets no
// response.
func TestRequestWithEndedContextNeverRuns(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	gate := mcptest.NewGate(t, srv, "gate")
	sess := srv.NewSession(conn.Stdio())
	out := outbound.New(8)
	ctx, cancel := context.WithCancelCause(context.Background())
	gone := errors.New("stream closed")
	cancel(gone)
	m, e := jsonrpc.Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate",` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	if e != nil {
		t.Fatal(e)
	}
	sess.Handle(ctx, m, out)
	if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Cancelled || !errors.Is(r.Cause, gone) {
		t.Fatalf("record = %+v, want cancelled by the context's cause", r)
	}
	select {
	case id := <-gate.Entered:
		t.Fatalf("call %v ran although its context had ended", id)
	default:
	}
	if f, ok := out.TryNext(); ok {
		t.Fatalf("a frame was written: %s", f.Data)
	}
	gate.Release()
}

// A transport whose context ends only with its session
// (conn.Prepared.SessionCtx) has its requests' contexts left unwatched,
// but one that had already ended still never runs.
func TestSessionContextEndedNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := mcptest.NewRecorder()
		srv := mcptest.NewServer(t, rec.Hook(nil))
		gate := mcptest.NewGate(t, srv, "gate")
		defer gate.Release()
		sess := srv.NewSession(conn.Stdio())
		out := outbound.New(8)
		ctx, cancel := context.WithCancelCause(context.Background())
		gone := errors.New("connection closed")
		cancel(gone)
		m, e := jsonrpc.Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate",` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
		if e != nil {
			t.Fatal(e)
		}
		sess.HandleRequest(ctx, m, conn.Prepared{SessionCtx: true}, out)
		if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Cancelled || !errors.Is(r.Cause, gone) {
			t.Fatalf("record = %+v, want cancelled by the context's cause", r)
		}
		// Every goroutine of the bubble settled: a handler that had been
		// started has entered the gate by now.
		synctest.Wait()
		select {
		case id := <-gate.Entered:
			t.Fatalf("call %v ran although its context had ended", id)
		default:
		}
	})
}

// On stdio a request's context is not watched (conn.Prepared.SessionCtx):
// when the connection's context ends, Serve closes the session, which
// cancels every call in flight with that context's cause.
func TestStdioContextEndCancelsCalls(t *testing.T) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	gate := mcptest.NewGate(t, srv, "gate")
	defer gate.Release()
	inR, inW := io.Pipe()
	defer inW.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	served := make(chan error, 1)
	go func() { served <- stdio.NewConn(srv, inR, io.Discard, nil).Serve(ctx) }()
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate",`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	gate.WaitEntered(t)
	gone := errors.New("client went away")
	cancel(gone)
	select {
	case cause := <-gate.Exited:
		if !errors.Is(cause, gone) {
			t.Fatalf("the handler saw %v, want %v", cause, gone)
		}
	case <-time.After(mcptest.Timeout):
		t.Fatal("the call was not cancelled when the connection's context ended")
	}
	gate.Release()
	if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Cancelled || !errors.Is(r.Cause, gone) {
		t.Fatalf("record = %+v, want cancelled by the context's cause", r)
	}
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve returned %v", err)
	}
}
