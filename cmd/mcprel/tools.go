package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

type echoArgs struct {
	Text string `json:"text"`
}

type slowCountArgs struct {
	Steps      int `json:"steps"`
	IntervalMs int `json:"intervalMs"`
}

type slowCountResult struct {
	Counted int `json:"counted"`
}

// addDemoTools registers the tools "mcprel serve" offers.
func addDemoTools(srv *server.Server) error {
	err := server.AddTypedTool(srv, server.Tool{
		Name:        "echo",
		Description: "Returns its text argument unchanged. Read-only; safe to retry.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"text to return"}},"required":["text"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		Policy:      server.Policy{Timeout: server.TimeoutFast, Retry: mcp.RetrySafe},
	}, func(ctx context.Context, req *server.CallRequest, in echoArgs) (string, error) {
		return in.Text, nil
	})
	if err != nil {
		return err
	}
	return server.AddTypedTool(srv, server.Tool{
		Name: "slow_count",
		Description: "Counts to steps, waiting intervalMs between steps and reporting progress after each " +
			"(when a progress token is given). Stops as soon as the call is cancelled. Read-only; safe to retry.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"steps":{"type":"integer","minimum":1,"maximum":1000000,"description":"how many steps to count"},` +
			`"intervalMs":{"type":"integer","minimum":0,"maximum":60000,"description":"pause before each step, in milliseconds"}},` +
			`"required":["steps"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		// Each step is progress, so idle only has to outlast the longest
		// pause; the whole count is bounded at ten minutes.
		Policy: server.Policy{Timeout: server.TimeoutLong, IdleTimeout: 90 * time.Second, MaxTimeout: 10 * time.Minute, Retry: mcp.RetrySafe},
	}, slowCount)
}

func slowCount(ctx context.Context, req *server.CallRequest, in slowCountArgs) (slowCountResult, error) {
	interval := time.Duration(in.IntervalMs) * time.Millisecond
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for step := 1; step <= in.Steps; step++ {
		if step > 1 {
			timer.Reset(interval)
		}
		select {
		case <-ctx.Done():
			return slowCountResult{}, context.Cause(ctx)
		case <-timer.C:
		}
		req.ReportProgress(float64(step), float64(in.Steps), fmt.Sprintf("step %d of %d", step, in.Steps))
	}
	return slowCountResult{Counted: in.Steps}, nil
}
