package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// cancelWait bounds how long CallToolTask keeps polling a task after its
// caller cancelled and it asked to cancel the task, waiting for the
// worker to reach a checkpoint.
const cancelWait = time.Minute

// CallToolTask calls a tool asking for a durable task, and follows the
// task to its end: it polls tasks/get at the server's poll interval (with
// jitter, so that many clients do not poll in step) until the task is
// terminal, and returns the result the call would have returned. A server
// that answers the call at once (no task) has its answer returned as it
// is. It is StartToolTask and FollowTask under one pair of clocks.
//
// The call's clocks (o) apply to the task as a whole. Max bounds the whole
// wait: the creating call, every poll and the fetch of the result. Idle
// bounds the time without news of the task: it is reset when a poll finds
// the task's lastUpdatedAt advanced (the spec's Task field, which mcprel's
// server moves at every checkpoint) or its status or status message
// changed, not by a poll that finds nothing new. (Progress the server
// sends for the task after the creating call has answered reaches no
// request in flight and is dropped, so it cannot reset the clock.) When
// either fires, the client
// sends tasks/cancel (under DefaultProbeTimeout's own bound), stops
// waiting and returns a *TaskAbandonedError that wraps the
// *DeadlineError: the task may still complete, and tasks/get reads it.
//
// When ctx ends the client sends tasks/cancel — an acknowledgement, not
// the end — and keeps polling until the task is terminal (at most a
// minute, and never past Max): a task that completed before its worker
// saw the intent returns its result.
//
// A task that asks for input while it runs (2026-07-28: status
// input_required, its requests in tasks/get) is answered through
// o.OnRequest, or else Options.OnRequest, and the answers given with
// tasks/update; the time that takes does not count against Idle. Input
// the client cannot give cancels the task and ends the wait with a
// *TaskAbandonedError that wraps the *InputError. Input asked before the
// task is created (an input_required result to the call itself) is
// answered as CallTool answers it.
//
// In the 2026-07-28 era the request declares the tasks extension, which
// is what asks the server for a task (the client's Options.Capabilities
// need not); in the 2025-11-25 era it carries params.task. onStatus, if
// not nil, is told each status polled.
func (c *Client) CallToolTask(ctx context.Context, name string, args any, o *CallOptions, onStatus func(status, message string)) (*mcp.CallToolResult, error) {
	opts := taskClocks(o)
	deadline := time.Now().Add(opts.Max)
	maxErr := &DeadlineError{Clock: MaxClock, After: opts.Max}
	callCtx, stop := context.WithDeadlineCause(ctx, deadline, maxErr)
	defer stop()
	id, res, err := c.startTask(callCtx, name, args, &opts)
	if err != nil || res != nil {
		return res, err
	}
	if onStatus != nil {
		onStatus("working", "task "+id)
	}
	// Polling outlives the caller's cancel (to see the cancel's outcome),
	// never the max clock.
	pollCtx, stopPoll := context.WithDeadlineCause(context.WithoutCancel(ctx), deadline, maxErr)
	defer stopPoll()
	return c.followTask(ctx, pollCtx, id, time.Second, opts.Idle, opts.OnRequest, true, onStatus)
}

// StartToolTask is CallToolTask's first half: it calls the tool asking for
// a durable task, under o's clocks, and returns the created task's id —
// or, when the server answered the call at once (no task), its result.
// The id is the only handle on the task's outcome: a caller that must
// survive its own restart keeps it durably before anything else, and
// follows the task with FollowTask, now or after the restart.
func (c *Client) StartToolTask(ctx context.Context, name string, args any, o *CallOptions) (taskID string, answered *mcp.CallToolResult, err error) {
	opts := taskClocks(o)
	callCtx, stop := context.WithTimeoutCause(ctx, opts.Max, &DeadlineError{Clock: MaxClock, After: opts.Max})
	defer stop()
	return c.startTask(callCtx, name, args, &opts)
}

