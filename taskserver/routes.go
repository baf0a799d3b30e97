package taskserver

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
)

// resultWait bounds how long one tasks/result waits for its task to
// finish; a client whose task runs longer asks again.
const resultWait = time.Hour

// addRoutes adds the tasks/* methods of both eras.
func (ts *Server) addRoutes() error {
	long := server.Deadlines{Idle: resultWait, Max: resultWait}
	for _, rt := range []server.Route{
		{Method: mcp.MethodTasksGet, Legacy: true, Modern: true, NameMember: "taskId", Handler: ts.get},
		{Method: mcp.MethodTasksCancel, Legacy: true, Modern: true, NameMember: "taskId", Handler: ts.cancel},
		{Method: mcp.MethodTasksUpdate, Modern: true, NameMember: "taskId", Handler: ts.update},
		{Method: mcp.MethodTasksResult, Legacy: true, Deadlines: long, Handler: ts.result},
		{Method: mcp.MethodTasksList, Legacy: true, Handler: ts.list},
	} {
		if err := ts.srv.AddRoute(rt); err != nil {
			return err
		}
	}
	return nil
}

// unknownTask is the answer for an id the tenant does not have: never
// created, expired and reaped, or another tenant's.
func unknownTask(id string) *jsonrpc.Error {
	return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown task %q", id)
}

// taskID decodes the params of tasks/get, tasks/cancel and tasks/result,
// and refuses a 2026-07-28 client that did not declare the extension.
func taskID(req *server.RouteRequest) (string, error) {
	if err := negotiated(req); err != nil {
		return "", err
	}
	var p mcp.TaskIDParams
	if len(req.Params) == 0 || json.Unmarshal(req.Params, &p) != nil {
		return "", jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: taskId must be a string")
	}
	if p.TaskID == "" {
		return "", jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: taskId is required")
	}
	if err := checkText("taskId", p.TaskID, maxIDBytes); err != nil {
		return "", err
	}
	return p.TaskID, nil
}

// maxIDBytes bounds a taskId a request may carry: the ids this server
// issues are 26 characters, and an error message quotes the id.
const maxIDBytes = 64

// maxCursorBytes bounds a tasks/list cursor: the ones issued are a
// millisecond timestamp, a dot and a task id.
const maxCursorBytes = 64

// checkText refuses, as invalid params, a string from the wire that no
// store can hold or that is longer than anything this server issues: a
// NUL or another control character (PostgreSQL refuses a NUL in text),
// invalid UTF-8, or more than max bytes. Such input is invalid on every
// store, and answered before it reaches one.
func checkText(member, v string, max int) error {
	if len(v) > max {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %s is %d bytes long; the ones this server issues are at most %d", member, len(v), max)
	}
	if !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %s contains a control character (such as NUL) or invalid UTF-8; the ones this server issues never do", member)
	}
	return nil
}

// negotiated refuses tasks/* from a 2026-07-28 client that did not declare
// the tasks extension in this request.
func negotiated(req *server.RouteRequest) error {
	if req.Era == mcp.Modern {
		return req.Require(mcp.ExtensionTasks)
	}
	return nil
}

// storeError maps a store failure of a tasks/* request.
func storeError(id string, err error) error {
	if errors.Is(err, tasks.ErrNotFound) {
		return unknownTask(id)
	}
	return err // the server hides storage failures behind their advice
}

func (ts *Server) get(ctx context.Context, req *server.RouteRequest) (mcp.Result, error) {
	id, err := taskID(req)
	if err != nil {
		return nil, err
	}
	t, err := ts.store.Get(ctx, req.Tenant, id)
	if err != nil {
		return nil, storeError(id, err)
	}
	if req.Era == mcp.Modern {
		return detailed(t), nil
	}
	return &mcp.LegacyTaskResult{LegacyTask: legacyTask(t)}, nil
}

