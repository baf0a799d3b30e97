package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Work is what a task does. It runs on a Runner's worker with a context
// of the runner's own — never the context of the request that created the
// task, so that closing that request's connection neither cancels nor
// stops it — and calls run.Checkpoint between its steps. Its Outcome ends
// the task, unless a checkpoint already did (the task was cancelled).
type Work func(ctx context.Context, run *Run) Outcome

// Outcome is how a Work ended its task.
type Outcome struct {
	// Status is Completed, Failed or Cancelled; or 0 when the work stopped
	// for a shutdown (a checkpoint returned ErrShutdown, or its context
	// ended), which leaves the task to another process.
	Status  Status
	Message string
	// Result is a Completed task's result; Error a Failed task's JSON-RPC
	// error object.
	Result json.RawMessage
	Error  json.RawMessage
}

// Run is one worker's hold on one task, handed to its Work.
type Run struct {
	runner *Runner
	task   Task
	stop   <-chan struct{} // closed when the runner shuts down

	// cancelDelay is how long after the cancellation intent a checkpoint
	// of this run observed it, once one did (cancelSeen).
	cancelSeen  atomic.Bool
	cancelDelay atomic.Int64
}

// observed notes what a checkpoint returned: when it observed the
// cancellation intent, how long after the intent.
func (r *Run) observed(delay time.Duration, err error) error {
	if errors.Is(err, ErrCancelled) && !r.cancelSeen.Load() {
		r.cancelDelay.Store(int64(delay))
		r.cancelSeen.Store(true)
	}
	return err
}

// Task returns the task as the worker found it: its request, attempts,
// and (after a takeover) the checkpoint data it resumes from.
func (r *Run) Task() Task { return r.task }

// Checkpoint tells the store the task is alive between two steps, with an
// optional status message for clients ("" keeps the last one): the lease
// is renewed and the cancellation intent read. It returns ErrCancelled
// once the intent was recorded — the task is then durably cancelled, and
// the work must stop and return — and ErrShutdown when the process is
// shutting down, after which the work should stop too: the task is left
// for another process to take over. Any other error means the store could
// not be reached; the work may go on and checkpoint again later.
func (r *Run) Checkpoint(ctx context.Context, message string) error {
	return r.checkpoint(ctx, message, nil)
}

// Save is Checkpoint with data a resumable tool continues from after a
// takeover (Task.Checkpoint): the state the work reached, as JSON.
func (r *Run) Save(ctx context.Context, message string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("tasks: checkpoint data: %w", err)
	}
	return r.checkpoint(ctx, message, b)
}

func (r *Run) checkpoint(ctx context.Context, message string, data json.RawMessage) error {
	u := CheckpointUpdate{Data: data}
	if message != "" {
		u.StatusMessage = &message
	}
	began := time.Now()
	err := r.observed(r.runner.store.checkpoint(ctx, r.task.ID, r.runner.owner, u))
	if err == nil {
		select {
		case <-r.stop:
			err = ErrShutdown
		default:
		}
	}
	if obs := r.runner.opts.Observers; len(obs) > 0 {
		result := "ok"
		switch {
		case errors.Is(err, ErrCancelled):
			result = "cancelled"
		case errors.Is(err, ErrShutdown):
			result = "shutdown"
		case err != nil:
			result = "error"
		}
		d := time.Since(began)
		for _, o := range obs {
			o.Checkpointed(ctx, result, d)
		}
	}
	return err
}

// Renew tells the store the task is alive, as Checkpoint does — its
// lease renewed, its lastUpdatedAt moved, and message (if not empty) and
// data (if not nil) saved as Save saves them — and reports whether its
// cancellation was requested, without ending it. It is for work whose
// cancellation may leave an effect it must find out about before the
// task ends: a call sent to another service, which may have acted by the
// time it is cancelled. Such work stops what it does on true, and then
// ends the task itself: with Checkpoint (ErrCancelled) when nothing took
// effect, or with the outcome it found. It returns ErrShutdown,
// ErrTerminal and ErrLeaseLost as Checkpoint does.
func (r *Run) Renew(ctx context.Context, message string, data any) (cancelRequested bool, err error) {
	u := CheckpointUpdate{}
	if message != "" {
		u.StatusMessage = &message
	}
	if data != nil {
		if u.Data, err = json.Marshal(data); err != nil {
			return false, fmt.Errorf("tasks: checkpoint data: %w", err)
		}
	}
	requested, err := r.runner.store.Renew(ctx, r.task.ID, r.runner.owner, u)
	if err == nil {
		select {
		case <-r.stop:
			err = ErrShutdown
		default:
		}
	}
	return requested, err
}

