package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Causes of a timed-out request, read with context.Cause in a handler.
var (
	// ErrIdleTimeout: the request made no useful progress (no valid
	// progress report) for its idle deadline.
	ErrIdleTimeout = errors.New("idle deadline exceeded: no progress for too long")
	// ErrMaxDeadline: the request ran past its absolute deadline, however
	// much progress it reported.
	ErrMaxDeadline = errors.New("maximum deadline exceeded")
)

// TimeoutClass says what kind of work a tool does, which picks its default
// deadlines. The zero value is TimeoutStandard.
type TimeoutClass uint8

const (
	// TimeoutStandard is a call to an external service: by default idle
	// 30 s, maximum 60 s (Options.Standard).
	TimeoutStandard TimeoutClass = iota
	// TimeoutFast is a lookup or a short computation: by default idle 5 s,
	// maximum 15 s (Options.Fast).
	TimeoutFast
	// TimeoutLong is work that should not hold a request open at all: it
	// belongs in a durable task. Until a tool can run as a task, a long
	// tool must state its own MaxTimeout, which bounds it like any other.
	TimeoutLong
)

// String returns "standard", "fast" or "long".
func (c TimeoutClass) String() string {
	switch c {
	case TimeoutFast:
		return "fast"
	case TimeoutLong:
		return "long"
	}
	return "standard"
}

// Deadlines are a request's two clocks. Idle is the longest the request
// may go without useful activity — a valid (increasing) progress report —
// and Max the longest it may run at all, from its arrival. Both are real
// timers: the maximum fires even if progress never stops, and a progress
// token never makes a request immortal.
type Deadlines struct {
	Idle time.Duration
	Max  time.Duration
}

// Default deadlines of the timeout classes.
var (
	DefaultFast     = Deadlines{Idle: 5 * time.Second, Max: 15 * time.Second}
	DefaultStandard = Deadlines{Idle: 30 * time.Second, Max: 60 * time.Second}
)

func (d Deadlines) validate(what string) error {
	if d.Idle < 0 || d.Max < 0 {
		return fmt.Errorf("server: %s deadlines must not be negative", what)
	}
	return nil
}

// or fills zero fields from def.
func (d Deadlines) or(def Deadlines) Deadlines {
	if d.Idle == 0 {
		d.Idle = def.Idle
	}
	if d.Max == 0 {
		d.Max = def.Max
	}
	return d
}

// deadlines resolves a tool policy's deadlines against the server's
// defaults for its class.
func (s *Server) deadlines(p Policy) Deadlines {
	own := Deadlines{Idle: p.IdleTimeout, Max: p.MaxTimeout}
	switch p.Timeout {
	case TimeoutFast:
		return own.or(s.opts.Fast)
	case TimeoutLong:
		// A long tool states its maximum; without progress it may idle up
		// to that maximum unless it says otherwise.
		return own.or(Deadlines{Idle: own.Max, Max: own.Max})
	}
	return own.or(s.opts.Standard)
}

// armDeadlines starts the request's clocks, from its arrival: the
// maximum from the request's start, the idle clock from now.
//
// The two clocks are kept by one timer, set for whichever deadline comes
// first; a progress report moves the idle deadline (touchLocked) without
// touching the timer, and when the timer fires early for an idle
// deadline that has moved it is set again for the next one. Each clock
// still fires on its own time, whatever the other does and whether or not
// anything else happens: a request that goes quiet times out at its idle
// deadline, one that reports progress forever at its maximum. A call pays
// for one timer rather than two, and a progress report for none.
func (r *inflight) armDeadlines(d Deadlines) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadlines = d
	r.activeAt = time.Now()
	if at, ok := r.nextDeadlineLocked(); ok {
		r.clock = time.AfterFunc(at.Sub(r.activeAt), r.clockFired)
	}
}

// idleClock reports whether the idle clock runs: an idle deadline not
// past the maximum.
func (d Deadlines) idleClock() bool { return d.Idle > 0 && (d.Max == 0 || d.Idle < d.Max) }

// nextDeadlineLocked is the earlier of the two deadlines; ok is false
// when neither clock runs.
func (r *inflight) nextDeadlineLocked() (at time.Time, ok bool) {
	d := r.deadlines
	if d.Max > 0 {
		at, ok = r.start.Add(d.Max), true
	}
	if d.idleClock() {
		if idle := r.activeAt.Add(d.Idle); !ok || idle.Before(at) {
			at, ok = idle, true
		}
	}
	return at, ok
}

// clockFired ends the request with the deadline that has passed, the
// maximum first; if neither has (the idle one moved since the timer was
// set), it sets the timer for the next.
func (r *inflight) clockFired() {
	r.mu.Lock()
	if r.outcome != 0 {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	d := r.deadlines
	var cause error
	switch {
	case d.Max > 0 && !now.Before(r.start.Add(d.Max)):
		cause = ErrMaxDeadline
	case d.idleClock() && !now.Before(r.activeAt.Add(d.Idle)):
		cause = ErrIdleTimeout
	default:
		if at, ok := r.nextDeadlineLocked(); ok {
			r.clock.Reset(at.Sub(now))
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.timeout(cause)
}

// touchLocked restarts the idle clock after useful activity.
func (r *inflight) touchLocked() {
	if r.clock != nil {
		r.activeAt = time.Now()
	}
}

// stopClocksLocked stops both clocks and any pending progress flush.
func (r *inflight) stopClocksLocked() {
	if r.clock != nil {
		r.clock.Stop()
	}
	if r.flushTimer != nil {
		r.flushTimer.Stop()
	}
	r.pending = nil
}

// timeout ends the request because a clock fired: the handler's context
// ends with cause, no more progress goes out, and the client gets a
// structured timeout failure saying which deadline and how long it ran.
func (r *inflight) timeout(cause error) {
	r.end(ending{outcome: TimedOut, cause: cause, withdraw: true, message: func() final {
		elapsed, d := r.ended.Sub(r.start), r.deadlines
		which, limit := "max", d.Max
		if errors.Is(cause, ErrIdleTimeout) {
			which, limit = "idle", d.Idle
		}
		te := &mcp.ToolError{
			Code:    mcp.FailureTimeout,
			Message: fmt.Sprintf("the request exceeded its %s deadline of %v after %v", which, limit, elapsed.Round(time.Millisecond)),
			// Whether the work took effect is unknown; only a safe call, or a
			// conditional one that carried its key, may be made again without
			// reconciling first.
			Retryable: r.retryable,
			Details: map[string]any{
				"deadline":  which,
				"limitMs":   limit.Milliseconds(),
				"elapsedMs": elapsed.Milliseconds(),
			},
		}
		if r.method == mcp.MethodToolsCall {
			if data, err := r.encodeResult(te.Result()); err == nil {
				return final{data: data, rec: RequestRecord{IsError: true}}
			}
		}
		e := jsonrpc.NewError(mcp.CodeTimeout, "%s", te.Message).WithData(te.Failure())
		return final{data: jsonrpc.AppendError(nil, r.id, e), rec: RequestRecord{ErrorCode: e.Code}}
	}})
}
