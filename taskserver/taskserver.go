// Package taskserver serves durable tasks (package tasks) over MCP,
// through the server's seams: routes for tasks/*, declarations of the
// capability (2025-11-25) and the io.modelcontextprotocol/tasks extension
// (2026-07-28), and a tool interceptor that turns a call of a
// task-capable tool into a task.
//
// A task-capable tool is registered with AddTool or AddTypedTool. A call
// becomes a task when the client can take one — in the 2026-07-28 era when
// the request declares the tasks extension, in the 2025-11-25 era when it
// carries params.task — and otherwise runs as an ordinary call, unless the
// tool requires a task. The task is recorded durably before its id is
// returned, runs on the task runner's bounded pool with a context of its
// own (closing the creating connection neither cancels nor stops it), and
// observes tasks/cancel at its checkpoints (Call.Checkpoint). A creation
// that carries an idempotency key and is retried gets the same task back.
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

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
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
	// checkpoint (Call.Resumed). Otherwise the task ends failed, as
	// interrupted.
	Resumable bool
	// Gather, when set, runs before a task is created, synchronously: it
	// returns a *server.InputRequired for what the call needs from the
	// client first (2026-07-28 multi round-trip requests), and nil once
	// the retry carries the answers (Request.InputResponses), which the
	// task's handler then finds in Call.InputResponses. The task is only
	// created on that last round.
	Gather func(ctx context.Context, req *server.CallRequest) error
}

// Options configure a Server. The zero value is valid.
type Options struct {
	// Runner bounds the workers and queue of the task runner.
	Runner tasks.RunnerOptions
	// Ledger, when set, makes task creation idempotent: a creation that
	// carries an idempotency key (arguments.idempotencyKey or
	// _meta["dev.mcprel/idempotencyKey"]) is recorded with the task in one
	// transaction, and its retry gets the same task. The ledger must share
	// the tasks' store.
	Ledger *ledger.Ledger
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
	ledger  *ledger.Ledger
	syncMax time.Duration

	mu    sync.RWMutex
	tools map[string]*taskTool

	inputMu      sync.Mutex
	inputArrived chan struct{} // closed and replaced when tasks/update answers a task here
}