// RequireInput moves the task to input_required, waiting on requests (a
// JSON object keyed by names never reused in the task's life), with
// message for clients; see Store.RequireInput.
func (r *Run) RequireInput(ctx context.Context, requests json.RawMessage, message string) error {
	return r.observed(r.runner.store.requireInput(ctx, r.task.ID, r.runner.owner, requests, message))
}

// ErrShutdown is what a checkpoint returns while the runner shuts down.
var ErrShutdown = errors.New("tasks: the process is shutting down; the task is left to another worker")

// ErrOverloaded refuses a task the runner has no room for: the client may
// retry later.
var ErrOverloaded = errors.New("tasks: too many tasks running and queued")

// RunnerOptions bound a Runner. The zero value is valid.
type RunnerOptions struct {
	// Owner names this process in the leases it holds; it must differ
	// between processes sharing a store. Empty means the host name, the
	// process id and a random suffix.
	Owner string
	// Workers bounds the tasks running at once (default 8), Queued the
	// tasks waiting for a worker (default 64), and PerTenant the tasks of
	// one tenant running or waiting (default: half of Workers+Queued), so
	// that one tenant cannot take every place in the queue.
	//
	// Workers are shared fairly between tenants: each tenant waits in a
	// queue of its own, and a worker that frees up goes to the waiting
	// tenant with the fewest tasks running (round robin between equals)
	// among those below MaxRunningPerTenant.
	Workers, Queued, PerTenant int
	// MaxRunningPerTenant bounds the tasks of one tenant running at once,
	// even when no other tenant has work: the workers beyond it are a
	// reserve no single tenant can fill, so that while one tenant's long
	// tasks hold all they may, another tenant's task starts at once on a
	// reserved worker instead of waiting for one of them to end (there
	// is no preemption). Only when the reserve is taken too — by other
	// tenants — does a task wait, and then for the first task to end,
	// whoever's it is: its tenant runs fewest and gets that worker.
	//
	// The default keeps a quarter of the workers (at least one) in
	// reserve: Workers - max(1, Workers/4) when Workers > 1, so 6 of 8;
	// with one worker there is no reserve. It must be between 1 and
	// Workers; Workers means no reserve (a tenant alone uses every
	// worker, and another tenant's first task waits for one to end).
	MaxRunningPerTenant int
	// Logger receives what goes wrong in the background (heartbeat,
	// takeover, reaping); nil means slog.Default.
	Logger *slog.Logger
	// OnEvent, when set, is told when a task of this runner starts
	// running and when it ends, and when the runner takes a task over:
	// metrics attach here. It is called on the runner's goroutines and
	// must not block.
	OnEvent func(Event)
	// Observers are told of each run of a task and of its checkpoints,
	// with contexts (see Observer): tracing attaches here.
	Observers []Observer
}

// Observer follows runs of tasks through their steps. Its methods take
// plain values, so that an implementation need not import this package,
// and this package links no tracing library.
//
// RunStarted is called as a worker starts running a task (attempt counts
// the processes that ran it); the work runs with the context it returns.
// Checkpointed is called, with that context, after each checkpoint the
// work reached, d after it began: result is "ok", "cancelled" (it
// observed the cancellation intent), "shutdown" or "error". RunEnded is
// called once the run stopped: status is "completed", "failed" or
// "cancelled", or "" when it stopped for a shutdown and was left to be
// taken over. None may block.
type Observer interface {
	RunStarted(ctx context.Context, tool, id string, attempt int) context.Context
	Checkpointed(ctx context.Context, result string, d time.Duration)
	RunEnded(ctx context.Context, status string)
}

