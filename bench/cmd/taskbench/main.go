// Command taskbench measures durable tasks (package tasks) against the
// disk they live on, in one run: the raw fsync rate (write 4 KiB +
// fsync), task creations per second on SQLite with one and with several
// creators (as a ratio to that fsync rate), tasks/get latency among 10,000
// stored tasks, what 10,000 stored tasks cost on disk and in the process,
// and the delay from a cancellation recorded through one handle to the
// worker of another observing it at its checkpoint — two replicas sharing
// the store. The creation and cancel phases run on PostgreSQL too.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mcprel/mcprel/bench/internal/measure"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
)

func main() {
	dir := flag.String("dir", os.TempDir(), "directory for the fsync probe and the SQLite files (put it on the disk you care about)")
	duration := flag.Duration("duration", 3*time.Second, "how long each throughput phase runs")
	writers := flag.Int("writers", 8, "concurrent creators and readers in the contended phases")
	pg := flag.String("postgres", os.Getenv(storetest.PostgresEnv), "PostgreSQL URL (empty: skip the PostgreSQL phases)")
	checkpoint := flag.Duration("checkpoint", 20*time.Millisecond, "how often the worker of the cancel phase reaches a checkpoint")
	cancels := flag.Int("cancels", 200, "cancellations measured per store")
	flag.Parse()
	b := &bench{dir: *dir, d: *duration, writers: *writers, checkpoint: *checkpoint, cancels: *cancels}
	if err := b.run(*pg); err != nil {
		fmt.Fprintln(os.Stderr, "taskbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	dir        string
	d          time.Duration
	writers    int
	checkpoint time.Duration
	cancels    int
	fsync      float64
}

// request is a typical task request: a tool call of a few arguments.
var request = json.RawMessage(`{"name":"generate_report","arguments":{"rows":1000,"stepMs":50},"era":2}`)

func (b *bench) run(pg string) error {
	ctx := context.Background()
	fsync, err := measure.FsyncRate(b.dir, b.d)
	if err != nil {
		return err
	}
	b.fsync = fsync.Rate()
	fmt.Printf("dir %s, %v per phase, %d writers; ratios are to the fsync rate\n\n", b.dir, b.d, b.writers)
	measure.Report(fsync, b.fsync)

	path := filepath.Join(b.dir, fmt.Sprintf("taskbench-%d.db", os.Getpid()))
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(path + suffix)
		}
	}()
	a, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer a.DB().Close()
	measure.Report(b.create(ctx, a, "sqlite, create, 1 writer", 1), b.fsync)
	measure.Report(b.create(ctx, a, fmt.Sprintf("sqlite, create, %d writers", b.writers), b.writers), b.fsync)
	if err := b.stored(ctx, a, path); err != nil {
		return err
	}
	// A second handle on the same file stands in for a second process.
	other, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer other.DB().Close()
	if err := b.cancel(ctx, "sqlite", other, a); err != nil {
		return err
	}

	if pg == "" {
		fmt.Println("\npostgres: skipped (no -postgres URL and " + storetest.PostgresEnv + " unset)")
		return nil
	}
	dsn, drop, err := storetest.FreshSchema(ctx, pg, "taskbench_")
	if err != nil {
		return err
	}
	defer drop()
	pa, err := openPG(ctx, dsn, b.writers*2)
	if err != nil {
		return err
	}
	defer pa.DB().Close()
	pb, err := openPG(ctx, dsn, 4)
	if err != nil {
		return err
	}
	defer pb.DB().Close()
	fmt.Println()
	measure.Report(b.create(ctx, pa, "postgres, create, 1 worker", 1), 0)
	measure.Report(b.create(ctx, pa, fmt.Sprintf("postgres, create, %d workers", b.writers), b.writers), 0)
	b.fill(ctx, pa, 10_000)
	measure.Report(b.get(ctx, pa, "postgres, tasks/get among 10,000"), 0)
	return b.cancel(ctx, "postgres", pb, pa)
}

// unbounded lifts the store's bounds on stored tasks: the phases create
// more than the defaults keep. The counts behind the bounds are kept all
// the same, so their cost is part of every creation measured.
var unbounded = &tasks.Options{MaxTasksPerTenant: 1 << 30, MaxTasks: 1 << 30}

