package taskserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// job is a task-capable tool the test steps through: it reports each
// task it starts, waits at step, checkpoints (when checkpoint is set),
// waits at finish and answers.
type job struct {
	started    chan string
	step       chan struct{}
	finish     chan struct{}
	returned   chan error
	checkpoint bool
	runs       atomic.Int64
}

func newJob(checkpoint bool) *job {
	return &job{started: make(chan string, 16), step: make(chan struct{}), finish: make(chan struct{}),
		returned: make(chan error, 16), checkpoint: checkpoint}
}

func (j *job) handler(ctx context.Context, call *server.CallRequest) (res *mcp.CallToolResult, err error) {
	defer func() { j.returned <- err }()
	j.runs.Add(1)
	j.started <- taskserver.TaskID(call)
	select {
	case <-j.step:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if j.checkpoint {
		if err := taskserver.Checkpoint(ctx, call, "halfway"); err != nil {
			return nil, err
		}
	}
	select {
	case <-j.finish:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("report ready")}}, nil
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
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

type env struct {
	srv   *server.Server
	ts    *taskserver.Server
	store *tasks.Store
	job   *job
	rec   *mcptest.Recorder
}

func newEnv(t *testing.T, dsn string, checkpoint bool, opts *taskserver.Options) *env {
	t.Helper()
	return newEnvWith(t, dsn, checkpoint, opts, nil)
}

// newEnvWith is newEnv with the task store's options.
func newEnvWith(t *testing.T, dsn string, checkpoint bool, opts *taskserver.Options, storeOpts *tasks.Options) *env {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := tasks.Open(context.Background(), db, storeOpts)
	if err != nil {
		t.Fatal(err)
	}
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	// Idempotent creation is on in these tests: the ledger shares the
	// tasks' store, and its policy comes before the task's.
	l, err := ledger.Open(context.Background(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := taskserver.New(srv, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), mcptest.Timeout)
		defer cancel()
		ts.Shutdown(ctx)
	})
	j := newJob(checkpoint)
	err = srv.AddTool(server.Tool{Name: "job", Policy: server.Policy{Timeout: server.TimeoutLong}}, j.handler,
		idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyOptional}), taskserver.AsTask(ts, taskserver.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, ts: ts, store: st, job: j, rec: rec}
}

// tasksMeta declares the tasks extension in a modern request.
var tasksMeta = map[string]any{mcp.MetaClientCapabilities: map[string]any{"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}}}

func modern(extra map[string]any) map[string]any {
	extra["_meta"] = tasksMeta
	return mcptest.ModernParams(extra)
}

func decode[T any](t *testing.T, f mcptest.Frame) T {
	t.Helper()
	if f.Error != nil {
		t.Fatalf("error: %s", f.Raw)
	}
	var v T
	if err := json.Unmarshal(f.Result, &v); err != nil {
		t.Fatalf("%v: %s", err, f.Raw)
	}
	return v
}

// The seeds' trace, cancel first, over stdio in the 2026-07-28 era:
// create; tasks/cancel acknowledged; tasks/get still working; the worker
// reaches its checkpoint; tasks/get cancelled.
func TestCancelObservedAtCheckpoint(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), true, nil)
	c := mcptest.Stdio(t, e.srv, nil)
	created := decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"})))
	if created.ResultType != mcp.ResultTask || created.Status != "working" || created.TTLMs == nil || created.PollIntervalMs == nil {
		t.Fatalf("create result = %+v", created)
	}
	if id := wait(t, e.job.started, "the task to start"); id != created.TaskID {
		t.Fatalf("the worker runs %q, created %q", id, created.TaskID)
	}
	ack := c.Call(2, mcp.MethodTasksCancel, modern(map[string]any{"taskId": created.TaskID}))
	if ack.Error != nil || strings.TrimSpace(string(ack.Result)) == "" || strings.Contains(string(ack.Result), "status") {
		t.Fatalf("cancel ack = %s, want an empty acknowledgement", ack.Raw)
	}
	if again := c.Call(3, mcp.MethodTasksCancel, modern(map[string]any{"taskId": created.TaskID})); again.Error != nil {
		t.Fatalf("a repeated cancel = %s", again.Raw)
	}
	got := decode[mcp.Task](t, c.Call(4, mcp.MethodTasksGet, modern(map[string]any{"taskId": created.TaskID})))
	if got.Status != "working" {
		t.Fatalf("before the checkpoint the task is %q, want working", got.Status)
	}
	close(e.job.step)
	if err := wait(t, e.job.returned, "the handler to return"); !errors.Is(err, tasks.ErrCancelled) {
		t.Fatalf("the checkpoint returned %v, want tasks.ErrCancelled", err)
	}
	got = decode[mcp.Task](t, c.Call(5, mcp.MethodTasksGet, modern(map[string]any{"taskId": created.TaskID})))
	if got.Status != "cancelled" || got.Result != nil {
		t.Fatalf("after the checkpoint: %+v", got)
	}
	// Cancelling a finished task is acknowledged the same way.
	if f := c.Call(6, mcp.MethodTasksCancel, modern(map[string]any{"taskId": created.TaskID})); f.Error != nil {
		t.Fatalf("cancel of a cancelled task = %s", f.Raw)
	}
}