// EventKind says what happened to a task.
type EventKind uint8

// The events a Runner reports.
const (
	// TaskStarted: a worker began running the task.
	TaskStarted EventKind = iota + 1
	// TaskEnded: the task reached Status here (Completed, Failed or
	// Cancelled); Duration is from its creation. A task that stopped for a
	// shutdown, to be taken over, ends nothing and reports TaskLeft.
	TaskEnded
	// TaskLeft: the task stopped running here without ending (a shutdown).
	TaskLeft
	// TaskTakenOver: the runner took the task over from a process whose
	// lease expired; Status is Failed when it could not be resumed.
	TaskTakenOver
	// TaskExpired: the runner ended a task still running past its TTL
	// (Store.Expire), whichever process ran it, with Status (Failed, or
	// Cancelled when its cancellation was requested); that process's
	// worker reports TaskLeft when it stops.
	TaskExpired
)

// Event is what OnEvent is told.
type Event struct {
	Kind     EventKind
	Tool     string
	Status   Status
	Duration time.Duration
	// CancelObserved is set on a TaskEnded Cancelled whose worker
	// observed the cancellation intent at one of its checkpoints here;
	// CancelDelay is then the time from the intent (tasks/cancel) to that
	// checkpoint, in the store's milliseconds: how long the work took to
	// honour the cancellation.
	CancelObserved bool
	CancelDelay    time.Duration
}

func (r *Runner) event(e Event) {
	if r.opts.OnEvent != nil {
		r.opts.OnEvent(e)
	}
}

// Runner runs tasks on a bounded pool of workers shared fairly between
// tenants, keeps their leases alive, takes over the tasks of processes
// that died, ends the tasks that outlive their TTL, and reaps expired
// ones.
type Runner struct {
	store  *Store
	owner  string
	log    *slog.Logger
	opts   RunnerOptions
	stop   chan struct{}
	ctx    context.Context // every task's context
	cancel context.CancelFunc

	mu        sync.Mutex
	reserved  int            // running + queued + reserved before creation
	perTenant map[string]int // the same, by tenant
	running   int
	runningBy map[string]int      // running, by tenant
	queues    map[string][]*entry // waiting for a worker, by tenant, oldest first
	ring      []string            // the tenants with work waiting, in turn order
	active    map[string]*entry   // queued and running, by task id
	started   uint64              // tasks dispatched to a worker so far
	draining  bool
	finished  chan struct{} // closed and replaced when a task of this process ends
	wg        sync.WaitGroup

	// afterHeld, when set, runs in stopUnheld between its read of Held
	// and its taking r.mu: a test dispatches a task there.
	afterHeld func()
}

// entry is one task of this runner, waiting for a worker or running.
type entry struct {
	tenant  string
	task    Task
	work    Work
	running bool
	started uint64                  // r.started once it was dispatched
	cancel  context.CancelCauseFunc // the run's context, once running
}

// errNotHeld is the cause of a run's context cancelled because its task
// was ended or taken without it (expired, taken over, deleted).
var errNotHeld = errors.New("tasks: the task was ended or taken over without this worker")

// NewRunner returns a runner for the store's tasks.
func NewRunner(s *Store, opts *RunnerOptions) (*Runner, error) {
	var o RunnerOptions
	if opts != nil {
		o = *opts
	}
	if o.Workers < 0 || o.Queued < 0 || o.PerTenant < 0 || o.MaxRunningPerTenant < 0 {
		return nil, errors.New("tasks: RunnerOptions bounds must not be negative")
	}
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.MaxRunningPerTenant > o.Workers {
		return nil, fmt.Errorf("tasks: RunnerOptions.MaxRunningPerTenant (%d) must not exceed Workers (%d)", o.MaxRunningPerTenant, o.Workers)
	}
	if o.MaxRunningPerTenant == 0 {
		o.MaxRunningPerTenant = o.Workers
		if o.Workers > 1 {
			o.MaxRunningPerTenant = o.Workers - max(1, o.Workers/4)
		}
	}
	if o.Queued == 0 {
		o.Queued = 64
	}
	if o.PerTenant == 0 {
		o.PerTenant = max(1, (o.Workers+o.Queued)/2)
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newID()[:8])
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{store: s, owner: o.Owner, log: o.Logger, opts: o,
		stop: make(chan struct{}), ctx: ctx, cancel: cancel,
		perTenant: map[string]int{}, runningBy: map[string]int{}, queues: map[string][]*entry{},
		active: map[string]*entry{}, finished: make(chan struct{})}, nil
}

