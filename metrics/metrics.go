// Package metrics exports what the server sees of its requests as
// Prometheus metrics, through the server's observer seam: package server
// imports no metrics library, and a program that does not want Prometheus
// does not link it.
//
// The metrics tell protocol failures from tool failures: a request ends
// completed, with a tool error (a result with isError), with a protocol
// error (a JSON-RPC error, by code class), refused by admission, cancelled
// (by source) or timed out (by clock). Labels are bounded: method names
// the server serves, tool names it registered ("unknown" for anything a
// client made up), eras, transports, outcomes; never an id, a key or a
// tenant, unless the operator opts in to tenants.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// Options configure an Observer. The zero value is valid.
type Options struct {
	// Namespace prefixes every metric name; empty means "mcprel".
	Namespace string
	// Tenants adds a tenant label to mcprel_requests_total: the tenant the
	// operator's configuration gave the request (server.WithTenant, such
	// as serve's --token TENANT=TOKEN), never a name a client chose; ""
	// for requests of no tenant. Off by default: turn it on only when the
	// tenants are few, since each multiplies the series.
	Tenants bool
}

// Observer is a server.Observer that keeps the metrics. Attach it with
// server.Options.Observers, and serve Handler (or the registry it was
// given) at /metrics.
type Observer struct {
	srv *server.Server // nil until Attach: tool names are checked against it

	gatherer prometheus.Gatherer
	tenants  bool // Options.Tenants

	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	queued      *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
	cancels     *prometheus.CounterVec
	progress    *prometheus.CounterVec
	annotations *prometheus.CounterVec

	tasksRunning  *prometheus.GaugeVec
	tasksEnded    *prometheus.CounterVec
	taskDuration  *prometheus.HistogramVec
	taskTakeovers *prometheus.CounterVec

	events *serverEvents // see server_events.go
}

// Buckets of the latency histograms: 100 µs to about 14 minutes, a factor
// of 2 apart, so that p50, p95 and p99 resolve from the fastest echo to a
// long call.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 24)

// New registers the metrics with reg (a fresh registry when nil; its
// Gatherer is what Handler serves).
func New(reg *prometheus.Registry, opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Namespace == "" {
		o.Namespace = "mcprel"
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	ns := o.Namespace
	m := &Observer{
		tenants:  o.Tenants,
		gatherer: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests by method, tool, era, transport and terminal outcome (completed, tool_error, protocol_error_client, protocol_error_server, refused, cancelled, timed_out_idle, timed_out_max)."},
			requestLabels(o.Tenants)),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
			Help: "Time from a request's arrival to its terminal state, by method, tool and outcome.", Buckets: latencyBuckets},
			[]string{"method", "tool", "outcome"}),
		queued: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_queued_seconds",
			Help: "Time a call waited for admission before its handler ran, by tool.", Buckets: latencyBuckets},
			[]string{"tool"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "requests_in_flight",
			Help: "Requests started and not yet ended, by method."}, []string{"method"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "cancellations_total",
			Help: "Requests that ended cancelled or timed out, by source: notification (notifications/cancelled), stream_close (2026 HTTP), slow_consumer, connection_closed, shutdown, idle_deadline, max_deadline, other."},
			[]string{"source"}),
		progress: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "progress_discarded_total",
			Help: "Progress reports not sent as reported, by reason: not_increasing (refused), rate_limited (held back by the rate limit and replaced by a newer one), coalesced (a newer one replaced it in the outbox), dropped (the client read too slowly), after_end (reported after the request ended)."},
			[]string{"reason"}),
		annotations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "call_annotations_total",
			Help: "What interceptors did with calls, by tool, kind and value: idempotency (executed, replayed, conflict, in_progress, key_missing, unkeyed, rolled_back, unavailable) and task (created, replayed, inline, refused)."},
			[]string{"tool", "kind", "value"}),
	}
	m.tasksRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "tasks_running",
		Help: "Durable tasks running in this process, by tool."}, []string{"tool"})
	m.tasksEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tasks_ended_total",
		Help: "Durable tasks that reached a terminal status in this process, by tool and status (completed, failed, cancelled)."},
		[]string{"tool", "status"})
	m.taskDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "task_duration_seconds",
		Help: "From a task's creation to its terminal status, by tool and status.", Buckets: latencyBuckets},
		[]string{"tool", "status"})
	m.taskTakeovers = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "task_takeovers_total",
		Help: "Tasks taken over from a process whose lease expired, by tool and result (resumed, failed: interrupted)."},
		[]string{"tool", "result"})
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.queued, m.inFlight, m.cancels, m.progress, m.annotations,
		m.tasksRunning, m.tasksEnded, m.taskDuration, m.taskTakeovers} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	events, err := newServerEvents(reg, ns)
	if err != nil {
		return nil, err
	}
	m.events = events
	return m, nil
}

