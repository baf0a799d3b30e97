package retry

import (
	"math"
	"sync"
	"time"
)

// Defaults of Budget.
const (
	// DefaultBudgetRatio: retries may add a tenth to the calls made, the
	// share the Google SRE book gives a client's retries.
	DefaultBudgetRatio = 0.1
	// DefaultMinRetriesPerSecond lets a client that makes few calls still
	// retry one of them per second.
	DefaultMinRetriesPerSecond = 1
	// DefaultMaxBalance is the most retries a budget saves up while calls
	// succeed (gRPC's retry throttling uses 10 tokens too).
	DefaultMaxBalance = 10
)

// milli is the budget's unit: a thousandth of a retry. Whole numbers keep
// the ratio exact over any number of calls (gRPC keeps three decimals for
// the same reason); ten thousand deposits of 0.1 in floating point make
// 999.99…, not 1000.
const milli = 1000

// Budget is a retry budget for one target: a token bucket in the manner
// of gRPC's retry throttling and Finagle's RetryBudget. Every first
// attempt of a call deposits Ratio of a token and every retry withdraws a
// whole one, so retries stay near Ratio of the calls however many
// attempts each call is allowed and however long the target keeps
// failing: against a server that always fails, a ratio of 0.1 makes about
// 1.1 attempts per call, not the attempt cap's 3.
//
// A small floor, MinPerSecond, lets a client that makes few calls still
// retry. A retry goes ahead when either the deposits or the floor hold
// one, and is charged to both (the deposits may go into debt, down to
// -MaxBalance, which later deposits repay; the floor stops at empty), so
// the two allowances do not add up: a busy client retries its Ratio of
// calls, a quiet one MinPerSecond a second.
//
// The zero value is a Budget with the defaults. Set the fields before
// first use and do not change them after; the methods are safe for
// concurrent use.
type Budget struct {
	// Ratio is the share of calls that may be retried; 0 means
	// DefaultBudgetRatio, a negative value none (only the floor).
	Ratio float64
	// MinPerSecond is the floor: retries allowed per second whatever the
	// deposits; 0 means DefaultMinRetriesPerSecond, a negative value none.
	// Up to one second's worth (at least one retry) is kept in hand.
	MinPerSecond float64
	// MaxBalance caps the retries saved up while calls succeed, so that a
	// long healthy spell cannot fund a burst of retries when the target
	// fails; 0 or less means DefaultMaxBalance.
	MaxBalance float64

	mu      sync.Mutex
	started bool
	balance int64   // deposits less retries, in milli
	floor   float64 // retries in hand from MinPerSecond
	last    time.Time
}

func (b *Budget) ratio() int64 {
	switch {
	case b.Ratio == 0:
		return DefaultBudgetRatio * milli
	case b.Ratio < 0 || math.IsNaN(b.Ratio):
		return 0
	}
	return int64(math.Round(min(b.Ratio, 1e6) * milli))
}

func (b *Budget) minPerSecond() float64 {
	switch {
	case b.MinPerSecond == 0:
		return DefaultMinRetriesPerSecond
	case b.MinPerSecond < 0 || math.IsNaN(b.MinPerSecond):
		return 0
	}
	return b.MinPerSecond
}

func (b *Budget) maxBalance() int64 {
	if !(b.MaxBalance > 0) {
		return DefaultMaxBalance * milli
	}
	return int64(math.Round(min(b.MaxBalance, 1e9) * milli))
}

// Deposit records a call's first attempt.
func (b *Budget) Deposit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.balance = min(b.balance+b.ratio(), b.maxBalance())
}

// Withdraw takes one retry from the budget at time now and reports
// whether there was one to take. A false answer means the target has
// been failing more than the budget allows: give up rather than add load.
func (b *Budget) Withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	rate := b.minPerSecond()
	burst := max(rate, 1)
	switch {
	case !b.started:
		b.started, b.floor, b.last = true, burst, now
	case now.After(b.last):
		b.floor = min(burst, b.floor+now.Sub(b.last).Seconds()*rate)
		b.last = now
	}
	if b.balance < milli && !(rate > 0 && b.floor >= 1) {
		return false
	}
	// Charged to both, so that they do not add up.
	b.balance = max(b.balance-milli, -b.maxBalance())
	b.floor = max(b.floor-1, 0)
	return true
}
