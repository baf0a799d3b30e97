package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/tasks"
)

// gated is a pool of works the test steps through: each reports its name
// on started when a worker enters it, and completes when the test closes
// its gate (or stops when its context ends).
type gated struct {
	started chan string
	gates   map[string]chan struct{}
	stopped chan error    // the cause of a context that ended a work
	done    chan struct{} // closed when the test ends: every work returns
}

func newGated(t *testing.T) *gated {
	g := &gated{started: make(chan string, 256), gates: map[string]chan struct{}{}, stopped: make(chan error, 256),
		done: make(chan struct{})}
	t.Cleanup(func() { close(g.done) })
	return g
}

// runner returns a runner on s that the test shuts down when it ends.
func runner(t *testing.T, s *tasks.Store, opts *tasks.RunnerOptions) *tasks.Runner {
	t.Helper()
	r, err := tasks.NewRunner(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return r
}

func (g *gated) work(name string) tasks.Work {
	gate := make(chan struct{})
	g.gates[name] = gate
	return func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		g.started <- name
		select {
		case <-gate:
			return tasks.Outcome{Status: tasks.Completed, Result: json.RawMessage(`{}`)}
		case <-g.done:
			return tasks.Outcome{}
		case <-ctx.Done():
			g.stopped <- context.Cause(ctx)
			return tasks.Outcome{}
		}
	}
}

func (g *gated) next(t *testing.T) string {
	t.Helper()
	select {
	case name := <-g.started:
		return name
	case <-time.After(10 * time.Second):
		t.Fatal("no work started")
	}
	return ""
}

// submit reserves room for the tenant's task, creates it and starts work
// on it.
func submit(t *testing.T, r *tasks.Runner, s *tasks.Store, tenant string, work tasks.Work) tasks.Task {
	t.Helper()
	slot, err := r.Reserve(tenant)
	if err != nil {
		t.Fatal(err)
	}
	task := create(t, s, tenant, r.Owner())
	slot.Start(task, work)
	return task
}

// Workers are shared fairly between tenants. Tenant A, alone, takes
// the six workers of eight it may (MaxRunningPerTenant's default keeps a
// quarter in reserve) and queues 30 more tasks; then tenant B submits 5.
// B's first two start at once on the reserve, without any of A's tasks
// ending; then each worker that frees up goes to B until both run as
// many, and from then on to the tenant running fewer.
func TestFairShareBetweenTenants(t *testing.T) {
	s, _ := open(t, storetest.SQLite(t), nil)
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 8})
	g := newGated(t)
	for i := range 36 { // A's whole per-tenant bound: (8+64)/2
		submit(t, r, s, "A", g.work(fmt.Sprintf("A%d", i)))
	}
	first := map[string]bool{}
	for range 6 {
		first[g.next(t)] = true
	}
	for i := range 6 {
		if !first[fmt.Sprintf("A%d", i)] {
			t.Fatalf("A's first 6 tasks did not all start: %v", first)
		}
	}
	for i := range 5 {
		submit(t, r, s, "B", g.work(fmt.Sprintf("B%d", i)))
	}
	// The reserve: B0 and B1 start while all of A's six still run.
	for i := range 2 {
		if name := g.next(t); name != fmt.Sprintf("B%d", i) {
			t.Fatalf("with A's six running, %s started; want B%d", name, i)
		}
	}
	// As A's tasks end one by one, B's start until B runs 4 and A 4.
	for i := range 2 {
		close(g.gates[fmt.Sprintf("A%d", i)])
		if name := g.next(t); name != fmt.Sprintf("B%d", i+2) {
			t.Fatalf("after %d of A's tasks ended, %s started; want B%d", i+1, name, i+2)
		}
	}
	// From equal shares on, a worker goes to the tenant whose task ended.
	for _, step := range [][2]string{{"A2", "A6"}, {"B0", "B4"}, {"A3", "A7"}} {
		close(g.gates[step[0]])
		if name := g.next(t); name != step[1] {
			t.Fatalf("after %s ended, %s started; want %s", step[0], name, step[1])
		}
	}
}

