package server

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// admission decides, at once, whether a call runs, waits or is refused.
//
// Calls are bounded server-wide, per tool (or per handler kind) and, when
// Options.Tenant sets limits, per tenant: in number, and in the bytes their
// requests hold while they wait and run. Each tool has its own lane — a
// concurrency limit and a FIFO queue — so calls of a slow tool wait in
// their own queue instead of starving other tools. A queued call holds no
// goroutine; past the queue bounds a call is refused with a retryable
// overload error, and a call over a token-bucket rate limit (per tool,
// per tenant) is refused with the time until a token is free. A handler
// goroutine that finishes picks up the oldest queued call that may run
// now, so handler goroutines never exceed the server-wide limit.
type admission struct {
	mu           sync.Mutex
	limit        int   // server-wide running limit
	maxQueue     int   // server-wide queued limit
	maxBytes     int64 // server-wide bound on the bytes of admitted requests
	running      int
	queued       int
	bytes        int64              // held by the calls running and queued
	seq          uint64             // arrival order across lanes
	waiting      map[*lane]struct{} // tool lanes with queued calls
	tenants      map[string]*lane
	tenantLimits Limits
	retryAfter   time.Duration // suggestion when nothing better is known
}

// lane is one tool's (or one tenant's) share of the admission.
type lane struct {
	limit    int // 0: no limit of its own
	maxQueue int // 0: no queue bound of its own
	running  int
	queued   int
	queue    []*inflight   // tool lanes only: the calls waiting, in order
	limiter  *rate.Limiter // nil: no rate limit
	runTime  time.Duration // moving average of handler run time
	maxBytes int64         // tenant and group lanes: 0, no bound of its own
	bytes    int64
}

// Limits bound what one tenant (Options.Tenant) or one group of tools
// (LimitGroup) may use, within the server's own bounds. Zero fields mean
// no limit of that kind; negative ones are errors.
type Limits struct {
	MaxConcurrent int
	MaxQueued     int
	// Rate is the sustained calls per second, Burst how many may come at
	// once.
	Rate  float64
	Burst int
	// MaxBytes bounds the bytes the running and queued requests hold
	// (see Options.MaxInflightBytes).
	MaxBytes int64
}

func (l Limits) validate(what string) error {
	if l.MaxConcurrent < 0 || l.MaxQueued < 0 || l.Rate < 0 || l.Burst < 0 || l.MaxBytes < 0 {
		return fmt.Errorf("server: %s: limits must not be negative", what)
	}
	return nil
}

// LimitGroup is a share of the server that several tools draw on
// together (Policy.Group): the tools a gateway forwards to one upstream,
// which all reach the same server however many there are. A call of one
// of them must fit its tool's limits, its group's, its tenant's and the
// server's; past the group's queue it is refused with the same retryable
// overload error. A group belongs to the first server a tool of it is
// registered on.
type LimitGroup struct {
	name string
	ln   *lane // guarded by its server's admission.mu
	srv  *Server
}

// NewLimitGroup makes a group with limits l, named in errors.
func NewLimitGroup(name string, l Limits) (*LimitGroup, error) {
	if err := l.validate("limit group " + strconv.Quote(name)); err != nil {
		return nil, err
	}
	ln := newLane(l.MaxConcurrent, l.MaxQueued, l.Rate, l.Burst)
	ln.maxBytes = l.MaxBytes
	return &LimitGroup{name: name, ln: ln}, nil
}

// bind ties g to s, the server whose admission guards its lane: a
// group shared by two servers would be counted under two locks.
func (g *LimitGroup) bind(s *Server) error {
	if g == nil {
		return nil
	}
	s.admit.mu.Lock()
	defer s.admit.mu.Unlock()
	if g.srv == nil {
		g.srv = s
	}
	if g.srv != s {
		return fmt.Errorf("limit group %q belongs to another server", g.name)
	}
	return nil
}

type admitDecision uint8