// cancel records the intent to cancel. The 2026-07-28 answer is an empty
// acknowledgement, the same for a finished task; the 2025-11-25 answer is
// the task as it now is, and -32602 for a finished one. A task still
// waiting for a worker in this process ends cancelled at once; a running
// one stays working until its worker observes the intent at a checkpoint
// (or finishes first): cancellation in mcprel is cooperative in both eras.
func (ts *Server) cancel(ctx context.Context, req *server.RouteRequest) (mcp.Result, error) {
	id, err := taskID(req)
	if err != nil {
		return nil, err
	}
	t, err := ts.store.RequestCancel(ctx, req.Tenant, id)
	if err == nil && !t.Status.Terminal() && ts.runner.CancelQueued(ctx, id) {
		// It was waiting for a worker here: it ended cancelled at once.
		if now, gerr := ts.store.Get(ctx, req.Tenant, id); gerr == nil {
			t = now
		}
	}
	switch {
	case errors.Is(err, tasks.ErrTerminal):
		if req.Era == mcp.Modern {
			return &mcp.EmptyResult{}, nil
		}
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "task %q has already finished (%s): it cannot be cancelled", id, t.Status)
	case err != nil:
		return nil, storeError(id, err)
	}
	if req.Era == mcp.Modern {
		return &mcp.EmptyResult{}, nil
	}
	res := &mcp.LegacyTaskResult{LegacyTask: legacyTask(t)}
	if !t.Status.Terminal() {
		res.StatusMessage = "cancellation requested: the task stops at its next checkpoint"
	}
	return res, nil
}

func (ts *Server) update(ctx context.Context, req *server.RouteRequest) (mcp.Result, error) {
	if err := negotiated(req); err != nil {
		return nil, err
	}
	var p mcp.UpdateTaskParams
	if len(req.Params) == 0 || json.Unmarshal(req.Params, &p) != nil || p.TaskID == "" {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: tasks/update needs a taskId and an inputResponses object")
	}
	if err := checkText("taskId", p.TaskID, maxIDBytes); err != nil {
		return nil, err
	}
	err := ts.store.ProvideInput(ctx, req.Tenant, p.TaskID, p.InputResponses)
	if err != nil && !errors.Is(err, tasks.ErrTerminal) {
		return nil, storeError(p.TaskID, err)
	}
	ts.inputGiven()
	return &mcp.EmptyResult{}, nil
}

// result waits until the task finishes (2025-11-25 tasks/result) and
// answers what the call would have: its result, or its JSON-RPC error.
func (ts *Server) result(ctx context.Context, req *server.RouteRequest) (mcp.Result, error) {
	id, err := taskID(req)
	if err != nil {
		return nil, err
	}
	for {
		changed := ts.runner.Changed()
		t, err := ts.store.Get(ctx, req.Tenant, id)
		if err != nil {
			return nil, storeError(id, err)
		}
		if t.Status.Terminal() {
			return finalAnswer(t)
		}
		// This process's workers say when a task ends; another replica's
		// are read at the task's poll interval.
		timer := time.NewTimer(t.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, context.Cause(ctx)
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// finalAnswer is a finished task's answer to tasks/result.
func finalAnswer(t tasks.Task) (mcp.Result, error) {
	related := mcp.Meta{mcp.MetaRelatedTask: mcp.RelatedTask{TaskID: t.ID}}
	switch {
	case t.Result != nil:
		var res mcp.CallToolResult
		if err := json.Unmarshal(t.Result, &res); err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "the task's stored result is unreadable")
		}
		if res.Meta == nil {
			res.Meta = mcp.Meta{}
		}
		res.Meta[mcp.MetaRelatedTask] = related[mcp.MetaRelatedTask]
		return &res, nil
	case t.Error != nil:
		var e jsonrpc.Error
		if err := json.Unmarshal(t.Error, &e); err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "the task's stored error is unreadable")
		}
		return nil, &e
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "task %q was cancelled before it finished", t.ID).
		WithData(map[string]any{"taskId": t.ID, "status": t.Status.String()})
}