// requestLabels are the labels of mcprel_requests_total.
func requestLabels(tenants bool) []string {
	labels := []string{"method", "tool", "era", "transport", "outcome"}
	if tenants {
		labels = append(labels, "tenant")
	}
	return labels
}

// Attach tells the observer the server it observes, whose registered tool
// names are the only ones used as labels.
func (m *Observer) Attach(srv *server.Server) { m.srv = srv }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Observer) Handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{})
}

// RequestStarted counts the request in flight.
func (m *Observer) RequestStarted(ctx context.Context, info server.RequestInfo) context.Context {
	m.inFlight.WithLabelValues(methodLabel(info.Method)).Inc()
	return ctx
}

// RequestEnded records how the request ended.
func (m *Observer) RequestEnded(_ context.Context, rec server.RequestRecord) {
	method := methodLabel(rec.Method)
	m.inFlight.WithLabelValues(method).Dec()
	tool := m.toolLabel(rec)
	outcome := outcomeOf(rec)
	if m.tenants {
		m.requests.WithLabelValues(method, tool, eraLabel(rec.Era), transportLabel(rec.Transport), outcome, rec.Tenant).Inc()
	} else {
		m.requests.WithLabelValues(method, tool, eraLabel(rec.Era), transportLabel(rec.Transport), outcome).Inc()
	}
	m.duration.WithLabelValues(method, tool, outcome).Observe(rec.Duration.Seconds())
	if rec.Method == mcp.MethodToolsCall && rec.Queued > 0 {
		m.queued.WithLabelValues(tool).Observe(rec.Queued.Seconds())
	}
	if rec.Outcome == server.Cancelled || rec.Outcome == server.TimedOut {
		m.cancels.WithLabelValues(sourceOf(rec.Cause)).Inc()
	}
	for _, p := range [...]struct {
		reason string
		n      uint64
	}{{"not_increasing", rec.ProgressRefused}, {"rate_limited", rec.ProgressRateLimited}, {"coalesced", rec.ProgressCoalesced}, {"dropped", rec.ProgressDropped}} {
		if p.n > 0 {
			m.progress.WithLabelValues(p.reason).Add(float64(p.n))
		}
	}
	for kind, value := range rec.Annotations {
		if kind == "idempotency" || kind == "task" {
			m.annotations.WithLabelValues(tool, kind, value).Inc()
		}
	}
}

// TaskStarted counts a durable task now running in this process. The
// methods for tasks take plain values, so that this package does not link
// package tasks: a program wires its runner's events to them.
func (m *Observer) TaskStarted(tool string) { m.tasksRunning.WithLabelValues(m.registered(tool)).Inc() }

// TaskLeft counts a task that stopped running here without ending (a
// shutdown left it to be taken over).
func (m *Observer) TaskLeft(tool string) { m.tasksRunning.WithLabelValues(m.registered(tool)).Dec() }

// TaskEnded records a task that ended here with status ("completed",
// "failed", "cancelled"), d after its creation.
func (m *Observer) TaskEnded(tool, status string, d time.Duration) {
	tool = m.registered(tool)
	m.tasksRunning.WithLabelValues(tool).Dec()
	m.tasksEnded.WithLabelValues(tool, status).Inc()
	m.taskDuration.WithLabelValues(tool, status).Observe(d.Seconds())
}