// One tenant's long tasks never hold every worker: with 8 workers and
// tenant A's many gated tasks running and queued, tenant B's one task,
// and then tenant C's, start at once — none of A's ending — and A never
// gets past its six.
func TestReserveStartsAnotherTenantAtOnce(t *testing.T) {
	s, _ := open(t, storetest.SQLite(t), nil)
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 8})
	g := newGated(t)
	for i := range 20 {
		submit(t, r, s, "A", g.work(fmt.Sprintf("A%d", i)))
	}
	for range 6 {
		if name := g.next(t); !strings.HasPrefix(name, "A") {
			t.Fatalf("%s started", name)
		}
	}
	submit(t, r, s, "B", g.work("B"))
	if name := g.next(t); name != "B" {
		t.Fatalf("%s started; want B's task, on a reserved worker", name)
	}
	// The eighth worker is still free (A runs its six): C's task takes it.
	submit(t, r, s, "C", g.work("C"))
	if name := g.next(t); name != "C" {
		t.Fatalf("%s started; want C's task", name)
	}
}

// MaxRunningPerTenant is validated, and Workers turns the reserve off.
func TestMaxRunningPerTenant(t *testing.T) {
	s, _ := open(t, storetest.SQLite(t), nil)
	for _, o := range []tasks.RunnerOptions{{MaxRunningPerTenant: -1}, {Workers: 4, MaxRunningPerTenant: 5}, {MaxRunningPerTenant: 9}} {
		if _, err := tasks.NewRunner(s, &o); err == nil {
			t.Errorf("NewRunner(%+v) accepted it", o)
		}
	}
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 3, MaxRunningPerTenant: 3})
	g := newGated(t)
	for i := range 3 {
		submit(t, r, s, "A", g.work(fmt.Sprintf("A%d", i)))
	}
	for range 3 {
		g.next(t)
	}
}

// A task cancelled while it waits for a worker ends cancelled when its
// turn comes, without its work ever being entered; a task ended while
// queued (expired, say) is not run either.
func TestCancelledWhileQueuedNeverRuns(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t, storetest.SQLite(t), nil)
	events := make(chan tasks.Event, 16)
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 1, OnEvent: func(e tasks.Event) { events <- e }})
	g := newGated(t)
	submit(t, r, s, "acme", g.work("first"))
	if g.next(t) != "first" {
		t.Fatal("the first task did not start")
	}
	var entered atomic.Int64
	queued := submit(t, r, s, "acme", func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		entered.Add(1)
		return tasks.Outcome{Status: tasks.Completed, Result: json.RawMessage(`{}`)}
	})
	if _, err := s.RequestCancel(ctx, "acme", queued.ID); err != nil {
		t.Fatal(err)
	}
	last := submit(t, r, s, "acme", g.work("last"))
	changed := r.Changed()
	close(g.gates["first"])
	if g.next(t) != "last" {
		t.Fatal("the task after the cancelled one did not start")
	}
	<-changed
	if n := entered.Load(); n != 0 {
		t.Fatalf("the work of a task cancelled while queued ran %d times", n)
	}
	got, err := s.Get(ctx, "acme", queued.ID)
	if err != nil || got.Status != tasks.Cancelled {
		t.Fatalf("the task cancelled while queued: %+v, %v; want cancelled", got, err)
	}
	sawCancelled := false
	for len(events) > 0 {
		if e := <-events; e.Kind == tasks.TaskEnded && e.Status == tasks.Cancelled {
			sawCancelled = true
		}
	}
	if !sawCancelled {
		t.Fatal("no TaskEnded cancelled event for the task cancelled while queued")
	}
	close(g.gates["last"])
	_ = last
}

