package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
)

// clock is a time tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.UnixMilli(1_800_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func open(t testing.TB, dsn string, opts *tasks.Options) (*tasks.Store, *clock) {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := tasks.Open(context.Background(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	tasks.SetClock(s, clk.Now)
	return s, clk
}

func create(t testing.TB, s *tasks.Store, tenant, owner string) tasks.Task {
	t.Helper()
	task, err := s.Create(context.Background(), tasks.NewTask{Tenant: tenant, Tool: "job", Request: json.RawMessage(`{"name":"job"}`), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// A created task is durable and readable at once; ids are unguessable
// and another tenant's id reads as unknown.
func TestCreateGetAndTenantIsolation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, _ := open(t, dsn, nil)
		a := create(t, s, "acme", "w1")
		b := create(t, s, "acme", "w1")
		if a.ID == b.ID || len(a.ID) < 26 {
			t.Fatalf("ids %q and %q: want distinct 128-bit ids", a.ID, b.ID)
		}
		got, err := s.Get(ctx, "acme", a.ID)
		if err != nil || got.Status != tasks.Working || got.Owner != "w1" || got.Attempts != 1 || got.TTL != tasks.DefaultTTL {
			t.Fatalf("Get = %+v, %v", got, err)
		}
		for _, probe := range []func() error{
			func() error { _, err := s.Get(ctx, "globex", a.ID); return err },
			func() error { _, err := s.RequestCancel(ctx, "globex", a.ID); return err },
			func() error { return s.ProvideInput(ctx, "globex", a.ID, nil) },
			func() error { _, err := s.Get(ctx, "acme", "no-such-id"); return err },
		} {
			if err := probe(); !errors.Is(err, tasks.ErrNotFound) {
				t.Fatalf("another tenant's or an unknown id: %v, want ErrNotFound", err)
			}
		}
		if got, _ := s.Get(ctx, "acme", a.ID); got.CancelRequested {
			t.Fatal("another tenant's cancel reached the task")
		}
	})
}

// The seeds' trace: cancel is an intent; the task stays working until a
// checkpoint observes it, and then it is cancelled for good.
func TestCancelIsObservedAtACheckpoint(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, _ := open(t, dsn, nil)
		task := create(t, s, "acme", "w1")
		msg := "step 1"
		if err := s.Checkpoint(ctx, task.ID, "w1", tasks.CheckpointUpdate{StatusMessage: &msg}); err != nil {
			t.Fatal(err)
		}
		after, err := s.RequestCancel(ctx, "acme", task.ID)
		if err != nil || after.Status != tasks.Working || !after.CancelRequested {
			t.Fatalf("RequestCancel = %+v, %v; want still working with the intent recorded", after, err)
		}
		if _, err := s.RequestCancel(ctx, "acme", task.ID); err != nil {
			t.Fatalf("a repeated cancel: %v", err)
		}
		if got, _ := s.Get(ctx, "acme", task.ID); got.Status != tasks.Working || got.StatusMessage != "step 1" {
			t.Fatalf("before the checkpoint: %+v", got)
		}
		if err := s.Checkpoint(ctx, task.ID, "w1", tasks.CheckpointUpdate{}); !errors.Is(err, tasks.ErrCancelled) {
			t.Fatalf("Checkpoint after the intent = %v, want ErrCancelled", err)
		}
		got, _ := s.Get(ctx, "acme", task.ID)
		if got.Status != tasks.Cancelled || got.Owner != "" {
			t.Fatalf("after the checkpoint: %+v", got)
		}
		// Finished: the worker's late outcome changes nothing.
		if err := s.Finish(ctx, task.ID, "w1", tasks.Completed, "", json.RawMessage(`{}`), nil); !errors.Is(err, tasks.ErrTerminal) {
			t.Fatalf("Finish after cancelled = %v, want ErrTerminal", err)
		}
		if _, err := s.RequestCancel(ctx, "acme", task.ID); !errors.Is(err, tasks.ErrTerminal) {
			t.Fatalf("cancel of a finished task = %v, want ErrTerminal", err)
		}
	})
}