// TaskTakenOver records a task taken over from a dead process: resumed
// here, or ended failed as interrupted.
func (m *Observer) TaskTakenOver(tool string, resumed bool) {
	tool = m.registered(tool)
	result := "failed"
	if resumed {
		result = "resumed"
	} else {
		m.tasksEnded.WithLabelValues(tool, "failed").Inc()
	}
	m.taskTakeovers.WithLabelValues(tool, result).Inc()
}

// TaskExpired records a task this process ended because it was still
// running past its TTL, with status "failed" (or "cancelled" when its
// cancellation was requested): it counts as ended, and the worker that ran
// it, here or on another replica, counts it no longer running there.
func (m *Observer) TaskExpired(tool, status string) {
	m.tasksEnded.WithLabelValues(m.registered(tool), status).Inc()
}

// registered is name when the server registered such a tool, "unknown"
// otherwise.
func (m *Observer) registered(name string) string {
	if m.srv != nil && m.srv.HasTool(name) {
		return name
	}
	return "unknown"
}

// toolLabel is the tool's name when the server registered it; "" for a
// request that is not a call, "unknown" for a name a client made up.
func (m *Observer) toolLabel(rec server.RequestRecord) string {
	switch {
	case rec.Tool == "":
		return ""
	case m.srv != nil && m.srv.HasTool(rec.Tool):
		return rec.Tool
	}
	return "unknown"
}

// methodLabel keeps the methods MCP defines and folds anything else.
func methodLabel(method string) string {
	switch method {
	case mcp.MethodInitialize, mcp.MethodPing, mcp.MethodSetLevel, mcp.MethodDiscover, mcp.MethodListen,
		mcp.MethodToolsList, mcp.MethodToolsCall, mcp.MethodResourcesList, mcp.MethodResourcesRead,
		mcp.MethodResourceTempls, mcp.MethodSubscribe, mcp.MethodUnsubscribe, mcp.MethodPromptsList,
		mcp.MethodPromptsGet, mcp.MethodComplete, mcp.MethodTasksGet, mcp.MethodTasksCancel,
		mcp.MethodTasksUpdate, mcp.MethodTasksResult, mcp.MethodTasksList:
		return method
	}
	return "other"
}

func eraLabel(e mcp.Era) string {
	switch e {
	case mcp.Modern:
		return "2026-07-28"
	case mcp.Legacy:
		return "2025"
	}
	return "unknown"
}

func transportLabel(t string) string {
	switch t {
	case "stdio", "http":
		return t
	}
	return "other"
}

// outcomeOf names a request's terminal state, telling protocol failures
// from tool failures.
func outcomeOf(rec server.RequestRecord) string {
	switch rec.Outcome {
	case server.Completed:
		if rec.IsError {
			return "tool_error"
		}
		return "completed"
	case server.Failed:
		switch {
		case rec.ErrorCode == mcp.CodeOverloaded || rec.ErrorCode == mcp.CodeRateLimited || rec.ErrorCode == mcp.CodeUnavailable:
			return "refused"
		case rec.ErrorCode == jsonrpc.CodeInternalError || rec.ErrorCode == mcp.CodeTimeout:
			return "protocol_error_server"
		}
		return "protocol_error_client"
	case server.Cancelled:
		return "cancelled"
	case server.TimedOut:
		if errors.Is(rec.Cause, server.ErrIdleTimeout) {
			return "timed_out_idle"
		}
		return "timed_out_max"
	}
	return "unknown"
}

// sourceOf names what ended a cancelled or timed-out request.
func sourceOf(cause error) string {
	switch {
	case errors.Is(cause, server.ErrPeerCancelled):
		return "notification"
	case errors.Is(cause, server.ErrDisconnected):
		return "stream_close"
	case errors.Is(cause, server.ErrSlowConsumer):
		return "slow_consumer"
	case errors.Is(cause, server.ErrConnectionClosed):
		return "connection_closed"
	case errors.Is(cause, server.ErrShutdown):
		return "shutdown"
	case errors.Is(cause, server.ErrIdleTimeout):
		return "idle_deadline"
	case errors.Is(cause, server.ErrMaxDeadline):
		return "max_deadline"
	}
	return "other"
}

var _ server.Observer = (*Observer)(nil)
