package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcprel/mcprel/mcp"
)

// Forward is one request a gateway forwarded to an upstream server, as
// GatewayMetrics counts it.
type Forward struct {
	Upstream string
	Method   string // tools/call, resources/read, prompts/get
	// Name is the tool or prompt as downstream clients call it; resource
	// URIs are not labels (they are unbounded).
	Name    string
	Outcome string // how the forward ended (package gateway's outcomes)
	// InUpstream is the time from sending the request upstream to its
	// answer; Total includes waiting for a connection. Reached reports
	// whether the request was sent at all (InUpstream means something).
	InUpstream, Total time.Duration
	Reached           bool
	// CancelPropagated: the downstream cancelled (or a clock fired) and
	// the upstream was sent its own cancellation.
	CancelPropagated bool
	// Retries counts the attempts the gateway made again upstream.
	Retries int
}

// UpstreamStats is one upstream's state at a scrape.
type UpstreamStats struct {
	Name        string
	CircuitOpen bool
	InFlight    int    // requests forwarded now
	Sessions    int    // per-tenant sessions (or processes) open
	Restarts    uint64 // stdio processes started again after they died
	// LateResponses are upstream responses that arrived after the
	// gateway had given up on the request (cancelled, timed out):
	// discarded.
	LateResponses uint64
}

// GatewayMetrics are the Prometheus metrics of a gateway (package
// gateway, assembled by package host): forwarded requests by upstream,
// name and outcome, the time spent in the upstream against the total,
// cancellations carried upstream, what happened to upstream connections,
// and each upstream's circuit, load, restarts and late responses, read
// at every scrape.
type GatewayMetrics struct {
	forwarded  *prometheus.CounterVec
	inUpstream *prometheus.HistogramVec
	total      *prometheus.HistogramVec
	cancels    *prometheus.CounterVec
	retries    *prometheus.CounterVec
	events     *prometheus.CounterVec
	state      *upstreamCollector
}

// NewGateway registers the gateway metrics with reg; namespace "" means
// "mcprel", and their names start NAMESPACE_gateway_. upstreams, when
// set, is read at every scrape for the upstreams' state.
func NewGateway(reg prometheus.Registerer, namespace string, upstreams func() []UpstreamStats) (*GatewayMetrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: NewGateway needs a registry to register with")
	}
	if namespace == "" {
		namespace = "mcprel"
	}
	const sub = "gateway"
	m := &GatewayMetrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "forwarded_total",
			Help: "Requests forwarded to upstream servers, by upstream, method, name (the tool or prompt as clients call it; empty for resources) and outcome (ok, tool_error, protocol_error, unavailable, lost, cancelled, input_required, failed)."},
			[]string{"upstream", "method", "name", "outcome"}),
		inUpstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "upstream_seconds",
			Help: "Time from sending a forwarded request upstream to its answer, by upstream and method.", Buckets: latencyBuckets},
			[]string{"upstream", "method"}),
		total: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: sub, Name: "forward_seconds",
			Help: "Time a forwarded request spent in the gateway's handler, waiting for a connection included, by upstream and method.", Buckets: latencyBuckets},
			[]string{"upstream", "method"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "cancellations_propagated_total",
			Help: "Forwarded requests whose downstream cancellation or deadline was carried upstream as the upstream's own cancellation, by upstream."},
			[]string{"upstream"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "retries_total",
			Help: "Attempts the gateway made again upstream (a safe tool, a keyed one whose upstream honours the key, or a request that never left), by upstream."},
			[]string{"upstream"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "upstream_events_total",
			Help: "What happened to upstream connections, by upstream and kind: connect_failed, died (a stdio process or an HTTP+SSE stream ended), reconnected, listed (its tools, prompts and resources listed again, after a connection or a list change)."},
			[]string{"upstream", "kind"}),
		state: newUpstreamCollector(namespace, upstreams),
	}
	for _, c := range []prometheus.Collector{m.forwarded, m.inUpstream, m.total, m.cancels, m.retries, m.events, m.state} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Forwarded counts one forwarded request.
func (m *GatewayMetrics) Forwarded(f Forward) {
	name := f.Name
	if f.Method == mcp.MethodResourcesRead {
		name = "" // URIs are unbounded
	}
	m.forwarded.WithLabelValues(f.Upstream, f.Method, name, f.Outcome).Inc()
	if f.Reached {
		m.inUpstream.WithLabelValues(f.Upstream, f.Method).Observe(f.InUpstream.Seconds())
	}
	m.total.WithLabelValues(f.Upstream, f.Method).Observe(f.Total.Seconds())
	if f.CancelPropagated {
		m.cancels.WithLabelValues(f.Upstream).Inc()
	}
	if f.Retries > 0 {
		m.retries.WithLabelValues(f.Upstream).Add(float64(f.Retries))
	}
}

// UpstreamEvent counts something that happened to an upstream's
// connection (kind: connect_failed, died, reconnected).
func (m *GatewayMetrics) UpstreamEvent(upstream, kind string) {
	m.events.WithLabelValues(upstream, kind).Inc()
}

// upstreamCollector reports the upstreams' state, read at every scrape.
type upstreamCollector struct {
	read                                        func() []UpstreamStats
	circuit, inflight, sessions, restarts, late *prometheus.Desc
}

func newUpstreamCollector(ns string, read func() []UpstreamStats) *upstreamCollector {
	name := func(n string) string { return prometheus.BuildFQName(ns, "gateway", n) }
	labels := []string{"upstream"}
	return &upstreamCollector{read: read,
		circuit: prometheus.NewDesc(name("circuit_open"),
			"1 while an upstream's circuit is open (calls refused at once as upstream_unavailable), 0 while closed.", labels, nil),
		inflight: prometheus.NewDesc(name("upstream_in_flight"),
			"Requests forwarded to an upstream now.", labels, nil),
		sessions: prometheus.NewDesc(name("upstream_sessions"),
			"Per-tenant sessions (2025-era HTTP) or processes (stdio with one per tenant) an upstream holds open.", labels, nil),
		restarts: prometheus.NewDesc(name("upstream_restarts_total"),
			"Times an upstream's connection was made again after it ended (a stdio process started again).", labels, nil),
		late: prometheus.NewDesc(name("late_responses_total"),
			"Upstream responses that arrived after the gateway had given up on the request (the downstream cancelled, a clock fired): discarded.", labels, nil),
	}
}

func (c *upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.circuit, c.inflight, c.sessions, c.restarts, c.late} {
		ch <- d
	}
}

func (c *upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	if c.read == nil {
		return
	}
	for _, u := range c.read() {
		open := 0.0
		if u.CircuitOpen {
			open = 1
		}
		ch <- prometheus.MustNewConstMetric(c.circuit, prometheus.GaugeValue, open, u.Name)
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(u.InFlight), u.Name)
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(u.Sessions), u.Name)
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(u.Restarts), u.Name)
		ch <- prometheus.MustNewConstMetric(c.late, prometheus.CounterValue, float64(u.LateResponses), u.Name)
	}
}