// A task cancelled while it waits for a worker here leaves the queue and
// ends cancelled at once (CancelQueued), its work never entered and its
// room given back; a running task, or one whose cancellation was not
// requested, is left alone.
func TestCancelQueuedEndsItAtOnce(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t, storetest.SQLite(t), nil)
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 1, Queued: 2, PerTenant: 3})
	g := newGated(t)
	running := submit(t, r, s, "acme", g.work("running"))
	g.next(t)
	var entered atomic.Int64
	queued := submit(t, r, s, "acme", func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		entered.Add(1)
		return tasks.Outcome{Status: tasks.Completed, Result: json.RawMessage(`{}`)}
	})
	submit(t, r, s, "acme", g.work("after"))
	if _, err := r.Reserve("acme"); !errors.Is(err, tasks.ErrOverloaded) {
		t.Fatalf("a fourth task: %v, want ErrOverloaded", err)
	}
	if r.CancelQueued(ctx, queued.ID) {
		t.Fatal("CancelQueued ended a task whose cancellation was not requested")
	}
	if _, err := s.RequestCancel(ctx, "acme", running.ID); err != nil {
		t.Fatal(err)
	}
	if r.CancelQueued(ctx, running.ID) {
		t.Fatal("CancelQueued ended a running task")
	}
	if _, err := s.RequestCancel(ctx, "acme", queued.ID); err != nil {
		t.Fatal(err)
	}
	if !r.CancelQueued(ctx, queued.ID) {
		t.Fatal("CancelQueued left a queued, cancel-requested task")
	}
	if got, err := s.Get(ctx, "acme", queued.ID); err != nil || got.Status != tasks.Cancelled {
		t.Fatalf("the queued task after CancelQueued: %+v, %v; want cancelled at once", got, err)
	}
	slot, err := r.Reserve("acme") // its room is free
	if err != nil {
		t.Fatalf("room after CancelQueued: %v", err)
	}
	slot.Release()
	// The running task goes on to its checkpoint; the next in the queue is
	// the one after the cancelled task.
	close(g.gates["running"])
	if name := g.next(t); name != "after" {
		t.Fatalf("%s started, want after", name)
	}
	if n := entered.Load(); n != 0 {
		t.Fatalf("the cancelled task's work ran %d times", n)
	}
}

// A task still running past its TTL is ended failed by the maintainer,
// its worker's context is cancelled and its worker freed — whether this
// runner's maintainer ended it, or another replica's did. The work's late
// outcome changes nothing.
func TestExpiredTaskStopsItsWorker(t *testing.T) {
	for _, where := range []string{"here", "elsewhere"} {
		t.Run(where, func(t *testing.T) {
			ctx := context.Background()
			s, clk := open(t, storetest.SQLite(t), &tasks.Options{Lease: time.Hour, DefaultTTL: time.Minute})
			events := make(chan tasks.Event, 16)
			r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 1, Queued: 1, OnEvent: func(e tasks.Event) { events <- e }})
			g := newGated(t)
			task := submit(t, r, s, "acme", g.work("job"))
			g.next(t)
			if _, err := r.Reserve("other"); err != nil { // the queue's one place
				t.Fatal(err)
			}
			if _, err := r.Reserve("other"); !errors.Is(err, tasks.ErrOverloaded) {
				t.Fatalf("a third task while the first runs: %v, want ErrOverloaded", err)
			}
			clk.Advance(time.Minute)
			if where == "elsewhere" {
				if expired, err := s.Expire(ctx, 10); err != nil || len(expired) != 1 {
					t.Fatalf("another replica's Expire = %+v, %v", expired, err)
				}
			}
			r.MaintainOnce(ctx, func(tasks.Task) (tasks.Work, bool) { return nil, false })
			select {
			case cause := <-g.stopped:
				if cause == nil || errors.Is(cause, context.Canceled) || !strings.Contains(cause.Error(), "ended or taken over") {
					t.Fatalf("the worker stopped with %v", cause)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the worker of an expired task was not stopped")
			}
			got, err := s.Get(ctx, "acme", task.ID)
			if err != nil || got.Status != tasks.Failed || !strings.Contains(got.StatusMessage, "expired") || !strings.Contains(got.StatusMessage, "TTL") {
				t.Fatalf("the task past its TTL: %+v, %v", got, err)
			}
			// Its worker is free: room for a task again.
			deadline := time.After(10 * time.Second)
			for {
				slot, err := r.Reserve("acme")
				if err == nil {
					slot.Release()
					break
				}
				select {
				case <-r.Changed():
				case <-deadline:
					t.Fatal("the expired task's worker was not freed")
				}
			}
			kinds := map[tasks.EventKind]int{}
			for len(events) > 0 {
				kinds[(<-events).Kind]++
			}
			wantExpired := 1
			if where == "elsewhere" {
				wantExpired = 0 // the replica that ended it reports it
			}
			if kinds[tasks.TaskStarted] != 1 || kinds[tasks.TaskLeft] != 1 || kinds[tasks.TaskEnded] != 0 || kinds[tasks.TaskExpired] != wantExpired {
				t.Fatalf("events %v; want started, left and %d expired", kinds, wantExpired)
			}
		})
	}
}

