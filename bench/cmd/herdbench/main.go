// Command herdbench simulates, in virtual time, what package retry does
// to a recovering server. Nothing sleeps and nothing touches the network:
// every pause comes from retry.Backoff with a seeded jitter, so a run
// takes well under a second and the same flags print the same numbers.
//
// # Reconnect herd
//
// N clients (-clients, 10,000) lose their connection at t = 0, when the
// server goes down; it is back at t = L (-outage, 30 s). A reconnect
// attempt before L fails at once; the first one at or after L succeeds
// (the recovered server takes every connection: herdbench measures when
// the load arrives, not whether the server survives it). Two strategies:
//
//	backoff  the retry package's default Backoff: the pause before
//	         attempt k is uniform in [0, min(8 s, 250 ms·2ᵏ)), each
//	         client with its own seeded jitter;
//	steady   the same Backoff with Steady, what package client
//	         reconnects with: full jitter until one pause was drawn at
//	         the cap, then exactly the cap, keeping the client's phase;
//	naive    reconnect at once, then every -interval (1 s), no jitter.
//
// For each, herdbench prints a histogram of reconnect attempts per 100 ms
// window from the last second of the outage to the last reconnect, and
// the peak window after recovery as a ratio to the uniform average.
//
// The uniform average is the N reconnects the recovered server must take,
// spread evenly over the reconnect period: the 100 ms windows from L up
// to and including the one in which the last client reconnected with the
// backoff. Both strategies are measured against this same average. A
// strategy's own period would flatter the naive one — all its reconnects
// land in one window, so its peak equals its own average — and a fixed
// reference such as the backoff cap would ignore how long clients really
// took. The period is set by the slowest client, so a few stragglers
// lengthen it and lower the average: that is the pessimistic choice for
// the backoff's ratio. The target (issue 12) is a ratio of at most 2 with
// the backoff.
//
// Attempts during the outage fail, but they are load too (on a load
// balancer, or on a server that is up but refusing); their total and
// peak are printed beside the histogram. A sweep over outage lengths
// follows, because the ratio depends on how far the clients' backoff has
// grown when the server returns.
//
// # Retry amplification
//
// -calls logical calls (10,000) of a Safe tool start at -rate a second
// (100) against a server that fails every attempt with "overloaded" and
// no retry-after. Each call may make -attempts attempts (3) within
// -call-max (30 s), paced by the default backoff. naive retries every call
// up to the attempt cap; budgeted asks a retry.Planner, whose per-target
// budget lets retries add a tenth of the calls (target: at most 1.1
// attempts per call). A sweep over call rates shows the budget's floor (1
// retry a second), which lets a quiet client retry and so dominates at
// low rates.
//
// Run it with
//
//	cd bench && go run ./cmd/herdbench
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

const window = 100 * time.Millisecond

func main() {
	clients := flag.Int("clients", 10_000, "herd: clients that reconnect")
	outage := flag.Duration("outage", 30*time.Second, "herd: how long the server is down")
	interval := flag.Duration("interval", time.Second, "herd: the naive strategy's fixed reconnect interval")
	all := flag.Bool("all", false, "herd: print every 100 ms window from t = 0, not only from the outage's last second")
	seed := flag.Int("seed", 1, "jitter seed (each client's jitter is seeded by this and its index)")
	calls := flag.Int("calls", 10_000, "amplification: logical calls")
	rate := flag.Float64("rate", 100, "amplification: calls started per second")
	attempts := flag.Int("attempts", retry.DefaultMaxAttempts, "amplification: attempt cap per call")
	callMax := flag.Duration("call-max", 30*time.Second, "amplification: each call's deadline, all attempts included")
	flag.Parse()
	if *clients <= 0 || *outage <= 0 || *interval <= 0 || *calls <= 0 || *rate <= 0 || *attempts <= 0 || *callMax <= 0 {
		fmt.Fprintln(os.Stderr, "herdbench: every count, duration and rate must be positive")
		os.Exit(2)
	}

	herd(*clients, *outage, *interval, *seed, *all)
	amplification(*calls, *rate, *attempts, *callMax, *seed)
}

// reconnects is one strategy's run: attempts per 100 ms window from t = 0,
// and the time of the last reconnect.
type reconnects struct {
	name    string
	windows []int
	last    time.Duration
}

func (r *reconnects) record(at time.Duration) {
	w := int(at / window)
	for len(r.windows) <= w {
		r.windows = append(r.windows, 0)
	}
	r.windows[w]++
	r.last = max(r.last, at)
}

// simulate runs n clients through an outage of length outage; pause
// returns client c's wait before its attempt k (k = 0 is the first).
func simulate(name string, n int, outage time.Duration, pause func(c, k int) time.Duration) *reconnects {
	r := &reconnects{name: name}
	for c := range n {
		var at time.Duration
		for k := 0; ; k++ {
			at += pause(c, k)
			r.record(at)
			if at >= outage {
				break
			}
		}
	}
	return r
}