// FollowTask follows a task this client may read — one StartToolTask
// created, here or in an earlier process, on this session where the
// server binds tasks to one — to its end, polling as CallToolTask does,
// under o's clocks from now: Max bounds the whole wait, Idle the time
// without news of the task. Input the task asks for is answered through
// o.OnRequest, or else Options.OnRequest.
//
// Unlike CallToolTask it never cancels the task: when ctx ends or a
// clock fires, the wait ends with a *TaskAbandonedError whose Left is
// set, and the task goes on — to be followed again, or cancelled with
// CancelTask. A caller that cancels keeps following: the task ends
// cancelled, or completes first.
func (c *Client) FollowTask(ctx context.Context, taskID string, o *CallOptions, onStatus func(status, message string)) (*mcp.CallToolResult, error) {
	opts := taskClocks(o)
	pollCtx, stopPoll := context.WithTimeoutCause(ctx, opts.Max, &DeadlineError{Clock: MaxClock, After: opts.Max})
	defer stopPoll()
	return c.followTask(ctx, pollCtx, taskID, time.Second, opts.Idle, opts.OnRequest, false, onStatus)
}

// CancelTask asks the server to cancel a task (tasks/cancel) and returns
// once it acknowledged: an intent recorded, not the end — the task may
// still complete, and FollowTask tells how it ended. It is bounded by
// Options.ProbeTimeout as well as ctx.
func (c *Client) CancelTask(ctx context.Context, taskID string) error {
	c.stats.cancelled.Add(1)
	return c.cancelTask(ctx, taskID)
}

// taskRequest is the options of a tasks/* request: in the 2026-07-28 era
// each declares the tasks extension, which the server requires of every
// one (-32021 otherwise).
var taskRequest = &CallOptions{asksTask: true}

// taskClocks is o with its clocks defaulted.
func taskClocks(o *CallOptions) CallOptions {
	var opts CallOptions
	if o != nil {
		opts = *o
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	return opts
}

// startTask sends a tools/call that asks for a task and returns the
// created task's id, or the server's answer when it made none.
func (c *Client) startTask(ctx context.Context, name string, args any, opts *CallOptions) (string, *mcp.CallToolResult, error) {
	raw, err := c.withParamHeaders(ctx, name, args, func(args any, headers [][2]string) (json.RawMessage, error) {
		params := map[string]any{"name": name}
		if args != nil {
			params["arguments"] = args
		}
		if c.era == mcp.Legacy {
			params["task"] = map[string]any{}
		}
		opts.headers, opts.asksTask = headers, true
		return c.call(ctx, mcp.MethodToolsCall, name, params, opts)
	})
	if err != nil {
		return "", nil, err
	}
	id, ok := createdTask(raw, c.era)
	if !ok {
		var res mcp.CallToolResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return "", nil, fmt.Errorf("client: tools/call answered %s: %w", clip(raw), err)
		}
		return "", &res, nil
	}
	return id, nil, nil
}

// TaskFailedError ends the wait for a task that ended failed: Err is the
// JSON-RPC error the task ended with — what the call would have answered
// — which errors.As finds. A tasks/get or tasks/result that fails is no
// TaskFailedError: the task may still be running.
type TaskFailedError struct {
	TaskID string
	Err    *jsonrpc.Error
}

func (e *TaskFailedError) Error() string { return e.Err.Error() }
func (e *TaskFailedError) Unwrap() error { return e.Err }

// ErrTaskCancelled ends the wait for a task that ended cancelled when the
// caller did not cancel it (another client did, or the server): errors.Is
// finds it. A task the caller cancelled ends its wait with a
// *CancelledError instead.
var ErrTaskCancelled = errors.New("client: the task was cancelled")

// TaskAbandonedError ends a task call whose clock fired: the client asked
// the server to cancel the task and stopped waiting for it. The task may
// still be working, and may yet complete or end cancelled: tasks/get with
// TaskID tells.
type TaskAbandonedError struct {
	TaskID string
	// Status is the last status the client saw ("working",
	// "input_required").
	Status string
	// Left is set when the client did not ask the server to cancel the
	// task (FollowTask): it goes on.
	Left bool
	// CancelErr is why tasks/cancel was not acknowledged; nil when it
	// was (an acknowledgement records the intent, it does not end the
	// task) or was not sent (Left).
	CancelErr error
	// Err is what ended the wait: a *DeadlineError, a *CancelledError
	// when the caller cancelled and the max clock fired before the task
	// ended, or the *InputError (*InputRoundsError) of input the task
	// asked for and the client did not give.
	Err error
}

func (e *TaskAbandonedError) Error() string {
	cancel := "the server acknowledged tasks/cancel"
	switch {
	case e.Left:
		return fmt.Sprintf("%v; task %s was last seen %s and was left running: read it with tasks/get", e.Err, e.TaskID, e.Status)
	case e.CancelErr != nil:
		cancel = "tasks/cancel failed (" + e.CancelErr.Error() + ")"
	}
	return fmt.Sprintf("%v; task %s was last seen %s and %s; it may still complete: read it with tasks/get",
		e.Err, e.TaskID, e.Status, cancel)
}