// Owner is the name this runner's leases carry.
func (r *Runner) Owner() string { return r.owner }

// Store is the store the runner's tasks live in.
func (r *Runner) Store() *Store { return r.store }

// Slot is room reserved for one task on a runner, before the task is
// created: a creation the runner could not run is refused before it is
// recorded.
type Slot struct {
	r      *Runner
	tenant string
	used   bool
}

// Reserve takes room for one of the tenant's tasks, or returns
// ErrOverloaded (or ErrShutdown while the runner shuts down).
func (r *Runner) Reserve(tenant string) (*Slot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return nil, ErrShutdown
	}
	if r.reserved >= r.opts.Workers+r.opts.Queued || r.perTenant[tenant] >= r.opts.PerTenant {
		return nil, ErrOverloaded
	}
	r.reserved++
	r.perTenant[tenant]++
	return &Slot{r: r, tenant: tenant}, nil
}

// Release gives the room back unused (the task was not created).
func (s *Slot) Release() {
	if s.used {
		return
	}
	s.used = true
	s.r.free(s.tenant)
}

func (r *Runner) free(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreserve(tenant)
}

// unreserve gives back the tenant's room; r.mu is held.
func (r *Runner) unreserve(tenant string) {
	r.reserved--
	if r.perTenant[tenant]--; r.perTenant[tenant] <= 0 {
		delete(r.perTenant, tenant)
	}
}

// Start runs work for t, which this runner owns, in the slot: at once if a
// worker is free, or when one frees up and it is the tenant's turn (see
// RunnerOptions.Workers).
func (s *Slot) Start(t Task, work Work) {
	if s.used {
		panic("tasks: a slot was used twice")
	}
	s.used = true
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		// Shutting down before a worker was free: another process takes
		// the task over now rather than after the lease.
		r.wg.Go(func() { r.abandonQueued([]*entry{{tenant: s.tenant, task: t}}) })
		return
	}
	e := &entry{tenant: s.tenant, task: t, work: work}
	r.active[t.ID] = e
	if len(r.queues[s.tenant]) == 0 {
		r.ring = append(r.ring, s.tenant)
	}
	r.queues[s.tenant] = append(r.queues[s.tenant], e)
	r.dispatch()
}

// dispatch starts waiting tasks while workers are free, each time for
// the waiting tenant with the fewest tasks running, the earliest in turn
// among equals, passing over a tenant that runs its MaxRunningPerTenant;
// a tenant served goes to the back of the turn. r.mu is held.
func (r *Runner) dispatch() {
	for !r.draining && r.running < r.opts.Workers {
		next := -1
		for i, tenant := range r.ring {
			if n := r.runningBy[tenant]; n < r.opts.MaxRunningPerTenant && (next < 0 || n < r.runningBy[r.ring[next]]) {
				next = i
			}
		}
		if next < 0 {
			return // nothing waits, or only tenants that run all they may
		}
		tenant := r.ring[next]
		r.ring = append(r.ring[:next], r.ring[next+1:]...)
		q := r.queues[tenant]
		e := q[0]
		q[0] = nil
		if q = q[1:]; len(q) == 0 {
			delete(r.queues, tenant)
		} else {
			r.queues[tenant] = q
			r.ring = append(r.ring, tenant)
		}
		r.running++
		r.runningBy[tenant]++
		r.started++
		ctx, cancel := context.WithCancelCause(r.ctx)
		e.running, e.started, e.cancel = true, r.started, cancel
		r.wg.Go(func() { r.runEntry(ctx, e) })
	}
}