// The other order: the work finishes before any checkpoint observes the
// intent, and its result stands.
func TestWorkFinishingFirstCompletesDespiteTheIntent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, _ := open(t, dsn, nil)
		task := create(t, s, "acme", "w1")
		if _, err := s.RequestCancel(ctx, "acme", task.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, task.ID, "w1", tasks.Completed, "", json.RawMessage(`{"content":[]}`), nil); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(ctx, "acme", task.ID)
		if got.Status != tasks.Completed || string(got.Result) != `{"content":[]}` || !got.CancelRequested {
			t.Fatalf("got %+v", got)
		}
	})
}

// Only the owner moves a task; terminal states never change; the
// transitions are the protocol's.
func TestTransitions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, _ := open(t, dsn, nil)
		task := create(t, s, "acme", "w1")
		if err := s.Checkpoint(ctx, task.ID, "w2", tasks.CheckpointUpdate{}); !errors.Is(err, tasks.ErrLeaseLost) {
			t.Fatalf("a checkpoint by another worker = %v, want ErrLeaseLost", err)
		}
		if err := s.Finish(ctx, task.ID, "w1", tasks.Working, "", nil, nil); err == nil {
			t.Fatal("Finish accepted a non-terminal status")
		}
		if err := s.RequireInput(ctx, task.ID, "w1", json.RawMessage(`{"a":{"method":"elicitation/create"},"b":{}}`), "need a and b"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, "acme", task.ID); got.Status != tasks.InputRequired || got.InputRequests == nil {
			t.Fatalf("after RequireInput: %+v", got)
		}
		// Partial answers keep it waiting; unknown keys are ignored.
		if err := s.ProvideInput(ctx, "acme", task.ID, map[string]json.RawMessage{"a": json.RawMessage(`1`), "zzz": json.RawMessage(`2`)}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, "acme", task.ID); got.Status != tasks.InputRequired || string(got.InputResponses) != `{"a":1}` {
			t.Fatalf("after a partial answer: %+v (%s)", got, got.InputResponses)
		}
		if err := s.ProvideInput(ctx, "acme", task.ID, map[string]json.RawMessage{"a": json.RawMessage(`9`), "b": json.RawMessage(`3`)}); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(ctx, "acme", task.ID)
		if got.Status != tasks.Working || string(got.InputResponses) != `{"a":1,"b":3}` {
			t.Fatalf("after every answer: %+v (%s)", got, got.InputResponses)
		}
		errObj := json.RawMessage(`{"code":-32603,"message":"boom"}`)
		if err := s.Finish(ctx, task.ID, "w1", tasks.Failed, "boom", nil, errObj); err != nil {
			t.Fatal(err)
		}
		for _, st := range []tasks.Status{tasks.Completed, tasks.Cancelled, tasks.Failed} {
			if err := s.Finish(ctx, task.ID, "w1", st, "", nil, nil); !errors.Is(err, tasks.ErrTerminal) {
				t.Fatalf("Finish(%s) on a failed task = %v", st, err)
			}
		}
		if err := s.ProvideInput(ctx, "acme", task.ID, nil); !errors.Is(err, tasks.ErrTerminal) {
			t.Fatalf("ProvideInput on a failed task = %v", err)
		}
		if got, _ := s.Get(ctx, "acme", task.ID); got.Status != tasks.Failed || string(got.Error) != string(errObj) {
			t.Fatalf("final: %+v", got)
		}
	})
}

