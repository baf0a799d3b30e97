package retry_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// fixed is a Jitter that always returns f.
func fixed(f float64) retry.Jitter { return func(int) float64 { return f } }

func TestBoundDoublesToTheCap(t *testing.T) {
	var b retry.Backoff
	want := []time.Duration{250, 500, 1000, 2000, 4000, 8000, 8000, 8000}
	for n, w := range want {
		if got := b.Bound(n); got != w*time.Millisecond {
			t.Errorf("Bound(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	for _, n := range []int{-1, 62, 63, 64, 1000, math.MaxInt} {
		if got, want := b.Bound(n), map[bool]time.Duration{true: 250 * time.Millisecond, false: 8 * time.Second}[n < 0]; got != want {
			t.Errorf("Bound(%d) = %v, want %v", n, got, want)
		}
	}
	custom := retry.Backoff{Base: time.Second, Cap: 500 * time.Millisecond}
	if got := custom.Bound(0); got != 500*time.Millisecond {
		t.Errorf("a base above the cap: Bound(0) = %v, want the cap", got)
	}
}

// Same seed, same pauses; different seeds, different pauses; every pause
// inside [0, Bound).
func TestSeededJitterIsReproducibleAndBounded(t *testing.T) {
	for c := range 1000 {
		seed := fmt.Sprintf("client-%d", c)
		a := retry.Backoff{Jitter: retry.SeededJitter(seed)}
		b := retry.Backoff{Jitter: retry.SeededJitter(seed)}
		for n := range 12 {
			da, db := a.Delay(n, 0), b.Delay(n, 0)
			if da != db {
				t.Fatalf("seed %q retry %d: %v then %v", seed, n, da, db)
			}
			if da < 0 || da >= a.Bound(n) {
				t.Fatalf("seed %q retry %d: %v outside [0, %v)", seed, n, da, a.Bound(n))
			}
		}
	}
	x, y := retry.SeededJitter("client-1"), retry.SeededJitter("client-2")
	same := 0
	for n := range 100 {
		if x(n) == y(n) {
			same++
		}
	}
	if same > 0 {
		t.Errorf("two seeds agreed on %d of 100 retries", same)
	}
}

// A deterministic check that seeded fractions look uniform: the mean and
// each decile of 100,000 draws (10,000 seeds × 10 retries) are within 2 %
// of a uniform distribution's. Being seeded, it cannot flake.
func TestSeededJitterSpreadsEvenly(t *testing.T) {
	const seeds, retries = 10_000, 10
	var deciles [10]int
	var sum float64
	for c := range seeds {
		j := retry.SeededJitter(fmt.Sprintf("client-%d", c))
		for n := range retries {
			f := j(n)
			if f < 0 || f >= 1 {
				t.Fatalf("fraction %v outside [0, 1)", f)
			}
			sum += f
			deciles[int(f*10)]++
		}
	}
	total := float64(seeds * retries)
	if mean := sum / total; math.Abs(mean-0.5) > 0.01 {
		t.Errorf("mean fraction %.4f, want 0.5 ± 0.01", mean)
	}
	for i, n := range deciles {
		if share := float64(n) / total; math.Abs(share-0.1) > 0.002 {
			t.Errorf("decile %d holds %.4f of the draws, want 0.1 ± 0.002", i, share)
		}
	}
}

func TestDefaultJitterIsRandomAndBounded(t *testing.T) {
	var b retry.Backoff
	distinct := map[time.Duration]bool{}
	for range 1000 {
		for n := range 8 {
			d := b.Delay(n, 0)
			if d < 0 || d >= b.Bound(n) {
				t.Fatalf("retry %d: %v outside [0, %v)", n, d, b.Bound(n))
			}
			distinct[d] = true
		}
	}
	if len(distinct) < 7000 {
		t.Errorf("only %d distinct pauses in 8,000 draws: the default jitter is not random", len(distinct))
	}
}

func TestMisbehavingJitterStaysInBounds(t *testing.T) {
	for _, f := range []float64{-1, math.NaN(), 1, 2, math.Inf(1)} {
		b := retry.Backoff{Jitter: fixed(f)}
		if d := b.Delay(3, 0); d < 0 || d >= b.Bound(3) {
			t.Errorf("jitter %v: Delay = %v, outside [0, %v)", f, d, b.Bound(3))
		}
	}
}

// The server's retry-after is a floor under the backoff, capped; the
// jittered backoff is added on top of it.
func TestDelayHonoursRetryAfterCapped(t *testing.T) {
	tests := []struct {
		name       string
		b          retry.Backoff
		retry      int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"no retry-after", retry.Backoff{Jitter: fixed(0.5)}, 0, 0, 125 * time.Millisecond},
		{"longer than the backoff", retry.Backoff{Jitter: fixed(0)}, 0, 2 * time.Second, 2 * time.Second},
		{"plus the jitter", retry.Backoff{Jitter: fixed(0.5)}, 2, 2 * time.Second, 2500 * time.Millisecond},
		{"shorter than the backoff", retry.Backoff{Jitter: fixed(0.5)}, 5, 10 * time.Millisecond, 4010 * time.Millisecond},
		{"huge, capped at Cap", retry.Backoff{Jitter: fixed(0)}, 0, 1000 * time.Hour, 8 * time.Second},
		{"saturated, capped at Cap", retry.Backoff{Jitter: fixed(0)}, 0, time.Duration(math.MaxInt64), 8 * time.Second},
		{"huge, capped at RetryAfterCap", retry.Backoff{Jitter: fixed(0), RetryAfterCap: 30 * time.Second}, 0, time.Hour, 30 * time.Second},
		{"huge, capped, plus the jitter", retry.Backoff{Jitter: fixed(0.5)}, 9, time.Hour, 12 * time.Second},
		{"negative ignored", retry.Backoff{Jitter: fixed(0)}, 0, -time.Second, 0},
	}
	for _, tt := range tests {
		if got := tt.b.Delay(tt.retry, tt.retryAfter); got != tt.want {
			t.Errorf("%s: Delay(%d, %v) = %v, want %v", tt.name, tt.retry, tt.retryAfter, got, tt.want)
		}
	}
}

// No pause DelayWithin allows ends at or after the deadline, and it gives
// up only when the pause Delay would pick does.
func TestDelayWithinNeverOutlivesTheDeadline(t *testing.T) {
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	gaveUp, allowed := 0, 0
	for c := range 200 {
		b := retry.Backoff{Jitter: retry.SeededJitter(fmt.Sprintf("c%d", c))}
		for n := range 10 {
			for _, ra := range []time.Duration{0, 300 * time.Millisecond, 5 * time.Second, time.Hour} {
				for _, left := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond, time.Second, 3 * time.Second, 20 * time.Second} {
					deadline := now.Add(left)
					d, ok := b.DelayWithin(n, ra, now, deadline)
					want := b.Delay(n, ra)
					switch {
					case ok && !now.Add(d).Before(deadline):
						t.Fatalf("retry %d, %v left: a pause of %v ends at or after the deadline", n, left, d)
					case ok && d != want:
						t.Fatalf("retry %d: DelayWithin = %v, Delay = %v", n, d, want)
					case !ok && now.Add(want).Before(deadline):
						t.Fatalf("retry %d, %v left: gave up on a pause of %v that fits", n, left, want)
					case ok:
						allowed++
					default:
						gaveUp++
					}
				}
			}
		}
	}
	if gaveUp == 0 || allowed == 0 {
		t.Errorf("the table exercised %d allowed pauses and %d give-ups; want both", allowed, gaveUp)
	}
	if d, ok := (retry.Backoff{}).DelayWithin(20, time.Hour, now, time.Time{}); !ok || d < 8*time.Second {
		t.Errorf("no deadline: DelayWithin = %v, %v; want a capped pause", d, ok)
	}
}

