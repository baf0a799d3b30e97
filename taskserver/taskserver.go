// Package taskserver serves durable tasks (package tasks) over MCP,
// through the server's seams: routes for tasks/*, declarations of the
// capability (2025-11-25) and the io.modelcontextprotocol/tasks extension
// (2026-07-28), and a tool interceptor that turns a call of a
// task-capable tool into a task.
//
// A tool becomes task-capable through the policy AsTask, given to
// server.Server.AddTool (or server.AddTypedTool) like any other. A call
// becomes a task when the client can take one — in the 2026-07-28 era when
// the request declares the tasks extension, in the 2025-11-25 era when it
// carries params.task — and otherwise runs as an ordinary call, unless the
// tool requires a task. The task is recorded durably before its id is
// returned, runs on the task runner's bounded pool with a context of its
// own (closing the creating connection neither cancels nor stops it), and
// observes tasks/cancel at its checkpoints (Checkpoint). Its handler is the
// tool's ordinary one, given a call detached from any request (see
// server.Server.Detached); Checkpoint, Save, Resumed, TaskID and Ask reach
// the task through that call. Stacked inside idempotency.Keyed, the task
// is created in the transaction that claims the call's key, and a retried
// creation gets the same task back.
//
// Package server knows none of this: it imports neither tasks nor store.
package taskserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
)

// AnnotationKey is the key of the annotation this package adds to the
// record of a call of a task-capable tool: what became of it.
const AnnotationKey = "task"

// TaskIDAnnotation is the key of the annotation that names the task a
// call created or replayed, for the request's log line and span (an id is
// never a metric label).
const TaskIDAnnotation = "task_id"

// The values of AnnotationKey.
const (
	Created  = "created"  // a task was created and queued
	Replayed = "replayed" // a retried creation got its earlier task back
	Inline   = "inline"   // the client could not take a task: the call ran synchronously
	Refused  = "refused"  // no room for the task, or the client could not take the task the tool needs
)

// Policy is a task-capable tool's contract.
type Policy struct {
	// Required: the tool only runs as a task; a client that cannot take
	// one is refused (2026-07-28: -32021; 2025-11-25: -32601). Otherwise a
	// call from such a client runs synchronously, as an ordinary call.
	Required bool
	// Resumable: when the process running a task dies, the process that
	// takes it over runs the tool again with the data of its last
	// checkpoint (Resumed). Otherwise the task ends failed, as
	// interrupted.
	Resumable bool
	// ReadsCancel: the handler reads tasks/cancel itself (Renew) and ends
	// the task by what the cancellation left — a call it sent elsewhere
	// may have acted — rather than stop at a Checkpoint. Its tasks are
	// never ended cancelled without a worker (tasks.NewTask.ReadsCancel):
	// one cancelled while the process running it was gone is taken over
	// as any other, and a Resumable tool runs again with the intent left
	// for it to read (Attempt tells it is a later attempt); any other
	// ends failed as interrupted, its outcome unknown.
	ReadsCancel bool
	// Gather, when set, runs before a task is created, synchronously: it
	// returns a *server.InputRequired for what the call needs from the
	// client first (2026-07-28 multi round-trip requests), and nil once
	// the retry carries the answers (Request.InputResponses), which the
	// task's handler then finds in its call's InputResponses. The task is
	// only created on that last round.
	Gather func(ctx context.Context, req *server.CallRequest) error
}

// Options configure a Server. The zero value is valid.
type Options struct {
	// Runner bounds the workers and queue of the task runner.
	Runner tasks.RunnerOptions
	// SyncMaxTimeout bounds a synchronous call of a TimeoutLong
	// task-capable tool that sets no MaxTimeout of its own. Zero means
	// ten minutes.
	SyncMaxTimeout time.Duration
}

// Server serves durable tasks on an MCP server.
type Server struct {
	srv     *server.Server
	store   *tasks.Store
	runner  *tasks.Runner
	syncMax time.Duration

	mu    sync.RWMutex
	tools map[string]*taskTool

	inputMu      sync.Mutex
	inputArrived chan struct{} // closed and replaced when tasks/update answers a task here
}