// The other order: the work finishes before it reaches a checkpoint, and
// the task completes despite the intent.
func TestWorkFinishingFirstCompletes(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	c := mcptest.Stdio(t, e.srv, nil)
	created := decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"})))
	wait(t, e.job.started, "the task to start")
	if f := c.Call(2, mcp.MethodTasksCancel, modern(map[string]any{"taskId": created.TaskID})); f.Error != nil {
		t.Fatal(f.Raw)
	}
	ended := e.ts.Runner().Changed()
	close(e.job.step)
	close(e.job.finish)
	if err := wait(t, e.job.returned, "the handler"); err != nil {
		t.Fatal(err)
	}
	wait(t, ended, "the outcome to be recorded")
	got := decode[mcp.Task](t, c.Call(3, mcp.MethodTasksGet, modern(map[string]any{"taskId": created.TaskID})))
	var res map[string]any
	if got.Status != "completed" || json.Unmarshal(got.Result, &res) != nil || res["resultType"] != "complete" ||
		!strings.Contains(string(got.Result), "report ready") {
		t.Fatalf("got %+v (%s)", got, got.Result)
	}
}

// The connection that created a task closes right after the create
// response: the task neither stops nor disappears, and a new connection
// reads its result. Over stdio and over Streamable HTTP (2026: closing
// the response stream is a request's cancellation; it is not the task's).
func TestTaskOutlivesItsConnection(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t, storetest.SQLite(t), true, nil)
			var id string
			if transport == "stdio" {
				c := mcptest.Stdio(t, e.srv, nil)
				id = decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))).TaskID
				c.CloseInput()
				if err := c.ServeResult(); err != nil {
					t.Fatalf("the connection ended with %v", err)
				}
			} else {
				h := mcptest.HTTP(t, e.srv, nil)
				resp := h.Modern(context.Background(), 1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))
				id = decode[mcp.Task](t, mcptest.ReadJSON(t, resp)).TaskID
				resp.Body.Close()
			}
			wait(t, e.job.started, "the task to start")
			ended := e.ts.Runner().Changed()
			close(e.job.step)
			close(e.job.finish)
			wait(t, ended, "the task to finish")
			c2 := mcptest.Stdio(t, e.srv, nil)
			got := decode[mcp.Task](t, c2.Call(1, mcp.MethodTasksGet, modern(map[string]any{"taskId": id})))
			if got.Status != "completed" || !strings.Contains(string(got.Result), "report ready") {
				t.Fatalf("the task after its connection closed: %+v", got)
			}
		})
	}
}

// A creation retried with the same idempotency key (its response was
// lost) gets the same task, and the work runs once; the same key with
// other arguments is refused.
func TestKeyedCreationIsIdempotent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		e := newEnv(t, dsn, false, nil)
		c := mcptest.Stdio(t, e.srv, nil)
		call := func(id int64, args map[string]any) mcptest.Frame {
			return c.Call(id, mcp.MethodToolsCall, modern(map[string]any{"name": "job", "arguments": args}))
		}
		first := decode[mcp.Task](t, call(1, map[string]any{"rows": 3, "idempotencyKey": "k-1"}))
		again := decode[mcp.Task](t, call(2, map[string]any{"rows": 3, "idempotencyKey": "k-1"}))
		if first.TaskID == "" || again.TaskID != first.TaskID {
			t.Fatalf("a retried creation got task %q, the first %q", again.TaskID, first.TaskID)
		}
		// Both requests' records (their log lines, their spans) name the
		// task, and say which created it.
		for id, what := range map[int64]string{1: taskserver.Created, 2: taskserver.Replayed} {
			a := e.rec.WaitRequest(t, jsonrpc.IntID(id)).Annotations
			if a[taskserver.TaskIDAnnotation] != first.TaskID || a[taskserver.AnnotationKey] != what {
				t.Errorf("request %d annotated %v, want task_id %s and %s", id, a, first.TaskID, what)
			}
		}
		wait(t, e.job.started, "the task to start")
		close(e.job.step)
		close(e.job.finish)
		wait(t, e.job.returned, "the handler")
		if n := e.job.runs.Load(); n != 1 {
			t.Fatalf("the work ran %d times", n)
		}
		conflict := call(3, map[string]any{"rows": 4, "idempotencyKey": "k-1"})
		if f := mcptest.Failure(t, conflict.Result); f.Code != mcp.FailureKeyConflict {
			t.Fatalf("the key reused for other arguments: %s", conflict.Raw)
		}
		other := decode[mcp.Task](t, call(4, map[string]any{"rows": 3, "idempotencyKey": "k-2"}))
		if other.TaskID == first.TaskID {
			t.Fatal("a new key got the old task")
		}
	})
}