// runEntry runs one task on a worker, then gives the worker to the next.
func (r *Runner) runEntry(ctx context.Context, e *entry) {
	defer func() {
		e.cancel(nil)
		r.mu.Lock()
		r.running--
		if r.runningBy[e.tenant]--; r.runningBy[e.tenant] <= 0 {
			delete(r.runningBy, e.tenant)
		}
		delete(r.active, e.task.ID)
		r.unreserve(e.tenant)
		r.dispatch()
		r.wake() // after the room is given back: a waiter woken finds it
		r.mu.Unlock()
	}()
	r.execute(ctx, e.task, e.work)
}

// CancelQueued ends at once a task of this runner that still waits for a
// worker and whose cancellation was recorded (Store.RequestCancel): it
// leaves the queue and ends cancelled without a worker, its handler never
// entered. It reports whether it did so. A task running here, or queued
// on another replica, observes the intent at its next checkpoint instead
// (for a queued one, the runner's own before its work starts).
func (r *Runner) CancelQueued(ctx context.Context, id string) bool {
	r.mu.Lock()
	e := r.active[id]
	if e == nil || e.running || r.draining {
		r.mu.Unlock()
		return false
	}
	r.unqueue(e)
	r.wg.Add(1) // Shutdown waits for this as for a worker
	r.mu.Unlock()
	defer r.wg.Done()
	run := &Run{runner: r, task: e.task, stop: r.stop}
	err := run.observed(r.store.checkpoint(ctx, id, r.owner, CheckpointUpdate{}))
	switch {
	case errors.Is(err, ErrCancelled):
		// Counted as a run that ended at its first checkpoint, so that
		// the running gauge and the ended count stay paired.
		t := e.task
		r.event(Event{Kind: TaskStarted, Tool: t.Tool})
		r.event(Event{Kind: TaskEnded, Tool: t.Tool, Status: Cancelled, Duration: time.Since(t.CreatedAt),
			CancelObserved: true, CancelDelay: time.Duration(run.cancelDelay.Load())})
	case errors.Is(err, ErrTerminal), errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound):
		// Ended or taken without this runner: nothing of ours to run.
	default:
		// No intent recorded, or the store could not be reached: the task
		// goes back to the head of its queue, to be run (or cancelled by
		// the check before its work) in its turn.
		r.mu.Lock()
		if r.draining {
			r.mu.Unlock()
			r.abandonQueued([]*entry{e})
			return false
		}
		r.active[id] = e
		if len(r.queues[e.tenant]) == 0 {
			r.ring = append(r.ring, e.tenant)
		}
		r.queues[e.tenant] = append([]*entry{e}, r.queues[e.tenant]...)
		r.dispatch()
		r.mu.Unlock()
		return false
	}
	r.mu.Lock()
	r.unreserve(e.tenant)
	r.wake()
	r.mu.Unlock()
	return errors.Is(err, ErrCancelled)
}

// unqueue takes a waiting task out of its tenant's queue (and the tenant
// out of the turn when nothing of it waits any more); r.mu is held.
func (r *Runner) unqueue(e *entry) {
	delete(r.active, e.task.ID)
	q := r.queues[e.tenant]
	if i := slices.Index(q, e); i >= 0 {
		q = slices.Delete(q, i, i+1)
	}
	if len(q) > 0 {
		r.queues[e.tenant] = q
		return
	}
	delete(r.queues, e.tenant)
	if i := slices.Index(r.ring, e.tenant); i >= 0 {
		r.ring = slices.Delete(r.ring, i, i+1)
	}
}

// abandonQueued releases tasks that never got a worker (the runner shuts
// down): another process takes each over at once.
func (r *Runner) abandonQueued(entries []*entry) {
	for _, e := range entries {
		r.release(e.task.ID)
		r.mu.Lock()
		r.unreserve(e.tenant)
		r.wake()
		r.mu.Unlock()
	}
}

