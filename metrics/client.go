package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/mcprel/mcprel/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/retry"
)

// ClientOptions configure ClientMetrics. The zero value is valid.
type ClientOptions struct {
	// Namespace prefixes every metric name; empty means "mcprel". The
	// client's metrics are named NAMESPACE_client_….
	Namespace string
	// Tools are the tool names that may become label values. A client
	// calls whatever a server lists, so only the caller's own list keeps
	// the label bounded: every other tool is counted as "other".
	Tools []string
}

// ClientMetrics are the Prometheus metrics of the client side: the retry
// planner's attempts and decisions (Observe, given to
// retry.Options.Observe) and the counters of the clients it watches
// (Watch), read from client.Stats when the registry is scraped. Packages
// client and retry link no Prometheus, and a program that gives them no
// ClientMetrics pays nothing per call.
type ClientMetrics struct {
	tools map[string]bool

	attempts *prometheus.CounterVec
	retries  *prometheus.CounterVec
	declined *prometheus.CounterVec
	requests *prometheus.CounterVec
	stats    *clientStats
}

// NewClient registers the client metrics with reg.
func NewClient(reg prometheus.Registerer, opts *ClientOptions) (*ClientMetrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: NewClient needs a registry to register with")
	}
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	ns := o.Namespace
	if ns == "" {
		ns = "mcprel"
	}
	m := &ClientMetrics{
		tools: map[string]bool{},
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "client", Name: "attempts_total",
			Help: "Attempts of tool calls the retry planner made, first attempts included, by tool and retry class (safe, conditional, unsafe; a conditional call without its idempotency key is unsafe)."},
			[]string{"tool", "class"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "client", Name: "retries_total",
			Help: "Failed attempts the retry planner made again, by tool, retry class and what happened to the attempt (lost, not_sent, idle_timeout, server_timeout, overloaded, rate_limited, shutting_down, tool_failed)."},
			[]string{"tool", "class", "failure"}),
		declined: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "client", Name: "retries_declined_total",
			Help: "Failed attempts the retry planner did not make again, by tool, retry class and reason: reconcile (the call may have taken effect and nothing deduplicates it), not_retryable, attempts_exhausted, deadline, budget_exhausted."},
			[]string{"tool", "class", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "client", Name: "requests_total",
			Help: "Requests the client sent, each attempt counted, by method, tool and verdict: outcome (answered, refused, not_sent, unknown) and kind (succeeded, tool_failed, lost, overloaded, ...; docs/errors.md)."},
			[]string{"method", "tool", "outcome", "kind"}),
		stats: newClientStats(ns),
	}
	for _, t := range o.Tools {
		m.tools[t] = true
	}
	for _, c := range []prometheus.Collector{m.attempts, m.retries, m.declined, m.requests, m.stats} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe counts one event of a retry planner: give it to
// retry.Options.Observe. It is safe for concurrent use.
func (m *ClientMetrics) Observe(e retry.Event) {
	tool, class := m.tool(e.Tool), e.Class.String()
	switch {
	case e.Start:
		m.attempts.WithLabelValues(tool, class).Inc()
	case e.Decision.Retry:
		m.attempts.WithLabelValues(tool, class).Inc()
		m.retries.WithLabelValues(tool, class, e.Failure.String()).Inc()
	default:
		m.declined.WithLabelValues(tool, class, declineReason(e.Decision.Err)).Inc()
	}
}

// Interceptor counts each request the client sends by its verdict
// (client.VerdictOf): give it to client.Options.Interceptors, inside any
// retries, so that each attempt counts.
func (m *ClientMetrics) Interceptor() client.Interceptor {
	return func(next client.CallFunc) client.CallFunc {
		return func(ctx context.Context, req *client.Request) (json.RawMessage, error) {
			raw, err := next(ctx, req)
			v := client.VerdictOfRaw(req, raw, err)
			tool := ""
			if req.Method == mcp.MethodToolsCall {
				tool = m.tool(req.Name)
			}
			m.requests.WithLabelValues(method(req.Method), tool, v.Outcome.String(), v.Kind.String()).Inc()
			return raw, err
		}
	}
}

// method is a request's method as a label: the protocol's, or "other",
// for a client may be asked to send anything.
func method(name string) string {
	switch name {
	case mcp.MethodToolsCall, mcp.MethodToolsList, mcp.MethodPromptsGet, mcp.MethodPromptsList, mcp.MethodResourcesRead,
		mcp.MethodResourcesList, mcp.MethodResourceTempls, mcp.MethodPing, mcp.MethodComplete:
		return name
	}
	return "other"
}

// tool is name when the caller listed it, "other" otherwise.
func (m *ClientMetrics) tool(name string) string {
	if m.tools[name] {
		return name
	}
	return "other"
}