// New adds task support to srv: the tasks/* routes of both eras and their
// declarations. Tools become task-capable through AsTask; Maintain must
// run for leases to be renewed and dead processes' tasks taken over.
func New(srv *server.Server, st *tasks.Store, opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.SyncMaxTimeout < 0 {
		return nil, errors.New("taskserver: Options.SyncMaxTimeout must not be negative")
	}
	if o.SyncMaxTimeout == 0 {
		o.SyncMaxTimeout = 10 * time.Minute
	}
	if o.Runner.Logger == nil {
		o.Runner.Logger = srv.Logger()
	}
	runner, err := tasks.NewRunner(st, &o.Runner)
	if err != nil {
		return nil, err
	}
	ts := &Server{srv: srv, store: st, runner: runner, syncMax: o.SyncMaxTimeout,
		tools: map[string]*taskTool{}, inputArrived: make(chan struct{})}
	if err := ts.addRoutes(); err != nil {
		return nil, err
	}
	err = srv.Declare(server.Declaration{Legacy: true, Capabilities: map[string]any{
		"tasks": map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
			"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}},
	}})
	if err != nil {
		return nil, err
	}
	err = srv.Declare(server.Declaration{Modern: true, Extensions: map[string]map[string]any{mcp.ExtensionTasks: {}}})
	return ts, err
}

// Server is the MCP server the tasks are served on.
func (ts *Server) Server() *server.Server { return ts.srv }

// Runner is the task runner, for its owner name and bounds.
func (ts *Server) Runner() *tasks.Runner { return ts.runner }

// Store is where the tasks live.
func (ts *Server) Store() *tasks.Store { return ts.store }

// Maintain keeps this process's task leases alive, takes over the tasks
// of processes that died (resuming those of Resumable tools registered
// here, failing the rest as interrupted) and reaps expired tasks, until
// ctx ends.
func (ts *Server) Maintain(ctx context.Context, interval time.Duration) {
	ts.runner.Maintain(ctx, interval, ts.resume)
}

// MaintainOnce is one round of Maintain.
func (ts *Server) MaintainOnce(ctx context.Context) { ts.runner.MaintainOnce(ctx, ts.resume) }

// Shutdown stops taking tasks and lets running ones stop at their next
// checkpoint, leaving them to be taken over, until ctx ends; see
// tasks.Runner.Shutdown.
func (ts *Server) Shutdown(ctx context.Context) error { return ts.runner.Shutdown(ctx) }

// taskRun is what a task's handler is given through its detached call:
// the run it checkpoints, saves and asks for input through.
type taskRun struct {
	run *tasks.Run
	ts  *Server
}

type runKey struct{}

func runOf(call *server.CallRequest) *taskRun {
	tr, _ := call.Attached(runKey{}).(*taskRun)
	return tr
}

// TaskID is the id of the task the call runs as, or "" when it runs
// synchronously.
func TaskID(call *server.CallRequest) string {
	if tr := runOf(call); tr != nil {
		return tr.run.Task().ID
	}
	return ""
}

// Resumed is the data the task saved at its last checkpoint before the
// process running it stopped (Save), when the tool is Resumable and this
// is a later attempt; nil otherwise.
func Resumed(call *server.CallRequest) json.RawMessage {
	tr := runOf(call)
	if tr == nil || tr.run.Task().Attempts < 2 {
		return nil
	}
	return tr.run.Task().Checkpoint
}

// Checkpoint marks a point between two steps of the work where it may
// stop: the task's cancellation intent is read (tasks.ErrCancelled, after
// which the handler returns it), its lease renewed, and message, if not
// empty, shown to clients as the task's status message. During a shutdown
// it returns tasks.ErrShutdown: the handler returns it, and another
// process takes the task over. A synchronous call's checkpoint reports its
// context's end instead.
func Checkpoint(ctx context.Context, call *server.CallRequest, message string) error {
	if tr := runOf(call); tr != nil {
		return tr.run.Checkpoint(ctx, message)
	}
	return syncCheckpoint(ctx)
}

