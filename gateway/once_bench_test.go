package gateway_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/benchtest"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// BenchmarkKeyedForward measures what the gateway's ledger costs a
// conditional tool, as ratios to baselines measured in the same run:
//
//	fsync                        4 KiB write + fsync of a file in the directory of the SQLite file
//	direct/callers=N             the upstream's tool called with no gateway in front
//	<store>/callers=N/unkeyed    the conditional tool through the gateway without a key
//	<store>/callers=N/keyed      the same with a fresh key: claim commit, forward, completion commit
//	<store>/callers=N/replay     the same key again: answered from the ledger, the upstream untouched
//
// for N = 1 and 8 concurrent callers (a client each, all over Streamable
// HTTP), on SQLite at synchronous=FULL ("sqlite-FULL") and on PostgreSQL
// ("postgres", skipped unless MCPREL_TEST_POSTGRES_URL names a server).
// Each variant reports its rate (calls/s, fsync/s). keyed reports
// x-unkeyed and x-fsync, replay x-direct and x-unkeyed: its rate over the
// baseline's, the baseline run in the same benchmark, interleaved with it
// in rounds of equal counts (untimed), so that a machine that gets busier
// or quieter during the run moves both alike. Both also report the
// store's write transactions per call (commits/call) and its mean
// group-commit batch (ops/commit; PostgreSQL commits each alone). Only
// ratios mean anything: run it on an otherwise idle machine, with TMPDIR
// on the disk you care about:
//
//	go test -run '^$' -bench 'KeyedForward' -benchtime 3s -count 3 -timeout 30m ./gateway
//
// (a run takes about 6 minutes, over go test's default timeout). Under
// -cpuprofile no baseline runs, and no ratio is reported, so that the
// profile of one variant is that variant's alone:
//
//	go test -run '^$' -bench 'KeyedForward/^sqlite-FULL$/^callers=8$/^keyed$' -benchtime 20000x -cpuprofile /tmp/keyed8.prof ./gateway
func BenchmarkKeyedForward(b *testing.B) {
	up := newTouchUpstream(b)
	dir := b.TempDir() // the SQLite file and the fsync probe share it
	fsync := benchtest.FsyncProbe(b, dir)
	b.Run("fsync", func(b *testing.B) { benchtest.Measure(b, "fsync/s", fsync) })
	direct := map[int]benchtest.Batch{}
	for _, n := range []int{1, 8} {
		direct[n] = up.checked(1, benchtest.Calls(benchtest.DialN(b, up.url, n), func(c *client.Client, i int64) error {
			return touch(c, strconv.FormatInt(i, 10), "")
		}))
		b.Run(fmt.Sprintf("direct/callers=%d", n), func(b *testing.B) { benchtest.Measure(b, "calls/s", direct[n]) })
	}
	stores := []struct {
		name string
		dsn  func(b *testing.B) string
	}{
		{"sqlite-FULL", func(b *testing.B) string { return filepath.Join(dir, "ledger.db") }},
		{"postgres", func(b *testing.B) string { return storetest.Postgres(b) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			l := ledgertest.Open(b, st.dsn(b), &store.Options{Synchronous: "FULL"}, nil, "")
			f := touchFront(b, up, l)
			var seq atomic.Int64 // fresh keys, unique over every run of this store
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("callers=%d", n), func(b *testing.B) {
					cs := benchtest.DialN(b, f.url, n)
					unkeyed := up.checked(1, benchtest.Calls(cs, func(c *client.Client, i int64) error {
						return touch(c, "", "")
					}))
					b.Run("unkeyed", func(b *testing.B) { benchtest.Measure(b, "calls/s", unkeyed) })
					b.Run("keyed", func(b *testing.B) {
						keyed := up.checked(1, benchtest.Calls(cs, func(c *client.Client, i int64) error {
							return touch(c, fmt.Sprintf("k-%d", seq.Add(1)), "executed")
						}))
						w := l.DB().WriteStats()
						benchtest.Measure(b, "calls/s", keyed, benchtest.Baseline{Unit: "x-unkeyed", Run: unkeyed}, benchtest.Baseline{Unit: "x-fsync", Run: fsync})
						benchtest.ReportCommits(b, w, l.DB().WriteStats())
					})
					b.Run("replay", func(b *testing.B) {
						// One committed key per caller, each asked again and again.
						key := map[*client.Client]string{}
						for _, c := range cs {
							key[c] = fmt.Sprintf("r-%d", seq.Add(1))
							must(b, touch(c, key[c], "executed"))
						}
						replay := up.checked(0, benchtest.Calls(cs, func(c *client.Client, i int64) error {
							return touch(c, key[c], "replayed")
						}))
						w := l.DB().WriteStats()
						benchtest.Measure(b, "calls/s", replay, benchtest.Baseline{Unit: "x-direct", Run: direct[n]}, benchtest.Baseline{Unit: "x-unkeyed", Run: unkeyed})
						benchtest.ReportCommits(b, w, l.DB().WriteStats())
					})
				})
			}
		})
	}
}

// touchUpstream is an upstream with one trivial mutation, "touch", that
// ignores its key (the gateway forwards it at most once per key, as it
// would a mailer's send) and counts its calls.
type touchUpstream struct {
	url   string
	calls atomic.Int64
}

func newTouchUpstream(b *testing.B) *touchUpstream {
	b.Helper()
	u := &touchUpstream{}
	srv := mcptest.NewServer(b, nil)
	must(b, server.AddTypedTool(srv, server.Tool{Name: "touch"}, func(ctx context.Context, call *server.CallRequest, in struct {
		RequestID string `json:"requestId,omitempty"`
	}) (string, error) {
		u.calls.Add(1)
		return "touched", nil
	}))
	h, err := streamhttp.NewHandler(srv, nil)
	must(b, err)
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

// checked is run, failing unless the upstream ran perCall calls for
// each of its operations.
func (u *touchUpstream) checked(perCall int64, run benchtest.Batch) benchtest.Batch {
	return func(n int) (time.Duration, error) {
		before := u.calls.Load()
		d, err := run(n)
		if got := u.calls.Load() - before; err == nil && got != perCall*int64(n) {
			err = fmt.Errorf("the upstream ran %d calls for %d operations, want %d each", got, n, perCall)
		}
		return d, err
	}
}

// touchFront is a gateway in front of u whose policy makes "touch"
// conditional, keyed by requestId, at most once, on ledger l: newFront's
// gateway, for a benchmark.
func touchFront(b *testing.B, u *touchUpstream, l *ledger.Ledger) *front {
	b.Helper()
	return newFrontOn(b, mcptest.NewServer(b, nil), gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}},
		Ledger:    l,
		Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
			"touch": {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, AtMostOnce: true, KeyArgument: "requestId"}},
		}},
	}, nil)
}

// touch calls "touch" with key as its requestId ("": none) and checks how
// the answer says it was served: want "executed" or "replayed" for a
// keyed call through the gateway, "" for anything else.
func touch(c *client.Client, key, want string) error {
	args := map[string]any{}
	if key != "" {
		args["requestId"] = key
	}
	res, err := c.CallTool(context.Background(), "touch", args, nil)
	switch {
	case err != nil:
		return err
	case res.IsError || text(res) != "touched":
		return fmt.Errorf("touch %q answered %+v", key, res)
	case want == "replayed" && res.Meta[mcp.MetaReplayed] != true,
		want == "executed" && res.Meta[mcp.MetaReplayed] != false:
		return fmt.Errorf("touch %q: want it %s, its _meta is %v", key, want, res.Meta)
	}
	return nil
}
