// Package benchtest is what mcprel's benchmarks share to measure as
// ratios: a batch of operations, a measurement that interleaves it with
// its baselines in rounds of equal counts (so that a machine that gets
// busier or quieter during the run moves both alike), batches of calls
// shared among clients, the disk's fsync rate, and the store's commits.
package benchtest

import (
	"context"
	"crypto/rand"
	"flag"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/store"
)

// Batch runs n operations and says how long they took.
type Batch func(n int) (time.Duration, error)

// Baseline is a batch that a measured one is reported against, as Unit.
type Baseline struct {
	Unit string
	Run  Batch
}

// Measure runs b.N operations of run, timed, in up to 10 rounds; in each
// round every baseline runs as many of its own, untimed, before or after
// it (taking turns). It reports run's rate as unit and, for each
// baseline, run's rate over the baseline's. Under -cpuprofile no
// baseline runs, so that the profile is run's alone.
func Measure(b *testing.B, unit string, run Batch, baselines ...Baseline) {
	b.Helper()
	if f := flag.Lookup("test.cpuprofile"); f != nil && f.Value.String() != "" {
		baselines = nil
	}
	b.StopTimer()
	b.ResetTimer()
	rounds := min(b.N, 10)
	var took time.Duration
	base := make([]time.Duration, len(baselines))
	runBaselines := func(n int) {
		for i, bl := range baselines {
			d, err := bl.Run(n)
			if err != nil {
				b.Fatalf("baseline %s: %v", bl.Unit, err)
			}
			base[i] += d
		}
	}
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		if r%2 == 1 {
			runBaselines(n)
		}
		b.StartTimer()
		d, err := run(n)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		took += d
		if r%2 == 0 {
			runBaselines(n)
		}
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), unit)
	for i, bl := range baselines {
		b.ReportMetric(base[i].Seconds()/took.Seconds(), bl.Unit)
	}
}

// Calls is a batch of calls shared among the clients, one caller each;
// call gets each call's sequence number in the batch, from 1.
func Calls(cs []*client.Client, call func(c *client.Client, i int64) error) Batch {
	return func(n int) (time.Duration, error) {
		var next atomic.Int64
		var first atomic.Pointer[error]
		var wg sync.WaitGroup
		start := time.Now()
		for _, c := range cs {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					if err := call(c, i); err != nil {
						first.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		if err := first.Load(); err != nil {
			return took, *err
		}
		return took, nil
	}
}

// DialN connects n clients (the newest era) to url, closed when b ends.
func DialN(b *testing.B, url string, n int) []*client.Client {
	b.Helper()
	cs := make([]*client.Client, n)
	for i := range cs {
		c, err := client.DialHTTP(context.Background(), url, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// FsyncProbe is bench/internal/measure.FsyncRate as a batch: 4 KiB
// written into a file in dir and fsynced, n times — what one durable
// commit on that disk costs at least.
func FsyncProbe(b *testing.B, dir string) Batch {
	f, err := os.CreateTemp(dir, "fsync-probe")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		f.Close()
		os.Remove(f.Name())
	})
	buf := make([]byte, 4096)
	rand.Read(buf)
	var at int64
	return func(n int) (time.Duration, error) {
		start := time.Now()
		for range n {
			if _, err := f.WriteAt(buf, at%256*4096); err != nil {
				return 0, err
			}
			if err := f.Sync(); err != nil {
				return 0, err
			}
			at++
		}
		return time.Since(start), nil
	}
}

// ReportCommits reports the write transactions the store committed
// between two of its counts, per operation, and the mean group-commit
// batch.
func ReportCommits(b *testing.B, before, after store.WriteStats) {
	commits, ops := after.Commits-before.Commits, after.Operations-before.Operations
	b.ReportMetric(float64(commits)/float64(b.N), "commits/call")
	if commits > 0 {
		b.ReportMetric(float64(ops)/float64(commits), "ops/commit")
	}
}
