package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcprel/mcprel/server"
)

// serverEvents are the metrics of what happens around requests rather
// than at their start and end: responses suppressed after a request ended,
// cancellations that came too late, progress sent, responses flagged for
// refetch, keepalives, slow consumers cut off (server.EventObserver and
// server.HandlerObserver), and how long tasks take to observe a cancel.
type serverEvents struct {
	suppressed    *prometheus.CounterVec
	overrun       *prometheus.HistogramVec
	lateCancels   *prometheus.CounterVec
	progressSent  *prometheus.CounterVec
	refetch       *prometheus.CounterVec
	keepalives    *prometheus.CounterVec
	slowConsumers *prometheus.CounterVec
	cancelSeen    *prometheus.HistogramVec
}

func newServerEvents(reg prometheus.Registerer, ns string) (*serverEvents, error) {
	perTransport := func(o prometheus.CounterOpts) *prometheus.CounterVec {
		o.Namespace = ns
		return prometheus.NewCounterVec(o, []string{"transport"})
	}
	e := &serverEvents{
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "responses_suppressed_total",
			Help: "Tool handlers that returned after their request had ended, whose response was discarded, by tool and the outcome that won (cancelled, timed_out)."},
			[]string{"tool", "outcome"}),
		overrun: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "handler_overrun_seconds",
			Help: "How long a tool handler kept running after its request ended (cancelled, timed out): how long the tool took to honour cancellation, by tool.", Buckets: latencyBuckets},
			[]string{"tool"}),
		lateCancels: perTransport(prometheus.CounterOpts{Name: "late_cancellations_total",
			Help: "notifications/cancelled ignored because the request had already ended or was unknown (the cancel crossed the response), by transport."}),
		progressSent: perTransport(prometheus.CounterOpts{Name: "progress_sent_total",
			Help: "Progress notifications the transport took to write, by transport."}),
		refetch: perTransport(prometheus.CounterOpts{Name: "responses_refetch_flagged_total",
			Help: "Responses sent with the refetch flag (dev.mcprel/refetch): their client missed progress or notifications, by transport."}),
		keepalives: perTransport(prometheus.CounterOpts{Name: "keepalives_total",
			Help: "Keepalive comments written on idle event streams, by transport."}),
		slowConsumers: perTransport(prometheus.CounterOpts{Name: "slow_consumers_total",
			Help: "Connections (stdio) and streams (HTTP) cut off because the client stopped reading: a write waited past its deadline, by transport."}),
		cancelSeen: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "task_cancel_observed_seconds",
			Help: "From a task's cancel intent (tasks/cancel) to the worker's checkpoint that observed it, for tasks cancelled here, by tool.", Buckets: latencyBuckets},
			[]string{"tool"}),
	}
	for _, c := range []prometheus.Collector{e.suppressed, e.overrun, e.lateCancels, e.progressSent, e.refetch,
		e.keepalives, e.slowConsumers, e.cancelSeen} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Zero from the start, so that a rate or an alert has a series to
	// read before the first event.
	for _, tr := range []string{"stdio", "http"} {
		for _, c := range []*prometheus.CounterVec{e.lateCancels, e.progressSent, e.refetch, e.slowConsumers} {
			c.WithLabelValues(tr)
		}
	}
	e.keepalives.WithLabelValues("http")
	return e, nil
}

// HandlerReturned counts a tool handler's response suppressed because its
// request had already ended, and how long the handler overran the end.
func (m *Observer) HandlerReturned(_ context.Context, rec server.HandlerRecord) {
	if !rec.Discarded {
		return
	}
	tool := ""
	if rec.Tool != "" {
		tool = m.registered(rec.Tool)
	}
	m.events.suppressed.WithLabelValues(tool, rec.Outcome.String()).Inc()
	m.events.overrun.WithLabelValues(tool).Observe(rec.Overrun.Seconds())
}

// ObserveEvent counts the server's and its transports' events.
func (m *Observer) ObserveEvent(ev server.Event) {
	var c *prometheus.CounterVec
	switch ev.Kind {
	case server.EventLateCancel:
		c = m.events.lateCancels
	case server.EventProgressSent:
		c = m.events.progressSent
	case server.EventRefetchFlagged:
		c = m.events.refetch
	case server.EventKeepalive:
		c = m.events.keepalives
	case server.EventSlowConsumer:
		c = m.events.slowConsumers
	case server.EventProgressAfterEnd:
		m.progress.WithLabelValues("after_end").Inc()
		return
	default:
		return
	}
	c.WithLabelValues(transportLabel(ev.Transport)).Inc()
}

// TaskCancelObserved records how long after its cancel intent a task's
// worker observed it at a checkpoint (tasks.Event.CancelDelay). Like the
// other task methods it takes plain values: this package does not link
// package tasks.
func (m *Observer) TaskCancelObserved(tool string, delay time.Duration) {
	m.events.cancelSeen.WithLabelValues(m.registered(tool)).Observe(delay.Seconds())
}

var (
	_ server.HandlerObserver = (*Observer)(nil)
	_ server.EventObserver   = (*Observer)(nil)
)