// New adds task support to srv: the tasks/* routes of both eras and their
// declarations. Tools become task-capable through AddTool; Maintain must
// run for leases to be renewed and dead processes' tasks taken over.
func New(srv *server.Server, st *tasks.Store, opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Ledger != nil && o.Ledger.DB() != st.DB() {
		return nil, errors.New("taskserver: the ledger must live in the tasks' store, or a task and its key could commit apart")
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
	ts := &Server{srv: srv, store: st, runner: runner, ledger: o.Ledger, syncMax: o.SyncMaxTimeout,
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

// Handler runs one call of a task-capable tool: as a task (Call.TaskID is
// set) or synchronously. Its errors map to the wire as
// server.ToolHandler's do; a task's answer is stored for tasks/get and
// tasks/result. It returns the error of a Checkpoint that reports
// cancellation or shutdown as it is.
type Handler func(ctx context.Context, call *Call) (*mcp.CallToolResult, error)

// Call is what a task-capable tool's handler sees of its call.
type Call struct {
	Name      string
	Arguments json.RawMessage
	Tenant    string
	// InputResponses are the answers the call gathered before it became a
	// task (Policy.Gather), by key.
	InputResponses map[string]json.RawMessage
	// Request is the call's request when it runs synchronously; nil in a
	// task, which outlives its request.
	Request *server.CallRequest
	run     *tasks.Run
	ts      *Server
}

// TaskID is the task's id, or "" when the call runs synchronously.
func (c *Call) TaskID() string {
	if c.run == nil {
		return ""
	}
	return c.run.Task().ID
}

// Resumed is the data the task saved at its last checkpoint before the
// process running it stopped (Save), when the tool is Resumable and this
// is a later attempt; nil otherwise.
func (c *Call) Resumed() json.RawMessage {
	if c.run == nil || c.run.Task().Attempts < 2 {
		return nil
	}
	return c.run.Task().Checkpoint
}

// Checkpoint marks a point between two steps of the work where it may
// stop: the task's cancellation intent is read (tasks.ErrCancelled, after
// which the handler returns it), its lease renewed, and message, if not
// empty, shown to clients as the task's status message. During a shutdown
// it returns tasks.ErrShutdown: the handler returns it, and another
// process takes the task over. A synchronous call's checkpoint reports its
// context's end instead (and reports message as progress if asked).
func (c *Call) Checkpoint(ctx context.Context, message string) error {
	if c.run != nil {
		return c.run.Checkpoint(ctx, message)
	}
	return c.syncCheckpoint(ctx)
}

// Save is Checkpoint with data that a Resumable tool continues from.
func (c *Call) Save(ctx context.Context, message string, data any) error {
	if c.run != nil {
		return c.run.Save(ctx, message, data)
	}
	return c.syncCheckpoint(ctx)
}

func (c *Call) syncCheckpoint(ctx context.Context) error {
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
}

// taskTool is one task-capable tool.
type taskTool struct {
	ts      *Server
	name    string
	policy  Policy
	handler Handler
}

// AddTool registers a task-capable tool on the server (replacing any tool
// of the same name); interceptors given here run inside this package's.
func (ts *Server) AddTool(t server.Tool, p Policy, h Handler, interceptors ...server.ToolInterceptor) error {
	if h == nil {
		return fmt.Errorf("taskserver: tool %q has no handler", t.Name)
	}
	tt := &taskTool{ts: ts, name: t.Name, policy: p, handler: h}
	inline := func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return h(ctx, &Call{Name: req.Name, Arguments: req.Arguments, Tenant: req.Tenant, InputResponses: req.InputResponses, Request: req, ts: ts})
	}
	if err := ts.srv.AddTool(t, inline, append([]server.ToolInterceptor{tt.intercept}, interceptors...)...); err != nil {
		return err
	}
	ts.mu.Lock()
	ts.tools[t.Name] = tt
	ts.mu.Unlock()
	return nil
}

// AddTypedTool is AddTool for a handler that takes decoded arguments of
// type In and returns a value of type Out, as server.AddTypedTool.
func AddTypedTool[In, Out any](ts *Server, t server.Tool, p Policy, h func(ctx context.Context, call *Call, in In) (Out, error), interceptors ...server.ToolInterceptor) error {
	if h == nil {
		return fmt.Errorf("taskserver: tool %q has no handler", t.Name)
	}
	t, err := server.TypedTool[In, Out](t)
	if err != nil {
		return err
	}
	return ts.AddTool(t, p, func(ctx context.Context, call *Call) (*mcp.CallToolResult, error) {
		in, err := server.TypedArguments[In](&server.CallRequest{Name: call.Name, Arguments: call.Arguments})
		if err != nil {
			return nil, err
		}
		out, err := h(ctx, call, in)
		if err != nil {
			return nil, err
		}
		return server.TypedResult(out)
	}, interceptors...)
}

// keyOf carries a call's idempotency key and fingerprint from the Check to
// the handler.
type keyOf struct{}

type keyed struct {
	key string
	fp  ledger.Fingerprint
}

// intercept declares the tool's task support and wraps its handler.
func (tt *taskTool) intercept(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
	support := mcp.TaskOptional
	if tt.policy.Required {
		support = mcp.TaskRequired
	}
	t.Execution = &mcp.ToolExecution{TaskSupport: support}
	if t.Meta == nil {
		t.Meta = mcp.Meta{}
	}
	t.Meta[mcp.MetaTaskSupport] = support
	if t.Policy.Timeout == server.TimeoutLong && t.Policy.MaxTimeout == 0 {
		t.Policy.MaxTimeout = tt.ts.syncMax // a task's life is bounded by its TTL; a synchronous call by this
	}
	if tt.ts.ledger != nil {
		prev := t.Check
		t.Check = func(ctx context.Context, call *server.CallRequest) (context.Context, error) {
			if prev != nil {
				var err error
				if ctx, err = prev(ctx, call); err != nil {
					return ctx, err
				}
			}
			k, err := keyFor(call)
			if err != nil || k == nil {
				return ctx, err
			}
			return context.WithValue(ctx, keyOf{}, k), nil
		}
	}
	return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
		asTask, err := tt.wantsTask(call)
		if err != nil {
			call.Annotate(AnnotationKey, Refused)
			return nil, err
		}
		if !asTask {
			call.Annotate(AnnotationKey, Inline)
			return next(ctx, call)
		}
		if tt.policy.Gather != nil {
			if err := tt.policy.Gather(ctx, call); err != nil {
				return nil, err // its input_required answer, or a refusal
			}
		}
		return tt.create(ctx, call)
	}, nil
}

// keyFor finds a call's idempotency key, if it carries one, and the
// fingerprint of its arguments without it.
func keyFor(call *server.CallRequest) (*keyed, error) {
	var key string
	if v, ok := call.DecodedArguments()[mcp.ArgIdempotencyKey].(string); ok {
		key = v
	} else if raw := call.KnownMeta.IdempotencyKey; len(raw) > 0 {
		if err := json.Unmarshal(raw, &key); err != nil {
			return nil, &mcp.ToolError{Code: mcp.FailureKeyRequired, Message: "the idempotency key must be a string"}
		}
	}
	if key == "" {
		return nil, nil
	}
	if !ledger.ValidKey(key) {
		return nil, &mcp.ToolError{Code: mcp.FailureKeyRequired, Message: "the idempotency key must be 1 to 255 printable characters"}
	}
	fp, err := ledger.FingerprintOf(call.DecodedArguments(), nil, mcp.ArgIdempotencyKey)
	if err != nil {
		return nil, &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: err.Error()}
	}
	return &keyed{key: key, fp: fp}, nil
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

// create records the call's task durably, queues it, and answers with it.
func (tt *taskTool) create(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
	ts := tt.ts
	slot, err := ts.runner.Reserve(call.Tenant)
	if err != nil {
		call.Annotate(AnnotationKey, Refused)
		return nil, server.OverloadedError(time.Second)
	}
	defer slot.Release() // unless started
	request, err := json.Marshal(storedRequest{Name: tt.name, Arguments: call.Arguments, InputResponses: call.InputResponses, Era: call.Era})
	if err != nil {
		return nil, err
	}
	n := tasks.NewTask{Tenant: call.Tenant, Tool: tt.name, Request: request, TTL: requestedTTL(call), Owner: ts.runner.Owner()}
	var t tasks.Task
	replayed := false
	if k, _ := ctx.Value(keyOf{}).(*keyed); k != nil {
		op := ledger.Op{Tenant: call.Tenant, Tool: tt.name, Key: k.key, Fingerprint: k.fp}
		res, err := ts.ledger.Do(ctx, op, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
			var err error
			t, err = ts.store.CreateTx(ctx, tx, n)
			if err != nil {
				return nil, err
			}
			return json.Marshal(mcp.TaskIDParams{TaskID: t.ID})
		})
		if err != nil {
			return nil, creationError(call, ledgerError(err))
		}
		if res.Replayed {
			replayed = true
			var id mcp.TaskIDParams
			if err := json.Unmarshal(res.Data, &id); err != nil {
				return nil, err
			}
			if t, err = ts.store.Get(ctx, call.Tenant, id.TaskID); err != nil {
				if errors.Is(err, tasks.ErrNotFound) {
					return nil, &mcp.ToolError{Code: mcp.FailureKeyConflict, Message: "this idempotency key created a task that has since expired; use a new key"}
				}
				return nil, err
			}
		}
	} else if t, err = ts.store.Create(ctx, n); err != nil {
		return nil, creationError(call, err)
	}
	if replayed {
		call.Annotate(AnnotationKey, Replayed)
	} else {
		slot.Start(t, tt.work)
		call.Annotate(AnnotationKey, Created)
	}
	// For the request's log line and span, never a metric label.
	call.Annotate(TaskIDAnnotation, t.ID)
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

// ledgerError maps the ledger's refusals of a keyed creation.
func ledgerError(err error) error {
	var conflict *ledger.ConflictError
	var busy *ledger.InProgressError
	switch {
	case errors.As(err, &conflict):
		return &mcp.ToolError{Code: mcp.FailureKeyConflict, Message: "this idempotency key was used for a call with other arguments"}
	case errors.As(err, &busy):
		return &mcp.ToolError{Code: mcp.FailureInProgress, Message: "a call with this idempotency key is still creating its task", Retryable: true, RetryAfter: busy.RetryAfter}
	}
	return err
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
	res, err := tt.handler(ctx, &Call{Name: req.Name, Arguments: req.Arguments, Tenant: t.Tenant,
		InputResponses: req.InputResponses, run: run, ts: tt.ts})
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
	if tt == nil || !tt.policy.Resumable {
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