func (e *TaskAbandonedError) Unwrap() error { return e.Err }

// createdTask reads a created task's id from a tools/call result, in the
// era's shape. (Its poll interval is read from the first tasks/get, which
// follows at once.)
func createdTask(raw json.RawMessage, era mcp.Era) (string, bool) {
	var modern struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
	}
	var legacy struct {
		Task *struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if era == mcp.Modern {
		if json.Unmarshal(raw, &modern) == nil && modern.ResultType == mcp.ResultTask && modern.TaskID != "" {
			return modern.TaskID, true
		}
		return "", false
	}
	if json.Unmarshal(raw, &legacy) == nil && legacy.Task != nil && legacy.Task.TaskID != "" {
		return legacy.Task.TaskID, true
	}
	return "", false
}

// polledTask is what tasks/get says, in either era.
type polledTask struct {
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	Result         json.RawMessage `json:"result"`
	Error          *jsonrpc.Error  `json:"error"`
	PollIntervalMs *int64          `json:"pollIntervalMs"`
	PollInterval   *int64          `json:"pollInterval"`
	// LastUpdatedAt is the spec's RFC 3339 time of the task's last
	// change: a server reports liveness (a checkpoint with the same
	// message) through it.
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// InputRequests are an input_required task's outstanding requests
	// (2026-07-28), answered with tasks/update.
	InputRequests json.RawMessage `json:"inputRequests"`
}

// updatedAt is LastUpdatedAt parsed; false when absent or not RFC 3339 (a
// server that does not report it resets the idle clock only by a change
// of status or message).
func (p polledTask) updatedAt() (time.Time, bool) {
	if p.LastUpdatedAt == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, p.LastUpdatedAt)
	return t, err == nil
}

func (p polledTask) terminal() bool {
	return p.Status == "completed" || p.Status == "failed" || p.Status == "cancelled"
}

// followTask polls the task until it is terminal, under pollCtx (the max
// clock) and the idle clock, cancelling it when ctx ends or a clock fires,
// and returns its outcome.
//
// With cancels false (FollowTask) it sends no tasks/cancel: ctx's end,
// like a clock's, ends the wait and leaves the task running.
func (c *Client) followTask(ctx, pollCtx context.Context, id string, poll, idleAfter time.Duration, onRequest RequestHandler, cancels bool, onStatus func(status, message string)) (*mcp.CallToolResult, error) {
	var cancelled, cancelErr error
	var giveUp <-chan time.Time
	idle := time.NewTimer(idleAfter)
	defer idle.Stop()
	last := polledTask{Status: "working"}
	var lastUpdated time.Time // the latest lastUpdatedAt seen
	if onRequest == nil {
		onRequest = c.opts.OnRequest
	}
	input := taskInput{c: c, onRequest: onRequest}
	abandon := func(err error) error {
		if !cancels {
			return &TaskAbandonedError{TaskID: id, Status: last.Status, Left: true, Err: err}
		}
		if cancelled == nil {
			c.stats.cancelled.Add(1)
			cancelErr = c.cancelTask(ctx, id)
		}
		return &TaskAbandonedError{TaskID: id, Status: last.Status, CancelErr: cancelErr, Err: err}
	}
	for {
		t, err := c.getTask(pollCtx, id)
		if err != nil {
			if pollCtx.Err() != nil {
				return nil, abandon(waitEnded(pollCtx, cancelled))
			}
			return nil, err
		}
		news := t.Status != last.Status || t.StatusMessage != last.StatusMessage
		if at, ok := t.updatedAt(); ok && at.After(lastUpdated) {
			// Only an advance counts: a server that repeats (or moves
			// back) the time reports nothing new.
			news = news || !lastUpdated.IsZero()
			lastUpdated = at
		}
		if news && cancelled == nil {
			// News of the task: a checkpoint, a change of state.
			idle.Reset(idleAfter)
		}
		last = t
		if onStatus != nil {
			onStatus(t.Status, t.StatusMessage)
		}
		if t.terminal() {
			res, err := c.taskOutcome(pollCtx, id, t, cancelled)
			if err != nil && pollCtx.Err() != nil {
				return nil, abandon(waitEnded(pollCtx, cancelled))
			}
			return res, err
		}
		if t.Status == mcp.ResultInputRequired && cancelled == nil {
			gave, err := input.answer(ctx, pollCtx, id, t.InputRequests)
			switch {
			case err != nil && ctx.Err() != nil:
				// The caller cancelled while it was being answered: the
				// select below cancels the task.
			case err != nil && pollCtx.Err() != nil:
				return nil, abandon(waitEnded(pollCtx, cancelled))
			case err != nil:
				return nil, abandon(err)
			case gave:
				// The time OnRequest took is not the task going quiet.
				idle.Reset(idleAfter)
			}
		}
		if ms := firstSet(t.PollIntervalMs, t.PollInterval); ms > 0 {
			poll = time.Duration(ms) * time.Millisecond
		}
		// ±20 % jitter around the server's interval.
		wait := time.Duration(float64(poll) * (0.8 + 0.4*rand.Float64()))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			if !cancels {
				return nil, abandon(&CancelledError{Cause: context.Cause(ctx)})
			}
			if cancelled == nil {
				cancelled = context.Cause(ctx)
				c.stats.cancelled.Add(1)
				if cancelErr = c.cancelTask(ctx, id); cancelErr != nil {
					return nil, fmt.Errorf("client: cancelling task %s: %w", id, cancelErr)
				}
				giveUp = time.After(cancelWait)
				idle.Stop() // from now on, poll until terminal
				ctx = context.WithoutCancel(ctx)
			}
		case <-pollCtx.Done():
			timer.Stop()
			return nil, abandon(waitEnded(pollCtx, cancelled))
		case <-idle.C:
			timer.Stop()
			return nil, abandon(&DeadlineError{Clock: IdleClock, After: idleAfter})
		case <-giveUp:
			timer.Stop()
			return nil, fmt.Errorf("client: task %s was asked to cancel %v ago and is still %s", id, cancelWait, t.Status)
		case <-timer.C:
		}
	}
}