const (
	admitRun admitDecision = iota + 1
	admitQueued
	admitRefused     // concurrency and queue bounds
	admitRateLimited // a token bucket is empty
)

func newAdmission(limit, maxQueue int, maxBytes int64, tenant Limits, retryAfter time.Duration) *admission {
	return &admission{
		limit: limit, maxQueue: maxQueue, maxBytes: maxBytes, retryAfter: retryAfter,
		waiting: make(map[*lane]struct{}), tenants: make(map[string]*lane), tenantLimits: tenant,
	}
}

func newLane(limit, maxQueue int, perSecond float64, burst int) *lane {
	ln := &lane{limit: limit, maxQueue: maxQueue}
	if perSecond > 0 {
		ln.limiter = rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
	}
	return ln
}

func (ln *lane) hasRoom() bool { return ln.limit == 0 || ln.running < ln.limit }

func (ln *lane) queueFull() bool { return ln.maxQueue != 0 && ln.queued >= ln.maxQueue }

// lanesLocked returns the lanes a call must fit in: its tool's, its
// group's when it has one, and its tenant's when tenants are limited
// (created on first use). They are put in buf, the caller's: this runs
// for every call's admission and release, and needs no allocation.
func (a *admission) lanesLocked(r *inflight, buf *[3]*lane) []*lane {
	lanes := append(buf[:0], r.lane)
	if r.group != nil {
		lanes = append(lanes, r.group)
	}
	t := a.tenantLimits
	if t == (Limits{}) {
		return lanes
	}
	tl := a.tenants[r.tenant]
	if tl == nil {
		tl = newLane(t.MaxConcurrent, t.MaxQueued, t.Rate, t.Burst)
		tl.maxBytes = t.MaxBytes
		a.tenants[r.tenant] = tl
	}
	return append(lanes, tl)
}

// admit decides for a call; for a refusal it also says when to retry.
func (a *admission) admit(r *inflight, now time.Time) (admitDecision, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var buf [3]*lane
	lanes := a.lanesLocked(r, &buf)
	defer a.forgetIdleTenantLocked(r.tenant, now)

	// Rate limits first: a call over its rate is refused even when slots
	// are free. Tokens taken by a call that is then refused are returned.
	var taken []*rate.Reservation
	giveBack := func() {
		for _, res := range taken {
			res.CancelAt(now)
		}
	}
	for _, ln := range lanes {
		if ln.limiter == nil {
			continue
		}
		res := ln.limiter.ReserveN(now, 1)
		if d := res.DelayFrom(now); !res.OK() || d > 0 {
			res.CancelAt(now)
			giveBack()
			if !res.OK() {
				d = time.Second
			}
			return admitRateLimited, d
		}
		taken = append(taken, res)
	}

	// Bytes: a call whose request would take the held bytes past a bound
	// is refused, whether or not it could run now.
	roomForBytes := a.bytes+r.size <= a.maxBytes
	for _, ln := range lanes {
		roomForBytes = roomForBytes && (ln.maxBytes == 0 || ln.bytes+r.size <= ln.maxBytes)
	}
	if !roomForBytes {
		giveBack()
		return admitRefused, a.retryAfterLocked(r.lane)
	}
	fits := a.running < a.limit && len(r.lane.queue) == 0
	for _, ln := range lanes {
		fits = fits && ln.hasRoom()
	}
	if fits {
		for _, ln := range lanes {
			ln.running++
			ln.bytes += r.size
		}
		a.running++
		a.bytes += r.size
		return admitRun, 0
	}
	canWait := a.queued < a.maxQueue
	for _, ln := range lanes {
		canWait = canWait && !ln.queueFull()
	}
	if canWait {
		a.seq++
		// Set before the call is in the queue: a finishing handler may
		// take it, run it and record it before admit's caller resumes.
		r.queued, r.seq, r.queuedAt = true, a.seq, now
		r.lane.queue = append(r.lane.queue, r)
		for _, ln := range lanes {
			ln.queued++
			ln.bytes += r.size
		}
		a.queued++
		a.bytes += r.size
		a.waiting[r.lane] = struct{}{}
		return admitQueued, 0
	}
	giveBack()
	return admitRefused, a.retryAfterLocked(r.lane)
}