func open(ctx context.Context, path string) (*tasks.Store, error) {
	db, err := store.Open(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	return tasks.Open(ctx, db, unbounded)
}

func openPG(ctx context.Context, dsn string, conns int) (*tasks.Store, error) {
	db, err := store.Open(ctx, dsn, &store.Options{MaxConns: conns})
	if err != nil {
		return nil, err
	}
	return tasks.Open(ctx, db, unbounded)
}

// create records new tasks, durably, each its own transaction (grouped
// with others' on SQLite when several creators wait at once).
func (b *bench) create(ctx context.Context, s *tasks.Store, name string, n int) measure.Phase {
	return measure.Loop(name, n, b.d, func(i int) error {
		_, err := s.Create(ctx, tasks.NewTask{Tenant: fmt.Sprintf("t%d", i%4), Tool: "generate_report", Request: request, Owner: "bench"})
		return err
	})
}

// fill creates tasks until the store holds at least n.
func (b *bench) fill(ctx context.Context, s *tasks.Store, n int) []tasks.Task {
	var all []tasks.Task
	for _, tenant := range []string{"t0", "t1", "t2", "t3"} {
		cursor := ""
		for {
			page, next, err := s.List(ctx, tenant, cursor, 1000)
			if err != nil {
				panic(err)
			}
			all = append(all, page...)
			if next == "" {
				break
			}
			cursor = next
		}
	}
	for len(all) < n {
		t, err := s.Create(ctx, tasks.NewTask{Tenant: "t0", Tool: "generate_report", Request: request, Owner: "bench"})
		if err != nil {
			panic(err)
		}
		all = append(all, t)
	}
	return all
}

// get reads random stored tasks from several readers.
func (b *bench) get(ctx context.Context, s *tasks.Store, name string) measure.Phase {
	all := b.fill(ctx, s, 10_000)
	return measure.Loop(name, b.writers, b.d, func(i int) error {
		t := all[rand.IntN(len(all))]
		_, err := s.Get(ctx, t.Tenant, t.ID)
		return err
	})
}

// stored reports tasks/get among 10,000 tasks and what 10,000 more cost:
// bytes on disk (the SQLite file and its WAL) and heap in the process,
// which keeps no task in memory.
func (b *bench) stored(ctx context.Context, s *tasks.Store, path string) error {
	measure.Report(b.get(ctx, s, "sqlite, tasks/get among 10,000"), 0)
	size := func() int64 {
		var n int64
		for _, suffix := range []string{"", "-wal"} {
			if fi, err := os.Stat(path + suffix); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	disk0, heap0 := size(), heap()
	have, _, err := s.List(ctx, "t0", "", 1)
	if err != nil || len(have) == 0 {
		return fmt.Errorf("no task to count from: %v", err)
	}
	for range 10_000 {
		if _, err := s.Create(ctx, tasks.NewTask{Tenant: "mem", Tool: "generate_report", Request: request, Owner: "bench"}); err != nil {
			return err
		}
	}
	disk1, heap1 := size(), heap()
	fmt.Printf("%-36s %9.1f MB on disk (file + WAL), heap %+.2f MB\n", "sqlite, 10,000 more stored tasks",
		float64(disk1-disk0)/1e6, (float64(heap1)-float64(heap0))/1e6)
	return nil
}

// cancel measures, cancels times, the delay from RequestCancel returning
// on one handle (the replica that received tasks/cancel) to the worker on
// the other observing the intent at a checkpoint.
func (b *bench) cancel(ctx context.Context, name string, receiver, workerStore *tasks.Store) error {
	// Room for a few: a task's slot is freed just after it ends.
	runner, err := tasks.NewRunner(workerStore, &tasks.RunnerOptions{Workers: 1, Queued: 8})
	if err != nil {
		return err
	}
	var delays []time.Duration
	for range b.cancels {
		slot, err := runner.Reserve("bench")
		if err != nil {
			return err
		}
		t, err := workerStore.Create(ctx, tasks.NewTask{Tenant: "bench", Tool: "job", Request: request, Owner: runner.Owner()})
		if err != nil {
			return err
		}
		running, observed := make(chan struct{}), make(chan time.Time, 1)
		ended := runner.Changed()
		slot.Start(t, func(ctx context.Context, run *tasks.Run) tasks.Outcome {
			close(running)
			for {
				time.Sleep(b.checkpoint)
				if err := run.Checkpoint(ctx, "step"); err != nil {
					if errors.Is(err, tasks.ErrCancelled) {
						observed <- time.Now()
						return tasks.Outcome{Status: tasks.Cancelled}
					}
					return tasks.Outcome{Status: tasks.Failed, Error: json.RawMessage(`{"code":-32603,"message":"checkpoint failed"}`)}
				}
			}
		})
		<-running
		time.Sleep(time.Duration(rand.Int64N(int64(b.checkpoint)))) // cancel anywhere between two checkpoints
		if _, err := receiver.RequestCancel(ctx, "bench", t.ID); err != nil {
			return err
		}
		sent := time.Now()
		select {
		case at := <-observed:
			delays = append(delays, at.Sub(sent))
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s: a cancel was not observed in 10 s", name)
		}
		<-ended
	}
	slices.Sort(delays)
	pct := func(q float64) time.Duration { return delays[min(len(delays)-1, int(q*float64(len(delays))))] }
	fmt.Printf("%-36s p50 %8v  p99 %8v  max %8v  (checkpoint every %v; %d cancels)\n",
		strings.TrimSpace(name+", cancel → worker observes"), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond),
		pct(1).Round(time.Microsecond), b.checkpoint, len(delays))
	return nil
}
