package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
)

func tryCreate(s *tasks.Store, tenant string) (tasks.Task, error) {
	return s.Create(context.Background(), tasks.NewTask{Tenant: tenant, Tool: "job", Request: json.RawMessage(`{}`), Owner: "w1"})
}

// stored counts a tenant's tasks as the table holds them, and checks the
// counts the bounds are enforced with against the table.
func stored(t *testing.T, s *tasks.Store, tenant string) int {
	t.Helper()
	ctx := context.Background()
	var n, counted, all, total int
	err := s.DB().ReadTx(ctx, func(tx *store.Tx) error {
		return errors.Join(
			tx.QueryRow(ctx, `SELECT count(*) FROM mcprel_tasks WHERE tenant = ?`, tenant).Scan(&n),
			tx.QueryRow(ctx, `SELECT COALESCE(SUM(n), 0) FROM mcprel_task_counts WHERE tenant = ?`, tenant).Scan(&counted),
			tx.QueryRow(ctx, `SELECT count(*) FROM mcprel_tasks`).Scan(&all),
			tx.QueryRow(ctx, `SELECT COALESCE(SUM(n), 0) FROM mcprel_task_total`).Scan(&total))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != counted || all != total {
		t.Fatalf("tenant %q: %d stored, %d counted; %d stored in all, %d counted", tenant, n, counted, all, total)
	}
	return n
}

// The store keeps at most MaxTasksPerTenant tasks of a tenant and
// MaxTasks in all, finished ones included; past either, creation is
// refused with a FullError that names the bound, nothing is recorded, and
// room comes back when tasks are reaped.
func TestStoreBounds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, clk := open(t, dsn, &tasks.Options{MaxTasksPerTenant: 2, MaxTasks: 3, DefaultTTL: time.Minute})
		a1 := create(t, s, "acme", "w1")
		a2 := create(t, s, "acme", "w1")
		if err := s.Finish(ctx, a1.ID, "w1", tasks.Completed, "", json.RawMessage(`{}`), nil); err != nil {
			t.Fatal(err)
		}
		var full *tasks.FullError
		if _, err := tryCreate(s, "acme"); !errors.As(err, &full) || full.All || full.Tenant != "acme" || full.Limit != 2 {
			t.Fatalf("a third task of one tenant, bound 2 = %v", err)
		}
		g := create(t, s, "globex", "w1")
		if _, err := tryCreate(s, "initech"); !errors.As(err, &full) || !full.All || full.Limit != 3 {
			t.Fatalf("a fourth task in all, bound 3 = %v", err)
		}
		if got := stored(t, s, "acme") + stored(t, s, "globex") + stored(t, s, "initech"); got != 3 {
			t.Fatalf("%d tasks stored, want 3: a refused creation records nothing", got)
		}
		for _, task := range []tasks.Task{a2, g} {
			if err := s.Finish(ctx, task.ID, "w1", tasks.Completed, "", json.RawMessage(`{}`), nil); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
		if n, err := s.Reap(ctx, 100); err != nil || n != 3 {
			t.Fatalf("Reap = %d, %v; want the 3 finished tasks", n, err)
		}
		if stored(t, s, "acme")+stored(t, s, "globex") != 0 {
			t.Fatal("tasks left after the reaper")
		}
		create(t, s, "acme", "w1")
		create(t, s, "acme", "w1")
		create(t, s, "globex", "w1")
		if _, err := tasks.Open(ctx, s.DB(), &tasks.Options{MaxTasks: -1}); err == nil {
			t.Fatal("a negative bound was accepted")
		}
	})
}

// Two creations racing for the last place under a bound — one tenant's,
// or all tenants' — cannot both succeed: the second waits for the first
// to commit its count and is then refused. The first is held between its
// count and its commit while the second, another replica's, starts.
func TestCreationsRaceForTheLastPlace(t *testing.T) {
	for _, bound := range []string{"tenant", "all"} {
		t.Run(bound, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, dsn string) {
				opts := &tasks.Options{MaxTasksPerTenant: 2, MaxTasks: 100}
				second := "acme"
				if bound == "all" {
					opts, second = &tasks.Options{MaxTasksPerTenant: 100, MaxTasks: 2}, "globex"
				}
				app := fmt.Sprintf("tasks-race-%d", time.Now().UnixNano())
				a, clk := open(t, dsn, opts)
				b, _ := open(t, storetest.Tagged(dsn, app), opts)
				tasks.SetClock(b, clk.Now)
				create(t, a, "acme", "w1") // one place left
				var firstErr, secondErr error
				done := make(chan struct{})
				tasks.SetBeforeWrite(a, func(op string) {
					if op != "create" {
						return
					}
					go func() {
						defer close(done)
						_, secondErr = tryCreate(b, second)
					}()
					if a.DB().Dialect() == store.Postgres {
						awaitLockWait(t, a.DB(), app) // the second waits on the first's count
					}
				})
				_, firstErr = tryCreate(a, "acme")
				tasks.SetBeforeWrite(a, nil)
				<-done
				var full *tasks.FullError
				if firstErr != nil || !errors.As(secondErr, &full) {
					t.Fatalf("two creations for the last place: %v and %v; want the first to succeed, the second refused", firstErr, secondErr)
				}
				if n := stored(t, a, "acme") + stored(t, a, "globex"); n != 2 {
					t.Fatalf("%d tasks stored under a bound of 2", n)
				}
			})
		})
	}
}

// awaitLockWait waits until a PostgreSQL backend named application (see
// storetest.Tagged) waits for a lock.
func awaitLockWait(t *testing.T, db *store.DB, application string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		err := db.ReadTx(ctx, func(tx *store.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ? AND wait_event_type = 'Lock'`, application).Scan(&n)
		})
		if err != nil {
			t.Error(err)
			return
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Error("the second creation never waited for the first")
			return
		case <-tick.C:
		}
	}
}

// TRUNCATE fires no DELETE trigger: emptying mcprel_tasks alone on
// PostgreSQL leaves the counts of the tasks that are gone, and the store
// refuses creation as full; the statement Options documents clears them
// together.
func TestTruncateClearsTheCountsOnlyWithThem(t *testing.T) {
	// SQLite has no TRUNCATE; its DELETE fires the trigger.
	dsn := storetest.Postgres(t)
	ctx := context.Background()
	s, _ := open(t, dsn, &tasks.Options{MaxTasksPerTenant: 2, MaxTasks: 2})
	for range 2 {
		if _, err := tryCreate(s, "acme"); err != nil {
			t.Fatal(err)
		}
	}
	truncate := func(sql string) {
		t.Helper()
		if err := s.DB().WriteTx(ctx, func(tx *store.Tx) error { _, err := tx.Exec(ctx, sql); return err }); err != nil {
			t.Fatal(err)
		}
	}
	truncate(`TRUNCATE mcprel_tasks`)
	var full *tasks.FullError
	if _, err := tryCreate(s, "acme"); !errors.As(err, &full) {
		t.Fatalf("after TRUNCATE mcprel_tasks alone: %v; want the store still counted full", err)
	}
	truncate(`TRUNCATE mcprel_tasks, mcprel_task_counts, mcprel_task_total`)
	for range 2 {
		if _, err := tryCreate(s, "acme"); err != nil {
			t.Fatalf("after the documented TRUNCATE: %v", err)
		}
	}
	if n := stored(t, s, "acme"); n != 2 {
		t.Fatalf("%d stored, want 2", n)
	}
}
