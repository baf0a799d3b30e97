package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
)

// replicas opens two handles on one database, as two processes sharing a
// store, both reading one clock.
func replicas(t *testing.T, dsn string, opts *tasks.Options) (a, b *tasks.Store, clk *clock) {
	t.Helper()
	a, clk = open(t, dsn, opts)
	b, _ = open(t, dsn, opts)
	tasks.SetClock(b, clk.Now)
	return a, b, clk
}

// interleave runs first, and when first has read the task for its
// transition op and not yet written it, runs second. On PostgreSQL second
// runs to its end before first writes: what a second replica's
// transaction does at READ COMMITTED. SQLite's writers take turns, so
// there second waits for first to commit and the interleaving cannot
// happen; the outcome must be just as consistent.
func interleave(t *testing.T, s *tasks.Store, op string, first, second func()) {
	t.Helper()
	pg := s.DB().Dialect() == store.Postgres
	var once sync.Once
	done := make(chan struct{})
	tasks.SetBeforeWrite(s, func(o string) {
		if o != op {
			return
		}
		once.Do(func() {
			go func() {
				defer close(done)
				second()
			}()
			if pg {
				<-done
			}
		})
	})
	first()
	<-done
	tasks.SetBeforeWrite(s, nil)
}

var result = json.RawMessage(`{"content":[{"type":"text","text":"report ready"}]}`)

// A worker still alive after its lease expired finishes while a tasks/cancel
// finds no live lease and ends the task cancelled, in either order: one
// terminal state commits, the loser writes nothing, and what each caller
// is told is what the task became — tasks/cancel never says cancelled of
// a task that ends completed, and a stored result is never overwritten.
func TestFinishRacesCancel(t *testing.T) {
	for _, paused := range []string{"finish", "cancel"} {
		t.Run(paused+" paused", func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, dsn string) {
				ctx := context.Background()
				s, clk := open(t, dsn, &tasks.Options{Lease: 10 * time.Second})
				task := create(t, s, "acme", "w1")
				clk.Advance(10 * time.Second) // the worker stalled past its lease
				var finishErr, cancelErr error
				var told tasks.Task
				finish := func() {
					finishErr = s.Finish(ctx, task.ID, "w1", tasks.Completed, "", result, nil)
				}
				cancel := func() { told, cancelErr = s.RequestCancel(ctx, "acme", task.ID) }
				if paused == "finish" {
					interleave(t, s, "finish", finish, cancel)
				} else {
					interleave(t, s, "cancel", cancel, finish)
				}
				got, err := s.Get(ctx, "acme", task.ID)
				if err != nil {
					t.Fatal(err)
				}
				switch got.Status {
				case tasks.Completed:
					if finishErr != nil || string(got.Result) != string(result) {
						t.Fatalf("completed with result %s, but Finish said %v", got.Result, finishErr)
					}
					if !errors.Is(cancelErr, tasks.ErrTerminal) || told.Status != tasks.Completed {
						t.Fatalf("the task completed, but tasks/cancel was told %s (%v)", told.Status, cancelErr)
					}
				case tasks.Cancelled:
					if got.Result != nil {
						t.Fatalf("a cancelled task kept a result: %s", got.Result)
					}
					if cancelErr != nil || told.Status != tasks.Cancelled {
						t.Fatalf("the task was cancelled, but tasks/cancel was told %s (%v)", told.Status, cancelErr)
					}
					if !errors.Is(finishErr, tasks.ErrTerminal) {
						t.Fatalf("the task was cancelled, but Finish said %v", finishErr)
					}
				default:
					t.Fatalf("the task ended %s", got.Status)
				}
				// Which wins is the order of the commits: the paused one
				// commits last on PostgreSQL, first on SQLite.
				pausedFirst := s.DB().Dialect() == store.SQLite
				if wantCancelled := (paused == "cancel") == pausedFirst; wantCancelled != (got.Status == tasks.Cancelled) {
					t.Fatalf("with %s paused on %s the task ended %s", paused, s.DB().Dialect(), got.Status)
				}
			})
		})
	}
}