// A real retry loop on the fake clock: whatever the jitter, no sleep ends
// after the call's deadline, and the loop ends by giving up, not by
// overrunning.
func TestRetryLoopNeverSleepsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for c := range 50 {
			start := time.Now()
			deadline := start.Add(3 * time.Second)
			p := retry.NewPlanner(retry.Options{
				Table:       retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}},
				MaxAttempts: 100,
				Budget:      &retry.Budget{MinPerSecond: 1000},
			})
			a := p.Start(retry.Call{Tool: "search", Deadline: deadline})
			for {
				d := a.Next(retry.Verdict{Kind: retry.Lost, RetryAfter: time.Duration(c) * 10 * time.Millisecond}, time.Now())
				if !d.Retry {
					if !errors.Is(d.Err, retry.ErrDeadline) {
						t.Fatalf("loop %d ended with %v, want ErrDeadline", c, d.Err)
					}
					break
				}
				time.Sleep(d.Delay)
				if !time.Now().Before(deadline) {
					t.Fatalf("loop %d: a sleep of %v ended %v after the deadline", c, d.Delay, time.Since(deadline))
				}
			}
			if time.Since(start) >= 3*time.Second {
				t.Fatalf("loop %d ran %v past a 3s deadline", c, time.Since(start))
			}
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"120", 120 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"0", 0, true},
		{"007", 7 * time.Second, true},
		{"99999999999999999999999", time.Duration(math.MaxInt64), true},
		{"9223372037", time.Duration(math.MaxInt64), true},
		{"9223372036", 9223372036 * time.Second, true},
		{"Tue, 28 Jul 2026 12:00:30 GMT", 30 * time.Second, true},                                     // IMF-fixdate
		{"Tuesday, 28-Jul-26 12:01:00 GMT", time.Minute, true},                                        // RFC 850
		{"Tue Jul 28 12:00:02 2026", 2 * time.Second, true},                                           // asctime
		{"Mon, 27 Jul 2026 12:00:00 GMT", 0, true},                                                    // in the past
		{"Sat, 01 Jan 2100 00:00:00 GMT", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now), true}, // far future; Backoff caps it
		{"", 0, false},
		{"   ", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"28 Jul 2026", 0, false},
		{"Tue, 28 Jul 2026 12:00:30 PST", 0, false},
	}
	for _, tt := range tests {
		got, ok := retry.ParseRetryAfter(tt.value, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
		}
	}
	// Whatever the header says, the pause it leads to is capped.
	for _, v := range []string{"99999999999999999999999", "Sat, 01 Jan 2100 00:00:00 GMT"} {
		ra, _ := retry.ParseRetryAfter(v, now)
		if d := (retry.Backoff{Jitter: fixed(0)}).Delay(0, ra); d != retry.DefaultCap {
			t.Errorf("Retry-After %q: pause %v, want the cap %v", v, d, retry.DefaultCap)
		}
	}
}

// A steady backoff draws as full jitter until it has drawn once at the
// cap, then pauses exactly the cap: the client keeps its phase.
func TestSteadyBackoffKeepsItsPhase(t *testing.T) {
	full := retry.Backoff{Jitter: retry.SeededJitter("steady")}
	steady := retry.Backoff{Jitter: retry.SeededJitter("steady"), Steady: true}
	for n := range 12 {
		d, s := full.Delay(n, 0), steady.Delay(n, 0)
		switch {
		case full.Bound(n) < retry.DefaultCap || n == 0 || full.Bound(n-1) < retry.DefaultCap:
			if s != d {
				t.Fatalf("retry %d: steady %v, full jitter %v; want the same draw below the cap", n, s, d)
			}
		case s != retry.DefaultCap:
			t.Fatalf("retry %d: steady %v, want exactly the cap", n, s)
		}
	}
}
