package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
)

// upstreamTasks is how an upstream runs one of its tools as a durable
// task of its own.
type upstreamTasks uint8

const (
	// noUpstreamTask: the upstream answers a call of the tool directly.
	noUpstreamTask upstreamTasks = iota
	// upstreamTaskOptional: the upstream makes a call a task when asked
	// to; the gateway asks when it runs the call as a task of its own.
	upstreamTaskOptional
	// upstreamTaskRequired: the upstream runs the tool only as a task
	// (2025-11-25 taskSupport "required"): the gateway always asks.
	upstreamTaskRequired
)

// eraNow is the era the upstream speaks on its current connection.
func (l *link) eraNow() mcp.Era {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.era
}

// upstreamTasksOf reads a tool's task support from what the upstream
// declared: a 2025-era upstream per tool (execution.taskSupport); a
// 2026-07-28 upstream decides per call, and may make any call a task when
// it serves the tasks extension.
func (l *link) upstreamTasksOf(t mcp.Tool) upstreamTasks {
	l.mu.Lock()
	era, extension := l.era, l.tasksExtension
	l.mu.Unlock()
	if era == mcp.Modern {
		if extension {
			return upstreamTaskOptional
		}
		return noUpstreamTask
	}
	if t.Execution == nil {
		return noUpstreamTask
	}
	switch t.Execution.TaskSupport {
	case mcp.TaskRequired:
		return upstreamTaskRequired
	case mcp.TaskOptional:
		return upstreamTaskOptional
	}
	return noUpstreamTask
}

// upstreamTaskRecord is what a gateway task keeps, as its checkpoint
// data, of the upstream's task it follows: the gateway that takes the
// task over after this one stopped follows the same upstream task, and
// never calls the tool again.
type upstreamTaskRecord struct {
	Upstream string `json:"upstream"`
	TaskID   string `json:"upstreamTaskId"`
}

// refollows bounds how often a follow that the connection cut off is
// taken up again on a new one: the upstream's task goes on meanwhile.
const refollows = 3

// upstreamCancelWait bounds how long the gateway follows an upstream task
// it asked to cancel, to learn how it ended: cancellation is cooperative,
// and the task may complete first.
const upstreamCancelWait = time.Minute

// errCancelWaitOver ends the follow of an upstream task that was asked to
// cancel and did not end within upstreamCancelWait.
var errCancelWaitOver = errors.New("gateway: the upstream's task did not end within the wait after it was asked to cancel")