// A worker still alive after its lease expired finishes while another
// replica takes the task over, in either order: the worker whose lease was
// taken over loses (ErrLeaseLost, nothing written); one taken over after
// it finished is not taken over.
func TestFinishRacesTakeOver(t *testing.T) {
	for _, paused := range []string{"finish", "takeover"} {
		t.Run(paused+" paused", func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, dsn string) {
				ctx := context.Background()
				a, b, clk := replicas(t, dsn, &tasks.Options{Lease: 10 * time.Second})
				task := create(t, a, "acme", "w1")
				clk.Advance(10 * time.Second)
				var finishErr, takeErr error
				var taken []tasks.Task
				finish := func() {
					finishErr = a.Finish(ctx, task.ID, "w1", tasks.Completed, "", result, nil)
				}
				takeOver := func() { taken, takeErr = b.TakeOver(ctx, "w2", 10) }
				if paused == "finish" {
					interleave(t, a, "finish", finish, takeOver)
				} else {
					interleave(t, b, "takeover", takeOver, finish)
				}
				if takeErr != nil {
					t.Fatal(takeErr)
				}
				got, err := a.Get(ctx, "acme", task.ID)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case got.Status == tasks.Completed:
					if finishErr != nil || string(got.Result) != string(result) || len(taken) != 0 {
						t.Fatalf("completed (result %s): Finish said %v, and %d tasks were taken over", got.Result, finishErr, len(taken))
					}
				case got.Status == tasks.Working && got.Owner == "w2":
					if !errors.Is(finishErr, tasks.ErrLeaseLost) || got.Result != nil || got.Attempts != 2 || len(taken) != 1 {
						t.Fatalf("taken over (%+v): the old worker's Finish said %v, %d taken", got, finishErr, len(taken))
					}
				default:
					t.Fatalf("the task is %s, owned by %q", got.Status, got.Owner)
				}
				pausedFirst := a.DB().Dialect() == store.SQLite
				if wantTaken := (paused == "takeover") == pausedFirst; wantTaken != (got.Status == tasks.Working) {
					t.Fatalf("with %s paused on %s the task is %s", paused, a.DB().Dialect(), got.Status)
				}
			})
		})
	}
}

// The other transitions are conditional too: a stalled worker's
// checkpoint (here one that asks for input) after another replica took
// its task over writes nothing, and a client's answer racing the task's
// end never makes a finished task working again.
func TestStaleTransitionsLose(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		a, b, clk := replicas(t, dsn, &tasks.Options{Lease: 10 * time.Second})
		task := create(t, a, "acme", "w1")
		clk.Advance(10 * time.Second)
		var askErr error
		interleave(t, a, "checkpoint", func() {
			askErr = a.RequireInput(ctx, task.ID, "w1", json.RawMessage(`{"q":{}}`), "need q")
		}, func() {
			if _, err := b.TakeOver(ctx, "w2", 10); err != nil {
				t.Error(err)
			}
		})
		got, _ := a.Get(ctx, "acme", task.ID)
		if a.DB().Dialect() == store.Postgres {
			if !errors.Is(askErr, tasks.ErrLeaseLost) || got.Status != tasks.Working || got.Owner != "w2" || got.InputRequests != nil {
				t.Fatalf("the stale worker's RequireInput = %v; task %s owned by %q, requests %s", askErr, got.Status, got.Owner, got.InputRequests)
			}
		} else if askErr != nil || got.Status != tasks.InputRequired || got.Owner != "w1" { // renewed: not taken
			t.Fatalf("RequireInput then TakeOver: %v; task %s owned by %q", askErr, got.Status, got.Owner)
		}

		other := create(t, a, "acme", "w1")
		if err := a.RequireInput(ctx, other.ID, "w1", json.RawMessage(`{"q":{}}`), "need q"); err != nil {
			t.Fatal(err)
		}
		var answerErr, finishErr error
		interleave(t, a, "input", func() {
			answerErr = a.ProvideInput(ctx, "acme", other.ID, map[string]json.RawMessage{"q": json.RawMessage(`42`)})
		}, func() {
			finishErr = b.Finish(ctx, other.ID, "w1", tasks.Completed, "", result, nil)
		})
		got, _ = a.Get(ctx, "acme", other.ID)
		if got.Status != tasks.Completed || string(got.Result) != string(result) || finishErr != nil {
			t.Fatalf("an answer racing the task's end: the task is %s (Finish %v, ProvideInput %v)", got.Status, finishErr, answerErr)
		}
		if a.DB().Dialect() == store.Postgres && !errors.Is(answerErr, tasks.ErrTerminal) {
			t.Fatalf("an answer to a task that finished meanwhile = %v, want ErrTerminal", answerErr)
		}
	})
}

