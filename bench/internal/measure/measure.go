// Package measure holds what the storage benchmarks share: a phase of
// timed operations, running one from several goroutines for a while, the
// disk's own fsync rate as the baseline, and one report line per phase.
package measure

import (
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is one measured workload.
type Phase struct {
	Name      string
	Ops       int
	Errors    int64
	Elapsed   time.Duration
	Latencies []time.Duration
}

// Rate is operations per second.
func (p Phase) Rate() float64 { return float64(p.Ops) / p.Elapsed.Seconds() }

// Pct is the latency at quantile q (0.5, 0.99, 1 for the maximum).
func (p Phase) Pct(q float64) time.Duration {
	if len(p.Latencies) == 0 {
		return 0
	}
	s := slices.Clone(p.Latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// Report prints p on one line, with its rate as a ratio to fsync (per
// second) when fsync is positive.
func Report(p Phase, fsync float64) {
	ratio := ""
	if fsync > 0 {
		ratio = fmt.Sprintf("%5.2f×", p.Rate()/fsync)
	}
	fmt.Printf("%-36s %9.0f/s  %6s  p50 %8v  p99 %8v  max %8v  errors %d\n",
		p.Name, p.Rate(), ratio, p.Pct(0.5).Round(time.Microsecond), p.Pct(0.99).Round(time.Microsecond),
		p.Pct(1).Round(time.Microsecond), p.Errors)
}

// Loop runs f from n goroutines for d; f gets a unique sequence number per
// call, starting at 1. Failed calls are counted, the first one printed.
func Loop(name string, n int, d time.Duration, f func(i int) error) Phase {
	var next atomic.Int64
	var errs atomic.Int64
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range n {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				i := int(next.Add(1))
				t := time.Now()
				if err := f(i); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, name+":", err)
					}
					continue
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		})
	}
	wg.Wait()
	p := Phase{Name: name, Elapsed: time.Since(start), Errors: errs.Load()}
	for _, l := range lat {
		p.Latencies = append(p.Latencies, l...)
	}
	p.Ops = len(p.Latencies)
	return p
}

// FsyncRate writes 4 KiB into a file in dir and fsyncs it, over and over,
// for d: the ceiling of one-commit-per-operation durability on that disk.
func FsyncRate(dir string, d time.Duration) (Phase, error) {
	f, err := os.CreateTemp(dir, "fsync-probe")
	if err != nil {
		return Phase{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	rand.Read(buf)
	p := Phase{Name: "raw fsync (4 KiB write + fsync)"}
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		if _, err := f.WriteAt(buf, int64(p.Ops%256)*4096); err != nil {
			return p, err
		}
		if err := f.Sync(); err != nil {
			return p, err
		}
		p.Latencies = append(p.Latencies, time.Since(t))
		p.Ops++
	}
	p.Elapsed = time.Since(start)
	return p, nil
}