// execute runs work and records its outcome.
func (r *Runner) execute(ctx context.Context, t Task, work Work) {
	r.event(Event{Kind: TaskStarted, Tool: t.Tool})
	for _, o := range r.opts.Observers {
		ctx = o.RunStarted(ctx, t.Tool, t.ID, t.Attempts)
	}
	ended := ""
	defer func() {
		for _, o := range r.opts.Observers {
			o.RunEnded(ctx, ended)
		}
	}()
	run := &Run{runner: r, task: t, stop: r.stop}
	// The runner's own checkpoint before the work starts: a task cancelled
	// while it waited for a worker ends cancelled here without running a
	// step, and one ended or taken over meanwhile (expired, say) is not
	// run at all. The lease is renewed for the work to come — unless the
	// runner is shutting down: a task dispatched just before Shutdown is
	// then left at once to another process rather than started here only
	// to stop at its first checkpoint.
	var err error
	if t.ReadsCancel && t.Attempts > 1 {
		// Taken over: the process that ran it before may have started
		// what its work must find out about; the intent is left for it.
		_, err = r.store.Renew(ctx, t.ID, r.owner, CheckpointUpdate{})
	} else {
		err = run.observed(r.store.checkpoint(ctx, t.ID, r.owner, CheckpointUpdate{}))
	}
	if err == nil {
		select {
		case <-r.stop:
			err = ErrShutdown
		default:
		}
	}
	switch {
	case errors.Is(err, ErrShutdown):
		r.release(t.ID)
		r.event(Event{Kind: TaskLeft, Tool: t.Tool})
		return
	case errors.Is(err, ErrCancelled):
		ended = Cancelled.String()
		r.event(Event{Kind: TaskEnded, Tool: t.Tool, Status: Cancelled, Duration: time.Since(t.CreatedAt),
			CancelObserved: true, CancelDelay: time.Duration(run.cancelDelay.Load())})
		return
	case errors.Is(err, ErrTerminal), errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound), ctx.Err() != nil:
		r.event(Event{Kind: TaskLeft, Tool: t.Tool})
		return
	case err != nil:
		// The store could not be reached: the work runs, and its own
		// checkpoints and outcome meet the store later (or the task is
		// taken over, if this process cannot reach it again).
		r.log.Warn("could not check a task before running it", "task", t.ID, "tool", t.Tool, "err", err)
	}
	out := r.safely(ctx, run, work)
	if out.Status == 0 {
		r.event(Event{Kind: TaskLeft, Tool: t.Tool})
		return // the work stopped for a shutdown, or its task was ended without it: the lease is released
	}
	if out.Status == Cancelled && !run.cancelSeen.Load() && ctx.Err() != nil {
		// The work ended "cancelled" because the runner stopped it (its
		// task was ended or taken without it, or the process stops), not
		// because a client asked: that is no outcome to record. Should
		// the task in fact still be held here, releasing it lets another
		// process take it over rather than leave it working until its TTL.
		r.release(t.ID)
		r.event(Event{Kind: TaskLeft, Tool: t.Tool})
		return
	}
	// The outcome is recorded even when the process is stopping, and even
	// when the runner stopped the work because its task looked ended or
	// taken without it: the work is done, running it again elsewhere
	// would run it twice, and Finish is guarded — it changes nothing
	// (ErrTerminal, ErrLeaseLost) when the task is no longer this
	// runner's, and ends it when it still is.
	err = r.store.Finish(context.WithoutCancel(ctx), t.ID, r.owner, out.Status, out.Message, out.Result, out.Error)
	switch {
	case err == nil, errors.Is(err, ErrTerminal) && run.cancelSeen.Load():
		status := out.Status
		if err != nil {
			status = Cancelled // a checkpoint ended it first
		}
		ended = status.String()
		e := Event{Kind: TaskEnded, Tool: t.Tool, Status: status, Duration: time.Since(t.CreatedAt)}
		if status == Cancelled && run.cancelSeen.Load() {
			e.CancelObserved, e.CancelDelay = true, time.Duration(run.cancelDelay.Load())
		}
		r.event(e)
		return
	case errors.Is(err, ErrTerminal), errors.Is(err, ErrNotFound):
		// Ended without this worker (expired, say, or cancelled while no
		// worker held it), or gone: whoever ended it reported the end.
	case errors.Is(err, ErrLeaseLost):
		r.log.Warn("a task finished after another worker took it over; its outcome was dropped",
			"task", t.ID, "tool", t.Tool)
	default:
		r.log.Error("could not record a task's outcome; it will be taken over", "task", t.ID, "tool", t.Tool, "err", err)
	}
	r.event(Event{Kind: TaskLeft, Tool: t.Tool})
}

