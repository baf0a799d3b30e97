package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
)

// shardCounts are the counts behind the bounds, shard by shard, as the
// count tables hold them (kept) and as the task rows say they were counted
// (tallied). Shards at zero are left out.
type shardCounts struct {
	tenants map[tenantShard]int
	total   map[int]int // by shard
}

type tenantShard struct {
	tenant string
	shard  int
}

func readShards(t *testing.T, db *store.DB, counted bool) shardCounts {
	t.Helper()
	ctx := context.Background()
	c := shardCounts{tenants: map[tenantShard]int{}, total: map[int]int{}}
	tenantQ, totalQ := `SELECT tenant, shard, n FROM mcprel_task_counts WHERE n <> 0`,
		`SELECT shard, n FROM mcprel_task_total WHERE n <> 0`
	if !counted {
		tenantQ, totalQ = `SELECT tenant, tenant_shard, count(*) FROM mcprel_tasks GROUP BY tenant, tenant_shard`,
			`SELECT total_shard, count(*) FROM mcprel_tasks GROUP BY total_shard`
	}
	err := db.ReadTx(ctx, func(tx *store.Tx) error {
		rows, err := tx.Query(ctx, tenantQ)
		if err != nil {
			return err
		}
		for rows.Next() {
			var tenant string
			var shard, n int
			if err := rows.Scan(&tenant, &shard, &n); err != nil {
				return err
			}
			c.tenants[tenantShard{tenant, shard}] = n
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if rows, err = tx.Query(ctx, totalQ); err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var shard, n int
			if err := rows.Scan(&shard, &n); err != nil {
				return err
			}
			c.total[shard] = n
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkShards fails t unless every shard counts exactly the tasks stored
// that name it, and returns the counts.
func checkShards(t *testing.T, db *store.DB) shardCounts {
	t.Helper()
	kept, tallied := readShards(t, db, true), readShards(t, db, false)
	if !maps.Equal(kept.tenants, tallied.tenants) || !maps.Equal(kept.total, tallied.total) {
		t.Fatalf("the shards count %v and %v; the tasks stored are %v and %v",
			kept.tenants, kept.total, tallied.tenants, tallied.total)
	}
	return kept
}

// shardsOf returns the shards that counted task id: the tenant's, the
// total's.
func shardsOf(t *testing.T, db *store.DB, id string) (tenant, total int) {
	t.Helper()
	ctx := context.Background()
	if err := db.QueryRow(ctx, `SELECT tenant_shard, total_shard FROM mcprel_tasks WHERE id = ?`, id).Scan(&tenant, &total); err != nil {
		t.Fatal(err)
	}
	return tenant, total
}

// startAt makes every creation through s start counting at these shards.
func startAt(s *tasks.Store, tenant, total int) {
	tasks.SetStartShards(s, func() (int, int) { return tenant, total })
}

// A creation whose shard holds its share moves on to the next shard that
// has room, in turn and around, and is refused only when none has: the
// shards hold exactly the bound. Deleting a task — the reaper, or any
// other DELETE, of one task or of several tenants' at once — takes it
// out of the shards that counted it, and a creation then finds the room
// there.
func TestCreationFallsThroughToAnotherShard(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		// Tenant shares 1, 1, 1, 1; total shares 2, 2, 1, 1.
		s, clk := open(t, dsn, &tasks.Options{MaxTasksPerTenant: 4, MaxTasks: 6, DefaultTTL: time.Minute, Lease: time.Hour})
		tasks.SetShards(s, 4)
		startAt(s, 2, 3)
		var acme []tasks.Task
		for range 4 {
			acme = append(acme, create(t, s, "acme", "w1"))
		}
		var full *tasks.FullError
		if _, err := tryCreate(s, "acme"); !errors.As(err, &full) || full.All || full.Limit != 4 {
			t.Fatalf("a fifth task of a tenant whose four shards are full = %v", err)
		}
		g1, g2 := create(t, s, "globex", "w1"), create(t, s, "globex", "w1")
		if _, err := tryCreate(s, "globex"); !errors.As(err, &full) || !full.All || full.Limit != 6 {
			t.Fatalf("a seventh task when all shards of the total are full = %v", err)
		}
		want := [][2]int{{2, 3}, {3, 0}, {0, 0}, {1, 1}}
		for i, task := range acme {
			if tenant, total := shardsOf(t, s.DB(), task.ID); tenant != want[i][0] || total != want[i][1] {
				t.Fatalf("acme's task %d counted in shards %d and %d, want %v", i, tenant, total, want[i])
			}
		}
		if _, total := shardsOf(t, s.DB(), g2.ID); total != 2 {
			t.Fatalf("globex's second task counted in total shard %d, want 2", total)
		}
		c := checkShards(t, s.DB())
		if !maps.Equal(c.total, map[int]int{0: 2, 1: 2, 2: 1, 3: 1}) {
			t.Fatalf("total shards %v, want each at its share", c.total)
		}

		// The reaper takes acme's second task (tenant shard 3, total 0)
		// out; a creation from shard 2 finds room in 3, and from total
		// shard 3 in 0.
		if err := s.Finish(ctx, acme[1].ID, "w1", tasks.Completed, "", json.RawMessage(`{}`), nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if n, err := s.Reap(ctx, 100); err != nil || n != 1 {
			t.Fatalf("Reap = %d, %v", n, err)
		}
		checkShards(t, s.DB())
		a := create(t, s, "acme", "w1")
		if tenant, total := shardsOf(t, s.DB(), a.ID); tenant != 3 || total != 0 {
			t.Fatalf("after the reaper, a creation counted in shards %d and %d, want 3 and 0", tenant, total)
		}
		// An operator's DELETE of two tenants' tasks in one statement.
		err := s.DB().WriteTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Exec(ctx, `DELETE FROM mcprel_tasks WHERE id IN (?, ?, ?)`, acme[0].ID, acme[3].ID, g1.ID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		c = checkShards(t, s.DB())
		if !maps.Equal(c.tenants, map[tenantShard]int{{"acme", 0}: 1, {"acme", 3}: 1, {"globex", 3}: 1}) ||
			!maps.Equal(c.total, map[int]int{0: 2, 2: 1}) {
			t.Fatalf("after the DELETE the shards count %v and %v", c.tenants, c.total)
		}
		for range 2 {
			create(t, s, "acme", "w1")
		}
		if stored(t, s, "acme") != 4 || stored(t, s, "globex") != 1 {
			t.Fatal("the freed places were not found")
		}
	})
}

// A bound smaller than the shards leaves some shards no share at all: a
// creation passes them over, and the bound still holds exactly.
func TestBoundSmallerThanTheShards(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		s, _ := open(t, dsn, &tasks.Options{MaxTasksPerTenant: 3, MaxTasks: 5})
		tasks.SetShards(s, 8)
		startAt(s, 6, 7) // shards with no share
		var full *tasks.FullError
		for i := range 4 {
			_, err := tryCreate(s, "acme")
			if (i < 3) != (err == nil) || i == 3 && (!errors.As(err, &full) || full.All) {
				t.Fatalf("acme's creation %d under a bound of 3 = %v", i+1, err)
			}
		}
		tasks.SetStartShards(s, nil) // shards in turn, from a random one
		for i := range 3 {
			_, err := tryCreate(s, "globex")
			if (i < 2) != (err == nil) || i == 2 && (!errors.As(err, &full) || !full.All) {
				t.Fatalf("creation %d in all under a bound of 5 = %v", i+4, err)
			}
		}
		c := checkShards(t, s.DB())
		for k, n := range c.tenants {
			if k.shard >= 3 || n != 1 {
				t.Fatalf("the tenants' shards count %v: only shards 0 to 2 have a share of 3", c.tenants)
			}
		}
		if !maps.Equal(c.total, map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1}) {
			t.Fatalf("the total's shards count %v: only shards 0 to 4 have a share of 5", c.total)
		}
	})
}

// Creators racing for a sharded bound never store more than it. Four
// creators, each a replica of its own counting in a shard of its own, are
// held between their counts and their commits all at once, each started
// from the one before's barrier; two more start at shards they hold and
// must wait for them (PostgreSQL), then find every shard full and be
// refused. On SQLite the creators take turns for the write lock, as
// replicas sharing the file do.
func TestShardedCreatorsNeverPassTheBound(t *testing.T) {
	for _, bound := range []string{"tenant", "all"} {
		t.Run(bound, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, dsn string) {
				ctx := context.Background()
				opts := &tasks.Options{MaxTasksPerTenant: 4, MaxTasks: 100}
				if bound == "all" {
					opts = &tasks.Options{MaxTasksPerTenant: 100, MaxTasks: 4}
				}
				const racers = 6
				starts := []int{0, 1, 2, 3, 0, 2}
				run := fmt.Sprintf("tasks-shards-%d", time.Now().UnixNano())
				var stores [racers]*tasks.Store
				for i := range stores {
					stores[i], _ = open(t, storetest.Tagged(dsn, fmt.Sprintf("%s-%d", run, i)), opts)
					tasks.SetShards(stores[i], 4)
					if bound == "tenant" {
						startAt(stores[i], starts[i], i)
					} else {
						startAt(stores[i], i, starts[i])
					}
				}
				tenant := func(i int) string {
					if bound == "tenant" {
						return "acme"
					}
					return fmt.Sprintf("t%d", i)
				}
				// Every tenant's shard rows exist before the race, as for
				// any tenant after its first task: the creation that makes
				// them holds them all until it commits.
				for i := range racers {
					task := create(t, stores[0], tenant(i), "w1")
					if err := stores[0].DB().WriteTx(ctx, func(tx *store.Tx) error {
						_, err := tx.Exec(ctx, `DELETE FROM mcprel_tasks WHERE id = ?`, task.ID)
						return err
					}); err != nil {
						t.Fatal(err)
					}
				}
				pg := stores[0].DB().Dialect() == store.Postgres
				var errs [racers]error
				var done [racers]chan struct{}
				for i := range done {
					done[i] = make(chan struct{})
				}
				start := func(i int) {
					go func() {
						defer close(done[i])
						_, errs[i] = tryCreate(stores[i], tenant(i))
					}()
				}
				for i := range 4 {
					tasks.SetBeforeWrite(stores[i], func(op string) {
						if op != "create" {
							return
						}
						if i < 3 {
							start(i + 1)
							if pg {
								awaitDone(t, done[i+1]) // held until every later one is done
							}
							return
						}
						start(4)
						start(5)
						if pg {
							awaitLockWait(t, stores[0].DB(), fmt.Sprintf("%s-%d", run, 4))
							awaitLockWait(t, stores[0].DB(), fmt.Sprintf("%s-%d", run, 5))
						}
					})
				}
				start(0)
				for i := range done {
					awaitDone(t, done[i])
				}
				var full *tasks.FullError
				for i, err := range errs {
					if (i < 4) != (err == nil) || i >= 4 && (!errors.As(err, &full) || full.All != (bound == "all")) {
						t.Fatalf("creator %d: %v; want the first four stored and the last two refused: %v", i, err, errs)
					}
				}
				c := checkShards(t, stores[0].DB())
				counts := c.total
				if bound == "tenant" {
					counts = map[int]int{}
					for k, n := range c.tenants {
						counts[k.shard] = n
					}
				}
				if !maps.Equal(counts, map[int]int{0: 1, 1: 1, 2: 1, 3: 1}) {
					t.Fatalf("the shards count %v under a bound of 4", counts)
				}
			})
		})
	}
}