// callAsUpstreamTask forwards a call as a task of the upstream's own and
// follows it to its end, under o's clocks for the whole: created with
// StartToolTask, its id kept in the gateway's task (when the call is one)
// before anything else, then followed with FollowTask, the upstream's
// status messages shown as the gateway task's. A gateway task taken over
// from a gateway that stopped follows the upstream task that one kept;
// if it stopped before it kept one, the upstream may have created a task
// nobody follows, and the outcome is unknown unless the tool may be sent
// again.
//
// A cancel — tasks/cancel of the gateway's task, the downstream giving up
// a synchronous call, a clock — is passed on as the upstream task's own
// tasks/cancel, and the follow goes on to learn how the task ended: it
// may complete first. A call left to another process (left ends) stops
// being followed and is not cancelled: its successor follows it.
//
// started is false when the upstream's task was never created: err is
// then how the call failed, for the caller to map as any forward's
// failure. Otherwise err is the end the downstream is told: the upstream
// task's failure, tasks.ErrCancelled for one it ended cancelled, or an
// unknown outcome for one it stopped answering about.
func (l *link) callAsUpstreamTask(f *forward, left context.Context, call *server.CallRequest, c *client.Client, upstreamTool string, args any, o *client.CallOptions, tp ToolPolicy) (_ *mcp.CallToolResult, err error, started bool) {
	inTask := taskserver.TaskID(call) != ""
	deadline := time.Now().Add(o.Max)
	rec, resumed := l.resumedUpstreamTask(call)
	if !resumed {
		if inTask && taskserver.Attempt(call) > 1 && !tp.resendable() {
			return nil, l.outcomeUnknown(tp, "the gateway that ran this task stopped before it kept the id of the task the upstream was asked to create"), true
		}
		id, answered, err := c.StartToolTask(f.ctx, upstreamTool, args, o)
		switch {
		case err != nil:
			return nil, err, false
		case answered != nil:
			return answered, nil, true // the upstream made no task of it
		}
		rec = upstreamTaskRecord{Upstream: l.up.Name, TaskID: id}
		if inTask {
			// Kept first: a gateway that dies now leaves its successor
			// the id to follow, not a call to make again.
			if _, err := taskserver.Renew(left, call, "working: the upstream runs it as a task of its own", rec); errors.Is(err, tasks.ErrLeaseLost) || errors.Is(err, tasks.ErrTerminal) {
				l.log.Warn("gateway: the task was ended or taken over before it kept the id of the upstream's task; that task goes on unfollowed",
					"tool", call.Name, "upstream_task", id, "err", err)
				return nil, err, true
			}
		}
	}

	var mu sync.Mutex // guards c, which a follow taken up again replaces
	cancelled := false
	follow, stop := context.WithCancelCause(context.WithoutCancel(f.ctx))
	defer stop(nil)
	defer context.AfterFunc(l.ctx, func() { stop(errClosing) })()
	defer context.AfterFunc(left, func() { stop(context.Cause(left)) })()
	cancelUpstream := func() {
		mu.Lock()
		defer mu.Unlock()
		if cancelled {
			return
		}
		cancelled = true
		if err := c.CancelTask(context.WithoutCancel(f.ctx), rec.TaskID); err != nil {
			l.log.Warn("gateway: the upstream did not acknowledge tasks/cancel of its task", "upstream_task", rec.TaskID, "err", err)
		}
	}
	defer context.AfterFunc(f.ctx, func() {
		if left.Err() != nil {
			return // left to another process: not cancelled
		}
		cancelUpstream()
		t := time.AfterFunc(upstreamCancelWait, func() { stop(errCancelWaitOver) })
		context.AfterFunc(follow, func() { t.Stop() })
	})()

	fo := *o
	if inTask {
		fo.OnRequest = askInTask(call)
	}
	var last string
	onStatus := func(status, message string) {
		if !inTask || status+"\x00"+message == last {
			return
		}
		last = status + "\x00" + message
		_, _ = taskserver.Renew(left, call, message, nil)
	}
	backoff := retry.Backoff{Base: l.g.opts.RestartBase, Cap: 2 * time.Second}
	var res *mcp.CallToolResult
	for attempt := 0; ; attempt++ {
		fo.Max = time.Until(deadline)
		mu.Lock()
		cur := c
		mu.Unlock()
		res, err = cur.FollowTask(follow, rec.TaskID, &fo, onStatus)
		if err == nil || attempt >= refollows || follow.Err() != nil || !cutOff(err) {
			break
		}
		if !retry.Wait(follow, backoff.Delay(attempt, 0)) {
			break
		}
		again, release, aerr := l.acquire(follow, call.Tenant, relayed(call.ClientCapabilities))
		if aerr != nil {
			break
		}
		defer release()
		mu.Lock()
		c = again
		mu.Unlock()
	}
	var abandoned *client.TaskAbandonedError
	if errors.As(err, &abandoned) {
		cause := context.Cause(follow)
		switch {
		case errors.Is(cause, tasks.ErrShutdown), errors.Is(cause, tasks.ErrLeaseLost), errors.Is(cause, tasks.ErrTerminal):
			return nil, cause, true // left: the next gateway follows it
		case errors.Is(cause, errClosing) && inTask:
			return nil, tasks.ErrShutdown, true
		case follow.Err() == nil:
			cancelUpstream() // a clock fired: the gateway gives up on it
		}
	}
	return res, l.upstreamTaskEnd(rec, tp, inTask, err), true
}

// resumedUpstreamTask is the upstream task a gateway task taken over from
// another gateway kept, if it kept one of this upstream's.
func (l *link) resumedUpstreamTask(call *server.CallRequest) (upstreamTaskRecord, bool) {
	var rec upstreamTaskRecord
	data := taskserver.Resumed(call)
	if data == nil || json.Unmarshal(data, &rec) != nil || rec.Upstream != l.up.Name || rec.TaskID == "" {
		return upstreamTaskRecord{}, false
	}
	return rec, true
}