// Bad input gets clear errors and the server keeps serving: unknown ids,
// another tenant's id, malformed params, tasks/* without the extension,
// a task for a tool that cannot run as one, removed methods.
func TestBadInputAndTenantIsolation(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	if err := e.srv.AddTool(server.Tool{Name: "plain"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("plain")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h := mcptest.HTTP(t, e.srv, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	alice, bob := h.As("tok-a"), h.As("tok-b")
	post := func(c *mcptest.HTTPClient, method, taskID string, params map[string]any) (int, mcptest.Frame) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
		resp := c.Do(context.Background(), http.MethodPost, body, mcptest.ModernHeaders(method, taskID))
		return resp.StatusCode, mcptest.ReadJSON(t, resp)
	}
	resp := alice.Modern(context.Background(), 1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))
	id := decode[mcp.Task](t, mcptest.ReadJSON(t, resp)).TaskID
	wait(t, e.job.started, "the task to start")

	_, unknown := post(alice, mcp.MethodTasksGet, "nope", modern(map[string]any{"taskId": "nope"}))
	_, foreign := post(bob, mcp.MethodTasksGet, id, modern(map[string]any{"taskId": id}))
	if unknown.Error == nil || foreign.Error == nil || unknown.Error.Code != -32602 || foreign.Error.Code != -32602 ||
		strings.ReplaceAll(foreign.Error.Message, id, "nope") != unknown.Error.Message {
		t.Fatalf("another tenant's id must read as unknown:\n%s\n%s", foreign.Raw, unknown.Raw)
	}
	if _, f := post(bob, mcp.MethodTasksCancel, id, modern(map[string]any{"taskId": id})); f.Error == nil || f.Error.Code != -32602 {
		t.Fatalf("another tenant's cancel: %s", f.Raw)
	}
	if _, f := post(alice, mcp.MethodTasksGet, "", modern(map[string]any{"taskId": 7})); f.Error == nil || f.Error.Code != mcp.CodeHeaderMismatch {
		t.Fatalf("a malformed taskId over HTTP (its Mcp-Name cannot match): %s", f.Raw)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	for _, params := range []map[string]any{{"taskId": 7}, {"taskId": ""}, {}} {
		if f := c.Call(1, mcp.MethodTasksGet, modern(params)); f.Error == nil || f.Error.Code != -32602 {
			t.Fatalf("tasks/get %v: %s", params, f.Raw)
		}
	}
	if _, f := post(alice, mcp.MethodTasksGet, id, mcptest.ModernParams(map[string]any{"taskId": id})); f.Error == nil || f.Error.Code != mcp.CodeMissingClientCapability {
		t.Fatalf("tasks/get without the extension: %s", f.Raw)
	}
	for _, removed := range []string{mcp.MethodTasksResult, mcp.MethodTasksList} {
		if _, f := post(alice, removed, id, modern(map[string]any{"taskId": id})); f.Error == nil || f.Error.Code != -32601 {
			t.Fatalf("%s in the 2026-07-28 era: %s", removed, f.Raw)
		}
	}
	// A tool that cannot be a task runs synchronously even for a client
	// that declared the extension.
	resp = alice.Modern(context.Background(), 2, mcp.MethodToolsCall, modern(map[string]any{"name": "plain"}))
	if f := mcptest.ReadJSON(t, resp); f.Error != nil || !strings.Contains(string(f.Result), `"resultType":"complete"`) {
		t.Fatalf("a plain tool: %s", f.Raw)
	}
	// The task is untouched by all of it.
	if _, f := post(alice, mcp.MethodTasksGet, id, modern(map[string]any{"taskId": id})); decode[mcp.Task](t, f).Status != "working" {
		t.Fatalf("the task after the bad requests: %s", f.Raw)
	}
	close(e.job.step)
	close(e.job.finish)
}

// A client without the extension calls an optional task tool
// synchronously; a tool that requires a task refuses it with -32021.
func TestWithoutTheExtension(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	if err := e.srv.AddTool(server.Tool{Name: "must"}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}, taskserver.AsTask(e.ts, taskserver.Policy{Required: true})); err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	close(e.job.step)
	close(e.job.finish)
	f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "job", "task": map[string]any{"ttl": 1000}}))
	if f.Error != nil || !strings.Contains(string(f.Result), "report ready") || !strings.Contains(string(f.Result), `"resultType":"complete"`) {
		t.Fatalf("an optional task tool without the extension (and a stray legacy task member): %s", f.Raw)
	}
	if id := wait(t, e.job.started, "the synchronous call"); id != "" {
		t.Fatalf("the synchronous call ran as task %q", id)
	}
	f = c.Call(2, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "must"}))
	if f.Error == nil || f.Error.Code != mcp.CodeMissingClientCapability || !strings.Contains(string(f.Error.Data), mcp.ExtensionTasks) {
		t.Fatalf("a required task tool without the extension: %s", f.Raw)
	}
	list := c.Call(3, mcp.MethodToolsList, mcptest.ModernParams(nil))
	if strings.Contains(string(list.Result), "execution") || !strings.Contains(string(list.Result), `"dev.mcprel/taskSupport":"required"`) {
		t.Fatalf("the 2026-07-28 tools/list: %s", list.Result)
	}
	disc := c.Call(4, mcp.MethodDiscover, mcptest.ModernParams(nil))
	if !strings.Contains(string(disc.Result), `"extensions":{"`+mcp.ExtensionTasks+`":{}}`) || strings.Contains(string(disc.Result), `"tasks":{`) {
		t.Fatalf("server/discover: %s", disc.Result)
	}
}

