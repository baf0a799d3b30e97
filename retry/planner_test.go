package retry_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// outcome is what a decision amounts to.
type outcome string

const (
	again     outcome = "retry with a new id"
	sameKey   outcome = "retry with the same key and arguments"
	reconcile outcome = "reconcile first"
	final     outcome = "final"
	noTime    outcome = "no time left"
)

func outcomeOf(t *testing.T, d retry.Decision) outcome {
	t.Helper()
	if d.Retry != (d.Err == nil) {
		t.Fatalf("Retry = %v with Err = %v", d.Retry, d.Err)
	}
	var re *retry.ReconcileError
	switch {
	case d.Retry && d.SameKey:
		return sameKey
	case d.Retry:
		return again
	case errors.As(d.Err, &re):
		return reconcile
	case errors.Is(d.Err, retry.ErrNotRetryable):
		return final
	case errors.Is(d.Err, retry.ErrDeadline):
		return noTime
	}
	t.Fatalf("unexpected decision error %v", d.Err)
	return ""
}

// The caller's view of a call: its class in the client's table, and
// whether it carries an idempotency key.
type caller struct {
	name  string
	class mcp.RetryClass
	keyed bool
}

var callers = [4]caller{
	{"safe", mcp.RetrySafe, false},
	{"conditional with its key", mcp.RetryConditional, true},
	{"conditional without a key", mcp.RetryConditional, false},
	{"unsafe", mcp.RetryUnsafe, false},
}

// The retry matrix: every class × every kind of failure, from a server the
// table does not trust and from one it does. Trust changes one thing: an
// Unsafe call the server says did not run (it refused it, or its tool
// says the failure is retryable) may be made again.
func TestRetryMatrix(t *testing.T) {
	overloaded := &jsonrpc.Error{Code: mcp.CodeOverloaded, Message: "overloaded"}
	toolRetryable := &mcp.ToolError{Code: mcp.FailureStorage, Retryable: true}
	toolFinal := &mcp.ToolError{Code: "insufficient_stock"}
	invalid := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad"}
	//                         safe       conditional  no key     unsafe
	lostLike := [4]outcome{again, sameKey, reconcile, reconcile}
	refused := [4]outcome{again, sameKey, reconcile, reconcile}
	refusedTrusted := [4]outcome{again, sameKey, again, again}
	never := [4]outcome{final, final, final, final}
	tests := []struct {
		name               string
		f                  retry.Verdict
		untrusted, trusted [4]outcome
	}{
		{"not sent", retry.Verdict{Kind: retry.NotSent, Err: io.ErrClosedPipe}, [4]outcome{again, sameKey, again, again}, [4]outcome{again, sameKey, again, again}},
		{"lost after send", retry.Verdict{Kind: retry.Lost, Err: io.ErrUnexpectedEOF}, lostLike, lostLike},
		{"idle timeout", retry.Verdict{Kind: retry.IdleTimeout}, lostLike, lostLike},
		{"server timeout", retry.Verdict{Kind: retry.ServerTimeout}, lostLike, lostLike},
		{"max timeout", retry.Verdict{Kind: retry.MaxTimeout}, [4]outcome{noTime, noTime, reconcile, reconcile}, [4]outcome{noTime, noTime, reconcile, reconcile}},
		{"overloaded", retry.Verdict{Kind: retry.Overloaded, RetryAfter: time.Second, Err: overloaded}, refused, refusedTrusted},
		{"rate limited", retry.Verdict{Kind: retry.RateLimited, RetryAfter: time.Second}, refused, refusedTrusted},
		{"shutting down", retry.Verdict{Kind: retry.ShuttingDown}, refused, refusedTrusted},
		{"tool failed, retryable", retry.Verdict{Kind: retry.ToolFailed, Retryable: true, Err: toolRetryable}, refused, refusedTrusted},
		{"tool failed, final", retry.Verdict{Kind: retry.ToolFailed, Err: toolFinal}, never, never},
		{"protocol error", retry.Verdict{Kind: retry.Rejected, Err: invalid}, never, never},
	}
	for _, tt := range tests {
		for _, trust := range []bool{false, true} {
			want := tt.untrusted
			if trust {
				want = tt.trusted
			}
			for i, c := range callers {
				name := tt.name + "/" + c.name
				if trust {
					name += "/trusted"
				}
				t.Run(name, func(t *testing.T) {
					p := retry.NewPlanner(retry.Options{
						Table: retry.Table{
							Tools:       map[string]retry.Rule{"op": {Class: c.class, Lookup: "lookup_operation"}},
							TrustServer: trust,
						},
						Budget: &retry.Budget{Ratio: 1},
					})
					a := p.Start(retry.Call{Tool: "op", HasIdempotencyKey: c.keyed, Deadline: t0.Add(time.Minute)})
					d := a.Next(tt.f, t0)
					if got := outcomeOf(t, d); got != want[i] {
						t.Fatalf("%s: got %q, want %q (err %v)", name, got, want[i], d.Err)
					}
					if d.Retry && a.Count() != 2 {
						t.Errorf("after a retry Count = %d, want 2", a.Count())
					}
					if !d.Retry && a.Count() != 1 {
						t.Errorf("after a refusal Count = %d, want 1", a.Count())
					}
					if d.Retry && d.Delay < tt.f.RetryAfter {
						t.Errorf("pause %v is shorter than the server's %v", d.Delay, tt.f.RetryAfter)
					}
					if tt.f.Err != nil && d.Err != nil && !errors.Is(d.Err, tt.f.Err) {
						t.Errorf("decision error %v does not wrap the failure's %v", d.Err, tt.f.Err)
					}
				})
			}
		}
	}
}

