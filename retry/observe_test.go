package retry_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// Options.Observe hears every start and every decision, with the class the
// call is planned by (a keyless Conditional call is Unsafe) and the
// number of the attempt that failed; Next's answer is unchanged.
func TestObserveSeesStartsAndDecisions(t *testing.T) {
	var events []retry.Event
	p := retry.NewPlanner(retry.Options{
		Table: retry.Table{Tools: map[string]retry.Rule{
			"read":    {Class: mcp.RetrySafe},
			"reserve": {Class: mcp.RetryConditional},
		}},
		MaxAttempts: 2,
		// One retry in hand and no more: the floor hardly refills.
		Budget:  &retry.Budget{Ratio: -1, MinPerSecond: 1e-9},
		Observe: func(e retry.Event) { events = append(events, e) },
	})
	now := time.Unix(1000, 0)
	lost := retry.Verdict{Kind: retry.Lost, Err: io.ErrUnexpectedEOF}

	read := p.Start(retry.Call{Tool: "read"})
	if d := read.Next(lost, now); !d.Retry {
		t.Fatalf("a safe call's first retry: %v", d.Err)
	}
	if d := read.Next(lost, now); !errors.Is(d.Err, retry.ErrAttemptsExhausted) {
		t.Fatalf("a safe call's third attempt: %+v", d)
	}
	keyless := p.Start(retry.Call{Tool: "reserve"})
	var re *retry.ReconcileError
	if d := keyless.Next(lost, now); !errors.As(d.Err, &re) {
		t.Fatalf("a keyless conditional call: %+v", d)
	}
	keyed := p.Start(retry.Call{Tool: "reserve", HasIdempotencyKey: true})
	if d := keyed.Next(lost, now); !errors.Is(d.Err, retry.ErrBudgetExhausted) {
		t.Fatalf("a keyed call with the budget spent: %+v", d)
	}

	type seen struct {
		tool    string
		class   mcp.RetryClass
		attempt int
		start   bool
		failure retry.Kind
		retry   bool
		err     error
	}
	want := []seen{
		{"read", mcp.RetrySafe, 1, true, 0, false, nil},
		{"read", mcp.RetrySafe, 1, false, retry.Lost, true, nil},
		{"read", mcp.RetrySafe, 2, false, retry.Lost, false, retry.ErrAttemptsExhausted},
		{"reserve", mcp.RetryUnsafe, 1, true, 0, false, nil},
		{"reserve", mcp.RetryUnsafe, 1, false, retry.Lost, false, nil}, // a *ReconcileError
		{"reserve", mcp.RetryConditional, 1, true, 0, false, nil},
		{"reserve", mcp.RetryConditional, 1, false, retry.Lost, false, retry.ErrBudgetExhausted},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		e := events[i]
		got := seen{e.Tool, e.Class, e.Attempt, e.Start, e.Failure, e.Decision.Retry, nil}
		if w.err != nil && errors.Is(e.Decision.Err, w.err) {
			got.err = w.err
		}
		if got != w {
			t.Errorf("event %d = %+v, want %+v", i, got, w)
		}
	}
	if !errors.As(events[4].Decision.Err, new(*retry.ReconcileError)) {
		t.Errorf("event 4 carries %v, want a *ReconcileError", events[4].Decision.Err)
	}
}