// awaitDone waits for done to close, failing t after 30 s.
func awaitDone(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("a creation never ended")
	}
}

// A creation that ends without a commit, or that the bound refuses, leaves
// no count behind — even when the caller commits its transaction anyway
// after the refusal.
func TestRefusedOrRolledBackCreationCountsNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, _ := open(t, dsn, &tasks.Options{MaxTasksPerTenant: 10, MaxTasks: 1})
		tasks.SetShards(s, 4)
		n := tasks.NewTask{Tenant: "acme", Tool: "job", Request: json.RawMessage(`{}`), Owner: "w1"}
		abandon := errors.New("abandoned")
		err := s.DB().WriteTx(ctx, func(tx *store.Tx) error {
			if _, err := s.CreateTx(ctx, tx, n); err != nil {
				return err
			}
			return abandon
		})
		if !errors.Is(err, abandon) {
			t.Fatal(err)
		}
		if c := checkShards(t, s.DB()); len(c.tenants)+len(c.total) != 0 {
			t.Fatalf("a rolled-back creation left counts %v and %v", c.tenants, c.total)
		}
		create(t, s, "globex", "w1") // the one place in all
		var full *tasks.FullError
		err = s.DB().WriteTx(ctx, func(tx *store.Tx) error {
			_, err := s.CreateTx(ctx, tx, n)
			if !errors.As(err, &full) || !full.All {
				return fmt.Errorf("a creation past the bound in all = %v", err)
			}
			return nil // the caller goes on, and commits
		})
		if err != nil {
			t.Fatal(err)
		}
		if c := checkShards(t, s.DB()); len(c.tenants) != 1 {
			t.Fatalf("a refused creation left the tenant's count: %v", c.tenants)
		}
	})
}

