package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// clockTool reports progress at the given offsets from its start (fake
// time), then waits for its context to end and returns the cause.
func clockTool(t *testing.T, srv *server.Server, policy server.Policy, at []time.Duration, values []float64, ended chan<- error) {
	t.Helper()
	err := srv.AddTool(server.Tool{Name: "clock", Policy: policy}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		for i, d := range at {
			time.Sleep(time.Until(start.Add(d)))
			v := float64(i + 1)
			if values != nil {
				v = values[i]
			}
			req.ReportProgress(v, 0, "")
		}
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type clockCase struct {
	name    string
	policy  server.Policy
	at      []time.Duration // progress report times
	values  []float64       // progress values (default 1, 2, 3, …)
	alive   time.Duration   // still running at this time
	endAt   time.Duration   // timed out exactly at this time
	cause   error
	keepTCP bool
}

// TestTwoClocks runs the request lifecycle's deadlines on fake time.
func TestTwoClocks(t *testing.T) {
	ms := time.Millisecond
	seed := server.Policy{IdleTimeout: 500 * ms, MaxTimeout: 2000 * ms}
	for _, tc := range []clockCase{
		{name: "the seed example: alive at 1500 ms", policy: seed, at: []time.Duration{400 * ms, 800 * ms, 1200 * ms}, alive: 1500 * ms, endAt: 1700 * ms, cause: server.ErrIdleTimeout},
		{name: "the seed example: progress at 1999 ms, still ends at 2000 ms", policy: seed, at: []time.Duration{400 * ms, 800 * ms, 1200 * ms, 1600 * ms, 1999 * ms}, alive: 1999 * ms, endAt: 2000 * ms, cause: server.ErrMaxDeadline},
		{name: "idle expiry without progress", policy: seed, alive: 499 * ms, endAt: 500 * ms, cause: server.ErrIdleTimeout},
		{name: "max fires despite progress every 100 ms", policy: seed, at: every(100*ms, 30), alive: 1999 * ms, endAt: 2000 * ms, cause: server.ErrMaxDeadline},
		{name: "repeated values do not reset idle", policy: seed, at: []time.Duration{100 * ms, 300 * ms, 550 * ms}, values: []float64{5, 5, 5}, alive: 599 * ms, endAt: 600 * ms, cause: server.ErrIdleTimeout},
		{name: "decreasing values do not reset idle", policy: seed, at: []time.Duration{100 * ms, 300 * ms, 550 * ms}, values: []float64{9, 3, 1}, alive: 599 * ms, endAt: 600 * ms, cause: server.ErrIdleTimeout},
		{name: "fast class defaults: idle 5 s", policy: server.Policy{Timeout: server.TimeoutFast}, alive: 4999 * ms, endAt: 5000 * ms, cause: server.ErrIdleTimeout},
		{name: "fast class defaults: max 15 s", policy: server.Policy{Timeout: server.TimeoutFast}, at: every(time.Second, 20), alive: 14999 * ms, endAt: 15000 * ms, cause: server.ErrMaxDeadline},
		{name: "standard class defaults: idle 30 s", policy: server.Policy{}, alive: 29999 * ms, endAt: 30000 * ms, cause: server.ErrIdleTimeout},
		{name: "long class bounded by its max", policy: server.Policy{Timeout: server.TimeoutLong, MaxTimeout: time.Minute}, alive: 59 * time.Second, endAt: time.Minute, cause: server.ErrMaxDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runClockCase(t, tc) })
		})
	}
}

func every(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d * time.Duration(i+1)
	}
	return out
}

func runClockCase(t *testing.T, tc clockCase) {
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{ProgressInterval: time.Millisecond}))
	ended := make(chan error, 1)
	clockTool(t, srv, tc.policy, tc.at, tc.values, ended)
	c := mcptest.Stdio(t, srv, nil)
	start := time.Now()
	c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "clock", "_meta": map[string]any{"progressToken": "t"}}))

	time.Sleep(tc.alive - time.Since(start))
	synctest.Wait()
	if recs := rec.Requests(jsonrpc.IntID(1)); len(recs) != 0 {
		t.Fatalf("ended at %v, want still running at %v: %+v", time.Since(start), tc.alive, recs[0])
	}
	r := rec.WaitRequest(t, jsonrpc.IntID(1))
	if got := time.Since(start); got != tc.endAt {
		t.Fatalf("timed out at %v, want %v", got, tc.endAt)
	}
	if r.Outcome != server.TimedOut || !errors.Is(r.Cause, tc.cause) {
		t.Fatalf("record = %+v, want timed out by %v", r, tc.cause)
	}
	if cause := <-ended; !errors.Is(cause, tc.cause) {
		t.Fatalf("handler saw %v, want %v", cause, tc.cause)
	}
	// The client got a structured timeout failure, after every progress
	// notification it will ever get.
	resp, _ := c.Await(1)
	if f := mcptest.Failure(t, resp.Result); f.Code != mcp.FailureTimeout ||
		f.Details["deadline"] != map[bool]string{true: "idle", false: "max"}[errors.Is(tc.cause, server.ErrIdleTimeout)] ||
		f.Details["elapsedMs"] != float64(tc.endAt.Milliseconds()) {
		t.Fatalf("response = %s", resp.Raw)
	}
	if before := c.Sync(2, mcp.Modern); len(before) > 0 {
		t.Fatalf("frames after the timeout:%s", mcptest.Raws(before))
	}
	c.CloseInput()
	c.ServeResult()
}

