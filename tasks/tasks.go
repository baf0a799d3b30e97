// Package tasks keeps durable tasks: work that a request starts and that
// outlives it, its connection and the process that runs it.
//
// A task record lives in the store (SQLite by default, PostgreSQL when
// replicas share the work) from the moment it is created, before anyone is
// told its id. Its status moves working ↔ input_required, then to exactly
// one of completed, failed or cancelled, which never change again; Store
// refuses any other transition.
//
// Cancellation is an intent, not an event: RequestCancel records it
// durably and returns at once, and the task stays working until the
// process running it observes the intent at a checkpoint (Store.Checkpoint,
// which a tool reaches through Run.Checkpoint between its steps) and ends
// it cancelled — or finishes first, in which case its result stands.
//
// Each task that is not finished is leased by the process running it,
// which renews the lease at every checkpoint and from a heartbeat. When a
// process dies its leases expire, and another process (or the same one,
// restarted) takes the task over: it resumes it from its last checkpoint
// data if its tool says it can, and otherwise ends it failed as
// interrupted. Nothing stays working forever.
//
// A task's TTL counts from its creation, as the protocol defines it, and
// is never shorter than a minimum, so that a task is readable right after
// its create answer. A task is never deleted or hidden while it has not
// finished: one still running at its TTL is ended failed (Store.Expire)
// and its worker stopped; a finished task is kept until its TTL has
// passed and at least Options.Retain after it finished, then reaped. See
// Options.DefaultTTL for the rule and the spec text it follows.
//
// Task ids are 128 random bits: unguessable. Every read and write is
// scoped to the tenant that created the task, and another tenant's id
// reads as unknown. The package knows the store, never the server or a
// transport: package taskserver serves it over MCP.
package tasks

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/store"
)

// Status is where a task is in its life.
type Status uint8

const (
	// Working: the task runs, or waits for a worker.
	Working Status = 1
	// InputRequired: the task waits for the client's answers.
	InputRequired Status = 2
	// Completed: the work finished and its result is stored. A tool's
	// isError result completes a task too (2026-07-28).
	Completed Status = 3
	// Failed: the work could not finish: a protocol error, or the process
	// running it stopped and the task could not be resumed.
	Failed Status = 4
	// Cancelled: the worker observed a cancellation intent at a
	// checkpoint, or no worker was running when it was recorded.
	Cancelled Status = 5
)