// A dead worker's tasks are taken over once its lease expires (and not
// before), each by exactly one process; a task whose cancel was
// requested meanwhile is cancelled instead.
func TestTakeOverAfterTheLease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{Lease: 10 * time.Second})
		alive := create(t, s, "acme", "dead")
		cancelled := create(t, s, "acme", "dead")
		if _, err := s.RequestCancel(ctx, "acme", cancelled.ID); err != nil {
			t.Fatal(err)
		}
		if got, err := s.TakeOver(ctx, "w2", 10); err != nil || len(got) != 0 {
			t.Fatalf("TakeOver before the lease expired = %v, %v", got, err)
		}
		clk.Advance(10 * time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var taken []tasks.Task
		for i := range 4 {
			wg.Go(func() {
				got, err := s.TakeOver(ctx, fmt.Sprintf("w%d", i+2), 10)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				taken = append(taken, got...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(taken) != 1 || taken[0].ID != alive.ID || taken[0].Attempts != 2 {
			t.Fatalf("taken over: %+v; want the live task once, attempt 2", taken)
		}
		if got, _ := s.Get(ctx, "acme", cancelled.ID); got.Status != tasks.Cancelled {
			t.Fatalf("the cancel-requested task of a dead worker: %+v", got)
		}
		// The old owner has lost it.
		if err := s.Checkpoint(ctx, alive.ID, "dead", tasks.CheckpointUpdate{}); !errors.Is(err, tasks.ErrLeaseLost) {
			t.Fatalf("the old owner's checkpoint = %v", err)
		}
		// The heartbeat keeps the new owner's lease alive.
		clk.Advance(8 * time.Second)
		if n, err := s.Heartbeat(ctx, taken[0].Owner); err != nil || n != 1 {
			t.Fatalf("Heartbeat = %d, %v", n, err)
		}
		clk.Advance(8 * time.Second)
		if got, _ := s.TakeOver(ctx, "w9", 10); len(got) != 0 {
			t.Fatalf("a renewed lease was taken over: %+v", got)
		}
	})
}

// A cancel recorded while no worker holds the task (its lease expired)
// ends it at once: no checkpoint will come.
func TestCancelWithoutAWorker(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{Lease: time.Second})
		task := create(t, s, "acme", "gone")
		clk.Advance(time.Second)
		got, err := s.RequestCancel(ctx, "acme", task.ID)
		if err != nil || got.Status != tasks.Cancelled {
			t.Fatalf("RequestCancel = %+v, %v", got, err)
		}
	})
}

// A task's TTL counts from its creation, within the store's bounds: a
// TTL below the minimum (ttl=1 ms) gets the minimum, so that the task is
// readable right after its create answer, and one over the maximum gets
// the maximum; what the task reports is what it got.
func TestTTLBounds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{DefaultTTL: 10 * time.Minute, MaxTTL: time.Hour})
		tiny, err := s.Create(ctx, tasks.NewTask{Tenant: "acme", Tool: "job", Request: json.RawMessage(`{}`), Owner: "w1", TTL: time.Millisecond})
		if err != nil || tiny.TTL != tasks.DefaultMinTTL {
			t.Fatalf("ttl=1ms: %+v, %v; want the minimum TTL %v", tiny, err, tasks.DefaultMinTTL)
		}
		clk.Advance(time.Second)
		if got, err := s.Get(ctx, "acme", tiny.ID); err != nil || got.TTL != tasks.DefaultMinTTL {
			t.Fatalf("tasks/get right after a ttl=1ms create: %+v, %v", got, err)
		}
		long, err := s.Create(ctx, tasks.NewTask{Tenant: "acme", Tool: "job", Request: json.RawMessage(`{}`), Owner: "w1", TTL: 48 * time.Hour})
		if err != nil || long.TTL != time.Hour {
			t.Fatalf("a TTL over the maximum: %+v, %v; want it capped at 1h", long, err)
		}
		if def := create(t, s, "acme", "w1"); def.TTL != 10*time.Minute {
			t.Fatalf("no TTL asked: %v, want the default", def.TTL)
		}
		db, err := store.Open(ctx, storetest.SQLite(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, bad := range []tasks.Options{{MinTTL: 2 * time.Hour, MaxTTL: time.Hour}, {DefaultTTL: time.Second, MinTTL: time.Minute},
			{Retain: -1}, {MinTTL: -1}} {
			if _, err := tasks.Open(ctx, db, &bad); err == nil {
				t.Errorf("Open accepted %+v", bad)
			}
		}
	})
}

