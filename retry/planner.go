package retry

import (
	"errors"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// Why a Decision says not to retry, besides a *ReconcileError. Decisions
// wrap them together with the failure's own error, so errors.Is finds the
// reason and errors.As the server's *jsonrpc.Error or *mcp.ToolError.
var (
	// ErrNotRetryable: the failure is an answer, and the same call would
	// get it again (a protocol error, a tool failure whose body says it
	// is not retryable).
	ErrNotRetryable = errors.New("retry: the failure is final; the same call would fail the same way")
	// ErrAttemptsExhausted: the call made its last allowed attempt.
	ErrAttemptsExhausted = errors.New("retry: the call used all its attempts")
	// ErrBudgetExhausted: the target has been failing more than its
	// retry budget allows; retrying would only add load.
	ErrBudgetExhausted = errors.New("retry: the target's retry budget is spent")
	// ErrDeadline: no pause would end before the call's deadline.
	ErrDeadline = errors.New("retry: no time left before the call's deadline")
)

// ReconcileError says that a call may have taken effect and will not be
// made again automatically, because nothing would stop it from taking
// effect twice. Its Instruction tells a person or a model what to do
// first; its text becomes API, so match it with errors.As, not by text.
type ReconcileError struct {
	// Tool is the tool that was called.
	Tool string
	// Lookup is the tool the client's table names for finding out whether
	// the call took effect, or empty.
	Lookup string
	// Instruction says, in a sentence or two, what happened and what to
	// run before calling the tool again.
	Instruction string
	// Cause is the attempt's failure.
	Cause error
}

// Error returns the instruction and the cause.
func (e *ReconcileError) Error() string {
	return fmt.Sprintf("retry: reconcile first: %s (%v)", e.Instruction, e.Cause)
}

// Unwrap returns the cause.
func (e *ReconcileError) Unwrap() error { return e.Cause }

func reconcile(tool string, r Rule, keyless bool, f Verdict) *ReconcileError {
	why := "nothing deduplicates its effects"
	switch {
	case keyless:
		why = "it was called without an idempotency key"
	case f.Kind == Undetermined && f.Retryable == false && r.Class != mcp.RetryUnsafe:
		why = "the server does not say that sending it again is safe"
	}
	how := "read the state it changes"
	if r.Lookup != "" {
		how = fmt.Sprintf("call the tool %q", r.Lookup)
	}
	// One statement of what happened: a refusal is the server's word that
	// nothing ran, which this client does not take as proof; anything
	// else may have taken effect.
	what := fmt.Sprintf("the call of tool %q may have taken effect (%s) and is not retried", tool, f.Kind.happened())
	if f.Outcome == OutcomeRefused {
		what = fmt.Sprintf("the server says the call of tool %q did not run (%s), which this client takes as proof only from a server it trusts (Table.TrustServer); it is not retried", tool, f.Kind.happened())
	}
	return &ReconcileError{
		Tool:        tool,
		Lookup:      r.Lookup,
		Instruction: fmt.Sprintf("%s because %s; before calling it again, %s to find out whether it did", what, why, how),
		Cause:       f.cause(),
	}
}

// Options configure a Planner. The zero value is valid: every tool
// Unsafe, the default backoff, three attempts, a default budget.
type Options struct {
	// Table is the client's retry policy for the target.
	Table Table
	// Backoff spaces the attempts.
	Backoff Backoff
	// MaxAttempts caps each call's attempts, the first included: 0 means
	// DefaultMaxAttempts, 1 (or less) no retries.
	MaxAttempts int
	// Budget is the target's retry budget; nil means a new default one.
	// Share one Budget between Planners that call the same target.
	Budget *Budget
	// Observe, when set, is told of every call's start and of every
	// decision after a failed attempt, for metrics and logs (package
	// metrics counts them). It runs on the caller's goroutine, from
	// concurrent calls concurrently, so it must be quick and safe for
	// concurrent use. Nil costs nothing.
	Observe func(Event)
}

// Event is one thing a Planner did, in plain values, for an observer.
type Event struct {
	// Tool is the call's tool.
	Tool string
	// Class is the class the call is planned by: a Conditional call
	// without an idempotency key is Unsafe.
	Class mcp.RetryClass
	// Attempt is the number of the attempt the event is about: 1 at a
	// call's start, the failed attempt's for a decision.
	Attempt int
	// Start: the call's first attempt is about to be made (Planner.Start).
	// Failure and Decision are zero then.
	Start bool
	// Failure is what happened to the failed attempt.
	Failure Kind
	// Decision is what Next decided: another attempt (Decision.Retry), or
	// why not (Decision.Err, for errors.Is and errors.As).
	Decision Decision
}

// Planner plans the retries of the calls a client makes to one target
// (one server): it resolves each call's class from the table, caps its
// attempts, and spends the target's shared budget. It is safe for
// concurrent use; make one per target and keep it as long as the client.
type Planner struct {
	table       Table
	backoff     Backoff
	maxAttempts int
	budget      *Budget
	observe     func(Event)
}

// NewPlanner returns a Planner for o. It keeps o's Table by value; the
// map inside it must not change afterwards.
func NewPlanner(o Options) *Planner {
	p := &Planner{table: o.Table, backoff: o.Backoff, maxAttempts: o.MaxAttempts, budget: o.Budget, observe: o.Observe}
	switch {
	case p.maxAttempts == 0:
		p.maxAttempts = DefaultMaxAttempts
	case p.maxAttempts < 1:
		p.maxAttempts = 1
	}
	if p.budget == nil {
		p.budget = new(Budget)
	}
	return p
}

// Call describes one logical call, made in one or more attempts.
type Call struct {
	// Tool is the tool's name.
	Tool string
	// Advertised is the tool as the server listed it, or nil; its claims
	// count only if the table trusts the server (Table.Rule).
	Advertised *mcp.Tool
	// HasIdempotencyKey says the call carries an idempotency key, which
	// every attempt must repeat. A Conditional tool called without one is
	// treated as Unsafe: without the key the server cannot tell a retry
	// from a new operation.
	HasIdempotencyKey bool
	// Deadline is when the whole call must be over, all attempts and
	// pauses included; the zero time means none (the attempt cap and the
	// budget still bound it).
	Deadline time.Time
}

// Start begins a call: it records the first attempt in the target's
// budget and returns the call's attempts. Call it once per logical call,
// before its first attempt, whether or not that attempt fails.
func (p *Planner) Start(c Call) *Attempts {
	p.budget.Deposit()
	a := &Attempts{p: p, call: c, rule: p.table.Rule(c.Tool, c.Advertised), made: 1}
	if p.observe != nil {
		class, _ := a.class()
		p.observe(Event{Tool: c.Tool, Class: class, Attempt: 1, Start: true})
	}
	return a
}

// class is the class the call is planned by, and whether it is a
// Conditional call made Unsafe by its missing key.
func (a *Attempts) class() (mcp.RetryClass, bool) {
	if a.rule.Class == mcp.RetryConditional && !a.call.HasIdempotencyKey {
		return mcp.RetryUnsafe, true
	}
	return a.rule.Class, false
}

// Attempts tracks one call's attempts. It belongs to the goroutine that
// makes the call and is not safe for concurrent use.
type Attempts struct {
	p    *Planner
	call Call
	rule Rule
	made int
}

// Count returns how many attempts have been made or allowed so far: 1
// after Start, one more after each Next that says retry. It is the number
// of the attempt about to be made, for attempt metadata.
func (a *Attempts) Count() int { return a.made }

// Rule returns the rule the call is planned by, its class resolved.
func (a *Attempts) Rule() Rule { return a.rule }

// Decision says whether to make a call again, and how.
type Decision struct {
	// Retry is true when another attempt may be made; Err is nil then.
	Retry bool
	// Delay is how long to wait before it. It ends before the call's
	// deadline.
	Delay time.Duration
	// SameKey: the attempt must carry the same idempotency key and
	// byte-identical arguments as the first (a Conditional call). Every
	// attempt has a new JSON-RPC id.
	SameKey bool
	// Err says why not, when Retry is false: a *ReconcileError, or one of
	// the Err… values wrapped with the failure's error.
	Err error
}

// Next reports that the latest attempt failed with f, at time now, and
// decides whether to make another. In order:
//
//  1. the class and the failure decide whether the call may be made again
//     at all (the matrix below); if not, Err is ErrNotRetryable, or
//     ErrDeadline for MaxTimeout, or a *ReconcileError when the call may
//     have taken effect and nothing deduplicates it;
//  2. the attempt cap (ErrAttemptsExhausted);
//  3. the pause, which must end before the deadline (ErrDeadline);
//  4. the target's budget (ErrBudgetExhausted), except for NotSent, which
//     added no load to the target.
//
// The matrix, for a call that may otherwise be retried:
//
//	NotSent                          every class
//	Lost, IdleTimeout, ServerTimeout Safe, Conditional; Unsafe: reconcile
//	  Unavailable (HTTP 503)
//	Overloaded, RateLimited,         Safe, Conditional; Unsafe only from a
//	  ShuttingDown, Unreachable,       trusted server (it says nothing ran)
//	  InProgress
//	ToolFailed, retryable            Safe, Conditional; Unsafe as above
//	ToolFailed, not retryable        none: the tool's answer stands
//	Undetermined, retryable          Safe, Conditional; Unsafe: reconcile
//	Undetermined, not retryable      reconcile
//	MaxTimeout                       none: no time left; Unsafe: reconcile
//	Rejected, Cancelled, Succeeded   none
func (a *Attempts) Next(f Verdict, now time.Time) Decision {
	failed := a.made
	d := a.next(f, now)
	if a.p.observe != nil {
		class, _ := a.class()
		a.p.observe(Event{Tool: a.call.Tool, Class: class, Attempt: failed, Failure: f.Kind, Decision: d})
	}
	return d
}

func (a *Attempts) next(f Verdict, now time.Time) Decision {
	class, keyless := a.class()
	if err := a.permit(class, keyless, f); err != nil {
		return Decision{Err: err}
	}
	if a.made >= a.p.maxAttempts {
		return Decision{Err: fmt.Errorf("%w (%d): %w", ErrAttemptsExhausted, a.made, f.cause())}
	}
	d, ok := a.p.backoff.DelayWithin(a.made-1, f.RetryAfter, now, a.call.Deadline)
	if !ok {
		return Decision{Err: fmt.Errorf("%w: %w", ErrDeadline, f.cause())}
	}
	if !f.notSent() && !a.p.budget.Withdraw(now) {
		return Decision{Err: fmt.Errorf("%w: %w", ErrBudgetExhausted, f.cause())}
	}
	a.made++
	return Decision{Retry: true, Delay: d, SameKey: class == mcp.RetryConditional}
}

// permit applies the matrix of Next: nil when the class allows another
// attempt after f.
func (a *Attempts) permit(class mcp.RetryClass, keyless bool, f Verdict) error {
	unsafe := func() error { return reconcile(a.call.Tool, a.rule, keyless, f) }
	if f.notSent() {
		// Whatever ended it, a request never sent did nothing: it may be
		// sent again while there is time, unless its caller withdrew it.
		switch f.Kind {
		case MaxTimeout:
			return fmt.Errorf("%w: %w", ErrDeadline, f.cause())
		case Cancelled:
			return fmt.Errorf("%w: %w", ErrNotRetryable, f.cause())
		}
		return nil
	}
	switch f.Kind {
	case NotSent:
		return nil
	case Lost, IdleTimeout, ServerTimeout, Unavailable:
		if class == mcp.RetryUnsafe {
			return unsafe()
		}
		return nil
	case Undetermined:
		if class == mcp.RetryUnsafe || !f.Retryable {
			return unsafe()
		}
		return nil
	case Overloaded, RateLimited, ShuttingDown, Unreachable, InProgress:
		if class == mcp.RetryUnsafe && !a.p.table.TrustServer {
			return unsafe()
		}
		return nil
	case ToolFailed:
		if !f.Retryable {
			return fmt.Errorf("%w: %w", ErrNotRetryable, f.cause())
		}
		if class == mcp.RetryUnsafe && !a.p.table.TrustServer {
			return unsafe()
		}
		return nil
	case MaxTimeout:
		if class == mcp.RetryUnsafe {
			return unsafe()
		}
		return fmt.Errorf("%w: %w", ErrDeadline, f.cause())
	}
	return fmt.Errorf("%w: %w", ErrNotRetryable, f.cause())
}