func backoffPause(seed int, steady bool) func(c, k int) time.Duration {
	jitters := map[int]retry.Backoff{}
	return func(c, k int) time.Duration {
		b, ok := jitters[c]
		if !ok {
			b = retry.Backoff{Jitter: retry.SeededJitter(fmt.Sprintf("%d/client-%d", seed, c)), Steady: steady}
			jitters[c] = b
		}
		return b.Delay(k, 0)
	}
}

func naivePause(interval time.Duration) func(c, k int) time.Duration {
	return func(c, k int) time.Duration {
		if k == 0 {
			return 0
		}
		return interval
	}
}

// stats are a run's numbers after recovery, against the shared uniform
// average.
type stats struct {
	peak, peakWindow        int // reconnects in the busiest window at or after recovery, and its index
	outageAttempts, outPeak int // failed attempts during the outage, and their busiest window
	allReconnected          time.Duration
	ratio                   float64
}

func measure(r *reconnects, outage time.Duration, average float64) stats {
	first := int(outage / window) // the window in which the server returns
	var s stats
	for w, n := range r.windows {
		if w >= first {
			if n > s.peak {
				s.peak, s.peakWindow = n, w
			}
			continue
		}
		s.outageAttempts += n
		s.outPeak = max(s.outPeak, n)
	}
	s.allReconnected = r.last - outage
	s.ratio = float64(s.peak) / average
	return s
}

// period is the number of windows in the reconnect period of a run: from
// the window in which the server returns to the one in which the last
// client reconnected, inclusive.
func period(r *reconnects, outage time.Duration) int {
	return int(r.last/window) - int(outage/window) + 1
}

func herd(n int, outage, interval time.Duration, seed int, all bool) {
	backoff := simulate("backoff", n, outage, backoffPause(seed, false))
	steady := simulate("steady", n, outage, backoffPause(seed, true))
	naive := simulate("naive", n, outage, naivePause(interval))
	windows := period(backoff, outage)
	average := float64(n) / float64(windows)

	fmt.Printf("RECONNECT HERD: %d clients, server down from 0 to %v, seed %d\n", n, outage, seed)
	fmt.Printf("reconnect period: %v to %v, the backoff's last reconnect (%d windows of %v)\n",
		outage, outage+time.Duration(windows)*window, windows, window)
	fmt.Printf("uniform average: %d reconnects / %d windows = %.1f per window\n\n", n, windows, average)

	for _, r := range []*reconnects{backoff, steady, naive} {
		s := measure(r, outage, average)
		label := map[string]string{
			"backoff": "backoff (retry.Backoff defaults: full jitter, 250 ms doubling to 8 s)",
			"steady":  "steady (the same with Steady: the phase kept at the cap; what package client reconnects with)",
			"naive":   fmt.Sprintf("naive (at once, then every %v, no jitter)", interval),
		}[r.name]
		fmt.Printf("== %s\n", label)
		printHistogram(r, outage, all)
		fmt.Printf("  during the outage: %d failed attempts, busiest window %d\n", s.outageAttempts, s.outPeak)
		fmt.Printf("  after recovery:    all %d reconnected within %v; busiest window %d at %v\n",
			n, s.allReconnected.Round(time.Millisecond), s.peak, time.Duration(s.peakWindow)*window)
		fmt.Printf("  peak / uniform average = %d / %.1f = %.2f×", s.peak, average, s.ratio)
		if r.name != "naive" {
			fmt.Printf("   (target ≤ 2×: %s)", verdict(s.ratio <= 2))
		}
		fmt.Print("\n\n")
	}

	fmt.Println("sweep over outage lengths (same clients and seed; each row against its own backoff period):")
	fmt.Printf("  %-8s  %-22s  %-10s  %-22s  %-10s  %-22s\n", "outage", "backoff: peak / avg", "all back", "steady: peak / avg", "all back", "naive: peak / avg")
	for _, o := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute} {
		b := simulate("backoff", n, o, backoffPause(seed, false))
		st := simulate("steady", n, o, backoffPause(seed, true))
		nv := simulate("naive", n, o, naivePause(interval))
		avg := float64(n) / float64(period(b, o))
		sb, ss, sn := measure(b, o, avg), measure(st, o, avg), measure(nv, o, avg)
		fmt.Printf("  %-8v  %5d / %6.1f = %5.2f×  %-10v  %5d / %6.1f = %5.2f×  %-10v  %5d / %6.1f = %5.1f×\n",
			o, sb.peak, avg, sb.ratio, sb.allReconnected.Round(time.Millisecond),
			ss.peak, avg, ss.ratio, ss.allReconnected.Round(time.Millisecond), sn.peak, avg, sn.ratio)
	}
	fmt.Println()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// printHistogram prints one line per 100 ms window, from the outage's
// last second (or from t = 0 with all) to the last reconnect. Bars are
// scaled to the run's busiest window; '-' marks failed attempts during
// the outage and '#' reconnects after it.
func printHistogram(r *reconnects, outage time.Duration, all bool) {
	const width = 60
	from := 0
	if !all {
		from = max(0, int((outage-time.Second)/window))
	}
	busiest := 1
	for _, n := range r.windows[from:] {
		busiest = max(busiest, n)
	}
	fmt.Printf("  attempts per %v window ('-' failed during the outage, '#' reconnected; full bar = %d)\n", window, busiest)
	first := int(outage / window)
	for w := from; w < len(r.windows); w++ {
		n := r.windows[w]
		mark := "#"
		if w < first {
			mark = "-"
		}
		bar := strings.Repeat(mark, (n*width+busiest-1)/busiest)
		fmt.Printf("  %8.1fs %6d %s\n", (time.Duration(w) * window).Seconds(), n, bar)
	}
}

