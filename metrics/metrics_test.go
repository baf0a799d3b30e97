package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// gated is a tool whose calls block until the test releases them all; the
// test learns of each call as it starts.
type gated struct {
	entered chan jsonrpc.ID
	release chan struct{}
}

func newGated() *gated {
	return &gated{entered: make(chan jsonrpc.ID, 8), release: make(chan struct{})}
}

func (g *gated) handler(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
	g.entered <- req.ID
	<-g.release
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("released")}}, nil
}

// within waits for a value from ch, failing the test after mcptest.Timeout.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(mcptest.Timeout):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// scrape reads the observer's metrics as Prometheus serves them.
func scrapeText(t *testing.T, obs *metrics.Observer) string {
	t.Helper()
	hs := httptest.NewServer(obs.Handler())
	defer hs.Close()
	resp, err := hs.Client().Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// expect checks that every line in want is in the scrape, exactly.
func expectLines(t *testing.T, body string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("the scrape lacks %s", w)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// A scripted scenario, in each era over stdio, then a scrape: every
// counter has exactly the value the scenario makes — completions, a tool
// error, a protocol error, a cancel that wins (and the response it
// suppressed), a late cancel (ignored), an idle and a max timeout, an
// overload refusal, progress sent and refused, an idempotent replay and a
// key conflict, and a task cancelled at its checkpoint — and a client's
// made-up tool name never becomes a label.
func TestScenarioCounters(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		t.Run(era.String(), func(t *testing.T) {
			obs, err := metrics.New(nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			// A recorder after the metrics: once it has a request's
			// record or a handler's return, the metrics observer has had
			// it too (observers are told in order), whatever the
			// response raced. Progress is not rate limited here, so that
			// every report is a notification of its own.
			rec := mcptest.NewRecorder()
			srv := mcptest.NewServer(t, rec.Hook(&server.Options{Observers: []server.Observer{obs}, ProgressInterval: time.Nanosecond}))
			obs.Attach(srv)
			ctx := context.Background()
			db, err := store.Open(ctx, storetest.SQLite(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			l, err := ledger.Open(ctx, db, nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := tasks.Open(ctx, db, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The task runner's events reach the metrics as serve wires
			// them; the test learns when a task ended.
			taskEnded := make(chan tasks.Event, 4)
			ts, err := taskserver.New(srv, st, &taskserver.Options{Runner: tasks.RunnerOptions{OnEvent: func(e tasks.Event) {
				switch e.Kind {
				case tasks.TaskStarted:
					obs.TaskStarted(e.Tool)
				case tasks.TaskLeft:
					obs.TaskLeft(e.Tool)
				case tasks.TaskEnded:
					obs.TaskEnded(e.Tool, e.Status.String(), e.Duration)
					if e.CancelObserved {
						obs.TaskCancelObserved(e.Tool, e.CancelDelay)
					}
					taskEnded <- e
				}
			}}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), mcptest.Timeout)
				defer cancel()
				ts.Shutdown(ctx)
			}()

			srv.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
			})
			srv.AddTool(server.Tool{Name: "fails"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				return nil, &mcp.ToolError{Code: "nope", Message: "it fails"}
			})
			stall := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			srv.AddTool(server.Tool{Name: "stalls", Policy: server.Policy{IdleTimeout: 50 * time.Millisecond, MaxTimeout: time.Minute}}, stall)
			srv.AddTool(server.Tool{Name: "overruns", Policy: server.Policy{IdleTimeout: time.Minute, MaxTimeout: 50 * time.Millisecond}}, stall)
			gate := mcptest.NewGate(t, srv, "gate")
			narrow := newGated()
			srv.AddTool(server.Tool{Name: "narrow", Policy: server.Policy{MaxConcurrent: 1, MaxQueued: 1}}, narrow.handler)
			step := make(chan struct{})
			srv.AddTool(server.Tool{Name: "counts"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				req.ReportProgress(1, 2, "")
				<-step
				req.ReportProgress(2, 2, "")
				req.ReportProgress(2, 2, "") // not increasing: refused
				return &mcp.CallToolResult{}, nil
			})
			jobStarted, jobStep := make(chan string, 1), make(chan struct{})
			err = ts.Server().AddTool(server.Tool{Name: "job", Policy: server.Policy{Timeout: server.TimeoutLong, MaxTimeout: time.Hour}}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
				jobStarted <- taskserver.TaskID(call)
				<-jobStep
				if err := taskserver.Checkpoint(ctx, call, "halfway"); err != nil {
					return nil, err
				}
				return &mcp.CallToolResult{}, nil
			}, taskserver.AsTask(ts, taskserver.Policy{}))
			if err != nil {
				t.Fatal(err)
			}
			err = srv.AddTool(server.Tool{Name: "reserve"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("reserved")}}, nil
			}, idempotency.Keyed(l, idempotency.Policy{}))
			if err != nil {
				t.Fatal(err)
			}

			c := mcptest.Stdio(t, srv, nil)
			c.Open(era)
			params := func(name string, extra map[string]any) map[string]any {
				if extra == nil {
					extra = map[string]any{}
				}
				extra["name"] = name
				return mcptest.Params(era, extra)
			}
			call := func(id int64, name string, args map[string]any) mcptest.Frame {
				return c.Call(id, mcp.MethodToolsCall, params(name, map[string]any{"arguments": args}))
			}
			call(1, "echo", nil)
			call(2, "echo", nil)
			call(3, "fails", nil)
			call(4, "made-up-by-the-client", nil)
			call(5, "stalls", nil)
			call(6, "overruns", nil)
			call(7, "reserve", map[string]any{"idempotencyKey": "k1", "n": 1})
			call(8, "reserve", map[string]any{"idempotencyKey": "k1", "n": 1})
			call(9, "reserve", map[string]any{"idempotencyKey": "k1", "n": 2})

			// A cancel that wins: the gate's late result is suppressed.
			c.Request(10, mcp.MethodToolsCall, params("gate", nil))
			gate.WaitEntered(t)
			c.Cancel(10, "the user gave up")
			gate.WaitExited(t)
			gate.Release()
			call(11, "echo", nil) // after the cancel: the connection serves on

			// A late cancel: it crossed the response, and is ignored. The
			// next call is read after it, so it has been counted by the
			// time that call is answered.
			call(12, "echo", nil)
			c.Cancel(12, "too late")
			call(13, "echo", nil)

			// Overload: one call of narrow runs, one waits, the third is
			// refused at once (stdio reads them in order).
			c.Request(14, mcp.MethodToolsCall, params("narrow", nil))
			within(t, narrow.entered, "the first narrow call")
			c.Request(15, mcp.MethodToolsCall, params("narrow", nil))
			if f := call(16, "narrow", nil); f.Error == nil || f.Error.Code != mcp.CodeOverloaded {
				t.Fatalf("the third narrow call: %s, want overloaded", f.Raw)
			}
			close(narrow.release)
			c.Await(14)
			c.Await(15)

			// Progress: the first is read before the second is reported,
			// so neither replaces the other.
			c.Request(17, mcp.MethodToolsCall, params("counts", map[string]any{"_meta": map[string]any{"progressToken": "p17"}}))
			if f := c.Next(); f.Method != mcp.NotificationProgress {
				t.Fatalf("got %s, want the first progress", f.Raw)
			}
			close(step)
			if _, before := c.Await(17); len(before) != 1 || before[0].Method != mcp.NotificationProgress {
				t.Fatalf("before the response: %s, want the second progress alone", mcptest.Raws(before))
			}

			// A task cancelled at its checkpoint.
			taskParams := func(extra map[string]any) map[string]any {
				if era == mcp.Modern {
					extra["_meta"] = map[string]any{mcp.MetaClientCapabilities: map[string]any{
						"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}}}
					return mcptest.ModernParams(extra)
				}
				return extra
			}
			create := taskParams(map[string]any{"name": "job"})
			if era == mcp.Legacy {
				create["task"] = map[string]any{}
			}
			if f := c.Call(18, mcp.MethodToolsCall, create); f.Error != nil {
				t.Fatalf("task creation: %s", f.Raw)
			}
			id := within(t, jobStarted, "the task to start")
			if f := c.Call(19, mcp.MethodTasksCancel, taskParams(map[string]any{"taskId": id})); f.Error != nil {
				t.Fatalf("tasks/cancel: %s", f.Raw)
			}
			close(jobStep)
			if e := within(t, taskEnded, "the task to end"); e.Status != tasks.Cancelled || !e.CancelObserved {
				t.Fatalf("the task ended %+v, want cancelled at its checkpoint", e)
			}

			for id := int64(1); id <= 19; id++ {
				rec.WaitRequest(t, jsonrpc.IntID(id))
			}
			for _, id := range []int64{5, 6, 10} {
				if h := rec.WaitHandler(t, jsonrpc.IntID(id)); !h.Discarded {
					t.Fatalf("handler of %d: %+v, want its response discarded", id, h)
				}
			}

			e := "2025"
			if era == mcp.Modern {
				e = "2026-07-28"
			}
			calls := func(tool, outcome string, n int) string {
				return `mcprel_requests_total{era="` + e + `",method="tools/call",outcome="` + outcome + `",tool="` + tool + `",transport="stdio"} ` + strconv.Itoa(n)
			}
			body := scrapeText(t, obs)
			expectLines(t, body, []string{
				calls("echo", "completed", 5),
				calls("fails", "tool_error", 1),
				calls("unknown", "protocol_error_client", 1),
				calls("stalls", "timed_out_idle", 1),
				calls("overruns", "timed_out_max", 1),
				calls("gate", "cancelled", 1),
				calls("narrow", "completed", 2),
				calls("narrow", "refused", 1),
				calls("reserve", "completed", 2),
				calls("reserve", "tool_error", 1), // the key conflict
				calls("counts", "completed", 1),
				calls("job", "completed", 1),
				`mcprel_requests_total{era="` + e + `",method="tasks/cancel",outcome="completed",tool="",transport="stdio"} 1`,
				`mcprel_request_queued_seconds_count{tool="narrow"} 1`,
				`mcprel_requests_in_flight{method="tools/call"} 0`,
				`mcprel_cancellations_total{source="idle_deadline"} 1`,
				`mcprel_cancellations_total{source="max_deadline"} 1`,
				`mcprel_cancellations_total{source="notification"} 1`,
				`mcprel_responses_suppressed_total{outcome="cancelled",tool="gate"} 1`,
				`mcprel_responses_suppressed_total{outcome="timed_out",tool="stalls"} 1`,
				`mcprel_responses_suppressed_total{outcome="timed_out",tool="overruns"} 1`,
				`mcprel_handler_overrun_seconds_count{tool="gate"} 1`,
				`mcprel_late_cancellations_total{transport="stdio"} 1`,
				`mcprel_progress_sent_total{transport="stdio"} 2`,
				`mcprel_progress_discarded_total{reason="not_increasing"} 1`,
				`mcprel_responses_refetch_flagged_total{transport="stdio"} 0`,
				`mcprel_slow_consumers_total{transport="stdio"} 0`,
				`mcprel_call_annotations_total{kind="idempotency",tool="reserve",value="executed"} 1`,
				`mcprel_call_annotations_total{kind="idempotency",tool="reserve",value="replayed"} 1`,
				`mcprel_call_annotations_total{kind="idempotency",tool="reserve",value="conflict"} 1`,
				`mcprel_call_annotations_total{kind="task",tool="job",value="created"} 1`,
				`mcprel_tasks_running{tool="job"} 0`,
				`mcprel_tasks_ended_total{status="cancelled",tool="job"} 1`,
				`mcprel_task_cancel_observed_seconds_count{tool="job"} 1`,
			})
			for _, absent := range []string{"made-up-by-the-client", `mcprel_progress_discarded_total{reason="coalesced"}`, `mcprel_progress_discarded_total{reason="dropped"}`} {
				if strings.Contains(body, absent) {
					t.Errorf("the scrape has %s", absent)
				}
			}
		})
	}
}

// Over Streamable HTTP, what the transport adds, on fake time: a 2026
// request cancelled by closing its stream (after three keepalives on its
// quiet stream), a client that stops reading cut off as a slow consumer,
// and in a 2025 session a POSTed cancel that wins and one that comes after
// the response; each suppressed response counted once.
func TestHTTPScenarioCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs, err := metrics.New(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := mcptest.NewRecorder()
		srv := mcptest.NewServer(t, rec.Hook(&server.Options{Observers: []server.Observer{obs}, ProgressInterval: time.Nanosecond}))
		obs.Attach(srv)
		srv.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
		})
		srv.AddTool(server.Tool{Name: "quiet"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})
		big := strings.Repeat("x", 16<<10)
		srv.AddTool(server.Tool{Name: "chatty"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			for i := 1; ; i++ {
				req.ReportProgress(float64(i), 0, big)
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
		})
		gate := mcptest.NewGate(t, srv, "gate")
		c := mcptest.PipeHTTP(t, srv, &streamhttp.HandlerOptions{KeepAlive: time.Second, WriteTimeout: 2 * time.Second})
		progress := map[string]any{"progressToken": "p"}

		// 2026: a quiet stream gets a keepalive a second; closing it after
		// 3.5 seconds cancels the call.
		ctx, closeStream := context.WithCancel(context.Background())
		stream := mcptest.ReadSSE(t, c.Modern(ctx, 1, mcp.MethodToolsCall, map[string]any{"name": "quiet", "_meta": progress}))
		time.Sleep(3500 * time.Millisecond)
		closeStream()
		rec.WaitHandler(t, jsonrpc.IntID(1))
		if n := len(stream.Keepalives); n != 3 {
			t.Fatalf("%d keepalives in 3.5 quiet seconds, want 3", n)
		}

		// 2026: a client that stops reading its stream is cut off once a
		// write waits past the write timeout.
		resp := c.Modern(context.Background(), 2, mcp.MethodToolsCall, map[string]any{"name": "chatty", "_meta": progress})
		if r := rec.WaitRequest(t, jsonrpc.IntID(2)); !errors.Is(r.Cause, server.ErrSlowConsumer) {
			t.Fatalf("the unread stream's call ended %v, want cut off as a slow consumer", r.Cause)
		}
		rec.WaitHandler(t, jsonrpc.IntID(2))
		resp.Body.Close()

		// 2025: a POSTed cancel wins over the gate; one POSTed after the
		// response is ignored (accepted, handled before its 202).
		c.Initialize(nil)
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			if resp, err := c.Client.Do(legacyRequest(t, c, 3, map[string]any{"name": "gate"})); err == nil {
				io.Copy(io.Discard, resp.Body) // cancelled: the connection is dropped without an answer
				resp.Body.Close()
			}
		}()
		gate.WaitEntered(t)
		c.LegacyNotify(context.Background(), mcp.NotificationCancelled, map[string]any{"requestId": 3, "reason": "the user gave up"})
		gate.WaitExited(t)
		gate.Release()
		<-answered
		rec.WaitHandler(t, jsonrpc.IntID(3))
		mcptest.ReadJSON(t, c.Legacy(context.Background(), 4, mcp.MethodToolsCall, map[string]any{"name": "echo"}))
		c.LegacyNotify(context.Background(), mcp.NotificationCancelled, map[string]any{"requestId": 4, "reason": "too late"})

		calls := func(era, tool, outcome string) string {
			return `mcprel_requests_total{era="` + era + `",method="tools/call",outcome="` + outcome + `",tool="` + tool + `",transport="http"} 1`
		}
		expectLines(t, scrapeText(t, obs), []string{
			calls("2026-07-28", "quiet", "cancelled"),
			calls("2026-07-28", "chatty", "cancelled"),
			calls("2025", "gate", "cancelled"),
			calls("2025", "echo", "completed"),
			`mcprel_cancellations_total{source="stream_close"} 1`,
			`mcprel_cancellations_total{source="slow_consumer"} 1`,
			`mcprel_cancellations_total{source="notification"} 1`,
			`mcprel_responses_suppressed_total{outcome="cancelled",tool="quiet"} 1`,
			`mcprel_responses_suppressed_total{outcome="cancelled",tool="chatty"} 1`,
			`mcprel_responses_suppressed_total{outcome="cancelled",tool="gate"} 1`,
			`mcprel_keepalives_total{transport="http"} 3`,
			`mcprel_slow_consumers_total{transport="http"} 1`,
			`mcprel_late_cancellations_total{transport="http"} 1`,
			`mcprel_requests_in_flight{method="tools/call"} 0`,
		})
	})
}

// legacyRequest is a tools/call POST in c's 2025 session.
func legacyRequest(t *testing.T, c *mcptest.HTTPClient, id int64, params map[string]any) *http.Request {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": mcp.MethodToolsCall, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range c.LegacyHeaders() {
		req.Header.Set(k, v)
	}
	return req
}