// TestTimeoutAfterCompletionChangesNothing: a call that completes before
// its deadlines stops both clocks.
func TestTimeoutAfterCompletionChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := mcptest.NewRecorder()
		srv := mcptest.NewServer(t, rec.Hook(nil))
		addNoop(t, srv, "quick")
		c := mcptest.Stdio(t, srv, nil)
		c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "quick"}))
		time.Sleep(time.Hour)
		synctest.Wait()
		if recs := rec.Requests(jsonrpc.IntID(1)); len(recs) != 1 || recs[0].Outcome != server.Completed {
			t.Fatalf("records = %+v", recs)
		}
		c.CloseInput()
		c.ServeResult()
	})
}

// TestLongToolNeedsAMaximum: a long-running tool without task support must
// state its own bound.
func TestLongToolNeedsAMaximum(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "forever", Policy: server.Policy{Timeout: server.TimeoutLong}},
		func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil })
	if err == nil {
		t.Fatal("a long tool without MaxTimeout was registered")
	}
}

// A timeout is retryable according to the tool's retry class, never its
// readOnlyHint: a safe tool's yes, an unsafe tool's no (whatever its
// annotations say), a conditional one's yes. tools/list advertises the
// class and the deadlines. (A keyed tool's timeout is retryable only when
// the call carried its key: package idempotency's
// TestRetryClassOfKeyedTools.)
func TestTimeoutRetryableByRetryClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, nil)
		block := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		fast := server.Policy{Timeout: server.TimeoutFast}
		readOnly := &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true)}
		for _, tool := range []server.Tool{
			{Name: "safe", Policy: server.Policy{Timeout: server.TimeoutFast, Retry: mcp.RetrySafe}},
			{Name: "unsafe-but-says-read-only", Policy: fast, Annotations: readOnly},
			{Name: "versioned", Policy: server.Policy{Timeout: server.TimeoutFast, Retry: mcp.RetryConditional}},
		} {
			if err := srv.AddTool(tool, block); err != nil {
				t.Fatal(err)
			}
		}
		c := mcptest.Stdio(t, srv, nil)
		for i, tc := range []struct {
			tool string
			args map[string]any
			want bool
		}{
			{"safe", nil, true},
			{"unsafe-but-says-read-only", nil, false},
			{"versioned", nil, true},
		} {
			id := int64(i + 1)
			c.Request(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": tc.tool, "arguments": tc.args}))
			time.Sleep(server.DefaultFast.Idle + time.Second) // past the idle deadline, on fake time
			f, _ := c.Await(id)
			if got := mcptest.Failure(t, f.Result); got.Code != mcp.FailureTimeout || got.Retryable != tc.want {
				t.Errorf("%s %v timed out with %+v, want retryable %v", tc.tool, tc.args, got, tc.want)
			}
		}
		list := c.Call(10, mcp.MethodToolsList, mcptest.ModernParams(nil))
		var tools struct{ Tools []mcp.Tool }
		json.Unmarshal(list.Result, &tools)
		want := map[string]string{"safe": "safe", "unsafe-but-says-read-only": "unsafe", "versioned": "conditional"}
		for _, tool := range tools.Tools {
			if tool.Meta[mcp.MetaRetryClass] != want[tool.Name] || tool.Meta[mcp.MetaTimeoutClass] != "fast" ||
				tool.Meta[mcp.MetaIdleTimeoutMs] != float64(server.DefaultFast.Idle.Milliseconds()) {
				t.Errorf("%s advertises %v", tool.Name, tool.Meta)
			}
		}
		c.CloseInput()
	})
}
