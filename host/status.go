package host

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/status"
	"github.com/mcprel/mcprel/tasks"
)

// statusPath is where the status page is served beside the metrics at
// metricsPath: "status" in the same directory (/metrics → /status), and
// its JSON at the same path plus ".json".
func statusPath(metricsPath string) string {
	return path.Join(path.Dir(metricsPath), "status")
}

// replicaName is the name of this process on the status page: the host's
// name and the process id.
func replicaName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// newStatusPage builds the status page over the runtime's sources.
func (rt *Runtime) newStatusPage() *status.Page {
	o := &rt.opts
	src := statusSources{rt}
	po := &status.Options{
		Replica: rt.replica, Implementation: o.Implementation.Name, Version: o.Implementation.Version,
		Started: rt.started, Unknown: src, Tasks: src, Tenants: src, Logger: rt.logger,
	}
	if rt.board != nil {
		po.Replicas = src
	}
	if rt.gateway != nil {
		po.Upstreams = src
	}
	if rt.outbox != nil {
		po.Outbox = src
	}
	return status.New(po)
}

// statusSources is the runtime as the status page reads it.
type statusSources struct{ rt *Runtime }

func (s statusSources) Upstreams(context.Context) ([]status.Upstream, error) {
	states := s.rt.gateway.Upstreams()
	out := make([]status.Upstream, 0, len(states))
	for _, u := range states {
		su := status.Upstream{Name: u.Name, Transport: string(u.Transport), State: "down", Circuit: string(u.Circuit),
			Restarts: u.Restarts, InFlight: u.InFlight, Sessions: u.Sessions}
		if u.Era != 0 {
			su.Era = u.Era.String()
		}
		if u.Connected {
			su.State = "connected"
		}
		if w := s.rt.upstreamWatch; w != nil {
			w.fill(&su)
		}
		out = append(out, su)
	}
	return out, nil
}

func (s statusSources) Replicas(ctx context.Context, limit int) ([]status.Replica, int, error) {
	return s.rt.board.replicas(ctx, limit)
}

func (s statusSources) Unknown(ctx context.Context, limit int) ([]status.Unknown, int, error) {
	counts, err := s.rt.ledger.UnknownByTool(ctx)
	if err != nil {
		return nil, 0, err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return nil, 0, nil
	}
	page, err := s.rt.ledger.List(ctx, ledger.ListQuery{State: ledger.ListUnknown, Limit: limit})
	if err != nil {
		return nil, 0, err
	}
	// The gateway's policy and its upstreams' secrets as they run now,
	// a reload's included.
	var reconcile map[string]gateway.ToolPolicy
	if g := s.rt.gateway; g != nil {
		reconcile = g.Policy().Tools
	}
	var secrets []string
	if w := s.rt.upstreamWatch; w != nil {
		secrets = w.currentSecrets()
	}
	out := make([]status.Unknown, 0, len(page.Records))
	for _, r := range page.Records {
		u := status.Unknown{Tenant: r.Tenant, Tool: r.Tool, Key: r.Key, At: r.At, Reason: status.Redact(r.UnknownReason(), secrets),
			Resolve: ledger.ResolveCommand(s.rt.opts.DB, r.Tenant, r.Tool, r.Key)}
		if tp, ok := reconcile[r.Tool]; ok && tp.Keyed != nil {
			u.ReconcileWith = tp.Keyed.ReconcileWith
		}
		out = append(out, u)
	}
	return out, total, nil
}

func (s statusSources) TaskCounts(ctx context.Context) (status.TaskCounts, error) {
	c, err := s.rt.taskStore.Counts(ctx)
	if err != nil {
		return status.TaskCounts{}, err
	}
	out := status.TaskCounts{ByStatus: map[string]int{}, OldestWorking: c.OldestWorking}
	for _, st := range tasks.Statuses {
		out.ByStatus[st.String()] = c.ByStatus[st]
		if c.Capped[st] {
			out.AtLeast = append(out.AtLeast, st.String())
		}
	}
	return out, nil
}

func (s statusSources) OutboxCounts(ctx context.Context) (status.OutboxCounts, error) {
	c, err := s.rt.outbox.Counts(ctx)
	if err != nil {
		return status.OutboxCounts{}, err
	}
	return status.OutboxCounts{Pending: c.Pending, Failed: c.Failed, PendingAtLeast: c.PendingCapped, FailedAtLeast: c.FailedCapped}, nil
}

func (s statusSources) Tenants(_ context.Context, limit int) ([]status.TenantLoad, int, status.Limits, error) {
	loads, total := s.rt.srv.TenantLoads(limit)
	out := make([]status.TenantLoad, 0, len(loads))
	for _, l := range loads {
		out = append(out, status.TenantLoad{Tenant: l.Tenant, Running: l.Running, Queued: l.Queued, Bytes: l.Bytes})
	}
	lim := s.rt.srv.TenantLimits()
	return out, total, status.Limits{MaxConcurrent: lim.MaxConcurrent, MaxQueued: lim.MaxQueued, Rate: lim.Rate,
		Burst: lim.Burst, MaxBytes: lim.MaxBytes}, nil
}