func (ts *Server) list(ctx context.Context, req *server.RouteRequest) (mcp.Result, error) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if len(req.Params) > 0 && json.Unmarshal(req.Params, &p) != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: cursor must be a string")
	}
	badCursor := jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: the cursor is not one this server issued; list again without one")
	if err := checkText("cursor", p.Cursor, maxCursorBytes); err != nil {
		return nil, badCursor
	}
	list, next, err := ts.store.List(ctx, req.Tenant, p.Cursor, 100)
	if errors.Is(err, tasks.ErrBadCursor) {
		return nil, badCursor
	}
	if err != nil {
		return nil, err
	}
	res := &mcp.ListTasksResult{Tasks: make([]mcp.LegacyTask, 0, len(list)), NextCursor: next}
	for _, t := range list {
		res.Tasks = append(res.Tasks, legacyTask(t))
	}
	return res, nil
}

// createResult answers a call that created (or, retried, found) task t.
func createResult(era mcp.Era, t tasks.Task) mcp.Result {
	if era == mcp.Modern {
		res := taskOf(t)
		res.ResultType = mcp.ResultTask
		return res
	}
	return &mcp.LegacyCreateTaskResult{Task: legacyTask(t)}
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// taskOf is a task's 2026-07-28 metadata.
func taskOf(t tasks.Task) *mcp.Task {
	ttl, poll := t.TTL.Milliseconds(), t.PollInterval.Milliseconds()
	return &mcp.Task{TaskID: t.ID, Status: t.Status.String(), StatusMessage: t.StatusMessage,
		CreatedAt: timestamp(t.CreatedAt), LastUpdatedAt: timestamp(t.UpdatedAt), TTLMs: &ttl, PollIntervalMs: &poll}
}

// detailed is tasks/get's 2026-07-28 answer: the metadata, and by status
// the inlined result, error or outstanding input requests. A tool's
// isError result completes a task in this era.
func detailed(t tasks.Task) *mcp.Task {
	res := taskOf(t)
	switch t.Status {
	case tasks.Completed:
		res.Result = withResultType(t.Result)
	case tasks.Failed:
		res.Error = t.Error
	case tasks.InputRequired:
		res.InputRequests = pending(t.InputRequests, t.InputResponses)
	}
	return res
}

// pending is the input requests that have no answer yet.
func pending(requests, responses json.RawMessage) json.RawMessage {
	var asked, answered map[string]json.RawMessage
	if json.Unmarshal(requests, &asked) != nil {
		return requests
	}
	if json.Unmarshal(responses, &answered) != nil || len(answered) == 0 {
		return requests
	}
	for k := range answered {
		delete(asked, k)
	}
	b, err := json.Marshal(asked)
	if err != nil {
		return requests
	}
	return b
}

// withResultType adds resultType "complete" to a stored result, as the
// 2026-07-28 era writes every result.
func withResultType(stored json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(stored, &m) != nil {
		return stored
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	b, err := json.Marshal(m)
	if err != nil {
		return stored
	}
	return b
}

// legacyTask is a task as the 2025-11-25 era shows it, where a tool's
// isError result makes a task failed.
func legacyTask(t tasks.Task) mcp.LegacyTask {
	ttl, poll := t.TTL.Milliseconds(), t.PollInterval.Milliseconds()
	status := t.Status.String()
	if t.Status == tasks.Completed && isError(t.Result) {
		status = tasks.Failed.String()
	}
	return mcp.LegacyTask{TaskID: t.ID, Status: status, StatusMessage: t.StatusMessage,
		CreatedAt: timestamp(t.CreatedAt), LastUpdatedAt: timestamp(t.UpdatedAt), TTL: &ttl, PollInterval: &poll}
}

func isError(result json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &r) == nil && r.IsError
}