// retryAfterLocked estimates when a refused call could be admitted: the
// lane's average run time for each call ahead of it, spread over its
// slots; the configured suggestion until run times are known.
func (a *admission) retryAfterLocked(ln *lane) time.Duration {
	if ln.runTime <= 0 {
		return a.retryAfter
	}
	slots := ln.limit
	if slots == 0 {
		slots = a.limit
	}
	d := ln.runTime * time.Duration(len(ln.queue)+1) / time.Duration(max(slots, 1))
	return min(max(d, 10*time.Millisecond), time.Minute)
}

// next releases the slot of done, which ran for ran, and returns the oldest
// queued call that may run now (its slots already taken), or nil.
func (a *admission) next(done *inflight, ran time.Duration) *inflight {
	a.mu.Lock()
	defer a.mu.Unlock()
	var buf [3]*lane
	for _, ln := range a.lanesLocked(done, &buf) {
		ln.running--
		ln.bytes -= done.size
	}
	a.running--
	a.bytes -= done.size
	// An exponentially weighted moving average, weight 1/8.
	if done.lane.runTime == 0 {
		done.lane.runTime = ran
	} else {
		done.lane.runTime += (ran - done.lane.runTime) / 8
	}
	a.forgetIdleTenantLocked(done.tenant, time.Now())

	var best *inflight
	for ln := range a.waiting {
		head := ln.queue[0]
		if best != nil && head.seq > best.seq {
			continue
		}
		runnable := true
		var buf [3]*lane
		for _, l := range a.lanesLocked(head, &buf) {
			runnable = runnable && l.hasRoom()
		}
		if runnable {
			best = head
		}
	}
	if best == nil {
		return nil
	}
	a.dequeueLocked(best)
	for _, ln := range a.lanesLocked(best, &buf) {
		ln.running++
		ln.bytes += best.size // dequeueLocked gave them back
	}
	a.running++
	a.bytes += best.size
	return best
}

// remove takes a call out of its queue; it reports false if the call was
// not waiting (it is running, or already gone).
func (a *admission) remove(r *inflight) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !r.queued {
		return false
	}
	a.dequeueLocked(r)
	a.forgetIdleTenantLocked(r.tenant, time.Now())
	return true
}

func (a *admission) dequeueLocked(r *inflight) {
	ln := r.lane
	for i, q := range ln.queue {
		if q == r {
			ln.queue = append(ln.queue[:i], ln.queue[i+1:]...)
			break
		}
	}
	if len(ln.queue) == 0 {
		delete(a.waiting, ln)
	}
	var buf [3]*lane
	for _, l := range a.lanesLocked(r, &buf) {
		l.queued--
		l.bytes -= r.size
	}
	a.queued--
	a.bytes -= r.size
	r.queued = false
}

// forgetIdleTenantLocked drops the lane of a tenant with nothing running or
// waiting and a full token bucket — a fresh lane would be identical — so
// that lanes do not accumulate for every tenant ever seen.
func (a *admission) forgetIdleTenantLocked(tenant string, now time.Time) {
	tl := a.tenants[tenant]
	if tl == nil || tl.running != 0 || tl.queued != 0 || tl.bytes != 0 {
		return
	}
	if tl.limiter == nil || tl.limiter.TokensAt(now) >= float64(tl.limiter.Burst()) {
		delete(a.tenants, tenant)
	}
}

// Load is what the server's calls hold at one moment.
type Load struct {
	Running int   // calls whose handlers run
	Queued  int   // admitted calls waiting for a slot
	Bytes   int64 // bytes of the requests of running and queued calls
}

// Load returns what the server's calls hold now: for metrics, and for a
// test that must know a burst of calls has been admitted.
func (s *Server) Load() Load {
	a := s.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	return Load{Running: a.running, Queued: a.queued, Bytes: a.bytes}
}