// A finished task is kept at least Retain after it finished, even past
// its TTL, and reports the TTL it now has; after that it reads as unknown
// and is reaped.
func TestFinishedTaskIsRetained(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{Lease: time.Hour, DefaultTTL: time.Minute, Retain: 30 * time.Second})
		task := create(t, s, "acme", "w1")
		early := create(t, s, "acme", "w1")
		if err := s.Finish(ctx, early.ID, "w1", tasks.Completed, "", json.RawMessage(`{}`), nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(59 * time.Second)
		if err := s.Finish(ctx, task.ID, "w1", tasks.Completed, "", json.RawMessage(`{"content":[]}`), nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second) // past created+TTL
		got, err := s.Get(ctx, "acme", task.ID)
		if err != nil || got.Status != tasks.Completed || got.TTL != 89*time.Second {
			t.Fatalf("a task finished 1s before its TTL, read 1s after it: %+v, %v; want it kept, ttl 89s", got, err)
		}
		// The one that finished early keeps its TTL from creation.
		if _, err := s.Get(ctx, "acme", early.ID); !errors.Is(err, tasks.ErrNotFound) {
			t.Fatalf("a task finished long before its TTL, read past it: %v, want ErrNotFound", err)
		}
		if n, err := s.Reap(ctx, 100); err != nil || n != 1 {
			t.Fatalf("Reap = %d, %v; want only the early one", n, err)
		}
		clk.Advance(28 * time.Second)
		if _, err := s.Get(ctx, "acme", task.ID); !errors.Is(err, tasks.ErrNotFound) {
			t.Fatalf("past its retention: %v, want ErrNotFound", err)
		}
		if n, err := s.Reap(ctx, 100); err != nil || n != 1 {
			t.Fatalf("Reap = %d, %v; want the retained one now", n, err)
		}
	})
}

// A task that has not finished is never hidden nor deleted, however long
// past its TTL, whether its worker lives or its lease lapsed: it stays
// readable, listable and cancellable until Expire ends it failed, with a
// message that says why; its worker then loses (its checkpoint and its
// outcome change nothing), it is not taken over, and it is kept for
// Retain before it is reaped. A cancel-requested one ends cancelled.
func TestExpiryEndsRunningTasks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{Lease: time.Minute, DefaultTTL: 10 * time.Minute, Retain: time.Minute})
		running := create(t, s, "acme", "w1")
		abandoned := create(t, s, "acme", "dead")
		cancelled := create(t, s, "acme", "w1")
		fresh, err := s.Create(ctx, tasks.NewTask{Tenant: "acme", Tool: "job", Request: json.RawMessage(`{}`), Owner: "w1", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RequestCancel(ctx, "acme", cancelled.ID); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10*time.Minute + time.Second)
		if _, err := s.Heartbeat(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{running.ID, abandoned.ID} {
			if got, err := s.Get(ctx, "acme", id); err != nil || got.Status != tasks.Working {
				t.Fatalf("an unfinished task past its TTL: %+v, %v; want it visible, working", got, err)
			}
		}
		if list, _, err := s.List(ctx, "acme", "", 10); err != nil || len(list) != 4 {
			t.Fatalf("List past the TTL: %d tasks, %v; want all 4", len(list), err)
		}
		if n, err := s.Reap(ctx, 100); err != nil || n != 0 {
			t.Fatalf("Reap = %d, %v; want no unfinished task deleted", n, err)
		}
		expired, err := s.Expire(ctx, 100)
		if err != nil || len(expired) != 3 {
			t.Fatalf("Expire = %+v, %v; want the 3 tasks past their TTL", expired, err)
		}
		owners := map[string]string{}
		for _, e := range expired {
			owners[e.ID] = e.Owner
		}
		if owners[running.ID] != "w1" || owners[abandoned.ID] != "dead" {
			t.Fatalf("Expire reported owners %v; the runner needs them to stop its workers", owners)
		}
		got, _ := s.Get(ctx, "acme", running.ID)
		if got.Status != tasks.Failed || !strings.Contains(got.StatusMessage, "TTL") || !strings.Contains(string(got.Error), "expired") ||
			got.Owner != "" || got.TTL != 11*time.Minute+time.Second {
			t.Fatalf("the running task after Expire: %+v (%s)", got, got.Error)
		}
		if got, _ := s.Get(ctx, "acme", cancelled.ID); got.Status != tasks.Cancelled {
			t.Fatalf("the cancel-requested task after Expire: %+v", got)
		}
		if got, _ := s.Get(ctx, "acme", fresh.ID); got.Status != tasks.Working {
			t.Fatalf("a task within its TTL after Expire: %+v", got)
		}
		// Its worker loses.
		if err := s.Checkpoint(ctx, running.ID, "w1", tasks.CheckpointUpdate{}); !errors.Is(err, tasks.ErrTerminal) {
			t.Fatalf("the worker's checkpoint after Expire = %v, want ErrTerminal", err)
		}
		if err := s.Finish(ctx, running.ID, "w1", tasks.Completed, "", json.RawMessage(`{}`), nil); !errors.Is(err, tasks.ErrTerminal) {
			t.Fatalf("the worker's Finish after Expire = %v, want ErrTerminal", err)
		}
		if held, err := s.Held(ctx, "w1"); err != nil || len(held) != 1 || !held[fresh.ID] {
			t.Fatalf("Held(w1) = %v, %v; want only the fresh task", held, err)
		}
		// The abandoned one is not taken over, and Expire has nothing more.
		clk.Advance(time.Minute)
		if _, err := s.Heartbeat(ctx, "w1"); err != nil { // the fresh task's worker lives
			t.Fatal(err)
		}
		if taken, err := s.TakeOver(ctx, "w2", 10); err != nil || len(taken) != 0 {
			t.Fatalf("TakeOver after Expire = %+v, %v", taken, err)
		}
		if again, err := s.Expire(ctx, 100); err != nil || len(again) != 0 {
			t.Fatalf("a second Expire = %+v, %v", again, err)
		}
		clk.Advance(time.Second) // past Retain
		if n, err := s.Reap(ctx, 100); err != nil || n != 3 {
			t.Fatalf("Reap after Retain = %d, %v; want the 3 ended tasks", n, err)
		}
	})
}

