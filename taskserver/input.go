package taskserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
)

// inputPoll is how often a task waiting for input reads the store when
// no answer arrived through this process (another replica took it).
const inputPoll = 250 * time.Millisecond

// Ask asks the client for input — elicitation/create, sampling or roots
// requests, by keys the tool chooses — and returns the answers by key.
//
// In a task the task becomes input_required: the client finds the
// requests in tasks/get and answers with tasks/update, in parts if it
// likes, and Ask returns once every request has its answer. Keys must not
// be reused within one task's life. A cancellation intent recorded
// meanwhile ends the task (tasks.ErrCancelled), as at a checkpoint.
//
// In a synchronous call of the 2026-07-28 era, Ask returns the answers
// the client's retry carries, or a *server.InputRequired for the handler
// to return, which asks for them (multi round-trip requests). In the
// 2025-11-25 era it sends each request to the client and waits for its
// answer (Request.CallClient).
func Ask(ctx context.Context, req *server.CallRequest, requests map[string]mcp.InputRequest, message string) (map[string]json.RawMessage, error) {
	if len(requests) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	if tr := runOf(req); tr != nil {
		return tr.askInTask(ctx, requests, message)
	}
	if req.Era == mcp.Modern {
		answers := map[string]json.RawMessage{}
		for key := range requests {
			a, ok := req.InputResponses[key]
			if !ok {
				return nil, &server.InputRequired{Requests: requests}
			}
			answers[key] = a
		}
		return answers, nil
	}
	answers := map[string]json.RawMessage{}
	for key, r := range requests {
		a, err := req.CallClient(ctx, r.Method, r.Params)
		if err != nil {
			return nil, err
		}
		answers[key] = a
	}
	return answers, nil
}

func (c *taskRun) askInTask(ctx context.Context, requests map[string]mcp.InputRequest, message string) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(requests)
	if err != nil {
		return nil, fmt.Errorf("taskserver: input requests: %w", err)
	}
	if err := c.run.RequireInput(ctx, b, message); err != nil {
		return nil, err
	}
	id, tenant := c.run.Task().ID, c.run.Task().Tenant
	for {
		wake := c.ts.inputWaiter()
		t, err := c.ts.store.Get(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		switch {
		case t.Status.Terminal():
			return nil, tasks.ErrTerminal
		case t.CancelRequested:
			return nil, c.run.Checkpoint(ctx, "") // ends it cancelled: tasks.ErrCancelled
		case t.Status == tasks.Working:
			var have map[string]json.RawMessage
			if err := json.Unmarshal(t.InputResponses, &have); err != nil {
				return nil, fmt.Errorf("taskserver: stored input responses: %w", err)
			}
			answers := make(map[string]json.RawMessage, len(requests))
			for key := range requests {
				answers[key] = have[key]
			}
			return answers, nil
		}
		timer := time.NewTimer(inputPoll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, context.Cause(ctx)
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// inputWaiter returns a channel closed the next time a client answers a
// task's input through this process.
func (ts *Server) inputWaiter() <-chan struct{} {
	ts.inputMu.Lock()
	defer ts.inputMu.Unlock()
	return ts.inputArrived
}

// inputGiven wakes the tasks of this process that wait for input.
func (ts *Server) inputGiven() {
	ts.inputMu.Lock()
	close(ts.inputArrived)
	ts.inputArrived = make(chan struct{})
	ts.inputMu.Unlock()
}
