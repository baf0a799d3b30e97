package metrics

import (
	"cmp"
	"context"
	"slices"
	"sync"
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
	unknown       *unknownOutcomes
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
	unknown := prometheus.GaugeOpts{Namespace: ns, Name: "ledger_unknown_outcomes",
		Help: "Keyed operations whose outcome is unknown and that no operator has resolved yet (mcprel ledger list), by tool: the " +
			"first tools by count, the rest summed under tool=\"other\". Every replica counts the whole shared ledger: aggregate with max, not sum."}
	m.unknown = &unknownOutcomes{desc: prometheus.NewDesc(prometheus.BuildFQName(unknown.Namespace, "", unknown.Name), unknown.Help, []string{"tool"}, nil)}
	for _, c := range []prometheus.Collector{m.ledgerOps, m.commitOps, m.commitSeconds, m.unknown} {
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

// MaxUnknownTools bounds the tools mcprel_ledger_unknown_outcomes names:
// past them, by count, the rest are summed under tool="other".
const MaxUnknownTools = 20

// SetUnknownOutcomes sets mcprel_ledger_unknown_outcomes to counts, the
// unresolved unknown outcomes by tool (ledger.UnknownByTool), replacing
// the counts set before whole: a scrape sees one set or the other. A tool
// with none is reported 0 once it has been reported, so that an alert on
// it resolves instead of its series vanishing.
func (m *StoreMetrics) SetUnknownOutcomes(counts map[string]int) {
	m.unknown.set(counts)
}

// unknownOutcomes is the gauge mcprel_ledger_unknown_outcomes: a
// collector, so that each scrape reads one consistent set.
type unknownOutcomes struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	byTool map[string]float64
}

func (u *unknownOutcomes) set(counts map[string]int) {
	type count struct {
		tool string
		n    int
	}
	all := make([]count, 0, len(counts))
	for tool, n := range counts {
		if n > 0 {
			all = append(all, count{tool, n})
		}
	}
	slices.SortFunc(all, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.tool, b.tool)) })
	next := map[string]float64{}
	for i, c := range all {
		tool := c.tool
		if i >= MaxUnknownTools || tool == "other" {
			tool = "other"
		}
		next[tool] += float64(c.n)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	// A tool reported before stays, at 0, while the label set has room.
	for tool := range u.byTool {
		if _, ok := next[tool]; !ok && len(next) < MaxUnknownTools+1 {
			next[tool] = 0
		}
	}
	u.byTool = next
}

// Describe is part of prometheus.Collector.
func (u *unknownOutcomes) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

// Collect is part of prometheus.Collector.
func (u *unknownOutcomes) Collect(ch chan<- prometheus.Metric) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for tool, n := range u.byTool {
		ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, n, tool)
	}
}