// waitEnded is why a task's wait ended when pollCtx did: the caller's
// cancel, if it came first, or the max clock.
func waitEnded(pollCtx context.Context, cancelled error) error {
	if cancelled != nil {
		return &CancelledError{Cause: cancelled}
	}
	var de *DeadlineError
	if errors.As(context.Cause(pollCtx), &de) {
		return de
	}
	return &CancelledError{Cause: context.Cause(pollCtx)}
}

// cancelTask sends tasks/cancel under a bound of its own: the clock that
// fired has no time left to give it.
func (c *Client) cancelTask(ctx context.Context, id string) error {
	_, err := c.roundTrip(context.WithoutCancel(ctx), mcp.MethodTasksCancel, id, map[string]any{"taskId": id},
		&CallOptions{Max: c.opts.ProbeTimeout, asksTask: true})
	return err
}

func firstSet(vs ...*int64) int64 {
	for _, v := range vs {
		if v != nil {
			return *v
		}
	}
	return 0
}

func (c *Client) getTask(ctx context.Context, id string) (polledTask, error) {
	raw, err := c.roundTrip(ctx, mcp.MethodTasksGet, id, map[string]any{"taskId": id}, taskRequest)
	if err != nil {
		return polledTask{}, err
	}
	var t polledTask
	if err := json.Unmarshal(raw, &t); err != nil {
		return polledTask{}, fmt.Errorf("client: tasks/get answered %s: %w", clip(raw), err)
	}
	return t, nil
}

// taskOutcome is a terminal task's answer: its result, its error, or the
// cancellation (when the client asked for it).
func (c *Client) taskOutcome(ctx context.Context, id string, t polledTask, cancelled error) (*mcp.CallToolResult, error) {
	if c.era == mcp.Legacy && t.Status != "cancelled" {
		// The 2025-11-25 result is fetched from tasks/result.
		raw, err := c.roundTrip(ctx, mcp.MethodTasksResult, "", map[string]any{"taskId": id}, taskRequest)
		if err != nil {
			return nil, err
		}
		t.Result = raw
	}
	switch {
	case t.Status == "cancelled" && cancelled != nil:
		return nil, &CancelledError{Cause: cancelled}
	case t.Status == "cancelled":
		return nil, fmt.Errorf("%w by someone else", ErrTaskCancelled)
	case t.Error != nil:
		return nil, &TaskFailedError{TaskID: id, Err: t.Error}
	case t.Result == nil:
		return nil, fmt.Errorf("client: task %s ended %s without a result", id, t.Status)
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(t.Result, &res); err != nil {
		return nil, fmt.Errorf("client: task %s's result %s: %w", id, clip(t.Result), err)
	}
	return &res, nil
}
