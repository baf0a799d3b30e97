package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/taskserver"
)

// The lab's tools ("mcprel serve --lab", which "mcprel demo" starts): they
// let the demo decide the order of events across processes with gates
// instead of sleeps. lab_hold enters, reports one progress step (so that
// the caller knows it is running) and waits for lab_release of its gate —
// deliberately ignoring its own cancellation, to complete after a
// cancellation won, as a slow tool would. lab_wait returns once the held
// side waits; lab_release returns once the held handler has returned. lab_tick reports progress forever under short
// deadlines; lab_flood reports progress as fast as it can.
type labGates struct {
	mu    sync.Mutex
	gates map[string]*labGate
}

type labGate struct {
	entered  chan struct{} // closed once the held side is where it waits
	release  chan struct{}
	returned chan struct{}
	released bool
}

// gate returns the gate called name, made on first use by either side.
func (l *labGates) gate(name string) *labGate {
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.gates[name]
	if !ok {
		g = &labGate{entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
		l.gates[name] = g
	}
	return g
}

type labGateArgs struct {
	Gate string `json:"gate"`
}

type labHoldResult struct {
	Gate string `json:"gate"`
	// CancelledFirst says the request had ended (cancelled or timed out)
	// before the handler returned: the server discards this result.
	CancelledFirst bool `json:"cancelledFirst"`
}

type labTickArgs struct {
	EveryMs int `json:"everyMs"`
}

type labFloodArgs struct {
	Reports  int `json:"reports"`
	EveryMs  int `json:"everyMs,omitempty"`
	PadBytes int `json:"padBytes,omitempty"`
}

// Deadlines of lab_tick: progress every everyMs keeps the idle clock from
// firing, and the maximum fires anyway.
const (
	labTickIdle = 200 * time.Millisecond
	labTickMax  = time.Second
	// labHoldLimit bounds how long a held handler waits for its release,
	// so that a demo that died cannot leave one behind for ever.
	labHoldLimit = 30 * time.Second
)

const gateSchema = `{"type":"object","properties":{"gate":{"type":"string","minLength":1,"maxLength":64}},"required":["gate"],"additionalProperties":false}`

// newLabGates returns an empty set of gates.
func newLabGates() *labGates { return &labGates{gates: map[string]*labGate{}} }

// addLabTools registers the lab's tools on srv, their gates in gates.
func addLabTools(srv *server.Server, gates *labGates) error {
	safe := &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)}
	err := server.AddTypedTool(srv, server.Tool{
		Name:        "lab_hold",
		Description: "Lab: reports one progress step, then waits for lab_release of the same gate, ignoring its own cancellation, and returns.",
		InputSchema: json.RawMessage(gateSchema),
		Annotations: safe,
		Policy:      server.Policy{Timeout: server.TimeoutLong, IdleTimeout: time.Minute, MaxTimeout: 2 * time.Minute, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in labGateArgs) (labHoldResult, error) {
		g := gates.gate(in.Gate)
		defer close(g.returned)
		req.ReportProgress(1, 2, "holding at gate "+in.Gate)
		close(g.entered)
		select {
		case <-g.release:
		case <-time.After(labHoldLimit):
		}
		return labHoldResult{Gate: in.Gate, CancelledFirst: ctx.Err() != nil}, nil
	})
	if err != nil {
		return err
	}
	err = server.AddTypedTool(srv, server.Tool{
		Name:        "lab_release",
		Description: "Lab: releases the gate's lab_hold and returns once that handler has returned.",
		InputSchema: json.RawMessage(gateSchema),
		Annotations: safe,
		Policy:      server.Policy{Timeout: server.TimeoutStandard, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in labGateArgs) (labGateArgs, error) {
		g := gates.gate(in.Gate)
		gates.mu.Lock()
		if !g.released {
			g.released = true
			close(g.release)
		}
		gates.mu.Unlock()
		select {
		case <-g.returned:
			return in, nil
		case <-ctx.Done():
			return labGateArgs{}, context.Cause(ctx)
		}
	})
	if err != nil {
		return err
	}
	err = server.AddTypedTool(srv, server.Tool{
		Name:        "lab_wait",
		Description: "Lab: returns once the gate's held side (lab_hold, or lab_task past its first checkpoint) is waiting.",
		InputSchema: json.RawMessage(gateSchema),
		Annotations: safe,
		Policy:      server.Policy{Timeout: server.TimeoutStandard, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in labGateArgs) (labGateArgs, error) {
		select {
		case <-gates.gate(in.Gate).entered:
			return in, nil
		case <-ctx.Done():
			return labGateArgs{}, context.Cause(ctx)
		}
	})
	if err != nil {
		return err
	}
	err = server.AddTypedTool(srv, server.Tool{
		Name:        "lab_tick",
		Description: fmt.Sprintf("Lab: reports increasing progress every everyMs until the call ends; its idle deadline is %v, its maximum %v.", labTickIdle, labTickMax),
		InputSchema: json.RawMessage(`{"type":"object","properties":{"everyMs":{"type":"integer","minimum":1,"maximum":1000}},"required":["everyMs"],"additionalProperties":false}`),
		Annotations: safe,
		Policy:      server.Policy{Timeout: server.TimeoutLong, IdleTimeout: labTickIdle, MaxTimeout: labTickMax, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in labTickArgs) (struct{}, error) {
		t := time.NewTicker(time.Duration(in.EveryMs) * time.Millisecond)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return struct{}{}, context.Cause(ctx)
			case <-t.C:
				req.ReportProgress(float64(n), 0, "")
			}
		}
	})
	if err != nil {
		return err
	}
	return server.AddTypedTool(srv, server.Tool{
		Name:        "lab_flood",
		Description: "Lab: reports progress reports times, every everyMs (0: as fast as it can), each message padded to padBytes, then returns.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"reports":{"type":"integer","minimum":1,"maximum":1000000},` +
			`"everyMs":{"type":"integer","minimum":0,"maximum":1000},"padBytes":{"type":"integer","minimum":0,"maximum":65536}},"required":["reports"],"additionalProperties":false}`),
		Annotations: safe,
		Policy:      server.Policy{Timeout: server.TimeoutStandard, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in labFloodArgs) (labFloodArgs, error) {
		pad := strings.Repeat(".", in.PadBytes)
		for n := 1; n <= in.Reports; n++ {
			if n > 1 && in.EveryMs > 0 {
				select {
				case <-ctx.Done():
					return labFloodArgs{}, context.Cause(ctx)
				case <-time.After(time.Duration(in.EveryMs) * time.Millisecond):
				}
			}
			req.ReportProgress(float64(n), float64(in.Reports), fmt.Sprintf("report %d of %d%s", n, in.Reports, pad))
		}
		return in, nil
	})
}

type labTaskResult struct {
	Gate string `json:"gate"`
}

// addLabTaskTool registers lab_task on ts: a durable task that reaches a
// first checkpoint, waits for lab_release of its gate (its cancellation
// intent, if any, is recorded meanwhile) and then reaches a second
// checkpoint, where a recorded intent is observed and ends it cancelled.
func addLabTaskTool(ts *taskserver.Server, gates *labGates) error {
	return server.AddTypedTool(ts.Server(), server.Tool{
		Name:        "lab_task",
		Description: "Lab: a durable task that checkpoints, waits for lab_release of its gate, and checkpoints again.",
		InputSchema: json.RawMessage(gateSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		Policy:      server.Policy{Timeout: server.TimeoutLong, MaxTimeout: 2 * time.Minute, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, call *server.CallRequest, in labGateArgs) (labTaskResult, error) {
		g := gates.gate(in.Gate)
		defer close(g.returned)
		if err := taskserver.Checkpoint(ctx, call, "waiting at gate "+in.Gate); err != nil {
			return labTaskResult{}, err
		}
		close(g.entered)
		select {
		case <-g.release:
		case <-time.After(labHoldLimit):
		case <-ctx.Done():
			return labTaskResult{}, context.Cause(ctx)
		}
		if err := taskserver.Checkpoint(ctx, call, "past gate "+in.Gate); err != nil {
			return labTaskResult{}, err
		}
		return labTaskResult{Gate: in.Gate}, nil
	}, taskserver.AsTask(ts, taskserver.Policy{}))
}