// Renew tells the task's store it is alive, as a Checkpoint (with
// message) or Save (with data) does, and reports whether tasks/cancel was
// asked of it — without ending it: for a handler whose cancellation may
// leave an effect it must report, such as a call it sent elsewhere that
// may have acted by the time it is cancelled. On true it stops that work,
// finds out what it did, and returns: Checkpoint's tasks.ErrCancelled
// when nothing took effect, or what it found (the answer that came first,
// or an outcome it cannot know, said so). It returns tasks.ErrShutdown,
// ErrTerminal and ErrLeaseLost as Checkpoint does. A synchronous call's
// cancellation is its context's end: it reports false, or the context's
// cause.
func Renew(ctx context.Context, call *server.CallRequest, message string, data any) (cancelRequested bool, err error) {
	if tr := runOf(call); tr != nil {
		return tr.run.Renew(ctx, message, data)
	}
	return false, syncCheckpoint(ctx)
}

// Attempt is which attempt at the task this run of its handler is: 1 for
// the first, more after the process running it stopped and another took
// it over (a Resumable tool); 0 for a synchronous call.
func Attempt(call *server.CallRequest) int {
	if tr := runOf(call); tr != nil {
		return tr.run.Task().Attempts
	}
	return 0
}

// Save is Checkpoint with data that a Resumable tool continues from.
func Save(ctx context.Context, call *server.CallRequest, message string, data any) error {
	if tr := runOf(call); tr != nil {
		return tr.run.Save(ctx, message, data)
	}
	return syncCheckpoint(ctx)
}

func syncCheckpoint(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// storedRequest is a task's durable request: what a worker needs to run
// it, here or after a takeover.
type storedRequest struct {
	Name           string                     `json:"name"`
	Arguments      json.RawMessage            `json:"arguments,omitempty"`
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
	Era            mcp.Era                    `json:"era"`
	// IdempotencyKey is the key the creating call was made with, for the
	// handler's idempotency.Key: a key sent in _meta is in no arguments.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// taskTool is one task-capable tool.
type taskTool struct {
	ts     *Server
	name   string
	policy Policy
	next   server.CallHandler // the handler inside AsTask: what a task runs
}

// AsTask is the policy that makes a tool task-capable on ts (see Policy
// and the package doc). Its handler runs as a task when the client can
// take one, and otherwise synchronously, as any call. To make task
// creation idempotent, give idempotency.Keyed before it, with a ledger in
// ts's store: srv.AddTool(t, h, idempotency.Keyed(l, kp), taskserver.AsTask(ts, tp)).
// Keyed after it is refused: a task runs outside the request whose key it
// would claim. Inside Keyed, a call that runs synchronously runs in the
// ledger's transaction like any keyed call: a tool whose synchronous run
// is long should require a task (Policy.Required).
func AsTask(ts *Server, p Policy) server.ToolInterceptor {
	return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		if ts == nil {
			return nil, fmt.Errorf("taskserver: tool %q has no task server", t.Name)
		}
		if _, keyed := idempotency.PolicyOf(t); keyed {
			return nil, fmt.Errorf("taskserver: tool %q: give idempotency.Keyed before taskserver.AsTask, so that a task's creation is what its key makes idempotent", t.Name)
		}
		tt := &taskTool{ts: ts, name: t.Name, policy: p, next: next}
		h, err := tt.intercept(t)
		if err != nil {
			return nil, err
		}
		ts.mu.Lock()
		ts.tools[t.Name] = tt
		ts.mu.Unlock()
		return h, nil
	}
}

// intercept declares the tool's task support and wraps its handler.
func (tt *taskTool) intercept(t *server.Tool) (server.CallHandler, error) {
	support := mcp.TaskOptional
	if tt.policy.Required {
		support = mcp.TaskRequired
	}
	t.Execution = &mcp.ToolExecution{TaskSupport: support}
	if t.Meta == nil {
		t.Meta = mcp.Meta{}
	}
	t.Meta[mcp.MetaTaskSupport] = support
	idempotency.KeepsRecords(t) // for Keyed outside: a created task is kept in place of a result
	if t.Policy.Timeout == server.TimeoutLong && t.Policy.MaxTimeout == 0 {
		t.Policy.MaxTimeout = tt.ts.syncMax // a task's life is bounded by its TTL; a synchronous call by this
	}
	return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
		if record, ok := idempotency.Replaying(call); ok {
			return tt.replay(ctx, call, record)
		}
		asTask, err := tt.wantsTask(call)
		if err != nil {
			call.Annotate(AnnotationKey, Refused)
			return nil, err
		}
		if !asTask {
			call.Annotate(AnnotationKey, Inline)
			return tt.next(ctx, call)
		}
		if tt.policy.Gather != nil {
			if err := tt.policy.Gather(ctx, call); err != nil {
				return nil, err // its input_required answer, or a refusal
			}
		}
		return tt.create(ctx, call)
	}, nil
}

