// Package status is the operator's status page of an mcprel runtime: which
// replica answered, since when and running what; the gateway's upstreams
// (state, circuit, restarts, calls in flight, recent latency, last error);
// every replica sharing the store, each with its upstreams in brief;
// the unknown outcomes waiting to be reconciled, each with the read that
// checks it and the command that closes it; the tasks and the outbox's
// deliveries by state; and the tenants using the most of their limits. It
// is served as HTML that refreshes itself (Page.HTML, at /status) and as
// the same data in JSON (Page.JSON, at /status.json).
//
// The page is an http.Handler over narrow interfaces of its sources, so
// that it knows none of the packages that own the data (the ledger, the
// tasks, the outbox, the gateway, the server): package host implements
// them and mounts the page beside the metrics, behind the same
// authentication and Host and Origin checks. Every section is bounded
// however much the stores hold, and every source is read with a timeout:
// one that fails or is slow shows as unavailable, its error logged and
// never shown, since a storage error may name what an operator's viewer
// should not read.
package status

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds of the page.
const (
	// DefaultTimeout bounds the read of each source.
	DefaultTimeout = 2 * time.Second
	// MaxUnknown is the most unknown outcomes the page lists; it says how
	// many more there are.
	MaxUnknown = 50
	// MaxTenants is the most tenants the page lists, the busiest first.
	MaxTenants = 50
	// MaxText bounds a free text the page shows (an error, a reason), in
	// bytes.
	MaxText = 300
	// MaxReplicas is the most replicas the page lists, the most recently
	// seen first; it says how many more there are.
	MaxReplicas = 64
	// MaxReplicaUpstreams is the most upstreams the page lists for one
	// replica; it says how many more there are.
	MaxReplicaUpstreams = 100
)

// Upstream is one of a gateway's upstreams as the page shows it.
type Upstream struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	// Era is the protocol era it speaks ("legacy", "modern"), "" before it
	// first connected.
	Era string `json:"era"`
	// State is "connected" or "down".
	State string `json:"state"`
	// Circuit is its circuit breaker's state: closed, open or half-open.
	Circuit  string `json:"circuit"`
	Restarts int    `json:"restarts"`
	InFlight int    `json:"in_flight"`
	Sessions int    `json:"sessions"`
	// Latency is of its recent answered calls.
	Latency Latency `json:"latency"`
	// LastError is why it last failed to connect or died, with its
	// secrets taken out (see Redact); "" when it never failed.
	LastError   string     `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

// Latency summarises the time recent calls spent upstream.
type Latency struct {
	// Samples is how many recent calls it summarises; the rest is zero
	// without any.
	Samples int     `json:"samples"`
	LastMs  float64 `json:"last_ms"`
	P50Ms   float64 `json:"p50_ms"`
	P90Ms   float64 `json:"p90_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// Unknown is an operation whose outcome is unknown, waiting for an
// operator to check what it did and close it.
type Unknown struct {
	Tenant string    `json:"tenant"`
	Tool   string    `json:"tool"`
	Key    string    `json:"key"`
	At     time.Time `json:"at"` // when its outcome became unknown
	// AgeSeconds is how long it has waited when the page was made.
	AgeSeconds float64 `json:"age_seconds"`
	Reason     string  `json:"reason"`
	// ReconcileWith is the read the policy names to check what it did;
	// "" when none is named.
	ReconcileWith string `json:"reconcile_with"`
	// Resolve is the command that closes it, once one of --result FILE,
	// --failed MESSAGE or --forget is added.
	Resolve string `json:"resolve"`
}

// Replica is one of the replicas sharing the store, as it last said it
// was: several gateways behind a load balancer each write theirs, so the
// page of any of them lists the upstreams of all.
type Replica struct {
	Name string `json:"name"`
	// LastSeen is when the replica last wrote its upstreams, by its own
	// clock.
	LastSeen time.Time `json:"last_seen"`
	// AgeSeconds is how long before the page was made it last wrote
	// them.
	AgeSeconds float64 `json:"age_seconds"`
	// This says the replica is the one that answered.
	This      bool              `json:"this"`
	Upstreams []ReplicaUpstream `json:"upstreams"`
	// MoreUpstreams counts the upstreams left out: those past
	// MaxReplicaUpstreams, and those the replica itself left out to keep
	// what it wrote bounded.
	MoreUpstreams int `json:"more_upstreams"`
}

// ReplicaUpstream is one upstream of a replica, in brief.
type ReplicaUpstream struct {
	Name string `json:"name"`
	// State is "connected" or "down".
	State string `json:"state"`
	// Circuit is its circuit breaker's state: closed, open or half-open.
	Circuit  string `json:"circuit"`
	InFlight int    `json:"in_flight"`
}