// event is an attempt of one call at a virtual time.
type event struct {
	at   time.Duration
	seq  int // breaks ties in the order the events were made
	call int
}

type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// decider says, after attempt number made of call c failed at now,
// whether to retry and after how long.
type decider interface {
	start(c int, now time.Time)
	next(c, made int, now time.Time) (time.Duration, bool)
}

// naiveDecider retries every call up to the attempt cap, with the same
// backoff and deadline as the planner but no budget.
type naiveDecider struct {
	backoff  retry.Backoff
	max      int
	callMax  time.Duration
	deadline map[int]time.Time
}

func (d *naiveDecider) start(c int, now time.Time) { d.deadline[c] = now.Add(d.callMax) }
func (d *naiveDecider) next(c, made int, now time.Time) (time.Duration, bool) {
	if made >= d.max {
		return 0, false
	}
	return d.backoff.DelayWithin(made-1, 0, now, d.deadline[c])
}

// plannerDecider asks a retry.Planner, budget and all.
type plannerDecider struct {
	p       *retry.Planner
	callMax time.Duration
	calls   map[int]*retry.Attempts
}

func (d *plannerDecider) start(c int, now time.Time) {
	d.calls[c] = d.p.Start(retry.Call{Tool: "search", Deadline: now.Add(d.callMax)})
}
func (d *plannerDecider) next(c, _ int, now time.Time) (time.Duration, bool) {
	dec := d.calls[c].Next(retry.Verdict{Kind: retry.Overloaded}, now)
	return dec.Delay, dec.Retry
}

// amplify runs calls against a server that fails every attempt and
// returns the attempts made.
func amplify(calls int, rate float64, d decider) int {
	t0 := time.Date(2026, 7, 28, 0, 0, 0, 0, time.UTC)
	q := &events{}
	seq := 0
	for c := range calls {
		heap.Push(q, event{at: time.Duration(float64(c) / rate * float64(time.Second)), seq: seq, call: c})
		seq++
	}
	made := make([]int, calls)
	total := 0
	for q.Len() > 0 {
		e := heap.Pop(q).(event)
		now := t0.Add(e.at)
		if made[e.call] == 0 {
			d.start(e.call, now)
		}
		made[e.call]++
		total++
		// The attempt fails at once.
		if pause, ok := d.next(e.call, made[e.call], now); ok {
			heap.Push(q, event{at: e.at + pause, seq: seq, call: e.call})
			seq++
		}
	}
	return total
}

func amplification(calls int, rate float64, attempts int, callMax time.Duration, seed int) {
	backoff := retry.Backoff{Jitter: retry.SeededJitter(fmt.Sprintf("%d/amplification", seed))}
	run := func(rate float64) (naive, budgeted int) {
		naive = amplify(calls, rate, &naiveDecider{backoff: backoff, max: attempts, callMax: callMax, deadline: map[int]time.Time{}})
		p := retry.NewPlanner(retry.Options{
			Table:       retry.Table{Default: retry.Rule{Class: mcp.RetrySafe}},
			Backoff:     backoff,
			MaxAttempts: attempts,
		})
		budgeted = amplify(calls, rate, &plannerDecider{p: p, callMax: callMax, calls: map[int]*retry.Attempts{}})
		return naive, budgeted
	}

	fmt.Printf("RETRY AMPLIFICATION: %d calls of a safe tool at %g/s, server fails every attempt (overloaded, no retry-after)\n", calls, rate)
	fmt.Printf("attempt cap %d, call deadline %v, default backoff\n", attempts, callMax)
	naive, budgeted := run(rate)
	nr, br := float64(naive)/float64(calls), float64(budgeted)/float64(calls)
	fmt.Printf("  naive    (every call retries up to the cap): %7d attempts  %.3f per call  (+%.1f %% load)\n", naive, nr, (nr-1)*100)
	fmt.Printf("  budgeted (retry.Planner, default budget):    %7d attempts  %.3f per call  (+%.1f %% load)   target ≤ 1.1: %s\n",
		budgeted, br, (br-1)*100, verdict(br <= 1.1))
	fmt.Println()
	fmt.Println("sweep over call rates (the budget's floor of 1 retry a second lets a quiet client retry):")
	fmt.Printf("  %-9s  %-8s  %-8s  %s\n", "calls/s", "naive", "budgeted", "budgeted extra attempts per second")
	for _, r := range []float64{1000, 100, 10, 1, 0.5} {
		n, b := run(r)
		span := float64(calls) / r
		fmt.Printf("  %-9g  %.3f×    %.3f×    %.2f\n", r, float64(n)/float64(calls), float64(b)/float64(calls), float64(b-calls)/span)
	}
}