// The counts created for a store that already holds tasks count them all,
// dealt over the shards so that no shard holds more than its share of a
// bound they are within: up to the bound, creations still succeed.
func TestCountsStartFromTheStoredTasks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := store.Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if err := db.Migrate(ctx, "tasks", tasks.Migrations[:1]); err != nil {
			t.Fatal(err)
		}
		err = db.WriteTx(ctx, func(tx *store.Tx) error {
			for i := range 47 {
				tenant := "acme"
				if i%7 == 6 {
					tenant = "globex"
				}
				if _, err := tx.Exec(ctx, `INSERT INTO mcprel_tasks (id, tenant, tool, status, created_at, updated_at,
					ttl_ms, expires_at, poll_ms, request) VALUES (?, ?, 'job', 1, 0, 0, 60000, 60000, 1000, '{}')`,
					fmt.Sprintf("task%02d", i), tenant); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// acme has 41 tasks, globex 6: one place left for acme and in all.
		s, err := tasks.Open(ctx, db, &tasks.Options{MaxTasksPerTenant: 42, MaxTasks: 48})
		if err != nil {
			t.Fatal(err)
		}
		checkShards(t, db)
		if stored(t, s, "acme") != 41 || stored(t, s, "globex") != 6 {
			t.Fatal("the existing tasks were not all counted")
		}
		create(t, s, "acme", "w1")
		var full *tasks.FullError
		if _, err := tryCreate(s, "acme"); !errors.As(err, &full) || full.All {
			t.Fatalf("acme's 43rd task under a bound of 42 = %v", err)
		}
		if _, err := tryCreate(s, "globex"); !errors.As(err, &full) || !full.All {
			t.Fatalf("the 49th task under a bound of 48 = %v", err)
		}
	})
}