// TaskCounts are how many tasks are in each status.
type TaskCounts struct {
	// ByStatus counts by the protocol's names of the statuses.
	ByStatus map[string]int
	// AtLeast names the statuses whose count is a floor: there are more
	// than counting reads.
	AtLeast []string
	// OldestWorking is when the oldest working task was created; zero
	// when none works.
	OldestWorking time.Time
}

// OutboxCounts are how many of the outbox's deliveries are pending and
// how many failed for good.
type OutboxCounts struct {
	Pending, Failed int
	// PendingAtLeast and FailedAtLeast say a count is a floor.
	PendingAtLeast, FailedAtLeast bool
}

// TenantLoad is what one tenant's calls hold now.
type TenantLoad struct {
	Tenant  string `json:"tenant"`
	Running int    `json:"running"`
	Queued  int    `json:"queued"`
	Bytes   int64  `json:"bytes"`
}

// Limits are what each tenant is held to; zero fields set no bound.
type Limits struct {
	MaxConcurrent int     `json:"max_concurrent"`
	MaxQueued     int     `json:"max_queued"`
	Rate          float64 `json:"rate"`
	Burst         int     `json:"burst"`
	MaxBytes      int64   `json:"max_bytes"`
}

// None reports whether no limit is set.
func (l Limits) None() bool { return l == Limits{} }

// The sources of the page. Each is a narrow view of the package that owns
// the data; a nil source leaves its section out.
type (
	// UpstreamSource lists a gateway's upstreams.
	UpstreamSource interface {
		Upstreams(ctx context.Context) ([]Upstream, error)
	}
	// UnknownSource lists at most limit unknown outcomes, newest first,
	// and counts all of them.
	UnknownSource interface {
		Unknown(ctx context.Context, limit int) (shown []Unknown, total int, err error)
	}
	// TaskSource counts the tasks by status.
	TaskSource interface {
		TaskCounts(ctx context.Context) (TaskCounts, error)
	}
	// OutboxSource counts the outbox's deliveries.
	OutboxSource interface {
		OutboxCounts(ctx context.Context) (OutboxCounts, error)
	}
	// TenantSource lists at most limit tenants, the busiest first, and
	// counts those with calls in flight, with the limits each is held to.
	TenantSource interface {
		Tenants(ctx context.Context, limit int) (loads []TenantLoad, total int, limits Limits, err error)
	}
	// ReplicaSource lists at most limit of the replicas seen lately, the
	// most recently seen first, and counts all of them.
	ReplicaSource interface {
		Replicas(ctx context.Context, limit int) (shown []Replica, total int, err error)
	}
)