// wantsTask decides whether a call runs as a task: when the client can
// take one. A Required tool refuses a client that cannot.
func (tt *taskTool) wantsTask(call *server.CallRequest) (bool, error) {
	if call.Era == mcp.Modern {
		if call.ClientCapabilities.Extensions[mcp.ExtensionTasks] != nil {
			return true, nil
		}
		if tt.policy.Required {
			return false, call.Require(mcp.ExtensionTasks)
		}
		return false, nil
	}
	if call.Task != nil {
		var md mcp.TaskMetadata
		if err := json.Unmarshal(call.Task, &md); err != nil {
			return false, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: task must be an object with an optional integer ttl")
		}
		return true, nil
	}
	if tt.policy.Required {
		return false, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "tool %q runs only as a task: call it with params.task", tt.name)
	}
	return false, nil
}

// create records the call's task durably, queues it once it is
// committed, and answers with it. Inside idempotency.Keyed the task is
// created in the transaction that claims the key, the ledger keeps its
// id, and the worker starts only after that transaction commits.
func (tt *taskTool) create(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
	ts := tt.ts
	slot, err := ts.runner.Reserve(call.Tenant)
	if err != nil {
		call.Annotate(AnnotationKey, Refused)
		return nil, server.OverloadedError(time.Second)
	}
	request, err := json.Marshal(storedRequest{Name: tt.name, Arguments: call.Arguments, InputResponses: call.InputResponses, Era: call.Era,
		IdempotencyKey: idempotency.Key(call)})
	if err != nil {
		slot.Release()
		return nil, err
	}
	n := tasks.NewTask{Tenant: call.Tenant, Tool: tt.name, Request: request, TTL: requestedTTL(call), Owner: ts.runner.Owner(),
		ReadsCancel: tt.policy.ReadsCancel}
	var t tasks.Task
	if tx := idempotency.Tx(call); tx != nil {
		if tx.DB() != ts.store.DB() {
			slot.Release()
			return nil, fmt.Errorf("taskserver: tool %q: the idempotency ledger must live in the tasks' store, or a task and its key could commit apart", tt.name)
		}
		t, err = ts.store.CreateTx(ctx, tx, n)
	} else {
		t, err = ts.store.Create(ctx, n)
	}
	if err != nil {
		slot.Release()
		return nil, creationError(call, err)
	}
	record, err := json.Marshal(mcp.TaskIDParams{TaskID: t.ID})
	if err != nil {
		slot.Release()
		return nil, err
	}
	idempotency.Keep(call, record)
	idempotency.AfterTx(call, func(committed bool) {
		if committed {
			slot.Start(t, tt.work)
		} else {
			slot.Release()
		}
	})
	call.Annotate(AnnotationKey, Created)
	// For the request's log line and span, never a metric label.
	call.Annotate(TaskIDAnnotation, t.ID)
	return createResult(call.Era, t), nil
}

// replay answers a retried creation with the task it created, as it is
// now. A client that cannot take a task is told where it is instead.
func (tt *taskTool) replay(ctx context.Context, call *server.CallRequest, record []byte) (mcp.Result, error) {
	var id mcp.TaskIDParams
	if err := json.Unmarshal(record, &id); err != nil || id.TaskID == "" {
		return nil, fmt.Errorf("taskserver: tool %q: the idempotency record is not a task's", tt.name)
	}
	call.Annotate(TaskIDAnnotation, id.TaskID)
	t, err := tt.ts.store.Get(ctx, call.Tenant, id.TaskID)
	if errors.Is(err, tasks.ErrNotFound) {
		call.Annotate(AnnotationKey, Refused)
		return nil, &mcp.ToolError{Code: mcp.FailureKeyConflict, Message: "this idempotency key created a task that has since expired; use a new key"}
	}
	if err != nil {
		return nil, err
	}
	if asTask, _ := tt.wantsTask(call); !asTask {
		call.Annotate(AnnotationKey, Refused)
		return nil, &mcp.ToolError{Code: mcp.FailureKeyConflict,
			Message: fmt.Sprintf("this idempotency key created task %s, which this request cannot receive: read it with tasks/get, or use a new key for a new operation", t.ID)}
	}
	call.Annotate(AnnotationKey, Replayed)
	return createResult(call.Era, t), nil
}

