package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

func call(ln *lane, tenant string) *inflight { return &inflight{lane: ln, tenant: tenant} }

// TestRateLimitRefusesWithTheWait: a tool limited to 2 calls a second with
// a burst of 2 admits two at once, refuses the third with the time until a
// token is free, and admits again once it is.
func TestRateLimitRefusesWithTheWait(t *testing.T) {
	a := newAdmission(10, 10, 1<<30, Limits{}, time.Second)
	ln := newLane(0, 0, 2, 2)
	t0 := time.Unix(1000, 0)
	for i := range 2 {
		if d, _ := a.admit(call(ln, ""), t0); d != admitRun {
			t.Fatalf("call %d: %v", i, d)
		}
	}
	d, wait := a.admit(call(ln, ""), t0)
	if d != admitRateLimited || wait != 500*time.Millisecond {
		t.Fatalf("third call: %v after %v, want rate limited for 500ms", d, wait)
	}
	if d, _ := a.admit(call(ln, ""), t0.Add(500*time.Millisecond)); d != admitRun {
		t.Fatalf("after the wait: %v", d)
	}
}

// TestRefusedCallsReturnTheirTokens: a call refused for lack of slots does
// not spend its rate token.
func TestRefusedCallsReturnTheirTokens(t *testing.T) {
	a := newAdmission(1, 0, 1<<30, Limits{}, time.Second)
	busy := newLane(0, 0, 0, 0)
	a.admit(call(busy, ""), time.Unix(0, 0)) // takes the only slot
	ln := newLane(0, 0, 1, 1)
	t0 := time.Unix(1000, 0)
	if d, _ := a.admit(call(ln, ""), t0); d != admitRefused {
		t.Fatalf("want refused for slots, got %v", d)
	}
	// The token is still there: a call right after is not rate limited.
	a.next(&inflight{lane: busy}, time.Millisecond)
	if d, _ := a.admit(call(ln, ""), t0); d != admitRun {
		t.Fatalf("the refused call spent the token: %v", d)
	}
}

// TestTenantLimits: one tenant's calls are bounded on their own; another
// tenant is unaffected, and idle tenants are forgotten.
func TestTenantLimits(t *testing.T) {
	a := newAdmission(10, 10, 1<<30, Limits{MaxConcurrent: 1, MaxQueued: 1}, time.Second)
	ln := newLane(0, 0, 0, 0)
	now := time.Unix(0, 0)
	first := call(ln, "a")
	if d, _ := a.admit(first, now); d != admitRun {
		t.Fatal(d)
	}
	waiting := call(ln, "a")
	if d, _ := a.admit(waiting, now); d != admitQueued {
		t.Fatalf("a's second call: %v, want queued", d)
	}
	if d, _ := a.admit(call(ln, "a"), now); d != admitRefused {
		t.Fatalf("a's third call: %v, want refused", d)
	}
	other := newLane(0, 0, 0, 0)
	if d, _ := a.admit(call(other, "b"), now); d != admitRun {
		t.Fatalf("b's call: %v, want to run beside a's", d)
	}
	if got := a.next(first, time.Millisecond); got != waiting {
		t.Fatalf("after a's first call, %v ran; want a's queued call", got)
	}
	a.next(waiting, time.Millisecond)
	a.next(&inflight{lane: other, tenant: "b"}, time.Millisecond)
	if len(a.tenants) != 0 {
		t.Fatalf("%d tenant lanes left after every call ended", len(a.tenants))
	}
}

// TestRetryAfterFollowsRunTimes: once run times are known, an overloaded
// lane suggests waiting about one run time per call ahead, per slot.
func TestRetryAfterFollowsRunTimes(t *testing.T) {
	a := newAdmission(100, 100, 1<<30, Limits{}, 7*time.Second)
	ln := newLane(2, 2, 0, 0)
	now := time.Unix(0, 0)
	calls := make([]*inflight, 4)
	for i := range calls {
		calls[i] = call(ln, "")
		a.admit(calls[i], now) // two run, two wait
	}
	if _, wait := a.admit(call(ln, ""), now); wait != 7*time.Second {
		t.Fatalf("with no run times known: %v, want the configured 7s", wait)
	}
	a.next(calls[0], 400*time.Millisecond) // calls[2] starts
	a.admit(call(ln, ""), now)             // refills the queue
	if _, wait := a.admit(call(ln, ""), now); wait != 600*time.Millisecond {
		t.Fatalf("retry after %v, want 400ms × 3 calls ahead / 2 slots = 600ms", wait)
	}
}