// The 2025-11-25 era: params.task makes a task; tasks/get, tasks/list and
// a blocking tasks/result answer it; cancelling a finished task is -32602;
// a task member on a tool without task support is -32601.
func TestLegacyEra(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	if err := e.srv.AddTool(server.Tool{Name: "plain"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	init := c.Initialize(mcp.Version20251125)
	if !strings.Contains(string(init.Result), `"tasks":{"cancel":{},"list":{},"requests":{"tools":{"call":{}}}}`) {
		t.Fatalf("initialize: %s", init.Result)
	}
	list := c.Call(1, mcp.MethodToolsList, nil)
	if !strings.Contains(string(list.Result), `"execution":{"taskSupport":"optional"}`) {
		t.Fatalf("tools/list: %s", list.Result)
	}
	created := decode[mcp.LegacyCreateTaskResult](t, c.Call(2, mcp.MethodToolsCall, map[string]any{"name": "job", "task": map[string]any{"ttl": 60000}}))
	if created.Task.Status != "working" || created.Task.TTL == nil || *created.Task.TTL != 60000 || created.Task.CreatedAt == "" {
		t.Fatalf("create = %+v", created)
	}
	id := created.Task.TaskID
	wait(t, e.job.started, "the task")
	got := decode[mcp.LegacyTaskResult](t, c.Call(3, mcp.MethodTasksGet, map[string]any{"taskId": id}))
	if got.Status != "working" {
		t.Fatalf("tasks/get = %+v", got)
	}
	listed := decode[mcp.ListTasksResult](t, c.Call(4, mcp.MethodTasksList, nil))
	if len(listed.Tasks) != 1 || listed.Tasks[0].TaskID != id {
		t.Fatalf("tasks/list = %+v", listed)
	}
	c.Request(5, mcp.MethodTasksResult, map[string]any{"taskId": id}) // blocks until the task ends
	close(e.job.step)
	close(e.job.finish)
	f, _ := c.Await(5)
	res := decode[mcp.CallToolResult](t, f)
	if !strings.Contains(f.Raw, "report ready") || res.Meta[mcp.MetaRelatedTask] == nil {
		t.Fatalf("tasks/result = %s", f.Raw)
	}
	if f := c.Call(6, mcp.MethodTasksCancel, map[string]any{"taskId": id}); f.Error == nil || f.Error.Code != -32602 {
		t.Fatalf("cancel of a completed task = %s", f.Raw)
	}
	if f := c.Call(7, mcp.MethodToolsCall, map[string]any{"name": "plain", "task": map[string]any{}}); f.Error == nil || f.Error.Code != -32601 {
		t.Fatalf("a task member on a tool without task support = %s", f.Raw)
	}
	if f := c.Call(8, mcp.MethodTasksUpdate, map[string]any{"taskId": id}); f.Error == nil || f.Error.Code != -32601 {
		t.Fatalf("tasks/update in the 2025-11-25 era = %s", f.Raw)
	}
}

// A 2025-11-25 client that asks for ttl=1 (ms) gets the store's minimum
// TTL, is told so, and finds its task with tasks/get and tasks/list right
// after the create answer (a task is durably created, and readable,
// before its id is returned).
func TestTinyTTLIsReadableAtOnce(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	c := mcptest.Stdio(t, e.srv, nil)
	c.Initialize(mcp.Version20251125)
	created := decode[mcp.LegacyCreateTaskResult](t, c.Call(1, mcp.MethodToolsCall, map[string]any{"name": "job", "task": map[string]any{"ttl": 1}}))
	if created.Task.TTL == nil || *created.Task.TTL != tasks.DefaultMinTTL.Milliseconds() {
		t.Fatalf("create with ttl=1: %+v; want the minimum TTL reported", created.Task)
	}
	got := c.Call(2, mcp.MethodTasksGet, map[string]any{"taskId": created.Task.TaskID})
	if got.Error != nil || decode[mcp.LegacyTaskResult](t, got).Status != "working" {
		t.Fatalf("tasks/get right after a ttl=1 create: %s", got.Raw)
	}
	if listed := decode[mcp.ListTasksResult](t, c.Call(3, mcp.MethodTasksList, nil)); len(listed.Tasks) != 1 {
		t.Fatalf("tasks/list right after a ttl=1 create: %+v", listed)
	}
	close(e.job.step)
	close(e.job.finish)
}

// A task cancelled while it waits for a worker ends cancelled at once:
// the 2025-11-25 tasks/cancel answers it cancelled (as that era asks), and
// its handler is never entered.
func TestCancelWhileQueued(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, &taskserver.Options{Runner: tasks.RunnerOptions{Workers: 1}})
	c := mcptest.Stdio(t, e.srv, nil)
	c.Initialize(mcp.Version20251125)
	first := decode[mcp.LegacyCreateTaskResult](t, c.Call(1, mcp.MethodToolsCall, map[string]any{"name": "job", "task": map[string]any{}}))
	if id := wait(t, e.job.started, "the first task"); id != first.Task.TaskID {
		t.Fatalf("started %q", id)
	}
	queued := decode[mcp.LegacyCreateTaskResult](t, c.Call(2, mcp.MethodToolsCall, map[string]any{"name": "job", "task": map[string]any{}}))
	got := decode[mcp.LegacyTaskResult](t, c.Call(3, mcp.MethodTasksCancel, map[string]any{"taskId": queued.Task.TaskID}))
	if got.Status != "cancelled" {
		t.Fatalf("tasks/cancel of a queued task: %+v; want cancelled", got)
	}
	ended := e.ts.Runner().Changed()
	close(e.job.step)
	close(e.job.finish)
	wait(t, ended, "the first task to end")
	if n := e.job.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times; the cancelled task's must never run", n)
	}
}