// fullRetryAfter is the retry advice when the task store is full: room
// comes back as finished tasks pass their TTL and the reaper, which runs
// every few seconds, deletes them.
const fullRetryAfter = 10 * time.Second

// creationError maps the store's refusal of a new task when it holds as
// many as it may: the server's retryable overload (mcp.CodeOverloaded,
// failure "overloaded", retryAfterMs), whose message names the bound. It
// is temporary, and nothing was created.
func creationError(call *server.CallRequest, err error) error {
	var full *tasks.FullError
	if !errors.As(err, &full) {
		return err
	}
	call.Annotate(AnnotationKey, Refused)
	msg := fmt.Sprintf("task store full: it keeps at most %d tasks per client (MaxTasksPerTenant) and holds that many of yours; retry once some expire", full.Limit)
	if full.All {
		msg = fmt.Sprintf("task store full: it keeps at most %d tasks in all (MaxTasks) and holds that many; retry once some expire", full.Limit)
	}
	te := &mcp.ToolError{Code: mcp.FailureOverloaded, Message: msg, Retryable: true, RetryAfter: fullRetryAfter}
	return jsonrpc.NewError(mcp.CodeOverloaded, "%s (retry after %d ms)", msg, fullRetryAfter.Milliseconds()).WithData(te.Failure())
}

// requestedTTL is the ttl a 2025-11-25 client asked for.
func requestedTTL(call *server.CallRequest) time.Duration {
	if call.Task == nil {
		return 0
	}
	var md mcp.TaskMetadata
	if json.Unmarshal(call.Task, &md) != nil || md.TTL == nil {
		return 0
	}
	return time.Duration(*md.TTL) * time.Millisecond
}

// work runs the tool for a task and turns its return into the task's
// outcome.
func (tt *taskTool) work(ctx context.Context, run *tasks.Run) tasks.Outcome {
	t := run.Task()
	var req storedRequest
	if err := json.Unmarshal(t.Request, &req); err != nil {
		return tasks.Outcome{Status: tasks.Failed, Message: "the task's stored request is unreadable",
			Error: mustJSON(jsonrpc.NewError(jsonrpc.CodeInternalError, "the task's stored request is unreadable"))}
	}
	call := tt.ts.srv.Detached(server.CallRequest{Name: req.Name, Arguments: req.Arguments,
		Request: server.Request{Tenant: t.Tenant, Era: req.Era, InputResponses: req.InputResponses}})
	call.Attach(runKey{}, &taskRun{run: run, ts: tt.ts})
	idempotency.WithKey(call, req.IdempotencyKey)
	res, err := tt.next(ctx, call)
	switch {
	case errors.Is(err, tasks.ErrCancelled):
		return tasks.Outcome{Status: tasks.Cancelled, Message: "cancelled"}
	case errors.Is(err, tasks.ErrShutdown), err != nil && ctx.Err() != nil:
		return tasks.Outcome{} // left for another process to take over
	case errors.Is(err, tasks.ErrTerminal), errors.Is(err, tasks.ErrLeaseLost):
		return tasks.Outcome{} // ended or taken over elsewhere; nothing of ours to record
	}
	out, rpcErr := tt.ts.srv.ToolResult(tt.name, res, err)
	if rpcErr != nil {
		return tasks.Outcome{Status: tasks.Failed, Message: rpcErr.Message, Error: mustJSON(rpcErr)}
	}
	return tasks.Outcome{Status: tasks.Completed, Result: mustJSON(out)}
}

// resume decides what becomes of a task taken over from a dead process.
func (ts *Server) resume(t tasks.Task) (tasks.Work, bool) {
	ts.mu.RLock()
	tt := ts.tools[t.Tool]
	ts.mu.RUnlock()
	// AsTask records its tool before AddTool has finished: a registration
	// refused after it (by a policy outside, or an invalid definition)
	// left it here, but registered nothing on the server.
	if tt == nil || !tt.policy.Resumable || !ts.srv.HasTool(t.Tool) {
		return nil, false
	}
	return tt.work, true
}
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{"code":-32603,"message":"the result could not be encoded"}`)
	}
	return b
}
