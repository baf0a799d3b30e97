package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/taskserver"
)

type reportArgs struct {
	Rows   int `json:"rows" jsonschema:"how many rows the report has"`
	StepMs int `json:"stepMs" jsonschema:"time each row takes, in milliseconds"`
}

type reportResult struct {
	Rows     int    `json:"rows"`
	Checksum string `json:"checksum"`
	// Attempts says how many processes worked on the report: more than 1
	// when one died and another resumed it from its checkpoint.
	Attempts int `json:"attempts"`
}

// reportProgress is what generate_report saves at each checkpoint, and
// resumes from when the process running it died.
type reportProgress struct {
	Done int    `json:"done"`
	Sum  uint64 `json:"sum"`
	// Attempts counts the processes that worked on it so far.
	Attempts int `json:"attempts"`
}

// addReportTool registers generate_report, the demo's long job: a durable
// task for clients that can take one, a checkpoint per row.
func addReportTool(srv *server.Server, ts *taskserver.Server) error {
	return server.AddTypedTool(srv, server.Tool{
		Name: "generate_report",
		Description: "Builds a report of rows, stepMs per row. Long-running: clients that support tasks get a task " +
			"(poll tasks/get; tasks/cancel stops it at the next row). It survives the connection that started it and, " +
			"resumed from its last row, the process that ran it. Read-only; safe to retry.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"rows":{"type":"integer","minimum":1,"maximum":100000,"description":"how many rows the report has"},` +
			`"stepMs":{"type":"integer","minimum":0,"maximum":60000,"description":"time each row takes, in milliseconds"}},` +
			`"required":["rows"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		Policy:      server.Policy{Timeout: server.TimeoutLong, Retry: mcp.RetrySafe},
	}, generateReport, taskserver.AsTask(ts, taskserver.Policy{Resumable: true}))
}

func generateReport(ctx context.Context, call *server.CallRequest, in reportArgs) (reportResult, error) {
	var p reportProgress
	if saved := taskserver.Resumed(call); saved != nil {
		if err := json.Unmarshal(saved, &p); err != nil {
			return reportResult{}, fmt.Errorf("generate_report: unreadable checkpoint: %w", err)
		}
	}
	p.Attempts++
	step := time.Duration(in.StepMs) * time.Millisecond
	timer := time.NewTimer(step)
	defer timer.Stop()
	for p.Done < in.Rows {
		timer.Reset(step)
		select {
		case <-ctx.Done():
			return reportResult{}, context.Cause(ctx)
		case <-timer.C:
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "row %d", p.Done)
		p.Sum += h.Sum64()
		p.Done++
		call.ReportProgress(float64(p.Done), float64(in.Rows), fmt.Sprintf("row %d of %d", p.Done, in.Rows))
		if err := taskserver.Save(ctx, call, fmt.Sprintf("row %d of %d", p.Done, in.Rows), p); err != nil {
			return reportResult{}, err
		}
	}
	return reportResult{Rows: in.Rows, Checksum: fmt.Sprintf("%016x", p.Sum), Attempts: p.Attempts}, nil
}
