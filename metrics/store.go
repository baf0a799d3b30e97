package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StoreMetrics times the idempotency ledger's operations and measures the
// database's write transactions, group commits included. Give it to
// ledger.Options.Observers (it has the methods of a ledger.Observer) and
// its Committed method to store.Options.OnCommit. Its methods take plain
// values, so this package links neither.
type StoreMetrics struct {
	ledgerOps     *prometheus.HistogramVec
	commitOps     prometheus.Histogram
	commitSeconds prometheus.Histogram
}

// NewStore registers the ledger and store metrics with reg.
func NewStore(reg prometheus.Registerer, opts *Options) (*StoreMetrics, error) {
	ns := "mcprel"
	if opts != nil && opts.Namespace != "" {
		ns = opts.Namespace
	}
	m := &StoreMetrics{
		ledgerOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "ledger_operation_seconds",
			Help:    "Idempotency ledger operations (do, claim, complete, release, lookup), from the call to its return, waiting for the write connection and the commit included, by result (ok, conflict, in_progress, not_found, cancelled, error).",
			Buckets: latencyBuckets}, []string{"op", "result"}),
		commitOps: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "store_commit_operations",
			Help:    "Operations carried by each committed write transaction: more than one is a group commit, one fsync for many writers.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 7)}), // 1 to 64, the largest batch
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "store_commit_seconds",
			Help: "Committed write transactions, from BEGIN to the end of COMMIT.", Buckets: latencyBuckets}),
	}
	for _, c := range []prometheus.Collector{m.ledgerOps, m.commitOps, m.commitSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// TxStarted is part of ledger.Observer; the context is unchanged.
func (m *StoreMetrics) TxStarted(ctx context.Context, op string) context.Context { return ctx }

// TxEnded times a ledger operation.
func (m *StoreMetrics) TxEnded(_ context.Context, op, result string, d time.Duration) {
	m.ledgerOps.WithLabelValues(op, result).Observe(d.Seconds())
}

// Committed records a write transaction that committed ops operations in
// d: a store.Options.OnCommit.
func (m *StoreMetrics) Committed(ops int, d time.Duration) {
	m.commitOps.Observe(float64(ops))
	m.commitSeconds.Observe(d.Seconds())
}