// Creators moving on from full shards lock none of them: two that start
// at different shards and pass over the shards the other starts at are
// both refused, and neither waits for the other. (Were a full shard
// locked as it is passed over — an upsert locks the row its guard refuses
// to update — each would hold the shard the other moves to, and
// PostgreSQL would break the deadlock by failing one with an error.) The
// first is held after passing over its first shard while the second, a
// replica's, runs.
func TestCreatorsPassingFullShardsDoNotDeadlock(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		opts := &tasks.Options{MaxTasksPerTenant: 4, MaxTasks: 100}
		app := fmt.Sprintf("tasks-full-%d", time.Now().UnixNano())
		a, _ := open(t, dsn, opts)
		b, _ := open(t, storetest.Tagged(dsn, app), opts)
		for _, s := range []*tasks.Store{a, b} {
			tasks.SetShards(s, 4)
		}
		startAt(a, 0, 0)
		for range 4 {
			create(t, a, "acme", "w1") // every shard full
		}
		startAt(a, 1, 0)
		startAt(b, 3, 1)
		var secondErr error
		done := make(chan struct{})
		var once sync.Once
		tasks.SetBeforeWrite(a, func(op string) {
			if op != "full" {
				return
			}
			once.Do(func() {
				go func() {
					defer close(done)
					_, secondErr = tryCreate(b, "acme")
				}()
				if a.DB().Dialect() == store.Postgres {
					awaitDoneOrLockWait(t, a.DB(), app, done)
				}
			})
		})
		_, firstErr := tryCreate(a, "acme")
		awaitDone(t, done)
		var full *tasks.FullError
		if !errors.As(firstErr, &full) || !errors.As(secondErr, &full) {
			t.Fatalf("two creations passing over each other's full shards: %v and %v; want both refused", firstErr, secondErr)
		}
		checkShards(t, a.DB())
	})
}

// awaitDoneOrLockWait waits until done closes or a PostgreSQL backend
// named application waits for a lock.
func awaitDoneOrLockWait(t *testing.T, db *store.DB, application string, done <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	timeout := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ? AND wait_event_type = 'Lock'`, application).Scan(&n); err != nil {
			t.Error(err)
			return
		}
		if n > 0 {
			return
		}
		select {
		case <-done:
			return
		case <-timeout:
			t.Error("the second creation neither ended nor waited")
			return
		case <-tick.C:
		}
	}
}