func TestReconcileErrorNamesTheToolAndTheLookup(t *testing.T) {
	p := retry.NewPlanner(retry.Options{Table: retry.Table{
		Tools: map[string]retry.Rule{
			"charge":  {Class: mcp.RetryUnsafe, Lookup: "find_charge"},
			"reserve": {Class: mcp.RetryConditional, Lookup: "lookup_operation"},
		},
	}})
	cause := io.ErrUnexpectedEOF

	d := p.Start(retry.Call{Tool: "charge"}).Next(retry.Verdict{Kind: retry.Lost, Err: cause}, t0)
	re, ok := errors.AsType[*retry.ReconcileError](d.Err)
	if !ok {
		t.Fatalf("got %v, want a *ReconcileError", d.Err)
	}
	if re.Tool != "charge" || re.Lookup != "find_charge" || !errors.Is(re, cause) {
		t.Errorf("ReconcileError = %+v", re)
	}
	for _, s := range []string{`"charge"`, `"find_charge"`, "may have taken effect", "before calling it again"} {
		if !strings.Contains(re.Instruction, s) || !strings.Contains(re.Error(), s) {
			t.Errorf("instruction %q (error %q) lacks %q", re.Instruction, re.Error(), s)
		}
	}

	d = p.Start(retry.Call{Tool: "reserve"}).Next(retry.Verdict{Kind: retry.IdleTimeout}, t0)
	re, ok = errors.AsType[*retry.ReconcileError](d.Err)
	if !ok || !strings.Contains(re.Instruction, "without an idempotency key") || re.Lookup != "lookup_operation" {
		t.Errorf("a conditional tool called without its key: %v", d.Err)
	}

	d = p.Start(retry.Call{Tool: "unlisted"}).Next(retry.Verdict{Kind: retry.Lost}, t0)
	re, ok = errors.AsType[*retry.ReconcileError](d.Err)
	if !ok || re.Lookup != "" || !strings.Contains(re.Instruction, "read the state it changes") {
		t.Errorf("an unlisted tool without a lookup: %v", d.Err)
	}
}