// safely runs work, turning a panic into a failed outcome and a shutdown
// stop into a released lease (Status 0).
func (r *Runner) safely(ctx context.Context, run *Run, work Work) (out Outcome) {
	t := run.task
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("a task's work panicked", "task", t.ID, "tool", t.Tool, "panic", p)
			out = Outcome{Status: Failed, Message: "the tool failed unexpectedly",
				Error: json.RawMessage(`{"code":-32603,"message":"the tool failed unexpectedly"}`)}
		}
	}()
	out = work(ctx, run)
	if out.Status == 0 {
		r.release(t.ID) // stopped for the shutdown: leave it to be taken over
	}
	return out
}

// release gives up this runner's lease on an unfinished task.
func (r *Runner) release(id string) {
	if err := r.store.Release(context.Background(), id, r.owner); err != nil {
		r.log.Warn("could not release a task at shutdown; it is taken over when its lease expires", "task", id, "err", err)
	}
}

// wake tells the waiters on Changed that a task stopped running here;
// r.mu is held.
func (r *Runner) wake() {
	close(r.finished)
	r.finished = make(chan struct{})
}

// Changed returns a channel closed the next time a task of this runner
// stops running, once its outcome is recorded and its room given back: a
// waiter for a task's end (a blocking tasks/result) reads the store again
// then, rather than poll it.
func (r *Runner) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finished
}

// Resumer decides what becomes of a task taken over from a process that
// died: the Work that resumes it, or false if it cannot be resumed (it is
// then ended failed as interrupted).
type Resumer func(t Task) (Work, bool)

// Maintain keeps the runner's leases alive, takes over expired tasks
// every interval (resuming them through resume, or failing them), and
// reaps tasks past their TTL, until ctx ends. interval 0 means a third of
// the store's lease.
func (r *Runner) Maintain(ctx context.Context, interval time.Duration, resume Resumer) {
	if interval <= 0 {
		interval = r.store.Lease() / 3
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		r.MaintainOnce(ctx, resume)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// MaintainOnce is one round of Maintain: renew this runner's leases, end
// the tasks (anyone's) still running past their TTL, stop the workers
// here whose tasks were ended or taken without them, take over the tasks
// of processes that died, and reap expired finished tasks. Expiry comes
// before takeover, so that a task past its TTL is never resumed.
func (r *Runner) MaintainOnce(ctx context.Context, resume Resumer) {
	if _, err := r.store.Heartbeat(ctx, r.owner); err != nil && ctx.Err() == nil {
		r.log.Warn("could not renew task leases", "err", err)
	}
	r.expire(ctx)
	r.stopUnheld(ctx)
	r.takeOver(ctx, resume)
	if _, err := r.store.Reap(ctx, 1000); err != nil && ctx.Err() == nil {
		r.log.Warn("could not reap expired tasks", "err", err)
	}
}

// expire ends the tasks still running past their TTL, in batches.
func (r *Runner) expire(ctx context.Context) {
	for {
		expired, err := r.store.Expire(ctx, 100)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("could not end tasks past their TTL", "err", err)
			}
			return
		}
		for _, t := range expired {
			r.log.Info("a task outlived its TTL and was ended", "task", t.ID, "tool", t.Tool, "ttl", t.TTL, "owner", t.Owner)
			status := Failed
			if t.CancelRequested {
				status = Cancelled
			}
			r.event(Event{Kind: TaskExpired, Tool: t.Tool, Status: status})
		}
		if len(expired) < 100 {
			return
		}
	}
}

