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

// cancelWait bounds how long CallToolTask keeps polling a task after it
// asked to cancel it, waiting for the worker to reach a checkpoint.
const cancelWait = time.Minute

// CallToolTask calls a tool asking for a durable task, and follows the
// task to its end: it polls tasks/get at the server's poll interval (with
// jitter, so that many clients do not poll in step) until the task is
// terminal, and returns the result the call would have returned. A server
// that answers the call at once (no task) has its answer returned as it
// is.
//
// In the 2026-07-28 era the client must declare the tasks extension
// (Options.Capabilities.Extensions[mcp.ExtensionTasks]); in the
// 2025-11-25 era the request carries params.task. When ctx ends the client
// sends tasks/cancel — an acknowledgement, not the end — and keeps polling
// until the task is terminal (at most a minute): a task that completed
// before its worker saw the intent returns its result. onStatus, if not
// nil, is told each status polled.
func (c *Client) CallToolTask(ctx context.Context, name string, args any, o *CallOptions, onStatus func(status, message string)) (*mcp.CallToolResult, error) {
	params := map[string]any{"name": name}
	if args != nil {
		params["arguments"] = args
	}
	if c.era == mcp.Legacy {
		params["task"] = map[string]any{}
	}
	raw, err := c.roundTrip(ctx, mcp.MethodToolsCall, name, params, o)
	if err != nil {
		return nil, err
	}
	id, poll, ok := createdTask(raw, c.era)
	if !ok {
		var res mcp.CallToolResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("client: tools/call answered %s: %w", clip(raw), err)
		}
		return &res, nil
	}
	if onStatus != nil {
		onStatus("working", "task "+id)
	}
	return c.followTask(ctx, id, poll, onStatus)
}

// createdTask reads a created task's id and poll interval from a
// tools/call result, in the era's shape.
func createdTask(raw json.RawMessage, era mcp.Era) (string, time.Duration, bool) {
	var modern struct {
		ResultType     string `json:"resultType"`
		TaskID         string `json:"taskId"`
		PollIntervalMs *int64 `json:"pollIntervalMs"`
	}
	var legacy struct {
		Task *struct {
			TaskID       string `json:"taskId"`
			PollInterval *int64 `json:"pollInterval"`
		} `json:"task"`
	}
	poll := func(ms *int64) time.Duration {
		if ms == nil || *ms <= 0 {
			return time.Second
		}
		return time.Duration(*ms) * time.Millisecond
	}
	if era == mcp.Modern {
		if json.Unmarshal(raw, &modern) == nil && modern.ResultType == mcp.ResultTask && modern.TaskID != "" {
			return modern.TaskID, poll(modern.PollIntervalMs), true
		}
		return "", 0, false
	}
	if json.Unmarshal(raw, &legacy) == nil && legacy.Task != nil && legacy.Task.TaskID != "" {
		return legacy.Task.TaskID, poll(legacy.Task.PollInterval), true
	}
	return "", 0, false
}

// polledTask is what tasks/get says, in either era.
type polledTask struct {
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	Result         json.RawMessage `json:"result"`
	Error          *jsonrpc.Error  `json:"error"`
	PollIntervalMs *int64          `json:"pollIntervalMs"`
	PollInterval   *int64          `json:"pollInterval"`
}

func (p polledTask) terminal() bool {
	return p.Status == "completed" || p.Status == "failed" || p.Status == "cancelled"
}

// followTask polls the task until it is terminal, cancelling it when ctx
// ends, and returns its outcome.
func (c *Client) followTask(ctx context.Context, id string, poll time.Duration, onStatus func(status, message string)) (*mcp.CallToolResult, error) {
	pollCtx := context.WithoutCancel(ctx) // polling outlives the caller's cancel
	var cancelled error
	var giveUp <-chan time.Time
	for {
		t, err := c.getTask(pollCtx, id)
		if err != nil {
			return nil, err
		}
		if onStatus != nil {
			onStatus(t.Status, t.StatusMessage)
		}
		if t.terminal() {
			return c.taskOutcome(pollCtx, id, t, cancelled)
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
			if cancelled == nil {
				cancelled = context.Cause(ctx)
				c.stats.cancelled.Add(1)
				if _, err := c.roundTrip(pollCtx, mcp.MethodTasksCancel, id, map[string]any{"taskId": id}, nil); err != nil {
					return nil, fmt.Errorf("client: cancelling task %s: %w", id, err)
				}
				giveUp = time.After(cancelWait)
				ctx = pollCtx // from now on, poll until terminal
			}
		case <-giveUp:
			timer.Stop()
			return nil, fmt.Errorf("client: task %s was asked to cancel %v ago and is still %s", id, cancelWait, t.Status)
		case <-timer.C:
		}
	}
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
	raw, err := c.roundTrip(ctx, mcp.MethodTasksGet, id, map[string]any{"taskId": id}, nil)
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
		raw, err := c.roundTrip(ctx, mcp.MethodTasksResult, "", map[string]any{"taskId": id}, nil)
		if err != nil {
			return nil, err
		}
		t.Result = raw
	}
	switch {
	case t.Status == "cancelled" && cancelled != nil:
		return nil, &CancelledError{Cause: cancelled}
	case t.Status == "cancelled":
		return nil, errors.New("client: the task was cancelled by someone else")
	case t.Error != nil:
		return nil, t.Error
	case t.Result == nil:
		return nil, fmt.Errorf("client: task %s ended %s without a result", id, t.Status)
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(t.Result, &res); err != nil {
		return nil, fmt.Errorf("client: task %s's result %s: %w", id, clip(t.Result), err)
	}
	return &res, nil
}