func TestAttemptCap(t *testing.T) {
	for _, tt := range []struct{ max, want int }{{0, retry.DefaultMaxAttempts}, {1, 1}, {-4, 1}, {5, 5}} {
		p := retry.NewPlanner(retry.Options{
			Table:       retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}},
			MaxAttempts: tt.max,
			Budget:      &retry.Budget{Ratio: 100},
		})
		a := p.Start(retry.Call{Tool: "search"})
		var d retry.Decision
		for d = a.Next(retry.Verdict{Kind: retry.Lost}, t0); d.Retry; d = a.Next(retry.Verdict{Kind: retry.Lost}, t0) {
		}
		if a.Count() != tt.want || !errors.Is(d.Err, retry.ErrAttemptsExhausted) {
			t.Errorf("MaxAttempts %d: %d attempts, ended with %v; want %d and ErrAttemptsExhausted", tt.max, a.Count(), d.Err, tt.want)
		}
	}
}

// A request that never left the client costs the target nothing, so it
// takes nothing from the budget; one that may have reached it does.
func TestNotSentSpendsNoBudget(t *testing.T) {
	p := retry.NewPlanner(retry.Options{
		Table:  retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}},
		Budget: &retry.Budget{Ratio: -1, MinPerSecond: -1}, // empty for good
	})
	a := p.Start(retry.Call{Tool: "search"})
	if d := a.Next(retry.Verdict{Kind: retry.NotSent}, t0); !d.Retry {
		t.Fatalf("not sent, empty budget: %v", d.Err)
	}
	if d := a.Next(retry.Verdict{Kind: retry.Lost}, t0); !errors.Is(d.Err, retry.ErrBudgetExhausted) {
		t.Fatalf("lost, empty budget: %v, want ErrBudgetExhausted", d.Err)
	}
}

// The server's word in tools/list counts through the table: a trusted
// server's "safe" makes an unlisted tool retryable, an untrusted one's
// does not.
func TestPlannerUsesAdvertisedClassOnlyWhenTrusted(t *testing.T) {
	tool := &mcp.Tool{Name: "search", Meta: mcp.Meta{mcp.MetaRetryClass: "safe"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: yes()}}
	for _, trust := range []bool{false, true} {
		p := retry.NewPlanner(retry.Options{Table: retry.Table{TrustServer: trust}})
		a := p.Start(retry.Call{Tool: "search", Advertised: tool})
		d := a.Next(retry.Verdict{Kind: retry.Lost}, t0)
		if d.Retry != trust {
			t.Errorf("trust %v: Retry = %v (%v)", trust, d.Retry, d.Err)
		}
		if want := map[bool]mcp.RetryClass{false: mcp.RetryUnsafe, true: mcp.RetrySafe}[trust]; a.Rule().Class != want {
			t.Errorf("trust %v: class %v, want %v", trust, a.Rule().Class, want)
		}
	}
}

func TestRetryAfterGovernsThePause(t *testing.T) {
	p := retry.NewPlanner(retry.Options{
		Table:   retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}},
		Backoff: retry.Backoff{Jitter: fixed(0)},
		Budget:  &retry.Budget{Ratio: 1},
	})
	a := p.Start(retry.Call{Tool: "search", Deadline: t0.Add(time.Minute)})
	if d := a.Next(retry.Verdict{Kind: retry.Overloaded, RetryAfter: 1500 * time.Millisecond}, t0); d.Delay != 1500*time.Millisecond {
		t.Errorf("retryAfterMs 1500: pause %v", d.Delay)
	}
	// A retry-after that would end after the deadline gives up at once.
	a = p.Start(retry.Call{Tool: "search", Deadline: t0.Add(time.Second)})
	if d := a.Next(retry.Verdict{Kind: retry.RateLimited, RetryAfter: 2 * time.Second}, t0); !errors.Is(d.Err, retry.ErrDeadline) {
		t.Errorf("retry-after past the deadline: %v, want ErrDeadline", d.Err)
	}
}