// Task creation is admitted: past the runner's bounds it is refused with
// the usual retryable overload, and nothing is recorded.
func TestCreationIsAdmitted(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, &taskserver.Options{Runner: tasks.RunnerOptions{Workers: 1, Queued: 1, PerTenant: 2}})
	c := mcptest.Stdio(t, e.srv, nil)
	for id := int64(1); id <= 2; id++ {
		if f := c.Call(id, mcp.MethodToolsCall, modern(map[string]any{"name": "job"})); f.Error != nil {
			t.Fatal(f.Raw)
		}
	}
	f := c.Call(3, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))
	if f.Error == nil || f.Error.Code != mcp.CodeOverloaded {
		t.Fatalf("a third task past 1 worker + 1 queued = %s", f.Raw)
	}
	list, _, err := e.store.List(context.Background(), "", "", 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("%d tasks recorded (%v), want 2", len(list), err)
	}
	close(e.job.step)
	close(e.job.finish)
}

// When the task store holds as many of a client's tasks as it may, a
// creation — keyed or not — is refused with the retryable overload a
// client retries later, naming the bound, and nothing is recorded.
func TestCreationRefusedWhenTheStoreIsFull(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		e := newEnvWith(t, dsn, false, nil, &tasks.Options{MaxTasksPerTenant: 2})
		c := mcptest.Stdio(t, e.srv, nil)
		for id := int64(1); id <= 2; id++ {
			if f := c.Call(id, mcp.MethodToolsCall, modern(map[string]any{"name": "job"})); f.Error != nil {
				t.Fatal(f.Raw)
			}
		}
		for id, args := range map[int64]map[string]any{3: nil, 4: {"idempotencyKey": "k-full"}} {
			f := c.Call(id, mcp.MethodToolsCall, modern(map[string]any{"name": "job", "arguments": args}))
			if f.Error == nil || f.Error.Code != mcp.CodeOverloaded || !strings.Contains(f.Error.Message, "at most 2 tasks per client") {
				t.Fatalf("a third task past a bound of 2 (arguments %v) = %s", args, f.Raw)
			}
			if got := retry.Classify(f.Error); got.Kind != retry.Overloaded || got.RetryAfter <= 0 {
				t.Fatalf("a client classifies the refusal as %v after %v, want overloaded with a retry-after", got.Kind, got.RetryAfter)
			}
			if a := e.rec.WaitRequest(t, jsonrpc.IntID(id)).Annotations; a[taskserver.AnnotationKey] != taskserver.Refused {
				t.Errorf("request %d annotated %v, want refused", id, a)
			}
		}
		list, _, err := e.store.List(context.Background(), "", "", 10)
		if err != nil || len(list) != 2 {
			t.Fatalf("%d tasks recorded (%v), want 2", len(list), err)
		}
		close(e.job.step)
		close(e.job.finish)
	})
}

// A task id or a cursor no store could hold — a NUL, far too long — is
// invalid params on every store, with words that say what is wrong, and
// never reaches the database (PostgreSQL refuses a NUL in text).
func TestMalformedIDsAndCursors(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		e := newEnv(t, dsn, false, nil)
		modernC := mcptest.Stdio(t, e.srv, nil)
		legacyC := mcptest.Stdio(t, e.srv, nil)
		legacyC.Initialize(mcp.Version20251125)
		long := strings.Repeat("a", 4096)
		check := func(what string, f mcptest.Frame, words string) {
			t.Helper()
			if f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(f.Error.Message, words) {
				t.Errorf("%s = %s; want -32602 saying %q", what, f.Raw, words)
			}
		}
		id := int64(1)
		for _, bad := range []struct{ id, words string }{{"ab\x00cd", "control character"}, {long, "4096 bytes"}} {
			for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksCancel} {
				check("modern "+m, modernC.Call(id, m, modern(map[string]any{"taskId": bad.id})), bad.words)
				id++
			}
			check("tasks/update", modernC.Call(id, mcp.MethodTasksUpdate, modern(map[string]any{"taskId": bad.id, "inputResponses": map[string]any{}})), bad.words)
			id++
			for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksCancel, mcp.MethodTasksResult} {
				check("legacy "+m, legacyC.Call(id, m, map[string]any{"taskId": bad.id}), bad.words)
				id++
			}
		}
		for _, cursor := range []string{"1.ab\x00cd", "\x00", long, "1.nope", "garbage"} {
			check("tasks/list", legacyC.Call(id, mcp.MethodTasksList, map[string]any{"cursor": cursor}), "cursor")
			id++
		}
		// A well-formed id that names no task is still unknown, as before.
		if f := legacyC.Call(id, mcp.MethodTasksGet, map[string]any{"taskId": "nope"}); f.Error == nil || !strings.Contains(f.Error.Message, `unknown task "nope"`) {
			t.Errorf("an unknown id = %s", f.Raw)
		}
	})
}