// String returns the status as the protocol spells it.
func (s Status) String() string {
	switch s {
	case Working:
		return "working"
	case InputRequired:
		return "input_required"
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return "unknown"
}

// Terminal reports whether the status never changes again.
func (s Status) Terminal() bool { return s >= Completed && s <= Cancelled }

// canMove reports whether a task may go from s to next.
func (s Status) canMove(next Status) bool {
	switch s {
	case Working:
		return next == InputRequired || next.Terminal()
	case InputRequired:
		return next == Working || next.Terminal()
	}
	return false
}

// Task is a task's durable record.
type Task struct {
	ID     string
	Tenant string
	Tool   string
	Status Status
	// StatusMessage is the latest word from the worker ("row 40 of 100"),
	// or why the task failed.
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// TTL is how long after CreatedAt the task may be deleted, as the
	// protocol defines it: the creator's wish within the store's bounds,
	// and for a finished task the time from creation to ExpiresAt (which
	// a retention floor may have pushed later), so that what a client is
	// told is never shorter than what is kept.
	TTL time.Duration
	// ExpiresAt is when the task may be deleted: CreatedAt+TTL, and for a
	// finished task no earlier than Options.Retain after it finished.
	// A task that has not finished is never deleted; past ExpiresAt it is
	// ended failed (Store.Expire).
	ExpiresAt time.Time
	// PollInterval is how often a client should ask for the task.
	PollInterval time.Duration
	// Request is what the task was created to do (for a tool call, its
	// name and arguments): what a worker needs to run it, or resume it.
	Request json.RawMessage
	// Result is the stored result of a Completed task.
	Result json.RawMessage
	// Error is the JSON-RPC error object of a Failed task.
	Error json.RawMessage
	// CancelRequested is set once a cancellation intent is recorded.
	CancelRequested bool
	// CancelRequestedAt is when it was first recorded.
	CancelRequestedAt time.Time
	// ReadsCancel is NewTask.ReadsCancel.
	ReadsCancel bool
	// Owner is the process whose lease the task is under, until
	// LeaseUntil; empty once the task is finished.
	Owner      string
	LeaseUntil time.Time
	// Attempts counts the workers that started the task: 1, plus one per
	// takeover after a lease expired.
	Attempts int
	// Checkpoint is the data the worker saved at its last checkpoint, from
	// which a resumable tool continues after a takeover.
	Checkpoint json.RawMessage
	// InputRequests holds the questions an InputRequired task waits on,
	// and InputResponses the answers received so far, both as JSON objects
	// keyed by request key.
	InputRequests  json.RawMessage
	InputResponses json.RawMessage
}

// Errors the store reports. Callers answer clients with their own words
// for them; ErrNotFound is also what another tenant's id gets.
var (
	ErrNotFound = errors.New("tasks: no such task")
	// ErrTerminal: the task already finished; its status cannot change.
	ErrTerminal = errors.New("tasks: the task has already finished")
	// ErrLeaseLost: the caller no longer owns the task (its lease expired
	// and another process took it over, or the task was ended for it).
	ErrLeaseLost = errors.New("tasks: the task's lease is held by another worker")
	// ErrCancelled is what a checkpoint returns once the task's
	// cancellation intent is observed: the tool stops and returns it.
	ErrCancelled = errors.New("tasks: the task was cancelled")
)

// Defaults for Options fields left at zero.
const (
	DefaultLease  = 30 * time.Second
	DefaultTTL    = time.Hour
	DefaultMaxTTL = 24 * time.Hour
	// DefaultMinTTL is the shortest TTL a task gets, whatever its creator
	// asks: a client must be able to read a task it was just told about.
	DefaultMinTTL = time.Minute
	// DefaultRetain is how long a finished task is kept at least, so that
	// a client polling at the poll interval finds its result.
	DefaultRetain       = time.Minute
	DefaultPollInterval = time.Second
	// MaxRequestBytes bounds a task's stored request, result and
	// checkpoint each.
	MaxRecordBytes = 8 << 20
	// DefaultMaxTasksPerTenant and DefaultMaxTasks bound the tasks stored
	// at once — running or finished and kept until their TTL — for one
	// tenant and in all.
	DefaultMaxTasksPerTenant = 10_000
	DefaultMaxTasks          = 100_000
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// Lease is how long a worker's hold on a task lasts without renewal;
	// a process that dies leaves its tasks to be taken over after it.
	// Zero means DefaultLease.
	Lease time.Duration
	// DefaultTTL is a task's TTL when its creator asks for none, and
	// MinTTL and MaxTTL bound what it may ask for. Zero means DefaultTTL,
	// DefaultMinTTL and DefaultMaxTTL.
	//
	// The TTL counts from the task's creation, as both protocol eras
	// define it: 2025-11-25 (tasks page, "TTL and Resource Management"):
	// "ttl: Time in milliseconds from creation before task may be
	// deleted", and "After a task's ttl lifetime has elapsed, receivers
	// MAY delete the task and its results, regardless of the task
	// status"; 2026-07-28 (the io.modelcontextprotocol/tasks extension,
	// SEP-2663): "ttlMs may change. After the TTL the server MAY mark the
	// task failed and delete it". mcprel takes the second reading in both
	// eras: a task still running at its TTL is ended failed (and its
	// worker stopped), never deleted or hidden while it runs; only a
	// finished task is deleted, once past its TTL and Retain.
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// Retain is how long a finished task is kept at least after it
	// finished, whatever its TTL, so that a task that ends just before (or
	// at) its TTL still lets its client read the result. Zero means
	// DefaultRetain.
	Retain time.Duration
	// PollInterval is what clients are told to poll at. Zero means
	// DefaultPollInterval.
	PollInterval time.Duration
	// MaxTasksPerTenant and MaxTasks bound how many tasks the store keeps
	// at once for one tenant and in all, finished ones included until
	// they are reaped: TTLs alone bound the store only in time, and one
	// tenant could fill it within one. Past either, Create refuses with a
	// *FullError, which callers answer as a retryable overload. Every
	// process sharing a store should give the same bounds: the counts are
	// split into shards, each with its share of a bound, so a store whose
	// bound was lowered, or whose processes disagree, keeps at most the
	// largest bound until the tasks counted under it are reaped. Zero
	// means DefaultMaxTasksPerTenant and DefaultMaxTasks.
	//
	// The counts live in mcprel_task_counts and mcprel_task_total, and a
	// DELETE trigger on mcprel_tasks takes each deleted task back out of
	// them. TRUNCATE (PostgreSQL) fires no DELETE trigger: an operator who
	// empties mcprel_tasks that way must clear the counts in the same
	// statement, or they keep counting the tasks that are gone and
	// creation is refused as full though the store is empty:
	//
	//	TRUNCATE mcprel_tasks, mcprel_task_counts, mcprel_task_total;
	//
	// (Empty count tables are rebuilt at zero by the next creations.) A
	// DELETE FROM mcprel_tasks, on either store, keeps the counts right.
	MaxTasksPerTenant, MaxTasks int
}

// Store keeps tasks in a database.
type Store struct {
	db           *store.DB
	lease        time.Duration
	defaultTTL   time.Duration
	minTTL       time.Duration
	maxTTL       time.Duration
	retain       time.Duration
	pollInterval time.Duration
	maxTenant    int              // Options.MaxTasksPerTenant
	maxTotal     int              // Options.MaxTasks
	shards       int              // countShards for the dialect; tests change it
	now          func() time.Time // time.Now; tests move it

	// nextShard is the shard the next creation's counts start at
	// (startAt), from a random one.
	nextShard atomic.Uint32
	// startShards, set only by tests, picks the shards a new task's
	// counts start at instead of nextShard.
	startShards func() (tenant, total int)

	// beforeWrite, set only by tests, runs inside a transition's write
	// transaction after the task was read and before it is written: a
	// test runs a competing transition there, to force the race of two
	// transitions on one task (see export_test.go).
	beforeWrite func(op string)
}

// barrier runs the test hook for op, if one is set.
func (s *Store) barrier(op string) {
	if s.beforeWrite != nil {
		s.beforeWrite(op)
	}
}

var migrations = []store.Migration{{
	Version: 1,
	SQLite: `CREATE TABLE mcprel_tasks (
		id              TEXT PRIMARY KEY,
		tenant          TEXT NOT NULL,
		tool            TEXT NOT NULL,
		status          INTEGER NOT NULL,
		status_message  TEXT NOT NULL DEFAULT '',
		created_at      INTEGER NOT NULL,
		updated_at      INTEGER NOT NULL,
		ttl_ms          INTEGER NOT NULL,
		expires_at      INTEGER NOT NULL,
		poll_ms         INTEGER NOT NULL,
		request         TEXT NOT NULL,
		result          TEXT,
		error           TEXT,
		cancel_requested INTEGER NOT NULL DEFAULT 0,
		cancel_at       INTEGER,
		owner           TEXT,
		lease_until     INTEGER,
		attempts        INTEGER NOT NULL DEFAULT 1,
		checkpoint      TEXT,
		input_requests  TEXT,
		input_responses TEXT);
		CREATE INDEX mcprel_tasks_tenant ON mcprel_tasks (tenant, created_at, id);
		CREATE INDEX mcprel_tasks_lease ON mcprel_tasks (lease_until) WHERE status < 3;
		CREATE INDEX mcprel_tasks_expires ON mcprel_tasks (expires_at)`,
	Postgres: `CREATE TABLE mcprel_tasks (
		id              TEXT PRIMARY KEY,
		tenant          TEXT NOT NULL,
		tool            TEXT NOT NULL,
		status          SMALLINT NOT NULL,
		status_message  TEXT NOT NULL DEFAULT '',
		created_at      BIGINT NOT NULL,
		updated_at      BIGINT NOT NULL,
		ttl_ms          BIGINT NOT NULL,
		expires_at      BIGINT NOT NULL,
		poll_ms         BIGINT NOT NULL,
		request         TEXT NOT NULL,
		result          TEXT,
		error           TEXT,
		cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
		cancel_at       BIGINT,
		owner           TEXT,
		lease_until     BIGINT,
		attempts        INTEGER NOT NULL DEFAULT 1,
		checkpoint      TEXT,
		input_requests  TEXT,
		input_responses TEXT);
		CREATE INDEX mcprel_tasks_tenant ON mcprel_tasks (tenant, created_at, id);
		CREATE INDEX mcprel_tasks_lease ON mcprel_tasks (lease_until) WHERE status < 3;
		CREATE INDEX mcprel_tasks_expires ON mcprel_tasks (expires_at)`,
}, {
	// Counts of stored tasks, by tenant and in all, for the bounds in
	// Options, each split into shards (see countShards): a row per
	// (tenant, shard) and per shard of the total, and in each task the
	// shards that counted it. CreateTx counts a task in, in its own
	// transaction; a trigger counts every deleted task out of its shards in
	// the deleting statement's, so that however tasks are deleted (the
	// reaper, an operator) the counts stay exact. Existing tasks are
	// counted here, dealt round-robin over the shards, so that no shard
	// holds more than its share of any bound they are within.
	Version: 2,
	SQLite: `ALTER TABLE mcprel_tasks ADD COLUMN tenant_shard INTEGER NOT NULL DEFAULT 0;
		ALTER TABLE mcprel_tasks ADD COLUMN total_shard INTEGER NOT NULL DEFAULT 0;
		CREATE TABLE mcprel_task_counts (tenant TEXT NOT NULL, shard INTEGER NOT NULL, n INTEGER NOT NULL,
			PRIMARY KEY (tenant, shard));
		INSERT INTO mcprel_task_counts (tenant, shard, n) SELECT tenant, 0, count(*) FROM mcprel_tasks GROUP BY tenant;
		CREATE TABLE mcprel_task_total (shard INTEGER PRIMARY KEY, n INTEGER NOT NULL);
		INSERT INTO mcprel_task_total (shard, n) SELECT 0, count(*) FROM mcprel_tasks;
		CREATE TRIGGER mcprel_tasks_uncount AFTER DELETE ON mcprel_tasks BEGIN
			UPDATE mcprel_task_counts SET n = n - 1 WHERE tenant = OLD.tenant AND shard = OLD.tenant_shard;
			UPDATE mcprel_task_total SET n = n - 1 WHERE shard = OLD.total_shard;
		END`,
	// One statement-level trigger per DELETE. It takes the tenants' rows
	// in one order and the total's after them in one order. A creator
	// holds at most one row of each table (it locks only the shard it
	// counts in, the tenant's before the total's) and waits for nothing
	// once it holds a total's, so deletes and creates never deadlock on the
	// counts.
	Postgres: `ALTER TABLE mcprel_tasks ADD COLUMN tenant_shard INTEGER NOT NULL DEFAULT 0,
			ADD COLUMN total_shard INTEGER NOT NULL DEFAULT 0;
		UPDATE mcprel_tasks t SET tenant_shard = r.ts, total_shard = r.tt
			FROM (SELECT id, (row_number() OVER (PARTITION BY tenant ORDER BY id) - 1) % ` + pgShardsSQL + ` AS ts,
				(row_number() OVER (ORDER BY id) - 1) % ` + pgShardsSQL + ` AS tt FROM mcprel_tasks) r
			WHERE t.id = r.id;
		CREATE TABLE mcprel_task_counts (tenant TEXT NOT NULL, shard INTEGER NOT NULL, n BIGINT NOT NULL,
			PRIMARY KEY (tenant, shard));
		INSERT INTO mcprel_task_counts (tenant, shard, n)
			SELECT tenant, tenant_shard, count(*) FROM mcprel_tasks GROUP BY tenant, tenant_shard;
		CREATE TABLE mcprel_task_total (shard INTEGER PRIMARY KEY, n BIGINT NOT NULL);
		INSERT INTO mcprel_task_total (shard, n)
			SELECT k, (SELECT count(*) FROM mcprel_tasks WHERE total_shard = k) FROM generate_series(0, ` + pgShardsSQL + ` - 1) k;
		CREATE FUNCTION mcprel_tasks_uncount() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE r RECORD;
		BEGIN
			FOR r IN SELECT tenant, tenant_shard, count(*) AS k FROM gone
					GROUP BY tenant, tenant_shard ORDER BY tenant, tenant_shard LOOP
				UPDATE mcprel_task_counts SET n = n - r.k WHERE tenant = r.tenant AND shard = r.tenant_shard;
			END LOOP;
			FOR r IN SELECT total_shard, count(*) AS k FROM gone GROUP BY total_shard ORDER BY total_shard LOOP
				UPDATE mcprel_task_total SET n = n - r.k WHERE shard = r.total_shard;
			END LOOP;
			RETURN NULL;
		END $$;
		CREATE TRIGGER mcprel_tasks_uncount AFTER DELETE ON mcprel_tasks
			REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION mcprel_tasks_uncount()`,
}, {
	// Whether the task's work reads its cancellation intent itself
	// (NewTask.ReadsCancel): such a task is never ended cancelled
	// without its worker.
	Version:  3,
	SQLite:   `ALTER TABLE mcprel_tasks ADD COLUMN reads_cancel INTEGER NOT NULL DEFAULT 0`,
	Postgres: `ALTER TABLE mcprel_tasks ADD COLUMN reads_cancel BOOLEAN NOT NULL DEFAULT FALSE`,
}, {
	// The tasks by status, oldest first: Counts reads how many are in
	// each status, and the oldest working one, from this index alone.
	Version:  4,
	SQLite:   `CREATE INDEX mcprel_tasks_status ON mcprel_tasks (status, created_at)`,
	Postgres: `CREATE INDEX mcprel_tasks_status ON mcprel_tasks (status, created_at)`,
}}

// Open prepares the tasks schema in db and returns the store. opts may be
// nil.
func Open(ctx context.Context, db *store.DB, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Lease < 0 || o.DefaultTTL < 0 || o.MinTTL < 0 || o.MaxTTL < 0 || o.Retain < 0 || o.PollInterval < 0 {
		return nil, errors.New("tasks: Options durations must not be negative")
	}
	if o.MaxTasksPerTenant < 0 || o.MaxTasks < 0 {
		return nil, errors.New("tasks: Options.MaxTasksPerTenant and MaxTasks must not be negative")
	}
	if o.MaxTasksPerTenant == 0 {
		o.MaxTasksPerTenant = DefaultMaxTasksPerTenant
	}
	if o.MaxTasks == 0 {
		o.MaxTasks = DefaultMaxTasks
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = max(DefaultMaxTTL, o.MinTTL, o.DefaultTTL)
	}
	if o.MinTTL == 0 {
		o.MinTTL = min(DefaultMinTTL, o.MaxTTL)
	}
	if o.DefaultTTL == 0 {
		o.DefaultTTL = max(min(DefaultTTL, o.MaxTTL), o.MinTTL)
	}
	if o.MinTTL > o.MaxTTL {
		return nil, errors.New("tasks: Options.MinTTL is longer than MaxTTL")
	}
	if o.DefaultTTL < o.MinTTL || o.DefaultTTL > o.MaxTTL {
		return nil, errors.New("tasks: Options.DefaultTTL is outside MinTTL..MaxTTL")
	}
	if o.Retain == 0 {
		o.Retain = DefaultRetain
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if err := db.Migrate(ctx, "tasks", migrations); err != nil {
		return nil, err
	}
	s := &Store{db: db, lease: o.Lease, defaultTTL: o.DefaultTTL, minTTL: o.MinTTL, maxTTL: o.MaxTTL,
		retain: o.Retain, pollInterval: o.PollInterval, maxTenant: o.MaxTasksPerTenant, maxTotal: o.MaxTasks,
		shards: countShards(db.Dialect()), now: time.Now}
	s.nextShard.Store(mrand.Uint32())
	return s, nil
}

// DB returns the database the store lives in.
func (s *Store) DB() *store.DB { return s.db }

// Lease is how long a worker's hold on a task lasts without renewal.
func (s *Store) Lease() time.Duration { return s.lease }

// TTL returns the TTL a task created with the requested one gets: the
// default for zero or less, otherwise the request within MinTTL..MaxTTL
// (both eras let the receiver override the requested ttl; the answer
// reports the one it got).
func (s *Store) TTL(requested time.Duration) time.Duration {
	if requested <= 0 {
		return s.defaultTTL
	}
	return min(max(requested, s.minTTL), s.maxTTL)
}

// Retain is how long a finished task is kept at least after it finished.
func (s *Store) Retain() time.Duration { return s.retain }

// NewTask is what Create needs.
type NewTask struct {
	Tenant string
	Tool   string
	// Request is what the task is to do, as JSON (see Task.Request).
	Request json.RawMessage
	// TTL is the creator's wish; the store applies its default and
	// maximum (Store.TTL).
	TTL time.Duration
	// Owner is the process that will run the task: the task starts
	// leased to it, so that if the process dies before its worker starts,
	// the task is still taken over.
	Owner string
	// ReadsCancel says the task's work reads its cancellation intent
	// itself (Run.Renew) and ends the task by what the cancellation left,
	// because it may start what a cancellation cannot undo (a call to
	// another service). Such a task is never ended cancelled without its
	// worker: a cancel while no worker holds it, or found when it is
	// taken over, is left for the worker that takes it over to read (or
	// it ends failed as interrupted, its outcome unknown, when it cannot
	// be resumed); one past its TTL ends failed, not cancelled.
	ReadsCancel bool
}

// newID returns an unguessable task id: 128 random bits.
func newID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// idLength is the length of a task id: 128 bits in unpadded base32.
const idLength = 26

// ValidID reports whether id has the shape of the ids this package issues
// (newID): 26 characters of lowercase base32. Anything else names no task,
// and the store answers ErrNotFound for it without asking the database:
// text a database cannot hold (PostgreSQL refuses a NUL) must never turn
// a lookup into a storage failure.
func ValidID(id string) bool {
	if len(id) != idLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Create records a new working task, durably: when it returns, Get finds
// it from any process sharing the store.
func (s *Store) Create(ctx context.Context, n NewTask) (Task, error) {
	var t Task
	err := s.db.WriteBatched(ctx, func(tx *store.Tx) error {
		var err error
		t, err = s.CreateTx(ctx, tx, n)
		return err
	})
	return t, err
}

// CreateTx is Create inside the caller's transaction, so that a task can
// be created together with something else — the idempotency record of the
// call that created it, so that a retried creation finds the same task.
func (s *Store) CreateTx(ctx context.Context, tx *store.Tx, n NewTask) (Task, error) {
	if n.Owner == "" {
		return Task{}, errors.New("tasks: a new task needs an owner")
	}
	if !json.Valid(n.Request) {
		return Task{}, errors.New("tasks: the task's request is not JSON")
	}
	if len(n.Request) > MaxRecordBytes {
		return Task{}, fmt.Errorf("tasks: the task's request is %d bytes, over %d", len(n.Request), MaxRecordBytes)
	}
	now := time.UnixMilli(s.now().UnixMilli())
	t := Task{
		ID: newID(), Tenant: n.Tenant, Tool: n.Tool, Status: Working,
		CreatedAt: now, UpdatedAt: now, TTL: s.TTL(n.TTL), PollInterval: s.pollInterval,
		Request: append(json.RawMessage(nil), n.Request...), Owner: n.Owner,
		LeaseUntil: now.Add(s.lease), Attempts: 1, ReadsCancel: n.ReadsCancel,
	}
	t.ExpiresAt = now.Add(t.TTL)
	// Count the task in, within the bounds, in this transaction, before
	// the task is written: the tenant's count first, then the total, which
	// every creator shares. Each holds the row of the one shard it
	// counted in until the transaction ends.
	tenantStart, totalStart := s.startAt()
	tenantShard, err := s.countIn(ctx, tx, &tenantCount, t.Tenant, s.maxTenant, tenantStart)
	if err != nil {
		return Task{}, err
	}
	if tenantShard < 0 {
		return Task{}, &FullError{Tenant: t.Tenant, Limit: s.maxTenant}
	}
	totalShard, err := s.countIn(ctx, tx, &totalCount, nil, s.maxTotal, totalStart)
	if err == nil && totalShard < 0 {
		err = &FullError{All: true, Limit: s.maxTotal}
	}
	if err == nil {
		_, err = tx.Exec(ctx, `INSERT INTO mcprel_tasks
			(id, tenant, tool, status, created_at, updated_at, ttl_ms, expires_at, poll_ms, request, owner, lease_until,
			attempts, tenant_shard, total_shard, reads_cancel)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)`,
			t.ID, t.Tenant, t.Tool, int(Working), ms(now), ms(now), t.TTL.Milliseconds(), ms(t.ExpiresAt),
			t.PollInterval.Milliseconds(), string(t.Request), t.Owner, ms(t.LeaseUntil), tenantShard, totalShard, t.ReadsCancel)
	}
	if err != nil {
		// Leave the transaction as this call found it, so that a caller
		// that goes on after a refusal keeps no count of a task that does
		// not exist. (After a failed statement PostgreSQL refuses even
		// this; the caller must roll back then anyway.)
		_, uncount := tx.Exec(ctx, tenantCount.uncount, t.Tenant, tenantShard)
		if totalShard >= 0 {
			_, err := tx.Exec(ctx, totalCount.uncount, totalShard)
			uncount = errors.Join(uncount, err)
		}
		var full *FullError
		if errors.As(err, &full) && uncount != nil {
			return Task{}, uncount
		}
		return Task{}, err
	}
	s.barrier("create")
	return t, nil
}

// Each count behind the bounds is split into shards: a tenant's into rows
// (tenant, shard) and the total into rows (shard), each shard allowed its
// share of the bound (shareOf; the shares add up to the bound exactly).
// A creation counts in one shard of each and holds that row's lock until
// it commits; on PostgreSQL, whose writers commit in parallel, one row per
// count would make every creator wait for the commit of the one before
// it. SQLite's writers take turns anyway, so it keeps one shard.
//
// pgShards is part of the schema: the existing tasks are dealt over this
// many shards when the counts are created (migration 2), and every process
// sharing a store must split the bounds alike. Changing it needs a
// migration that deals the counts again.
const pgShards = 16

var pgShardsSQL = strconv.Itoa(pgShards)

// countShards is how many shards a count has in the dialect.
func countShards(d store.Dialect) int {
	if d == store.Postgres {
		return pgShards
	}
	return 1
}

// shareOf is shard's share of limit split over shards: limit/shards, and
// one more for each of the first limit%shards shards. A shard whose share
// is 0 (a bound smaller than the shards) never counts a task.
func shareOf(limit, shard, shards int) int {
	share := limit / shards
	if shard < limit%shards {
		share++
	}
	return share
}

// startAt picks the shards a new task's counts start at. A store's
// consecutive creations start at consecutive shards, so that those it has
// in flight at once (fewer than the shards) each count in a shard of its
// own and none waits for another's commit; each store starts at a random
// shard, so that replicas spread too. (Shards drawn at random for each
// creation meet more: 8 concurrent creators over 16 shards find one
// another's held shard on a third of their creations.)
func (s *Store) startAt() (tenant, total int) {
	if s.startShards != nil {
		tenant, total = s.startShards()
		return tenant % s.shards, total % s.shards
	}
	v := int(s.nextShard.Add(1) % uint32(s.shards))
	return v, v
}

// counter is one count's statements; the tenant's take the tenant as
// their first argument, the total's have none.
type counter struct {
	// inc counts a task in the shard if its count is under the share.
	// A plain UPDATE, not an upsert: PostgreSQL locks the row an upsert
	// conflicts with even when its guard refuses the update, and a
	// creator moving on from a full shard must hold no lock on it — two
	// creators each holding the shard the other moves to would deadlock.
	// An UPDATE that waits for a concurrent creator's increment tests its
	// guard again on the committed row, and locks the row only if it
	// updates it, so creators racing for the last place in a shard cannot
	// both take it.
	inc string
	// rows counts the count's shard rows below a number; add creates
	// those missing, at zero: a tenant's when its first task is created
	// (they stay afterwards, as the tenant's single row did). Looking
	// first keeps add, which waits for creators holding any of the
	// rows, off the path of a creation that only found its shard full.
	rows, add string
	// uncount takes a task back out of a shard.
	uncount string
}

var (
	tenantCount = counter{
		inc:  `UPDATE mcprel_task_counts SET n = n + 1 WHERE tenant = ? AND shard = ? AND n < ?`,
		rows: `SELECT count(*) FROM mcprel_task_counts WHERE tenant = ? AND shard < ?`,
		add: `WITH RECURSIVE s (k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k + 1 < ?)
			INSERT INTO mcprel_task_counts (tenant, shard, n) SELECT ?, k, 0 FROM s WHERE true ON CONFLICT DO NOTHING`,
		uncount: `UPDATE mcprel_task_counts SET n = n - 1 WHERE tenant = ? AND shard = ?`,
	}
	totalCount = counter{
		inc:  `UPDATE mcprel_task_total SET n = n + 1 WHERE shard = ? AND n < ?`,
		rows: `SELECT count(*) FROM mcprel_task_total WHERE shard < ?`,
		add: `WITH RECURSIVE s (k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k + 1 < ?)
			INSERT INTO mcprel_task_total (shard, n) SELECT k, 0 FROM s WHERE true ON CONFLICT DO NOTHING`,
		uncount: `UPDATE mcprel_task_total SET n = n - 1 WHERE shard = ?`,
	}
)

// countIn counts a task in one shard of c (the tenant's when tenant is
// not nil) within limit, trying the shards in turn from start, and
// returns the shard, or -1 if every shard holds its share: the bound is
// reached. A shard is passed over only when its committed count is at its
// share, so the sum of the shards never passes limit.
func (s *Store) countIn(ctx context.Context, tx *store.Tx, c *counter, tenant any, limit, start int) (int, error) {
	key := func(more ...any) []any {
		if tenant == nil {
			return more
		}
		return append([]any{tenant}, more...)
	}
	looked := false
	for i := range s.shards {
		shard := (start + i) % s.shards
		share := shareOf(limit, shard, s.shards)
		if share == 0 {
			continue
		}
		for {
			if err := applied(tx.Exec(ctx, c.inc, key(shard, share)...)); err == nil {
				return shard, nil
			} else if !errors.Is(err, errChanged) {
				return -1, err
			}
			if looked {
				break
			}
			// Full, or the row is missing: the first time, make sure
			// every shard's row exists, and if one was missing try again.
			looked = true
			var have int
			if err := tx.QueryRow(ctx, c.rows, key(s.shards)...).Scan(&have); err != nil {
				return -1, err
			}
			if have == s.shards {
				break
			}
			if _, err := tx.Exec(ctx, c.add, append([]any{s.shards}, key()...)...); err != nil {
				return -1, err
			}
		}
		s.barrier("full")
	}
	return -1, nil
}

// FullError is Create's refusal when the store holds as many tasks as it
// may: the tenant's (Options.MaxTasksPerTenant) or in all (MaxTasks).
// Nothing was recorded, and CreateTx leaves its transaction as it found
// it. It is temporary: room comes back as finished tasks pass their TTL
// and are reaped, so callers answer it as a retryable overload.
type FullError struct {
	Tenant string // whose bound was reached, unless All
	All    bool   // the bound on all tenants' tasks was reached
	Limit  int
}

func (e *FullError) Error() string {
	if e.All {
		return fmt.Sprintf("tasks: the store holds %d tasks, the most it keeps (Options.MaxTasks)", e.Limit)
	}
	return fmt.Sprintf("tasks: the tenant has %d stored tasks, the most one tenant may keep (Options.MaxTasksPerTenant)", e.Limit)
}

const selectTask = `SELECT id, tenant, tool, status, status_message, created_at, updated_at, expires_at,
	poll_ms, request, result, error, cancel_requested, cancel_at, owner, lease_until, attempts,
	checkpoint, input_requests, input_responses, reads_cancel FROM mcprel_tasks `

func scanTask(row interface{ Scan(...any) error }) (Task, error) {
	var (
		t                                 Task
		status                            int
		created, updated, expires, poll   int64
		request                           string
		result, errObj, owner, checkpoint sql.NullString
		inputReq, inputResp               sql.NullString
		cancelAt, leaseUntil              sql.NullInt64
		cancelRequested, readsCancel      bool
	)
	err := row.Scan(&t.ID, &t.Tenant, &t.Tool, &status, &t.StatusMessage, &created, &updated, &expires,
		&poll, &request, &result, &errObj, &cancelRequested, &cancelAt, &owner, &leaseUntil, &t.Attempts,
		&checkpoint, &inputReq, &inputResp, &readsCancel)
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	if err != nil {
		return Task{}, err
	}
	t.Status = Status(status)
	t.CreatedAt, t.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	// The TTL reported is the effective one: expires_at is created+ttl
	// until a retention floor or an expiry moves it later.
	t.ExpiresAt = time.UnixMilli(expires)
	t.TTL, t.PollInterval = t.ExpiresAt.Sub(t.CreatedAt), time.Duration(poll)*time.Millisecond
	t.Request = json.RawMessage(request)
	t.Result, t.Error, t.Checkpoint = raw(result), raw(errObj), raw(checkpoint)
	t.InputRequests, t.InputResponses = raw(inputReq), raw(inputResp)
	t.CancelRequested, t.ReadsCancel = cancelRequested, readsCancel
	if cancelAt.Valid {
		t.CancelRequestedAt = time.UnixMilli(cancelAt.Int64)
	}
	t.Owner = owner.String
	if leaseUntil.Valid {
		t.LeaseUntil = time.UnixMilli(leaseUntil.Int64)
	}
	return t, nil
}

// scanTasks reads every task of a query's rows and closes them, so that a
// transition has read all its candidates before it writes any of them.
func scanTasks(rows *sql.Rows, err error) ([]Task, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

func raw(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// visible is the condition a task must meet to be seen, with the time as
// its parameter: a task that has not finished is always visible (past its
// TTL it is ended failed, never hidden while its worker may run), and a
// finished one until it expires.
const visible = `(status < 3 OR expires_at > ?)`

// Get returns the tenant's task. A task of another tenant, and a finished
// one past its expiry, is ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, id string) (Task, error) {
	if !ValidID(id) {
		return Task{}, ErrNotFound
	}
	t, err := scanTask(s.db.QueryRow(ctx, selectTask+`WHERE id = ? AND tenant = ? AND `+visible,
		id, tenant, ms(s.now())))
	return t, err
}

// List returns the tenant's tasks, oldest first, at most limit of them
// after cursor (empty for the first page), and the cursor of the next
// page ("" when there is none). A cursor the store did not issue is
// refused.
func (s *Store) List(ctx context.Context, tenant, cursor string, limit int) ([]Task, string, error) {
	if limit <= 0 {
		limit = 100
	}
	var afterCreated int64 = -1
	afterID := ""
	if cursor != "" {
		c, id, ok := strings.Cut(cursor, ".")
		var err error
		if ok {
			afterCreated, err = strconv.ParseInt(c, 10, 64)
		}
		if !ok || err != nil || afterCreated < 0 || !ValidID(id) {
			return nil, "", ErrBadCursor
		}
		afterID = id
	}
	var out []Task
	err := s.db.ReadTx(ctx, func(tx *store.Tx) error {
		var err error
		out, err = scanTasks(tx.Query(ctx, selectTask+`WHERE tenant = ? AND `+visible+`
			AND (created_at > ? OR (created_at = ? AND id > ?)) ORDER BY created_at, id LIMIT ?`,
			tenant, ms(s.now()), afterCreated, afterCreated, afterID, limit+1))
		return err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		next = fmt.Sprintf("%d.%s", ms(last.CreatedAt), last.ID)
	}
	return out, next, nil
}

// ErrBadCursor is List's answer to a cursor it did not issue.
var ErrBadCursor = errors.New("tasks: invalid cursor")

// RequestCancel records the intent to cancel the tenant's task and
// returns the task as it now is. It does not stop anything: the worker
// observes the intent at its next checkpoint. A task that no worker holds
// (its lease has expired) is cancelled at once, since no checkpoint will
// come. Recording it again changes nothing; on a finished task it changes
// nothing either and returns ErrTerminal with the task.
func (s *Store) RequestCancel(ctx context.Context, tenant, id string) (Task, error) {
	if !ValidID(id) {
		return Task{}, ErrNotFound
	}
	var t Task
	err := s.transition(ctx, func(tx *store.Tx) error {
		var err error
		t, err = scanTask(tx.QueryRow(ctx, selectTask+`WHERE id = ? AND tenant = ? AND `+visible, id, tenant, ms(s.now())))
		if err != nil {
			return err
		}
		if t.Status.Terminal() {
			return ErrTerminal
		}
		s.barrier("cancel")
		now := s.now()
		if !t.CancelRequested {
			// Only on a task still unfinished: one that finished since it
			// was read is reported as it ended, never as cancelled.
			if err := applied(tx.Exec(ctx, `UPDATE mcprel_tasks SET cancel_requested = ?, cancel_at = ?
				WHERE id = ? AND status < 3 AND NOT cancel_requested`, true, ms(now), id)); err != nil {
				return err
			}
			t.CancelRequested, t.CancelRequestedAt = true, time.UnixMilli(ms(now))
		}
		if !t.LeaseUntil.After(now) && !t.ReadsCancel {
			// finishTx's guard holds the lease to the one read: a worker
			// that renewed it meanwhile is alive and observes the intent
			// at its next checkpoint instead. A task whose work reads the
			// intent itself waits for the worker that takes it over.
			return s.finishTx(ctx, tx, &t, Cancelled, "cancelled while no worker held it", nil, nil, now)
		}
		return nil
	})
	if errors.Is(err, ErrTerminal) {
		return t, ErrTerminal
	}
	return t, err
}

// CheckpointUpdate is what a worker saves at a checkpoint. Nil fields
// keep what is stored.
type CheckpointUpdate struct {
	StatusMessage *string
	// Data is saved for a resumable tool to continue from.
	Data json.RawMessage
}

// Checkpoint is where a running task meets the store between its steps:
// the worker's lease is renewed, its status message and checkpoint data
// are saved, and the cancellation intent is read. It returns
// ErrCancelled if the intent was recorded (the task is then ended
// cancelled here, durably, and the worker must stop), ErrLeaseLost if
// owner no longer holds the task, and ErrTerminal if it was ended without
// its worker (taken over and failed as interrupted, say): either way the
// worker stops.
func (s *Store) Checkpoint(ctx context.Context, id, owner string, u CheckpointUpdate) error {
	_, err := s.checkpoint(ctx, id, owner, u)
	return err
}

// checkpoint is Checkpoint, and when it observes the intent, how long
// after the intent was recorded (see atCheckpoint).
func (s *Store) checkpoint(ctx context.Context, id, owner string, u CheckpointUpdate) (time.Duration, error) {
	if err := u.check(); err != nil {
		return 0, err
	}
	return s.atCheckpoint(ctx, id, owner, func(tx *store.Tx, t Task, now time.Time) error {
		return s.saveTx(ctx, tx, t, u, now)
	})
}

// Renew is Run.Renew's write: owner's lease on the task is renewed, the
// task marked updated and u (a status message, checkpoint data) saved, as
// at a checkpoint — but its cancellation intent is only read, and left
// for the worker to act on: the task stays working. It returns
// ErrLeaseLost when owner no longer holds the task, ErrTerminal when it
// has ended.
func (s *Store) Renew(ctx context.Context, id, owner string, u CheckpointUpdate) (cancelRequested bool, err error) {
	if err := u.check(); err != nil {
		return false, err
	}
	err = s.transition(ctx, func(tx *store.Tx) error {
		t, err := s.owned(ctx, tx, id, owner)
		if err != nil {
			return err
		}
		s.barrier("renew")
		cancelRequested = t.CancelRequested
		return s.saveTx(ctx, tx, t, u, s.now())
	})
	return cancelRequested, err
}

// check refuses checkpoint data no task keeps.
func (u CheckpointUpdate) check() error {
	if u.Data != nil && (!json.Valid(u.Data) || len(u.Data) > MaxRecordBytes) {
		return errors.New("tasks: checkpoint data must be JSON of at most 8 MiB")
	}
	return nil
}

// saveTx writes what a worker brings to a checkpoint — its lease renewed,
// the task marked updated, u saved — provided the task is still as t was
// read (leaseHeld): otherwise errChanged.
func (s *Store) saveTx(ctx context.Context, tx *store.Tx, t Task, u CheckpointUpdate, now time.Time) error {
	msg := t.StatusMessage
	if u.StatusMessage != nil {
		msg = *u.StatusMessage
	}
	data := nullable(t.Checkpoint)
	if u.Data != nil {
		data = nullable(u.Data)
	}
	return applied(tx.Exec(ctx, `UPDATE mcprel_tasks SET status_message = ?, checkpoint = ?, updated_at = ?, lease_until = ?
		WHERE id = ?`+leaseHeld, append([]any{msg, data, ms(now), ms(now.Add(s.lease)), t.ID}, held(t)...)...))
}

// atCheckpoint is where a worker meets its task's cancellation intent: in
// one write transaction the task owner holds is read, and ended cancelled
// if the intent was recorded (atCheckpoint then returns ErrCancelled once
// that commits, with the time from the intent to this checkpoint, in the
// store's milliseconds: how long cancellation took to be observed);
// otherwise update writes what the worker brought.
func (s *Store) atCheckpoint(ctx context.Context, id, owner string, update func(tx *store.Tx, t Task, now time.Time) error) (time.Duration, error) {
	cancelled := false
	var delay time.Duration
	err := s.transition(ctx, func(tx *store.Tx) error {
		t, err := s.owned(ctx, tx, id, owner)
		if err != nil {
			return err
		}
		s.barrier("checkpoint")
		now := s.now()
		if cancelled = t.CancelRequested; cancelled {
			// Another process's clock may have recorded the intent.
			delay = max(0, time.UnixMilli(ms(now)).Sub(t.CancelRequestedAt))
			return s.finishTx(ctx, tx, &t, Cancelled, "cancelled: the worker observed the intent at a checkpoint", nil, nil, now)
		}
		return update(tx, t, now)
	})
	if err == nil && cancelled {
		return delay, ErrCancelled
	}
	return 0, err
}

// owned reads a task that owner holds and that has not finished.
func (s *Store) owned(ctx context.Context, tx *store.Tx, id, owner string) (Task, error) {
	t, err := scanTask(tx.QueryRow(ctx, selectTask+`WHERE id = ?`, id))
	if err != nil {
		return Task{}, err
	}
	if t.Status.Terminal() {
		return t, ErrTerminal
	}
	if t.Owner != owner {
		return t, ErrLeaseLost
	}
	return t, nil
}

// errChanged is what a transition's guarded write finds when the task is
// no longer as the transition read it: another transaction — a second
// replica's, or a tasks/cancel — changed it in between. Nothing was
// written; transition decides again from the task as it now is.
var errChanged = errors.New("tasks: the task changed since it was read")

// maxRedecide bounds how often one transition decides again. Each round
// follows a change another transaction committed; more than a few in a
// row means something writes the task in a loop.
const maxRedecide = 8

// transition runs step, which reads a task, decides and writes it, in one
// write transaction, and runs it again in that transaction while its
// write finds the task changed (errChanged).
//
// Every write of a transition is conditional on what step read (leaseHeld
// and the like), so that two transitions deciding on the same row cannot
// both commit: on PostgreSQL, at READ COMMITTED, another transaction may
// commit between step's read and its write, and the second write then
// matches no row. Its next read sees that commit — each statement reads
// the latest committed row — so the loser decides again: ErrTerminal for
// a task that finished, ErrLeaseLost for one taken over. On SQLite one
// writer runs at a time and a guard never misses; it costs nothing there.
func (s *Store) transition(ctx context.Context, step func(tx *store.Tx) error) error {
	return s.db.WriteBatched(ctx, func(tx *store.Tx) error {
		for range maxRedecide {
			if err := step(tx); !errors.Is(err, errChanged) {
				return err
			}
		}
		return errors.New("tasks: the task kept changing under this transition; try again")
	})
}

// leaseHeld is the condition on a worker's write (and on any write that
// ends a task): the task is still unfinished, in the status read, under
// the same owner, takeover count and lease. A takeover by another process
// changes the owner and the count; a renewal, the lease.
const leaseHeld = ` AND status = ? AND owner = ? AND attempts = ? AND lease_until = ?`

// held is leaseHeld's arguments: what t was read with.
func held(t Task) []any {
	return []any{int(t.Status), t.Owner, t.Attempts, ms(t.LeaseUntil)}
}

// applied checks that a guarded write changed its one row, and reports
// errChanged when it matched none.
func applied(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return errChanged
	}
	return nil
}

func nullable(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// Finish ends a task that owner holds with a terminal status: Completed
// with its result, Failed with a JSON-RPC error object, or Cancelled. A
// task already finished is ErrTerminal and keeps its status: the first end
// recorded wins. A task another process took over after owner's lease
// expired is ErrLeaseLost: the worker that lost its lease writes nothing,
// even when the takeover commits between Finish's read and its write.
func (s *Store) Finish(ctx context.Context, id, owner string, status Status, message string, result, errObj json.RawMessage) error {
	if !status.Terminal() {
		return fmt.Errorf("tasks: %s is not a terminal status", status)
	}
	for _, b := range []json.RawMessage{result, errObj} {
		if b != nil && (!json.Valid(b) || len(b) > MaxRecordBytes) {
			return errors.New("tasks: a task's result and error must be JSON of at most 8 MiB")
		}
	}
	return s.transition(ctx, func(tx *store.Tx) error {
		t, err := s.owned(ctx, tx, id, owner)
		if err != nil {
			return err
		}
		s.barrier("finish")
		return s.finishTx(ctx, tx, &t, status, message, result, errObj, s.now())
	})
}

// finishTx moves t to a terminal status and releases its lease, provided
// the task is still as t was read (leaseHeld): otherwise errChanged, and
// nothing is written.
func (s *Store) finishTx(ctx context.Context, tx *store.Tx, t *Task, status Status, message string, result, errObj json.RawMessage, now time.Time) error {
	if !t.Status.canMove(status) {
		return fmt.Errorf("tasks: a %s task cannot become %s", t.Status, status)
	}
	// A finished task is kept at least s.retain from now, past its TTL if
	// need be, so that its client can still read the result.
	keep := ms(now.Add(s.retain))
	err := applied(tx.Exec(ctx, `UPDATE mcprel_tasks SET status = ?, status_message = ?, result = ?, error = ?,
		updated_at = ?, owner = NULL, lease_until = NULL, input_requests = NULL,
		expires_at = CASE WHEN expires_at < ? THEN ? ELSE expires_at END WHERE id = ?`+leaseHeld,
		append([]any{int(status), message, nullable(result), nullable(errObj), ms(now), keep, keep, t.ID}, held(*t)...)...))
	if err != nil {
		return err
	}
	if t.ExpiresAt.Before(time.UnixMilli(keep)) {
		t.ExpiresAt = time.UnixMilli(keep)
		t.TTL = t.ExpiresAt.Sub(t.CreatedAt)
	}
	t.Status, t.StatusMessage, t.Result, t.Error = status, message, result, errObj
	t.UpdatedAt, t.Owner, t.LeaseUntil, t.InputRequests = time.UnixMilli(ms(now)), "", time.Time{}, nil
	return nil
}

// RequireInput moves a task that owner holds to InputRequired, waiting on
// requests (a JSON object of questions keyed by names never reused in the
// task's life). A cancellation intent recorded meanwhile is observed here
// as at a checkpoint.
func (s *Store) RequireInput(ctx context.Context, id, owner string, requests json.RawMessage, message string) error {
	_, err := s.requireInput(ctx, id, owner, requests, message)
	return err
}

// requireInput is RequireInput, and when it observes the intent, how long
// after the intent was recorded.
func (s *Store) requireInput(ctx context.Context, id, owner string, requests json.RawMessage, message string) (time.Duration, error) {
	if !json.Valid(requests) || len(requests) > MaxRecordBytes {
		return 0, errors.New("tasks: input requests must be a JSON object of at most 8 MiB")
	}
	return s.atCheckpoint(ctx, id, owner, func(tx *store.Tx, t Task, now time.Time) error {
		return applied(tx.Exec(ctx, `UPDATE mcprel_tasks SET status = ?, status_message = ?, input_requests = ?,
			updated_at = ?, lease_until = ? WHERE id = ?`+leaseHeld,
			append([]any{int(InputRequired), message, string(requests), ms(now), ms(now.Add(s.lease)), id}, held(t)...)...))
	})
}

// ProvideInput stores the tenant's answers to an InputRequired task's
// requests (a JSON object keyed as the requests are). Answers to keys the
// task does not wait on are ignored, as are answers already given. When
// every request has its answer, the task is Working again. It returns
// ErrTerminal for a finished task.
func (s *Store) ProvideInput(ctx context.Context, tenant, id string, responses map[string]json.RawMessage) error {
	if !ValidID(id) {
		return ErrNotFound
	}
	return s.transition(ctx, func(tx *store.Tx) error {
		t, err := scanTask(tx.QueryRow(ctx, selectTask+`WHERE id = ? AND tenant = ? AND `+visible, id, tenant, ms(s.now())))
		if err != nil {
			return err
		}
		if t.Status.Terminal() {
			return ErrTerminal
		}
		if t.Status != InputRequired {
			return nil // nothing asked: eventually consistent, ignored
		}
		s.barrier("input")
		var asked map[string]json.RawMessage
		if err := json.Unmarshal(t.InputRequests, &asked); err != nil {
			return fmt.Errorf("tasks: stored input requests: %w", err)
		}
		have := map[string]json.RawMessage{}
		if t.InputResponses != nil {
			if err := json.Unmarshal(t.InputResponses, &have); err != nil {
				return fmt.Errorf("tasks: stored input responses: %w", err)
			}
		}
		for k, v := range responses {
			if _, ok := asked[k]; !ok {
				continue
			}
			if _, done := have[k]; !done {
				have[k] = v
			}
		}
		all := true
		for k := range asked {
			if _, ok := have[k]; !ok {
				all = false
			}
		}
		b, err := json.Marshal(have)
		if err != nil {
			return err
		}
		status := InputRequired
		if all {
			status = Working
		}
		// Only onto the requests and answers read: a task that finished
		// meanwhile stays finished, and an answer another replica stored
		// meanwhile is merged on the next round, not overwritten.
		return applied(tx.Exec(ctx, `UPDATE mcprel_tasks SET input_responses = ?, status = ?, updated_at = ?
			WHERE id = ? AND status = ? AND COALESCE(input_requests, '') = ? AND COALESCE(input_responses, '') = ?`,
			string(b), int(status), ms(s.now()), id, int(InputRequired), string(t.InputRequests), string(t.InputResponses)))
	})
}

// Heartbeat renews the lease of every unfinished task owner holds, so that
// a tool whose step outlasts the lease is not taken over while its
// process lives. It returns how many it renewed.
func (s *Store) Heartbeat(ctx context.Context, owner string) (int, error) {
	n := 0
	err := s.db.WriteBatched(ctx, func(tx *store.Tx) error {
		now := s.now()
		res, err := tx.Exec(ctx, `UPDATE mcprel_tasks SET lease_until = ? WHERE owner = ? AND status < 3`,
			ms(now.Add(s.lease)), owner)
		if err != nil {
			return err
		}
		c, err := res.RowsAffected()
		n = int(c)
		return err
	})
	return n, err
}

// TakeOver gives owner up to limit unfinished tasks whose lease has
// expired — their process died or stopped without finishing them — each
// with its attempt counted. A task whose cancellation was requested is
// ended cancelled instead, and not returned — unless its work reads the
// intent itself (ReadsCancel): it is returned, CancelRequested set, for
// the work to find out what the cancellation left. The caller resumes
// each task or ends it (Finish).
func (s *Store) TakeOver(ctx context.Context, owner string, limit int) ([]Task, error) {
	var out []Task
	err := s.db.WriteBatched(ctx, func(tx *store.Tx) error {
		out = out[:0]
		now := s.now()
		expired, err := scanTasks(tx.Query(ctx, selectTask+`WHERE status < 3 AND lease_until <= ? ORDER BY lease_until LIMIT ?`, ms(now), limit))
		if err != nil {
			return err
		}
		s.barrier("takeover")
		for _, t := range expired {
			res, err := tx.Exec(ctx, `UPDATE mcprel_tasks SET owner = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
				WHERE id = ? AND status < 3 AND lease_until <= ?`, owner, ms(now.Add(s.lease)), ms(now), t.ID, ms(now))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				if err != nil {
					return err
				}
				continue // another process took it first
			}
			// Read again what was claimed: the row may have changed
			// between the query and the claim, and from here on this
			// transaction holds it.
			if t, err = scanTask(tx.QueryRow(ctx, selectTask+`WHERE id = ?`, t.ID)); err != nil {
				return err
			}
			if t.CancelRequested && !t.ReadsCancel {
				if err := s.finishTx(ctx, tx, &t, Cancelled, "cancelled while its worker was gone", nil, nil, now); err != nil {
					return err
				}
				continue
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// Release gives up owner's lease on an unfinished task at once, so that
// another process may take it over without waiting for the lease to
// expire (a graceful shutdown that leaves work behind).
func (s *Store) Release(ctx context.Context, id, owner string) error {
	return s.db.WriteBatched(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE mcprel_tasks SET lease_until = ? WHERE id = ? AND owner = ? AND status < 3`,
			ms(s.now()), id, owner)
		return err
	})
}

// expiredError is the JSON-RPC error a task gets when it is still running
// at its TTL.
func expiredError(ttl time.Duration) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"code": -32603,
		"message": fmt.Sprintf("the task expired: it was still running when its TTL of %v from creation passed, and was stopped", ttl)})
	return b
}

// Expire ends up to limit tasks that have not finished and whose TTL has
// passed, whoever holds them, and returns them as they were before (their
// Owner says which process's worker must stop). Each ends failed with an
// error and a status message that say it expired — or cancelled, when
// its cancellation was requested — and is then kept for Retain like any
// finished task. The worker still running one loses: its checkpoints
// return ErrTerminal and its Finish changes nothing.
//
// This is the 2026-07-28 rule ("After the TTL the server MAY mark the
// task failed and delete it"), applied in both eras: a task is never
// deleted, nor hidden, while a worker may still run it.
func (s *Store) Expire(ctx context.Context, limit int) ([]Task, error) {
	var out []Task
	err := s.db.WriteBatched(ctx, func(tx *store.Tx) error {
		out = out[:0]
		now := s.now()
		expired, err := scanTasks(tx.Query(ctx, selectTask+`WHERE status < 3 AND expires_at <= ? ORDER BY expires_at LIMIT ?`, ms(now), limit))
		if err != nil {
			return err
		}
		for _, t := range expired {
			status, message, errObj := Failed, fmt.Sprintf("expired: still running when its TTL of %v passed; it was stopped", t.TTL), expiredError(t.TTL)
			if t.CancelRequested && !t.ReadsCancel {
				status, message, errObj = Cancelled, "cancelled: its TTL passed before a worker observed the cancellation", nil
			}
			// Conditional on the state read: a worker's Finish that
			// committed meanwhile wins, and this task is skipped.
			res, err := tx.Exec(ctx, `UPDATE mcprel_tasks SET status = ?, status_message = ?, error = ?, updated_at = ?,
				owner = NULL, lease_until = NULL, input_requests = NULL, expires_at = ?
				WHERE id = ? AND status < 3 AND expires_at <= ?`,
				int(status), message, nullable(errObj), ms(now), ms(now.Add(s.retain)), t.ID, ms(now))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				if err != nil {
					return err
				}
				continue
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// Held returns the ids of the tasks owner holds: tasks that have not
// finished and are leased to it. A runner stops the workers of any other
// task it runs — ended without it (expired, say), taken over by another
// process, or deleted — so that no worker runs on for a record it no
// longer holds.
func (s *Store) Held(ctx context.Context, owner string) (map[string]bool, error) {
	held := map[string]bool{}
	err := s.db.ReadTx(ctx, func(tx *store.Tx) error {
		clear(held)
		rows, err := tx.Query(ctx, `SELECT id FROM mcprel_tasks WHERE owner = ? AND status < 3`, owner)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			held[id] = true
		}
		return rows.Err()
	})
	return held, err
}

// Reap deletes up to batch finished tasks past their expiry and returns
// how many it deleted. A task that has not finished is never deleted, so
// that no worker ever runs for a record that is gone: past its TTL it is
// ended first (Expire), then kept for Retain. It keeps the store bounded.
func (s *Store) Reap(ctx context.Context, batch int) (int, error) {
	n := 0
	err := s.db.WriteTx(ctx, func(tx *store.Tx) error {
		now := ms(s.now())
		res, err := tx.Exec(ctx, `DELETE FROM mcprel_tasks WHERE id IN (SELECT id FROM mcprel_tasks
			WHERE status >= 3 AND expires_at <= ? LIMIT ?)`, now, batch)
		if err != nil {
			return err
		}
		c, err := res.RowsAffected()
		n = int(c)
		return err
	})
	return n, err
}