// stopUnheld cancels the context of every worker here whose task this
// runner no longer holds: ended without it (by Expire, here or on another
// replica), taken over after its lease lapsed, or deleted. Its checkpoints
// already return ErrTerminal or ErrLeaseLost; this stops work that does
// not reach one, and frees its worker.
//
// Only a worker dispatched before Held was read is judged by it: a task
// is created (or taken over) with this runner as its owner before it is
// dispatched, so such a task is in the snapshot if it is still held; one
// dispatched after the read may be missing from it though held, and is
// left for the next round.
func (r *Runner) stopUnheld(ctx context.Context) {
	r.mu.Lock()
	n, before := r.running, r.started
	r.mu.Unlock()
	if n == 0 {
		return
	}
	held, err := r.store.Held(ctx, r.owner)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("could not read which tasks this process holds", "err", err)
		}
		return
	}
	if r.afterHeld != nil {
		r.afterHeld()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, e := range r.active {
		if e.running && e.started <= before && !held[id] {
			e.cancel(errNotHeld)
		}
	}
}

// interrupted is the error a task gets when its process stopped and it
// cannot be resumed.
var interrupted = json.RawMessage(`{"code":-32603,"message":"the task was interrupted: the process running it stopped before it finished, so whether it took effect is unknown; it is not run again","data":{"outcome":"unknown"}}`)

func (r *Runner) takeOver(ctx context.Context, resume Resumer) {
	for {
		r.mu.Lock()
		free := r.opts.Workers + r.opts.Queued - r.reserved
		draining := r.draining
		r.mu.Unlock()
		if free <= 0 || draining {
			return
		}
		taken, err := r.store.TakeOver(ctx, r.owner, min(free, 16))
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("could not take over expired tasks", "err", err)
			}
			return
		}
		for _, t := range taken {
			work, ok := resume(t)
			var slot *Slot
			if ok {
				slot, err = r.reserveTakeover(t.Tenant)
			}
			if !ok || err != nil {
				if ferr := r.store.Finish(ctx, t.ID, r.owner, Failed, "interrupted: the process running it stopped; outcome unknown", nil, interrupted); ferr != nil && !errors.Is(ferr, ErrTerminal) {
					r.log.Warn("could not end an interrupted task", "task", t.ID, "err", ferr)
				}
				r.event(Event{Kind: TaskTakenOver, Tool: t.Tool, Status: Failed})
				continue
			}
			r.event(Event{Kind: TaskTakenOver, Tool: t.Tool, Status: Working})
			r.log.Info("resuming a task taken over from a stopped process", "task", t.ID, "tool", t.Tool, "attempt", t.Attempts)
			slot.Start(t, work)
		}
		if len(taken) < min(free, 16) {
			return
		}
	}
}

// reserveTakeover reserves room for a resumed task; a tenant's bound does
// not refuse it, since the task exists already.
func (r *Runner) reserveTakeover(tenant string) (*Slot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining || r.reserved >= r.opts.Workers+r.opts.Queued {
		return nil, ErrOverloaded
	}
	r.reserved++
	r.perTenant[tenant]++
	return &Slot{r: r, tenant: tenant}, nil
}

// Shutdown stops taking tasks and asks running ones to stop at their next
// checkpoint (which returns ErrShutdown), leaving them to be taken over;
// tasks still waiting for a worker are released at once. When ctx ends
// first, the contexts of the tasks still running are cancelled and
// Shutdown returns ctx's error without waiting for work that ignores its
// context: the heartbeat has stopped, so such a task is taken over when
// its lease expires.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if !r.draining {
		r.draining = true
		close(r.stop)
		// Tasks still waiting for a worker are released at once.
		var queued []*entry
		for _, tenant := range r.ring {
			for _, e := range r.queues[tenant] {
				delete(r.active, e.task.ID)
				queued = append(queued, e)
			}
		}
		r.ring, r.queues = nil, map[string][]*entry{}
		if len(queued) > 0 {
			r.wg.Go(func() { r.abandonQueued(queued) })
		}
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		r.cancel()
		return ctx.Err()
	}
}