// cutOff reports whether a follow ended because the connection did:
// the upstream's task goes on, and may be followed again.
func cutOff(err error) bool {
	var se *client.StatusError
	return errors.Is(err, client.ErrConnectionLost) || errors.As(err, new(*client.ConnectError)) ||
		errors.As(err, &se) && se.Status >= 500
}

// upstreamTaskEnd maps how following the upstream's task ended to what
// the downstream is told: the task's own failure passes on; a task the
// upstream ended cancelled ends the gateway's task cancelled (or, for a
// call that is no task, is the upstream's failure); a task the gateway
// stopped following — its clocks fired, the upstream no longer knows it,
// the connection stayed lost — may still complete, and its outcome is
// unknown.
func (l *link) upstreamTaskEnd(rec upstreamTaskRecord, tp ToolPolicy, inTask bool, err error) error {
	var abandoned *client.TaskAbandonedError
	var failed *client.TaskFailedError
	var cancelled *client.CancelledError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &abandoned):
		return l.outcomeUnknown(tp, fmt.Sprintf("its task %s did not end while the gateway waited (%v); it was asked to cancel, and may still complete", rec.TaskID, abandoned.Err))
	case errors.As(err, &failed):
		return upstreamRPCError(l.up.Name, failed.Err)
	case errors.As(err, &cancelled), errors.Is(err, client.ErrTaskCancelled):
		if inTask {
			return tasks.ErrCancelled // the upstream's word: its task ended cancelled
		}
		return &mcp.ToolError{Code: mcp.FailureUpstream, Message: fmt.Sprintf("upstream %q ended the task it ran the call as (%s) cancelled", l.up.Name, rec.TaskID)}
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		return l.outcomeUnknown(tp, fmt.Sprintf("it stopped answering for its task %s (%s): it lost it, or no longer shows it to this gateway", rec.TaskID, rpc.Message))
	}
	var redirect *client.RedirectError
	if errors.As(err, &redirect) {
		// Where it pointed is for the operator's log, never downstream.
		l.log.Warn("gateway: the upstream answered a request about its task with a redirect, which the gateway does not follow",
			"upstream_task", rec.TaskID, "status", redirect.Status, "location", redirect.Location)
		return l.outcomeUnknown(tp, fmt.Sprintf("asked about its task %s, it answered HTTP %d, a redirect, which the gateway does not follow", rec.TaskID, redirect.Status))
	}
	return l.outcomeUnknown(tp, fmt.Sprintf("the gateway lost touch with its task %s: %s", rec.TaskID, l.redact(err)))
}

// askInTask answers an upstream task's questions through the gateway's
// own task: it becomes input_required with the same questions, and the
// downstream client's answers (tasks/update) go back upstream.
func askInTask(call *server.CallRequest) client.RequestHandler {
	var n atomic.Int64
	// A question's key is never reused in the task's life, whichever
	// gateway asks it: each attempt at the task has keys of its own.
	prefix := "upstream-" + strconv.Itoa(taskserver.Attempt(call)) + "-"
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		key := prefix + strconv.FormatInt(n.Add(1), 10)
		answers, err := taskserver.Ask(ctx, call, map[string]mcp.InputRequest{key: {Method: method, Params: params}}, "the upstream asks ("+method+")")
		if err != nil {
			return nil, err
		}
		return answers[key], nil
	}
}

// needsTask reports whether err is a 2026-07-28 upstream's refusal of a
// plain call of a tool it runs only as a task: -32021 naming the tasks
// extension. The call did not run.
func needsTask(err error) bool {
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != mcp.CodeMissingClientCapability {
		return false
	}
	var data mcp.MissingCapabilityData
	if json.Unmarshal(rpc.Data, &data) != nil {
		return false
	}
	_, tasks := data.RequiredCapabilities["extensions"][mcp.ExtensionTasks]
	return tasks
}