// Options configure a Page. The zero value is a page with no sections.
type Options struct {
	// Replica names the process that answered (say, its host name and
	// pid), so that behind a load balancer one knows whose page it is.
	Replica string
	// Implementation and Version name what runs.
	Implementation, Version string
	// Started is when the process started.
	Started time.Time

	Upstreams UpstreamSource
	Unknown   UnknownSource
	Tasks     TaskSource
	Outbox    OutboxSource
	Tenants   TenantSource
	Replicas  ReplicaSource

	// Timeout bounds the read of each source; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger gets the sources' failures; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Page is the status page: its data (Snapshot) and its two handlers.
type Page struct {
	o Options
}

// New returns the page of opts. opts may be nil.
func New(opts *Options) *Page {
	p := &Page{}
	if opts != nil {
		p.o = *opts
	}
	p.o.Timeout = cmp.Or(p.o.Timeout, DefaultTimeout)
	if p.o.Logger == nil {
		p.o.Logger = slog.Default()
	}
	if p.o.Now == nil {
		p.o.Now = time.Now
	}
	return p
}

// Section says whether a section could be read. Error is a generic
// message when it could not; what failed is in the log.
type Section struct {
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"`
}

// Unavailable is what a section that could not be read says.
const Unavailable = "unavailable: could not be read now; the server logged why"

// UpstreamsSection lists the gateway's upstreams.
type UpstreamsSection struct {
	Section
	Upstreams []Upstream `json:"upstreams"`
}

// UnknownSection lists the unknown outcomes: at most MaxUnknown, newest
// first, and how many more there are.
type UnknownSection struct {
	Section
	Total    int       `json:"total"`
	Outcomes []Unknown `json:"outcomes"`
	More     int       `json:"more"`
}

// TasksSection counts the tasks by status.
type TasksSection struct {
	Section
	ByStatus map[string]int `json:"by_status"`
	// AtLeast names the statuses whose count is a floor.
	AtLeast []string `json:"at_least,omitempty"`
	// OldestWorkingAgeSeconds is the age of the oldest working task;
	// absent when none works.
	OldestWorkingAgeSeconds *float64 `json:"oldest_working_age_seconds,omitempty"`
}

// OutboxSection counts the outbox's deliveries.
type OutboxSection struct {
	Section
	Pending        int  `json:"pending"`
	Failed         int  `json:"failed"`
	PendingAtLeast bool `json:"pending_at_least,omitempty"`
	FailedAtLeast  bool `json:"failed_at_least,omitempty"`
}

// ReplicasSection lists the replicas seen lately: at most MaxReplicas,
// the most recently seen first, and how many more there are.
type ReplicasSection struct {
	Section
	Total    int       `json:"total"`
	Replicas []Replica `json:"replicas"`
	More     int       `json:"more"`
}

// TenantsSection lists the busiest tenants beside their limits.
type TenantsSection struct {
	Section
	Limits  Limits       `json:"limits"`
	Total   int          `json:"total"`
	Tenants []TenantLoad `json:"tenants"`
	More    int          `json:"more"`
}

// Snapshot is what the page shows, read at one moment. A section is nil
// when the page has no source for it.
type Snapshot struct {
	Replica        string    `json:"replica"`
	Implementation string    `json:"implementation"`
	Version        string    `json:"version"`
	StartedAt      time.Time `json:"started_at"`
	UptimeSeconds  float64   `json:"uptime_seconds"`
	GeneratedAt    time.Time `json:"generated_at"`

	Upstreams *UpstreamsSection `json:"upstreams"`
	Unknown   *UnknownSection   `json:"unknown_outcomes"`
	Tasks     *TasksSection     `json:"tasks"`
	Outbox    *OutboxSection    `json:"outbox"`
	Tenants   *TenantsSection   `json:"tenants"`
	Replicas  *ReplicasSection  `json:"replicas"`
}

// Snapshot reads every source at once, each within the timeout.
func (p *Page) Snapshot(ctx context.Context) *Snapshot {
	now := p.o.Now()
	s := &Snapshot{Replica: p.o.Replica, Implementation: p.o.Implementation, Version: p.o.Version,
		StartedAt: p.o.Started.UTC(), GeneratedAt: now.UTC()}
	if !p.o.Started.IsZero() {
		s.UptimeSeconds = seconds(now.Sub(p.o.Started))
	}
	var wg sync.WaitGroup
	if src := p.o.Upstreams; src != nil {
		s.Upstreams = &UpstreamsSection{Upstreams: []Upstream{}}
		wg.Go(func() {
			ups, ok := read(ctx, p, "upstreams", src.Upstreams)
			if s.Upstreams.Section = section(ok); ok {
				for _, u := range ups {
					u.LastError = clip(u.LastError)
					s.Upstreams.Upstreams = append(s.Upstreams.Upstreams, u)
				}
			}
		})
	}
	if src := p.o.Unknown; src != nil {
		s.Unknown = &UnknownSection{Outcomes: []Unknown{}}
		wg.Go(func() {
			type result struct {
				shown []Unknown
				total int
			}
			r, ok := read(ctx, p, "unknown outcomes", func(ctx context.Context) (result, error) {
				shown, total, err := src.Unknown(ctx, MaxUnknown)
				return result{shown, total}, err
			})
			if s.Unknown.Section = section(ok); ok {
				shown := r.shown[:min(len(r.shown), MaxUnknown)]
				for _, u := range shown {
					u.AgeSeconds = max(seconds(now.Sub(u.At)), 0)
					u.At = u.At.UTC()
					u.Reason = clip(u.Reason)
					s.Unknown.Outcomes = append(s.Unknown.Outcomes, u)
				}
				s.Unknown.Total = max(r.total, len(shown))
				s.Unknown.More = s.Unknown.Total - len(shown)
			}
		})
	}
	if src := p.o.Tasks; src != nil {
		s.Tasks = &TasksSection{ByStatus: map[string]int{}}
		wg.Go(func() {
			c, ok := read(ctx, p, "tasks", src.TaskCounts)
			if s.Tasks.Section = section(ok); ok {
				for k, v := range c.ByStatus {
					s.Tasks.ByStatus[k] = v
				}
				s.Tasks.AtLeast = c.AtLeast
				if !c.OldestWorking.IsZero() {
					age := max(seconds(now.Sub(c.OldestWorking)), 0)
					s.Tasks.OldestWorkingAgeSeconds = &age
				}
			}
		})
	}
	if src := p.o.Outbox; src != nil {
		s.Outbox = &OutboxSection{}
		wg.Go(func() {
			c, ok := read(ctx, p, "outbox", src.OutboxCounts)
			if s.Outbox.Section = section(ok); ok {
				s.Outbox.Pending, s.Outbox.Failed = c.Pending, c.Failed
				s.Outbox.PendingAtLeast, s.Outbox.FailedAtLeast = c.PendingAtLeast, c.FailedAtLeast
			}
		})
	}
	if src := p.o.Tenants; src != nil {
		s.Tenants = &TenantsSection{Tenants: []TenantLoad{}}
		wg.Go(func() {
			type result struct {
				loads  []TenantLoad
				total  int
				limits Limits
			}
			r, ok := read(ctx, p, "tenants", func(ctx context.Context) (result, error) {
				loads, total, limits, err := src.Tenants(ctx, MaxTenants)
				return result{loads, total, limits}, err
			})
			if s.Tenants.Section = section(ok); ok {
				s.Tenants.Tenants = append(s.Tenants.Tenants, r.loads[:min(len(r.loads), MaxTenants)]...)
				s.Tenants.Limits = r.limits
				s.Tenants.Total = max(r.total, len(s.Tenants.Tenants))
				s.Tenants.More = s.Tenants.Total - len(s.Tenants.Tenants)
			}
		})
	}
	if src := p.o.Replicas; src != nil {
		s.Replicas = &ReplicasSection{Replicas: []Replica{}}
		wg.Go(func() {
			type result struct {
				shown []Replica
				total int
			}
			r, ok := read(ctx, p, "replicas", func(ctx context.Context) (result, error) {
				shown, total, err := src.Replicas(ctx, MaxReplicas)
				return result{shown, total}, err
			})
			if s.Replicas.Section = section(ok); ok {
				shown := r.shown[:min(len(r.shown), MaxReplicas)]
				for _, rep := range shown {
					rep.This = rep.Name == p.o.Replica
					rep.Name = clip(rep.Name)
					rep.AgeSeconds = max(seconds(now.Sub(rep.LastSeen)), 0)
					rep.LastSeen = rep.LastSeen.UTC()
					ups := rep.Upstreams[:min(len(rep.Upstreams), MaxReplicaUpstreams)]
					rep.MoreUpstreams += len(rep.Upstreams) - len(ups)
					rep.Upstreams = make([]ReplicaUpstream, 0, len(ups))
					for _, u := range ups {
						u.Name, u.State, u.Circuit = clip(u.Name), clip(u.State), clip(u.Circuit)
						rep.Upstreams = append(rep.Upstreams, u)
					}
					s.Replicas.Replicas = append(s.Replicas.Replicas, rep)
				}
				s.Replicas.Total = max(r.total, len(shown))
				s.Replicas.More = s.Replicas.Total - len(shown)
			}
		})
	}
	wg.Wait()
	return s
}

// read calls f within the page's timeout. A failure, a panic or a source
// still reading at the timeout is logged, and read reports false: the
// section shows as unavailable, and the source's answer, should it come
// later, is dropped.
func read[T any](ctx context.Context, p *Page, what string, f func(context.Context) (T, error)) (T, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- result{err: fmt.Errorf("panic: %v", v)}
			}
		}()
		v, err := f(ctx)
		done <- result{v, err}
	}()
	var zero T
	select {
	case r := <-done:
		if r.err != nil {
			p.o.Logger.Warn("status page: reading a source failed", "source", what, "err", r.err)
			return zero, false
		}
		return r.v, true
	case <-ctx.Done():
		p.o.Logger.Warn("status page: a source did not answer in time", "source", what, "timeout", p.o.Timeout)
		return zero, false
	}
}

