package retry_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

var t0 = time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)

// alwaysFail makes calls logical calls against a target that fails every
// attempt, all at t0, and returns the attempts made.
func alwaysFail(p *retry.Planner, calls int) int {
	attempts := 0
	for range calls {
		a := p.Start(retry.Call{Tool: "search"})
		attempts++
		for a.Next(retry.Verdict{Kind: retry.Lost}, t0).Retry {
			attempts++
		}
	}
	return attempts
}

// Against a server that always fails, the budget holds retries to a tenth
// of the calls: 10,000 calls make at most 11,000 attempts, where the
// attempt cap alone allows 30,000.
func TestBudgetCapsAmplificationUnderTotalFailure(t *testing.T) {
	safe := retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}}
	const calls = 10_000

	budgeted := alwaysFail(retry.NewPlanner(retry.Options{Table: safe}), calls)
	if ratio := float64(budgeted) / calls; ratio > 1.1 {
		t.Errorf("budgeted: %.4f attempts per call, want ≤ 1.1", ratio)
	} else if ratio < 1.09 {
		t.Errorf("budgeted: %.4f attempts per call; the budget should allow about 1.1", ratio)
	}

	// The same calls with a budget too large to bind: the attempt cap is
	// all that is left, three attempts per call.
	naive := alwaysFail(retry.NewPlanner(retry.Options{Table: safe, Budget: &retry.Budget{Ratio: 10, MaxBalance: 1e9}}), calls)
	if naive != 3*calls {
		t.Errorf("unbudgeted: %d attempts for %d calls, want %d", naive, calls, 3*calls)
	}
}

// The same, on the fake clock: calls arrive at 100 a second, each retries
// after its backoff in its own goroutine, and the floor refills as time
// passes. The floor adds nothing to a busy client's tenth: what it lends
// is repaid from deposits, so attempts stay within (1+Ratio)·calls plus
// at most MaxBalance.
func TestBudgetHoldsOverTimeAndConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retry.NewPlanner(retry.Options{Table: retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}}})
		const calls = 10_000
		var attempts atomic.Int64
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				a := p.Start(retry.Call{Tool: "search", Deadline: time.Now().Add(30 * time.Second)})
				attempts.Add(1)
				for {
					d := a.Next(retry.Verdict{Kind: retry.Lost}, time.Now())
					if !d.Retry {
						return
					}
					time.Sleep(d.Delay)
					attempts.Add(1)
				}
			})
			time.Sleep(10 * time.Millisecond)
		}
		wg.Wait()
		limit := int64(calls*(1+retry.DefaultBudgetRatio)) + retry.DefaultMaxBalance
		if got := attempts.Load(); got > limit {
			t.Errorf("%d attempts for %d calls over %v, want ≤ %d", got, calls, 100*time.Second, limit)
		} else {
			t.Logf("%d attempts for %d calls: %.4f per call", got, calls, float64(got)/calls)
		}
	})
}

// The floor lets a quiet client retry MinPerSecond times a second, with
// one second's worth in hand, on the fake clock.
func TestBudgetFloorRefillsWithTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &retry.Budget{Ratio: -1} // no deposits count: only the floor
		if !b.Withdraw(time.Now()) {
			t.Fatal("a new budget has one retry in hand")
		}
		if b.Withdraw(time.Now()) {
			t.Fatal("a second retry at once went through")
		}
		time.Sleep(500 * time.Millisecond)
		if b.Withdraw(time.Now()) {
			t.Fatal("half a second gave a whole retry")
		}
		time.Sleep(500 * time.Millisecond)
		if !b.Withdraw(time.Now()) {
			t.Fatal("a second did not give a retry")
		}
		time.Sleep(time.Minute)
		got := 0
		for b.Withdraw(time.Now()) {
			got++
		}
		if got != 1 {
			t.Errorf("after a quiet minute %d retries in hand, want 1 (one second's worth)", got)
		}

		fast := &retry.Budget{Ratio: -1, MinPerSecond: 5}
		got = 0
		for fast.Withdraw(time.Now()) {
			got++
		}
		if got != 5 {
			t.Errorf("MinPerSecond 5: %d retries in hand, want 5", got)
		}

		none := &retry.Budget{Ratio: -1, MinPerSecond: -1}
		time.Sleep(time.Hour)
		if none.Withdraw(time.Now()) {
			t.Error("no deposits and no floor, yet a retry")
		}
	})
}

// A retry paid from the floor is charged to the deposits, which repay it
// before they fund another.
func TestBudgetFloorIsRepaidFromDeposits(t *testing.T) {
	var b retry.Budget
	if !b.Withdraw(t0) {
		t.Fatal("the floor's first retry was refused")
	}
	for range 10 {
		b.Deposit()
	}
	if b.Withdraw(t0) {
		t.Fatal("ten deposits funded a retry while repaying the floor's")
	}
	for range 10 {
		b.Deposit()
	}
	if !b.Withdraw(t0) {
		t.Fatal("twenty deposits did not fund one retry after repaying one")
	}
}

// Savings are capped: a long healthy spell buys at most MaxBalance
// retries when the target starts failing.
func TestBudgetSavingsAreCapped(t *testing.T) {
	b := &retry.Budget{MinPerSecond: -1}
	for range 1_000_000 {
		b.Deposit()
	}
	got := 0
	for b.Withdraw(t0) {
		got++
	}
	if got != retry.DefaultMaxBalance {
		t.Errorf("%d retries saved up, want %d", got, retry.DefaultMaxBalance)
	}
}

// Concurrent calls share the budget without losing or inventing tokens.
func TestBudgetIsSafeForConcurrentUse(t *testing.T) {
	b := &retry.Budget{MinPerSecond: -1, MaxBalance: 1e6}
	var wg sync.WaitGroup
	var granted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 5000 {
				b.Deposit()
				if b.Withdraw(t0) {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for b.Withdraw(t0) {
		granted.Add(1)
	}
	if got := granted.Load(); got != 4000 {
		t.Errorf("40,000 deposits of 0.1 granted %d retries, want exactly 4,000", got)
	}
}
