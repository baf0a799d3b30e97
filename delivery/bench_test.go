package delivery_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/benchtest"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// BenchmarkOutbox measures what the outbox costs a keyed tool, as ratios
// to a baseline measured in the same run:
//
//	<store>/callers=N/keyed    a keyed tool that writes one row in its key's transaction
//	<store>/callers=N/outbox   the same tool recording, in that transaction, an intent for a local receiver
//
// for N = 1 and 8 concurrent callers (a client each, over Streamable
// HTTP, in process), on SQLite at synchronous=FULL ("sqlite-FULL") and
// PostgreSQL ("postgres", skipped unless MCPREL_TEST_POSTGRES_URL names a
// server). outbox reports its rate (intents/s: each call commits one),
// x-keyed (its rate over keyed's, the two interleaved in rounds of equal
// counts), the store's commits per call, and the delivery lag to the
// receiver — an HTTP handler on loopback — from the handler's return (its
// transaction then commits) to the receiver's arrival, p50 and p99 in
// milliseconds. Every intent is checked delivered before the variant
// ends. Run it on an otherwise idle machine:
//
//	go test -run '^$' -bench Outbox -benchtime 3s -count 3 -timeout 30m ./delivery
func BenchmarkOutbox(b *testing.B) {
	stores := []struct {
		name string
		dsn  func(b *testing.B) string
	}{
		{"sqlite-FULL", func(b *testing.B) string { return filepath.Join(b.TempDir(), "bench.db") }},
		{"postgres", func(b *testing.B) string { return storetest.Postgres(b) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			bs := newBenchServer(b, st.dsn(b))
			var seq atomic.Int64 // fresh keys, unique over every run of this store
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("callers=%d", n), func(b *testing.B) {
					cs := benchtest.DialN(b, bs.url, n)
					keyed := benchtest.Calls(cs, func(c *client.Client, i int64) error {
						return bs.call(c, "reserve", fmt.Sprintf("k-%d", seq.Add(1)))
					})
					b.Run("keyed", func(b *testing.B) { benchtest.Measure(b, "calls/s", keyed) })
					b.Run("outbox", func(b *testing.B) {
						bs.lags.reset()
						bs.paid.Store(0)
						outboxed := benchtest.Calls(cs, func(c *client.Client, i int64) error {
							return bs.call(c, "pay", fmt.Sprintf("k-%d", seq.Add(1)))
						})
						w := bs.db.WriteStats()
						benchtest.Measure(b, "intents/s", outboxed, benchtest.Baseline{Unit: "x-keyed", Run: keyed})
						benchtest.ReportCommits(b, w, bs.db.WriteStats())
						p50, p99, err := bs.lags.await(int(bs.paid.Load()))
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(p50.Microseconds())/1000, "lag-p50-ms")
						b.ReportMetric(float64(p99.Microseconds())/1000, "lag-p99-ms")
					})
				})
			}
		})
	}
}

// benchServer is a server with the two tools the benchmark calls, on one
// store, its outbox delivering to a receiver on loopback.
type benchServer struct {
	url  string
	db   *store.DB
	lags *lags
	// paid counts the intents recorded, delivered or not yet.
	paid atomic.Int64
}

func newBenchServer(b *testing.B, dsn string) *benchServer {
	b.Helper()
	ctx := context.Background()
	l := ledgertest.Open(b, dsn, &store.Options{Synchronous: "FULL"}, nil, "")
	bs := &benchServer{db: l.DB(), lags: &lags{started: map[string]time.Time{}}}
	if err := bs.db.Migrate(ctx, "bench", []store.Migration{{Version: 1, SQL: `CREATE TABLE bench_rows (k TEXT)`}}); err != nil {
		b.Fatal(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bs.lags.arrived(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(receiver.Close)
	ob, err := outbox.Open(ctx, bs.db, &outbox.Options{MaxPendingPerTenant: 1 << 20, MaxPending: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	d, err := outbox.NewDispatcher(ob, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"receiver": &outbox.HTTPReceiver{URL: receiver.URL}}})
	if err != nil {
		b.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { d.Run(dctx); close(stopped) }()
	b.Cleanup(func() { stop(); <-stopped })

	srv := mcptest.NewServer(b, nil)
	type args struct {
		Key string `json:"idempotencyKey"`
	}
	policy := idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyRequired})
	row := func(ctx context.Context, call *server.CallRequest) error {
		_, err := idempotency.Tx(call).Exec(ctx, `INSERT INTO bench_rows (k) VALUES (?)`, idempotency.Key(call))
		return err
	}
	if err := server.AddTypedTool(srv, server.Tool{Name: "reserve"}, func(ctx context.Context, call *server.CallRequest, in args) (string, error) {
		return "done", row(ctx, call)
	}, policy); err != nil {
		b.Fatal(err)
	}
	if err := server.AddTypedTool(srv, server.Tool{Name: "pay"}, func(ctx context.Context, call *server.CallRequest, in args) (string, error) {
		if err := row(ctx, call); err != nil {
			return "", err
		}
		if _, err := delivery.Send(ctx, call, "receiver", map[string]string{"key": in.Key}); err != nil {
			return "", err
		}
		bs.paid.Add(1)
		bs.lags.start(outbox.DeliveryKey(call.Tenant, call.Name, in.Key, "receiver"))
		return "done", nil
	}, delivery.Outbox(d, delivery.Policy{}), idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyRequired})); err != nil {
		b.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	bs.url = hs.URL
	return bs
}

// call calls tool with a fresh key and checks that it ran.
func (bs *benchServer) call(c *client.Client, tool, key string) error {
	res, err := c.CallTool(context.Background(), tool, map[string]any{"idempotencyKey": key}, nil)
	switch {
	case err != nil:
		return err
	case res.IsError || res.Meta[mcp.MetaReplayed] != false:
		return fmt.Errorf("%s %s answered %+v", tool, key, res)
	}
	return nil
}

// lags times each delivery from its intent's recording to the receiver.
type lags struct {
	mu      sync.Mutex
	started map[string]time.Time
	took    []time.Duration
	early   int // arrivals before their start was noted
}

func (l *lags) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.started)
	l.took, l.early = l.took[:0], 0
}

func (l *lags) start(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, done := l.started[key]; !done {
		l.started[key] = time.Now()
	}
}

func (l *lags) arrived(key string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.started[key]; ok {
		l.took = append(l.took, now.Sub(at))
	} else {
		l.early++
	}
}

// await waits until want deliveries arrived since the last reset (at
// most a minute) and returns their lag's p50 and p99.
func (l *lags) await(want int) (p50, p99 time.Duration, err error) {
	deadline := time.Now().Add(time.Minute)
	for {
		l.mu.Lock()
		got := len(l.took) + l.early
		if got >= want || time.Now().After(deadline) {
			took := slices.Clone(l.took)
			l.mu.Unlock()
			if got != want {
				return 0, 0, fmt.Errorf("%d deliveries arrived of %d intents", got, want)
			}
			slices.Sort(took)
			if len(took) == 0 {
				return 0, 0, nil
			}
			return took[len(took)/2], took[len(took)*99/100], nil
		}
		l.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a benchmark's tail, not a test's synchronisation
	}
}