// tasks/list pages through the tenant's tasks only, with cursors the
// store issued.
func TestListPages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, nil)
		want := map[string]bool{}
		for range 5 {
			want[create(t, s, "acme", "w1").ID] = true
			create(t, s, "globex", "w1")
			clk.Advance(time.Millisecond)
		}
		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			page, next, err := s.List(ctx, "acme", cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range page {
				if !want[task.ID] || seen[task.ID] {
					t.Fatalf("page %d lists %s (another tenant's, or twice)", pages, task.ID)
				}
				seen[task.ID] = true
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if len(seen) != 5 {
			t.Fatalf("listed %d of 5", len(seen))
		}
		if _, _, err := s.List(ctx, "acme", "garbage", 2); !errors.Is(err, tasks.ErrBadCursor) {
			t.Fatalf("a bad cursor: %v", err)
		}
	})
}

func TestStatusStrings(t *testing.T) {
	for st, want := range map[tasks.Status]string{0: "unknown", tasks.Working: "working", tasks.InputRequired: "input_required",
		tasks.Completed: "completed", tasks.Failed: "failed", tasks.Cancelled: "cancelled", 9: "unknown"} {
		if st.String() != want {
			t.Errorf("Status(%d) = %q, want %q", st, st.String(), want)
		}
	}
	if tasks.Status(0).Terminal() || tasks.Working.Terminal() || !tasks.Cancelled.Terminal() {
		t.Error("Terminal is wrong")
	}
}