// TestByteBudget: the bytes of running and queued calls' requests are
// bounded server-wide and per tenant; a call past a bound is refused, and
// the bytes come back when a call ends or leaves the queue.
func TestByteBudget(t *testing.T) {
	a := newAdmission(1, 10, 100, Limits{MaxBytes: 60}, time.Second)
	ln := newLane(0, 0, 0, 0)
	now := time.Unix(0, 0)
	sized := func(tenant string, size int64) *inflight {
		r := call(ln, tenant)
		r.size = size
		return r
	}
	running := sized("a", 50)
	if d, _ := a.admit(running, now); d != admitRun {
		t.Fatalf("a's first call: %v", d)
	}
	if d, _ := a.admit(sized("a", 20), now); d != admitRefused {
		t.Fatalf("a's call past its 60 bytes: %v, want refused", d)
	}
	queued := sized("b", 40)
	if d, _ := a.admit(queued, now); d != admitQueued {
		t.Fatalf("b's call: %v, want queued (one slot, taken)", d)
	}
	if d, _ := a.admit(sized("c", 20), now); d != admitRefused {
		t.Fatalf("c's call past the server's 100 bytes: %v, want refused although the queue has room", d)
	}
	if !a.remove(queued) || a.bytes != 50 {
		t.Fatalf("after b's call left the queue: %d bytes held, want 50", a.bytes)
	}
	if d, _ := a.admit(sized("c", 50), now); d != admitQueued {
		t.Fatalf("c's call once b's bytes came back: %v", d)
	}
	next := a.next(running, time.Millisecond)
	if next == nil || a.bytes != 50 {
		t.Fatalf("after a's call ended: next %v, %d bytes held; want c's call running with its 50", next, a.bytes)
	}
	a.next(next, time.Millisecond)
	if a.bytes != 0 || len(a.tenants) != 0 {
		t.Fatalf("%d bytes and %d tenant lanes left after every call ended", a.bytes, len(a.tenants))
	}
}

// TestLimitGroupSharedByTools: two tools of one group share its slots and
// its queue; a tool outside the group runs beside them; the group's bytes
// bound holds across its tools.
func TestLimitGroupSharedByTools(t *testing.T) {
	a := newAdmission(10, 10, 1<<30, Limits{}, time.Second)
	g, err := NewLimitGroup("up", Limits{MaxConcurrent: 1, MaxQueued: 1, MaxBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	inGroup := func(ln *lane, size int64) *inflight { return &inflight{lane: ln, group: g.ln, size: size} }
	toolA, toolB, other := newLane(0, 0, 0, 0), newLane(0, 0, 0, 0), newLane(0, 0, 0, 0)
	now := time.Unix(0, 0)
	first := inGroup(toolA, 10)
	if d, _ := a.admit(first, now); d != admitRun {
		t.Fatalf("the group's first call: %v", d)
	}
	waiting := inGroup(toolB, 10)
	if d, _ := a.admit(waiting, now); d != admitQueued {
		t.Fatalf("another tool of the group: %v, want queued behind the group's one slot", d)
	}
	if d, _ := a.admit(inGroup(toolA, 10), now); d != admitRefused {
		t.Fatalf("past the group's queue: %v, want refused", d)
	}
	if d, _ := a.admit(&inflight{lane: other}, now); d != admitRun {
		t.Fatalf("a tool outside the group: %v, want to run", d)
	}
	if got := a.next(first, time.Millisecond); got != waiting {
		t.Fatalf("after the group's call, %v ran; want the group's queued call", got)
	}
	a.next(waiting, time.Millisecond)
	if d, _ := a.admit(inGroup(toolA, 101), now); d != admitRefused {
		t.Fatalf("a call past the group's bytes: %v, want refused", d)
	}
	if g.ln.running != 0 || g.ln.queued != 0 || g.ln.bytes != 0 {
		t.Fatalf("the group holds %d running, %d queued, %d bytes after its calls ended", g.ln.running, g.ln.queued, g.ln.bytes)
	}
}

// TestLimitGroupBelongsToOneServer: a group's lane is counted under one
// server's lock, so a second server refuses it; negative limits are
// refused.
func TestLimitGroupBelongsToOneServer(t *testing.T) {
	if _, err := NewLimitGroup("bad", Limits{MaxConcurrent: -1}); err == nil {
		t.Fatal("a group with negative limits was made")
	}
	g, _ := NewLimitGroup("up", Limits{MaxConcurrent: 1})
	h := func(context.Context, *CallRequest) (*mcp.CallToolResult, error) { return &mcp.CallToolResult{}, nil }
	s1, err := New(mcp.Implementation{Name: "one", Version: "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(mcp.Implementation{Name: "two", Version: "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.AddTool(Tool{Name: "a", Policy: Policy{Group: g}}, h); err != nil {
		t.Fatal(err)
	}
	if err := s1.AddTool(Tool{Name: "b", Policy: Policy{Group: g}}, h); err != nil {
		t.Fatal(err)
	}
	if err := s2.AddTool(Tool{Name: "a", Policy: Policy{Group: g}}, h); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("a second server took the group: %v", err)
	}
}

// A queued call carries the time it joined the queue from the moment it
// is in the queue: a finishing handler may take it, run it and record its
// wait before the goroutine that admitted it goes on (TestObservers
// once recorded a queued call with no wait that way).
func TestQueuedCallKnowsWhenItJoined(t *testing.T) {
	a := newAdmission(1, 1, 1<<30, Limits{}, time.Second)
	ln := newLane(0, 0, 0, 0)
	running := call(ln, "")
	a.admit(running, time.Unix(0, 0)) // takes the only slot
	joined := time.Unix(1000, 0)
	waiting := call(ln, "")
	if d, _ := a.admit(waiting, joined); d != admitQueued {
		t.Fatalf("want queued, got %v", d)
	}
	// The slot's handler finishes and takes the queued call at once.
	if next := a.next(running, time.Millisecond); next != waiting || !next.queuedAt.Equal(joined) {
		t.Fatalf("the runner took %p with queuedAt %v; want %p, joined at %v", next, next.queuedAt, waiting, joined)
	}
}