// A task dispatched while the maintainer reads which tasks this runner
// holds (between Store.Held and its stopping the others' workers) is
// held, though missing from that read: its work is not stopped, and its
// outcome is recorded. It used to be stopped as "ended or taken over",
// its outcome dropped, and the task left working here until its TTL.
func TestStopUnheldSparesATaskStartedDuringItsRead(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, _ := open(t, dsn, &tasks.Options{Lease: time.Hour})
		r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 4})
		g := newGated(t)
		submit(t, r, s, "acme", g.work("first")) // one running, so that the maintainer reads Held
		g.next(t)
		started, gate, cause := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		var late tasks.Task
		var once sync.Once
		tasks.SetAfterHeld(r, func() {
			once.Do(func() {
				late = submit(t, r, s, "other", func(ctx context.Context, run *tasks.Run) tasks.Outcome {
					close(started)
					<-gate
					cause <- context.Cause(ctx)
					return tasks.Outcome{Status: tasks.Completed, Result: json.RawMessage(`{}`)}
				})
				<-started
			})
		})
		r.MaintainOnce(ctx, func(tasks.Task) (tasks.Work, bool) { return nil, false })
		changed := r.Changed()
		close(gate) // after MaintainOnce returned: any stop it made is visible now
		if err := <-cause; err != nil {
			t.Errorf("the work of a task this runner holds was stopped: %v", err)
		}
		<-changed
		got, err := s.Get(ctx, "other", late.ID)
		if err != nil || got.Status != tasks.Completed {
			t.Fatalf("the task started during the read: %v owned by %q (%v); want completed", got.Status, got.Owner, err)
		}
	})
}

// A work that ends "cancelled" because the runner stopped it — not
// because a client asked — records no cancellation: the task is released
// for another process to take over.
func TestStoppedWorkRecordsNoCancellation(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t, storetest.SQLite(t), &tasks.Options{Lease: time.Hour})
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 1})
	started := make(chan struct{})
	task := submit(t, r, s, "acme", func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		close(started)
		<-ctx.Done()
		return tasks.Outcome{Status: tasks.Cancelled, Message: "stopped"}
	})
	<-started
	changed := r.Changed()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Shutdown(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v", err)
	}
	<-changed
	if got, err := s.Get(ctx, "acme", task.ID); err != nil || got.Status != tasks.Working {
		t.Fatalf("the stopped task: %v (%v); want working, left to be taken over", got.Status, err)
	}
	taken, err := s.TakeOver(ctx, "w2", 10)
	if err != nil || len(taken) != 1 || taken[0].ID != task.ID {
		t.Fatalf("TakeOver = %+v, %v; want the released task at once", taken, err)
	}
}

// A task dispatched just before a shutdown, whose worker reaches the
// runner's own check before the work after the shutdown began, is left
// to another process at once: its work is never entered, and its lease
// is released.
func TestShutdownBeforeTheWorkStartsLeavesTheTask(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t, storetest.SQLite(t), &tasks.Options{Lease: time.Hour})
	events := make(chan tasks.Event, 16)
	r := runner(t, s, &tasks.RunnerOptions{Owner: "w1", Workers: 1, OnEvent: func(e tasks.Event) { events <- e }})
	shutdown := make(chan error, 1)
	var once sync.Once
	tasks.SetBeforeWrite(s, func(op string) {
		if op != "checkpoint" {
			return
		}
		once.Do(func() {
			go func() { shutdown <- r.Shutdown(ctx) }()
			for { // until the shutdown has begun: Reserve refuses then
				slot, err := r.Reserve("probe")
				if errors.Is(err, tasks.ErrShutdown) {
					return
				}
				if err == nil {
					slot.Release()
				}
				runtime.Gosched()
			}
		})
	})
	var entered atomic.Int64
	task := submit(t, r, s, "acme", func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		entered.Add(1)
		return tasks.Outcome{Status: tasks.Completed, Result: json.RawMessage(`{}`)}
	})
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	tasks.SetBeforeWrite(s, nil)
	if n := entered.Load(); n != 0 {
		t.Fatalf("the work was entered %d times after the shutdown began", n)
	}
	taken, err := s.TakeOver(ctx, "w2", 10)
	if err != nil || len(taken) != 1 || taken[0].ID != task.ID {
		t.Fatalf("TakeOver = %+v, %v; want the task, released at once", taken, err)
	}
	kinds := map[tasks.EventKind]int{}
	for len(events) > 0 {
		kinds[(<-events).Kind]++
	}
	if kinds[tasks.TaskStarted] != 1 || kinds[tasks.TaskLeft] != 1 || kinds[tasks.TaskEnded] != 0 {
		t.Fatalf("events %v; want started and left", kinds)
	}
}