// expireLeases makes every lease in the store lapse, as when the process
// holding them died: the clock does not have to move.
func expireLeases(t *testing.T, st *tasks.Store) {
	t.Helper()
	err := st.DB().WriteTx(context.Background(), func(tx *store.Tx) error {
		_, err := tx.Exec(context.Background(), `UPDATE mcprel_tasks SET lease_until = 0 WHERE status < 3`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A task whose process died, of a tool that cannot resume, ends failed as
// interrupted when another process takes it over — never stuck working —
// and tasks/get says why.
func TestInterruptedTaskFails(t *testing.T) {
	dsn := storetest.SQLite(t)
	dead := newEnv(t, dsn, true, nil)
	c := mcptest.Stdio(t, dead.srv, nil)
	id := decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))).TaskID
	wait(t, dead.job.started, "the task")
	// The first process "dies": its worker never returns, its heartbeat
	// stops (Maintain never ran) and its lease lapses.
	expireLeases(t, dead.store)

	next := newEnv(t, dsn, true, nil)
	next.ts.MaintainOnce(context.Background())
	c2 := mcptest.Stdio(t, next.srv, nil)
	got := decode[mcp.Task](t, c2.Call(1, mcp.MethodTasksGet, modern(map[string]any{"taskId": id})))
	if got.Status != "failed" || !strings.Contains(got.StatusMessage, "interrupted") || !strings.Contains(string(got.Error), "-32603") {
		t.Fatalf("the orphaned task: %+v (%s)", got, got.Error)
	}
	if n := next.job.runs.Load(); n != 0 {
		t.Fatalf("a tool that cannot resume ran again %d times", n)
	}
	// The dead worker, should it come back, cannot change the outcome.
	close(dead.job.step)
	if err := wait(t, dead.job.returned, "the old worker"); !errors.Is(err, tasks.ErrTerminal) {
		t.Fatalf("the old worker's checkpoint = %v, want ErrTerminal", err)
	}
	if got := decode[mcp.Task](t, c2.Call(2, mcp.MethodTasksGet, modern(map[string]any{"taskId": id}))); got.Status != "failed" {
		t.Fatalf("after the old worker returned: %+v", got)
	}
}

// Graceful shutdown: a running task is asked to stop at its next
// checkpoint and is released at once, so that another process resumes it
// without waiting for the lease.
func TestShutdownReleasesAtACheckpoint(t *testing.T) {
	dsn := storetest.SQLite(t)
	e := newEnv(t, dsn, true, nil)
	c := mcptest.Stdio(t, e.srv, nil)
	id := decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))).TaskID
	wait(t, e.job.started, "the task")
	shut := make(chan error, 1)
	go func() { shut <- e.ts.Shutdown(context.Background()) }()
	// Refused while shutting down: the usual retryable overload.
	for {
		f := c.Call(2, mcp.MethodToolsCall, modern(map[string]any{"name": "job"}))
		if f.Error != nil && f.Error.Code == mcp.CodeOverloaded {
			break
		}
		if f.Error != nil {
			t.Fatal(f.Raw)
		}
		// Created before the shutdown began: it is either running (and
		// waits at step like the first) or released unstarted.
	}
	close(e.job.step)
	if err := wait(t, e.job.returned, "the worker"); !errors.Is(err, tasks.ErrShutdown) {
		t.Fatalf("the checkpoint during shutdown = %v", err)
	}
	if err := wait(t, shut, "Shutdown"); err != nil {
		t.Fatal(err)
	}
	task, err := e.store.Get(context.Background(), "", id)
	if err != nil || task.Status != tasks.Working || task.StatusMessage != "halfway" {
		t.Fatalf("after shutdown: %+v, %v", task, err)
	}
	taken, err := e.store.TakeOver(context.Background(), "next", 10)
	if err != nil || !slices.ContainsFunc(taken, func(t tasks.Task) bool { return t.ID == id }) {
		t.Fatalf("another process could not take the released task at once: %+v, %v", taken, err)
	}
}