// declineReason names why the planner said not to retry.
func declineReason(err error) string {
	var re *retry.ReconcileError
	switch {
	case errors.As(err, &re):
		return "reconcile"
	case errors.Is(err, retry.ErrBudgetExhausted):
		return "budget_exhausted"
	case errors.Is(err, retry.ErrAttemptsExhausted):
		return "attempts_exhausted"
	case errors.Is(err, retry.ErrDeadline):
		return "deadline"
	}
	return "not_retryable"
}

// Watch adds c's counters (client.Stats) to the metrics, read at every
// scrape, and returns a func that stops watching it: what c counted until
// then stays in the totals, so that they never go down, and the metrics
// forget c. Call it when c is closed, so that a program that makes many
// clients does not keep them all. Watching a client already watched does
// nothing, and its func does nothing either.
func (m *ClientMetrics) Watch(c *client.Client) (stop func()) {
	return m.stats.watch(c)
}

// clientStats is a collector that sums the Stats of the clients it
// watches, and of those it watched, at every scrape.
type clientStats struct {
	mu      sync.Mutex
	clients map[*client.Client]bool
	gone    client.Stats // what clients no longer watched had counted

	late, cancelled, progress, resumed, reconnects, restarts, refetches, serverRequests *prometheus.Desc
}

func newClientStats(ns string) *clientStats {
	name := func(n string) string { return prometheus.BuildFQName(ns, "client", n) }
	return &clientStats{
		clients: map[*client.Client]bool{},
		late: prometheus.NewDesc(name("late_responses_total"),
			"Responses that arrived for calls the client had given up on (cancelled, timed out), ignored.", nil, nil),
		cancelled: prometheus.NewDesc(name("cancellations_total"),
			"Calls the client cancelled, for any reason: the caller's context, the idle or the maximum deadline.", nil, nil),
		progress: prometheus.NewDesc(name("progress_discarded_total"),
			"Progress reports the client did not pass on, by reason: not_increasing (refused: no reset of the idle clock), dropped (the caller's callback was slower than the server).",
			[]string{"reason"}, nil),
		resumed: prometheus.NewDesc(name("resumptions_total"),
			"2025 streams picked up again with Last-Event-ID after they ended before their response.", nil, nil),
		reconnects: prometheus.NewDesc(name("reconnects_total"),
			"Connections established again after one was lost: listen streams acknowledged again, 2025 sessions renewed, restarted stdio servers that negotiated again.", nil, nil),
		restarts: prometheus.NewDesc(name("restarts_total"),
			"Stdio servers started again after they died.", nil, nil),
		refetches: prometheus.NewDesc(name("refetches_total"),
			"Results that carried the server's refetch flag: progress or notifications were dropped on the way.", nil, nil),
		serverRequests: prometheus.NewDesc(name("server_requests_discarded_total"),
			"Requests from the server the client did not handle because as many were already being answered, by reason: refused (answered with an overload error), dropped (left without an answer: the way back was full, or answering would have cost another connection).",
			[]string{"reason"}, nil),
	}
}

func (s *clientStats) watch(c *client.Client) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[c] {
		return func() {}
	}
	s.clients[c] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.clients, c)
			s.gone = addStats(s.gone, c.Stats())
		})
	}
}

func addStats(a, b client.Stats) client.Stats {
	return client.Stats{
		LateResponses:   a.LateResponses + b.LateResponses,
		ProgressRefused: a.ProgressRefused + b.ProgressRefused,
		ProgressDropped: a.ProgressDropped + b.ProgressDropped,
		Cancellations:   a.Cancellations + b.Cancellations,
		Resumptions:     a.Resumptions + b.Resumptions,
		Restarts:        a.Restarts + b.Restarts,
		Refetches:       a.Refetches + b.Refetches,
		Reconnects:      a.Reconnects + b.Reconnects,

		ServerRequestsRefused: a.ServerRequestsRefused + b.ServerRequestsRefused,
		ServerRequestsDropped: a.ServerRequestsDropped + b.ServerRequestsDropped,
	}
}

// Describe sends the descriptions of the client counters.
func (s *clientStats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.late, s.cancelled, s.progress, s.resumed, s.reconnects, s.restarts, s.refetches, s.serverRequests} {
		ch <- d
	}
}

// Collect sums the watched clients' counters.
func (s *clientStats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	sum := s.gone
	for c := range s.clients {
		sum = addStats(sum, c.Stats())
	}
	s.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(s.late, sum.LateResponses)
	counter(s.cancelled, sum.Cancellations)
	counter(s.progress, sum.ProgressRefused, "not_increasing")
	counter(s.progress, sum.ProgressDropped, "dropped")
	counter(s.resumed, sum.Resumptions)
	counter(s.reconnects, sum.Reconnects)
	counter(s.restarts, sum.Restarts)
	counter(s.refetches, sum.Refetches)
	counter(s.serverRequests, sum.ServerRequestsRefused, "refused")
	counter(s.serverRequests, sum.ServerRequestsDropped, "dropped")
}