// A runner's worker that observes the cancel intent at a checkpoint
// reports the task ended cancelled with the time from the intent to that
// checkpoint; a task that completes reports no cancel delay.
func TestRunnerReportsTheCancelDelay(t *testing.T) {
	ctx := context.Background()
	s, clk := open(t, storetest.SQLite(t), nil)
	events := make(chan tasks.Event, 16)
	r, err := tasks.NewRunner(s, &tasks.RunnerOptions{Owner: "w1", OnEvent: func(e tasks.Event) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(ctx)
	start := func(work tasks.Work) tasks.Task {
		t.Helper()
		slot, err := r.Reserve("acme")
		if err != nil {
			t.Fatal(err)
		}
		task := create(t, s, "acme", "w1")
		slot.Start(task, work)
		return task
	}
	ended := func() tasks.Event {
		t.Helper()
		for {
			select {
			case e := <-events:
				if e.Kind == tasks.TaskEnded {
					return e
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no TaskEnded event")
			}
		}
	}

	entered, step := make(chan struct{}), make(chan struct{})
	task := start(func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		close(entered)
		<-step
		if err := run.Checkpoint(ctx, "halfway"); !errors.Is(err, tasks.ErrCancelled) {
			t.Errorf("the checkpoint after the intent = %v, want ErrCancelled", err)
		}
		return tasks.Outcome{Status: tasks.Failed, Error: json.RawMessage(`{"code":-32603,"message":"stopped"}`)}
	})
	<-entered // running: a cancel before the work starts never lets it start
	if _, err := s.RequestCancel(ctx, "acme", task.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1500 * time.Millisecond)
	close(step)
	if e := ended(); e.Status != tasks.Cancelled || !e.CancelObserved || e.CancelDelay != 1500*time.Millisecond {
		t.Fatalf("TaskEnded = %+v, want cancelled, observed 1.5s after the intent", e)
	}

	start(func(ctx context.Context, run *tasks.Run) tasks.Outcome {
		run.Checkpoint(ctx, "")
		return tasks.Outcome{Status: tasks.Completed, Result: json.RawMessage(`{}`)}
	})
	if e := ended(); e.Status != tasks.Completed || e.CancelObserved || e.CancelDelay != 0 {
		t.Fatalf("TaskEnded = %+v, want completed with no cancel delay", e)
	}
}

// A task whose work reads its cancellation itself (ReadsCancel) is never
// ended cancelled without a worker: a cancel while no worker holds it is
// recorded and left, the task is taken over with the intent set for its
// work to read, and one whose TTL passes ends failed, not cancelled.
func TestReadsCancelIsNeverCancelledWithoutAWorker(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{Lease: time.Second})
		newTask := func(readsCancel bool) tasks.Task {
			task, err := s.Create(ctx, tasks.NewTask{Tenant: "acme", Tool: "forward", Request: json.RawMessage(`{}`), Owner: "gone", ReadsCancel: readsCancel})
			if err != nil {
				t.Fatal(err)
			}
			return task
		}
		reads, plain := newTask(true), newTask(false)
		clk.Advance(time.Second) // their worker is gone
		for _, task := range []tasks.Task{reads, plain} {
			if _, err := s.RequestCancel(ctx, "acme", task.ID); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := s.Get(ctx, "acme", plain.ID); got.Status != tasks.Cancelled {
			t.Fatalf("a task cancelled without a worker is %s, want cancelled at once", got.Status)
		}
		got, _ := s.Get(ctx, "acme", reads.ID)
		if got.Status != tasks.Working || !got.CancelRequested || !got.ReadsCancel {
			t.Fatalf("a ReadsCancel task cancelled without a worker: %+v", got)
		}
		taken, err := s.TakeOver(ctx, "w2", 10)
		if err != nil || len(taken) != 1 || taken[0].ID != reads.ID || !taken[0].CancelRequested || taken[0].Attempts != 2 {
			t.Fatalf("TakeOver = %+v, %v; want the ReadsCancel task, its intent set, attempt 2", taken, err)
		}
		// Its new worker renews it and reads the intent; the TTL then
		// passes before it ends it: failed, never cancelled unseen.
		if asked, err := s.Renew(ctx, reads.ID, "w2", tasks.CheckpointUpdate{}); err != nil || !asked {
			t.Fatalf("the new worker's Renew = %v, %v", asked, err)
		}
		clk.Advance(2 * time.Hour)
		if _, err := s.Expire(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, "acme", reads.ID); got.Status != tasks.Failed {
			t.Fatalf("a ReadsCancel task past its TTL is %s, want failed", got.Status)
		}
	})
}