// One keyed core: a keyed task tool refuses a bad key exactly as a plain
// keyed tool does — same code, same message, same field — in the
// arguments or in _meta.
func TestABadKeyGetsTheSameAnswerFromEveryKeyedTool(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	l, err := ledger.Open(context.Background(), e.store.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = e.srv.AddTool(server.Tool{Name: "plain"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}, idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyOptional}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	bad := []struct {
		name string
		args map[string]any
		meta map[string]any
	}{
		{"not a string", map[string]any{"idempotencyKey": 42}, nil},
		{"empty", map[string]any{"idempotencyKey": ""}, nil},
		{"control characters", map[string]any{"idempotencyKey": "a\x00b"}, nil},
		{"too long", map[string]any{"idempotencyKey": strings.Repeat("k", 256)}, nil},
		{"not a string in _meta", nil, map[string]any{mcp.MetaIdempotencyKey: 42}},
		{"two values", map[string]any{"idempotencyKey": "a"}, map[string]any{mcp.MetaIdempotencyKey: "b"}},
	}
	id := int64(0)
	for _, b := range bad {
		var answers []mcp.Failure
		for _, tool := range []string{"plain", "job"} {
			meta := map[string]any{}
			maps.Copy(meta, tasksMeta)
			maps.Copy(meta, b.meta)
			id++
			f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": tool, "arguments": b.args, "_meta": meta}))
			if f.Error != nil {
				t.Fatalf("%s, %s: %s", b.name, tool, f.Raw)
			}
			answers = append(answers, mcptest.Failure(t, f.Result))
		}
		if answers[0].Code != mcp.FailureInvalidArguments || !reflect.DeepEqual(answers[0], answers[1]) {
			t.Errorf("%s: the plain keyed tool answered %+v, the keyed task tool %+v", b.name, answers[0], answers[1])
		}
	}
	if n := e.job.runs.Load(); n != 0 {
		t.Fatalf("a refused call ran the job %d times", n)
	}
}

// The order of policies is checked when the tool is registered: the key
// must be claimed around the task's creation, and an External claim has
// no transaction to create the task in.
func TestKeyedAndTaskPoliciesStackOneWay(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	l, err := ledger.Open(context.Background(), e.store.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	err = e.srv.AddTool(server.Tool{Name: "inside-out"}, h, taskserver.AsTask(e.ts, taskserver.Policy{}), idempotency.Keyed(l, idempotency.Policy{}))
	if err == nil || !strings.Contains(err.Error(), "give idempotency.Keyed before taskserver.AsTask") {
		t.Fatalf("Keyed inside AsTask = %v", err)
	}
	err = e.srv.AddTool(server.Tool{Name: "external", Policy: server.Policy{MaxTimeout: time.Second}}, h,
		idempotency.Keyed(l, idempotency.Policy{External: true}), taskserver.AsTask(e.ts, taskserver.Policy{}))
	if err == nil || !strings.Contains(err.Error(), "External") {
		t.Fatalf("an External key around a task = %v", err)
	}
	for _, name := range []string{"inside-out", "external"} {
		if e.srv.HasTool(name) {
			t.Errorf("refused tool %s was registered", name)
		}
	}
}

// The order is checked by what the policies did, not by the _meta they
// advertise: a tool whose author wrote a key mode into its _meta, with no
// ledger behind it, is no keyed tool to AsTask, and one whose author
// wrote task support into it, with no task behind it, is no task to an
// External Keyed. Both register, and the _meta stays the author's.
func TestPolicyOrderIsNotReadFromHandWrittenMeta(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	l, err := ledger.Open(context.Background(), e.store.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	looksKeyed := server.Tool{Name: "looks-keyed", Meta: mcp.Meta{mcp.MetaKeyMode: "required", mcp.MetaEffect: mcp.EffectInTransaction}}
	if err := e.srv.AddTool(looksKeyed, h, taskserver.AsTask(e.ts, taskserver.Policy{})); err != nil {
		t.Errorf("AsTask on a tool no ledger wrapped, whose _meta names a key mode: %v", err)
	}
	looksTask := server.Tool{Name: "looks-task", Meta: mcp.Meta{mcp.MetaTaskSupport: mcp.TaskRequired}, Policy: server.Policy{MaxTimeout: time.Second}}
	if err := e.srv.AddTool(looksTask, h, idempotency.Keyed(l, idempotency.Policy{External: true})); err != nil {
		t.Errorf("External Keyed on a tool no task wraps, whose _meta names task support: %v", err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	var list struct{ Tools []mcp.Tool }
	json.Unmarshal(c.Call(1, mcp.MethodToolsList, mcptest.ModernParams(nil)).Result, &list)
	got := map[string]mcp.Meta{}
	for _, tool := range list.Tools {
		got[tool.Name] = tool.Meta
	}
	if got["looks-keyed"][mcp.MetaKeyMode] != "required" || got["looks-task"][mcp.MetaTaskSupport] != mcp.TaskRequired {
		t.Errorf("the authors' _meta was not listed as written: %v", got)
	}
}

// A keyed task's ledger must live in the tasks' store: a task and its key
// commit together or not at all. One in another database is refused with
// a message that says so, and nothing is created.
func TestKeyedTaskNeedsTheLedgerInTheTasksStore(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	elsewhere := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	err := e.srv.AddTool(server.Tool{Name: "apart"}, e.job.handler,
		idempotency.Keyed(elsewhere, idempotency.Policy{}), taskserver.AsTask(e.ts, taskserver.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	f := c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "apart", "arguments": map[string]any{"idempotencyKey": "k"}}))
	if !strings.Contains(string(f.Raw), "must live in the tasks' store") {
		t.Fatalf("a keyed task with its ledger elsewhere: %s", f.Raw)
	}
	list, _, err := e.store.List(context.Background(), "", "", 10)
	if err != nil || len(list) != 0 {
		t.Fatalf("tasks after the refusal: %+v, %v", list, err)
	}
}

// A retry that cannot receive a task (no tasks extension) of a creation
// that made one is told which task its key made, not given a task it
// cannot read, and nothing runs again.
func TestATaskKeyRetriedWithoutTaskSupport(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	c := mcptest.Stdio(t, e.srv, nil)
	args := map[string]any{"idempotencyKey": "k-1"}
	created := decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "job", "arguments": args})))
	wait(t, e.job.started, "the task to start")
	f := c.Call(2, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "job", "arguments": args}))
	if fail := mcptest.Failure(t, f.Result); fail.Code != mcp.FailureKeyConflict || !strings.Contains(fail.Message, created.TaskID) {
		t.Fatalf("the retry without task support: %s", f.Raw)
	}
	close(e.job.step)
	close(e.job.finish)
	wait(t, e.job.returned, "the handler")
	if n := e.job.runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times", n)
	}
}