func section(ok bool) Section {
	if ok {
		return Section{Available: true}
	}
	return Section{Error: Unavailable}
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// clip bounds a free text at MaxText bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= MaxText {
		return s
	}
	i := MaxText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// urlPattern matches a URL in a message.
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// bearerPattern matches credentials written after an authorization scheme.
var bearerPattern = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[^\s"',;]+`)

// Redact takes secrets out of a message before the page shows it: every
// URL loses its user information, query and fragment; a credential after
// Bearer or Basic is replaced; and each of secrets (header values,
// environment values an upstream is given) is replaced wherever it
// appears. Secrets shorter than 4 bytes are left alone, lest the message
// become unreadable; such a secret protects nothing anyway.
func Redact(msg string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	msg = urlPattern.ReplaceAllStringFunc(msg, func(u string) string {
		scheme, rest, _ := strings.Cut(u, "://")
		if i := strings.IndexAny(rest, "?#"); i >= 0 {
			rest = rest[:i]
		}
		// The user information ends at the last @ before the path.
		host, path := rest, ""
		if i := strings.Index(rest, "/"); i >= 0 {
			host, path = rest[:i], rest[i:]
		}
		if i := strings.LastIndex(host, "@"); i >= 0 {
			host = host[i+1:]
		}
		return scheme + "://" + host + path
	})
	return bearerPattern.ReplaceAllString(msg, "$1 [redacted]")
}