// A renewal (Run.Renew) reads the cancellation intent and
// leaves the task working for its worker to end; a stalled worker's
// renewal after another replica took its task over renews nothing.
func TestRenewReadsTheIntentAndLosesToATakeover(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		a, b, clk := replicas(t, dsn, &tasks.Options{Lease: 10 * time.Second})
		task := create(t, a, "acme", "w1")
		if asked, err := a.Renew(ctx, task.ID, "w1", tasks.CheckpointUpdate{}); err != nil || asked {
			t.Fatalf("Renew before tasks/cancel = %v, %v", asked, err)
		}
		if _, err := a.RequestCancel(ctx, "acme", task.ID); err != nil {
			t.Fatal(err)
		}
		clk.Advance(5 * time.Second)
		msg := "upstream task u-1: working"
		asked, err := a.Renew(ctx, task.ID, "w1", tasks.CheckpointUpdate{StatusMessage: &msg, Data: json.RawMessage(`{"upstream":"u-1"}`)})
		got, _ := a.Get(ctx, "acme", task.ID)
		if err != nil || !asked || got.Status != tasks.Working || !got.LeaseUntil.Equal(time.UnixMilli(clk.Now().Add(10*time.Second).UnixMilli())) {
			t.Fatalf("Renew after tasks/cancel = %v, %v; the task is %s, its lease until %v", asked, err, got.Status, got.LeaseUntil)
		}
		if got.StatusMessage != msg || string(got.Checkpoint) != `{"upstream":"u-1"}` || !got.UpdatedAt.Equal(time.UnixMilli(clk.Now().UnixMilli())) {
			t.Fatalf("Renew saved message %q, data %s, updated %v", got.StatusMessage, got.Checkpoint, got.UpdatedAt)
		}
		// The worker ends it itself: here as a checkpoint would.
		if err := a.Checkpoint(ctx, task.ID, "w1", tasks.CheckpointUpdate{}); !errors.Is(err, tasks.ErrCancelled) {
			t.Fatalf("Checkpoint after the intent = %v, want ErrCancelled", err)
		}
		if _, err := a.Renew(ctx, task.ID, "w1", tasks.CheckpointUpdate{}); !errors.Is(err, tasks.ErrTerminal) {
			t.Fatalf("Renew of an ended task = %v, want ErrTerminal", err)
		}

		stalled := create(t, a, "acme", "w1")
		clk.Advance(10 * time.Second) // w1's lease on it expired
		var renewErr error
		interleave(t, a, "renew", func() {
			_, renewErr = a.Renew(ctx, stalled.ID, "w1", tasks.CheckpointUpdate{})
		}, func() {
			if _, err := b.TakeOver(ctx, "w2", 10); err != nil {
				t.Error(err)
			}
		})
		got, _ = a.Get(ctx, "acme", stalled.ID)
		if a.DB().Dialect() == store.Postgres {
			if !errors.Is(renewErr, tasks.ErrLeaseLost) || got.Owner != "w2" || got.Attempts != 2 {
				t.Fatalf("the stalled worker's Renew = %v; the task is owned by %q (attempt %d)", renewErr, got.Owner, got.Attempts)
			}
		} else if renewErr != nil || got.Owner != "w1" { // renewed first: not taken
			t.Fatalf("Renew then TakeOver: %v; the task is owned by %q", renewErr, got.Owner)
		}
	})
}