// A policy between Keyed and AsTask that panics once the task was created
// in the key's transaction rolls the creation back: the slot it reserved
// on the runner comes back, and the next creation is not refused.
func TestAPanicAfterCreationGivesTheSlotBack(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, &taskserver.Options{Runner: tasks.RunnerOptions{Workers: 1, Queued: 1, PerTenant: 1}})
	l, err := ledger.Open(context.Background(), e.store.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var panicky atomic.Bool
	panicky.Store(true)
	boom := func(_ *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			res, err := next(ctx, call)
			if panicky.Load() {
				panic("after the creation")
			}
			return res, err
		}, nil
	}
	err = e.srv.AddTool(server.Tool{Name: "p"}, e.job.handler,
		idempotency.Keyed(l, idempotency.Policy{}), boom, taskserver.AsTask(e.ts, taskserver.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	call := func(id int64, key string) mcptest.Frame {
		return c.Call(id, mcp.MethodToolsCall, modern(map[string]any{"name": "p", "arguments": map[string]any{"idempotencyKey": key}}))
	}
	if f := call(1, "k-1"); !strings.Contains(string(f.Raw), "internal_error") {
		t.Fatalf("the panicking creation: %s", f.Raw)
	}
	panicky.Store(false)
	if f := call(2, "k-2"); f.Error != nil {
		t.Fatalf("the creation after a rolled-back one: %s", f.Raw)
	}
	wait(t, e.job.started, "the task to start")
	close(e.job.step)
	close(e.job.finish)
	wait(t, e.job.returned, "the handler")
}

// A keyed task's handler reads its call's idempotency key, to pass on to
// an external service, as a synchronous run does, whether the key came in
// the arguments or in _meta: the task runs outside any transaction, and
// may run again after a takeover, so that key is all that dedupes an
// external effect.
func TestATaskHandlerReadsItsKey(t *testing.T) {
	e := newEnv(t, storetest.SQLite(t), false, nil)
	l, err := ledger.Open(context.Background(), e.store.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := make(chan string, 4)
	h := func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		keys <- taskserver.TaskID(call) + "/" + idempotency.Key(call)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent")}}, nil
	}
	err = e.srv.AddTool(server.Tool{Name: "send"}, h, idempotency.Keyed(l, idempotency.Policy{}), taskserver.AsTask(e.ts, taskserver.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, e.srv, nil)
	inArgs := modern(map[string]any{"name": "send", "arguments": map[string]any{"idempotencyKey": "in-args"}})
	inMeta := mcptest.ModernParams(map[string]any{"name": "send",
		"_meta": map[string]any{mcp.MetaIdempotencyKey: "in-meta", mcp.MetaClientCapabilities: tasksMeta[mcp.MetaClientCapabilities]}})
	for i, params := range []map[string]any{inArgs, inMeta} {
		task := decode[mcp.Task](t, c.Call(int64(i+1), mcp.MethodToolsCall, params))
		want := task.TaskID + "/" + []string{"in-args", "in-meta"}[i]
		if got := wait(t, keys, "the task"); got != want {
			t.Errorf("the task's handler read %q, want %q", got, want)
		}
	}
}

// A tool whose registration was refused is not registered here: a task of
// that name taken over from a dead process ends failed as interrupted,
// and the handler of the refused registration never runs.
func TestARefusedRegistrationResumesNothing(t *testing.T) {
	dsn := storetest.SQLite(t)
	dead := newEnv(t, dsn, true, nil)
	if err := dead.srv.AddTool(server.Tool{Name: "export"}, dead.job.handler, taskserver.AsTask(dead.ts, taskserver.Policy{Resumable: true})); err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, dead.srv, nil)
	id := decode[mcp.Task](t, c.Call(1, mcp.MethodToolsCall, modern(map[string]any{"name": "export"}))).TaskID
	wait(t, dead.job.started, "the task")
	expireLeases(t, dead.store)

	next := newEnv(t, dsn, true, nil)
	l, err := ledger.Open(context.Background(), next.store.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("exported")}}, nil
	}
	// Refused: an External key cannot commit with a task's creation.
	err = next.srv.AddTool(server.Tool{Name: "export", Policy: server.Policy{MaxTimeout: time.Second}}, h,
		idempotency.Keyed(l, idempotency.Policy{External: true}), taskserver.AsTask(next.ts, taskserver.Policy{Resumable: true}))
	if err == nil {
		t.Fatal("the registration was accepted")
	}
	next.ts.MaintainOnce(context.Background())
	c2 := mcptest.Stdio(t, next.srv, nil)
	got := decode[mcp.Task](t, c2.Call(1, mcp.MethodTasksGet, modern(map[string]any{"taskId": id})))
	if got.Status != "failed" || !strings.Contains(got.StatusMessage, "interrupted") {
		t.Fatalf("the orphaned task of a refused tool: %+v", got)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the refused registration's handler ran %d times", n)
	}
	close(dead.job.step)
	if err := wait(t, dead.job.returned, "the old worker"); !errors.Is(err, tasks.ErrTerminal) {
		t.Fatalf("the old worker's checkpoint = %v, want ErrTerminal", err)
	}
}