// secretsOf are what the upstreams ups are given that the status page
// must never show: their headers' values, their environment's values, and
// their URLs' query values and passwords; the longest first.
func secretsOf(ups []gateway.Upstream) []string {
	var secrets []string
	for _, u := range ups {
		for _, vs := range u.Header {
			for _, v := range vs {
				secrets = append(secrets, v)
				// "Bearer TOKEN": the token alone too, wherever it is.
				if _, token, ok := strings.Cut(v, " "); ok {
					secrets = append(secrets, strings.TrimSpace(token))
				}
			}
		}
		for _, kv := range u.Env {
			if _, v, ok := strings.Cut(kv, "="); ok {
				secrets = append(secrets, v)
			}
		}
		if p, err := url.Parse(u.URL); err == nil {
			for _, vs := range p.Query() {
				secrets = append(secrets, vs...)
			}
			if pw, ok := p.User.Password(); ok {
				secrets = append(secrets, pw)
			}
		}
	}
	return sortSecrets(secrets)
}

// sortSecrets orders secrets the longest first, so that a secret holding
// another is taken out whole, and drops the duplicates.
func sortSecrets(secrets []string) []string {
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(secrets)
}

// recentCalls is how many of an upstream's latest answered calls its
// latency on the status page summarises.
const recentCalls = 128

// upstreamWatch keeps, per upstream, what the status page shows beyond the
// gateway's own state: the latency of its recent answered calls, in a
// ring of fixed size, and its last error, redacted. It hears the
// gateway's observer; it keeps only the upstreams it was made with.
type upstreamWatch struct {
	ups     []gateway.Upstream // as configured now
	secrets []string           // theirs, and the configuration's before
	now     func() time.Time
	mu      sync.Mutex
	by      map[string]*upstreamRecent
}

type upstreamRecent struct {
	ring      [recentCalls]time.Duration
	n, next   int
	lastError string
	lastAt    time.Time
}

func newUpstreamWatch(ups []gateway.Upstream) *upstreamWatch {
	w := &upstreamWatch{ups: ups, secrets: secretsOf(ups), now: time.Now, by: map[string]*upstreamRecent{}}
	for _, u := range ups {
		w.by[u.Name] = &upstreamRecent{}
	}
	return w
}

func (w *upstreamWatch) Forwarded(r gateway.ForwardRecord) {
	if !r.Reached {
		return
	}
	switch r.Outcome {
	case gateway.OutcomeOK, gateway.OutcomeToolError, gateway.OutcomeProtocolError:
	default:
		return // no answer: no time to the answer
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if u := w.by[r.Upstream]; u != nil {
		u.ring[u.next] = r.InUpstream
		u.next = (u.next + 1) % recentCalls
		u.n = min(u.n+1, recentCalls)
	}
}

func (w *upstreamWatch) UpstreamEvent(e gateway.UpstreamEvent) {
	if e.Kind != gateway.EventConnectFailed && e.Kind != gateway.EventDied {
		return
	}
	msg := "the connection ended"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Kind == gateway.EventConnectFailed {
		msg = "could not connect: " + msg
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Redacted and clipped here, once, not at every read of the page.
	msg = status.Redact(msg, w.secrets)
	if len(msg) > 4*status.MaxText {
		msg = msg[:4*status.MaxText]
	}
	if u := w.by[e.Upstream]; u != nil {
		u.lastError, u.lastAt = msg, w.now()
	}
}

// reloaded follows a reload to ups: the upstreams added are watched,
// those gone forgotten, and the secrets of the new ones are taken out
// beside the old ones' (an upstream being drained still runs with its
// old credentials).
func (w *upstreamWatch) reloaded(ups []gateway.Upstream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	by := map[string]*upstreamRecent{}
	for _, u := range ups {
		by[u.Name] = cmp.Or(w.by[u.Name], &upstreamRecent{})
	}
	w.by = by
	// The upstreams replaced may still be draining with their
	// credentials: theirs stay until the next reload, no longer (the
	// list is two configurations' at most).
	w.secrets = sortSecrets(append(secretsOf(w.ups), secretsOf(ups)...))
	w.ups = ups
}

// currentSecrets are the secrets the watch takes out, for the other
// sections of the page.
func (w *upstreamWatch) currentSecrets() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.secrets // replaced, never changed in place
}

// fill writes what the watch knows of su's upstream into su.
func (w *upstreamWatch) fill(su *status.Upstream) {
	w.mu.Lock()
	u := w.by[su.Name]
	if u == nil {
		w.mu.Unlock()
		return
	}
	samples := slices.Clone(u.ring[:u.n])
	last := u.ring[(u.next+recentCalls-1)%recentCalls]
	su.LastError = u.lastError
	if !u.lastAt.IsZero() {
		at := u.lastAt.UTC()
		su.LastErrorAt = &at
	}
	w.mu.Unlock()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	su.Latency = status.Latency{Samples: len(samples), LastMs: ms(last),
		P50Ms: ms(samples[(len(samples)-1)/2]), P90Ms: ms(samples[(len(samples)-1)*9/10]), MaxMs: ms(samples[len(samples)-1])}
}
