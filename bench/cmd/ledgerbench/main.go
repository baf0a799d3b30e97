// Command ledgerbench measures the idempotency ledger against the disk it
// runs on, in one run: the raw fsync rate (write 4 KiB + fsync), then
// committed ledger operations per second on SQLite (one writer, and
// several concurrent writers with latency percentiles), the replay path,
// the two-phase mode, and PostgreSQL with several workers. Throughput is
// reported as a ratio to the fsync rate measured in the same run, which is
// what bounds a durable commit.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

func main() {
	dir := flag.String("dir", os.TempDir(), "directory for the fsync probe and the SQLite files (put it on the disk you care about)")
	duration := flag.Duration("duration", 3*time.Second, "how long each phase runs")
	writers := flag.Int("writers", 8, "concurrent writers in the contended phases")
	pg := flag.String("postgres", os.Getenv(storetest.PostgresEnv), "PostgreSQL URL for the shared-store phase (empty: skip it)")
	sync := flag.String("synchronous", "FULL", "SQLite synchronous setting")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ledgerbench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	b := &bench{dir: *dir, d: *duration, writers: *writers}
	if err := b.run(*pg, *sync); err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type bench struct {
	dir     string
	d       time.Duration
	writers int
	fsync   float64 // per second, measured first
}

// phase is one measured workload.
type phase struct {
	name      string
	ops       int
	errors    int64
	elapsed   time.Duration
	latencies []time.Duration
}

func (p phase) rate() float64 { return float64(p.ops) / p.elapsed.Seconds() }

func (p phase) pct(q float64) time.Duration {
	if len(p.latencies) == 0 {
		return 0
	}
	s := slices.Clone(p.latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (b *bench) report(p phase) {
	ratio := ""
	if b.fsync > 0 {
		ratio = fmt.Sprintf("%5.2f×", p.rate()/b.fsync)
	}
	fmt.Printf("%-34s %9.0f/s  %6s  p50 %8v  p99 %8v  max %8v  errors %d\n",
		p.name, p.rate(), ratio, p.pct(0.5).Round(time.Microsecond), p.pct(0.99).Round(time.Microsecond),
		p.pct(1).Round(time.Microsecond), p.errors)
}

func (b *bench) run(pg, sync string) error {
	ctx := context.Background()
	fsync, err := b.fsyncRate()
	if err != nil {
		return err
	}
	b.fsync = fsync.rate()
	fmt.Printf("dir %s, %v per phase, %d writers; ratios are to the fsync rate\n\n", b.dir, b.d, b.writers)
	b.report(fsync)

	path := filepath.Join(b.dir, fmt.Sprintf("ledgerbench-%d.db", os.Getpid()))
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(path + suffix)
		}
	}()
	db, err := store.Open(ctx, path, &store.Options{Synchronous: sync})
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := openLedger(ctx, db)
	if err != nil {
		return err
	}
	bare := b.bare(ctx, db, "sqlite "+sync+", bare 1-row commit")
	b.report(bare)
	seq := b.do(ctx, l, "sqlite "+sync+", 1 writer", 1, "seq")
	b.report(seq)
	fmt.Printf("%-34s %9.2f× a bare commit\n", "  ledger / bare commit", seq.rate()/bare.rate())
	b.report(b.do(ctx, l, fmt.Sprintf("sqlite %s, %d writers", sync, b.writers), b.writers, "conc"))
	b.report(b.replay(ctx, l, fmt.Sprintf("sqlite replay, %d readers", b.writers), "seq", seq.ops))
	twoPhase := b.claim(ctx, l, "sqlite two-phase, 1 writer")
	b.report(twoPhase)
	fmt.Printf("%-34s %9.2f× the one-transaction mode\n", "  two-phase / one transaction", twoPhase.rate()/seq.rate())

	if pg == "" {
		fmt.Println("\npostgres: skipped (no -postgres URL and " + storetest.PostgresEnv + " unset)")
		return nil
	}
	dsn, drop, err := storetest.FreshSchema(ctx, pg, "ledgerbench_")
	if err != nil {
		return err
	}
	defer drop()
	pdb, err := store.Open(ctx, dsn, &store.Options{MaxConns: b.writers * 2})
	if err != nil {
		return err
	}
	defer pdb.Close()
	pl, err := openLedger(ctx, pdb)
	if err != nil {
		return err
	}
	fmt.Println()
	b.fsync = 0 // the server's disk is not the one probed
	b.report(b.do(ctx, pl, "postgres, 1 worker", 1, "pseq"))
	b.report(b.do(ctx, pl, fmt.Sprintf("postgres, %d workers", b.writers), b.writers, "pconc"))
	return nil
}

// fsyncRate writes 4 KiB and fsyncs it, over and over, for the phase's
// duration: the ceiling of one-commit-per-operation durability.
func (b *bench) fsyncRate() (phase, error) {
	f, err := os.CreateTemp(b.dir, "fsync-probe")
	if err != nil {
		return phase{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	rand.Read(buf)
	p := phase{name: "raw fsync (4 KiB write + fsync)"}
	start := time.Now()
	for time.Since(start) < b.d {
		t := time.Now()
		if _, err := f.WriteAt(buf, int64(p.ops%256)*4096); err != nil {
			return p, err
		}
		if err := f.Sync(); err != nil {
			return p, err
		}
		p.latencies = append(p.latencies, time.Since(t))
		p.ops++
	}
	p.elapsed = time.Since(start)
	return p, nil
}

var effects = []store.Migration{{Version: 1,
	SQL: `CREATE TABLE bench_effects (idem_key TEXT NOT NULL, amount BIGINT NOT NULL)`,
}}

func openLedger(ctx context.Context, db *store.DB) (*ledger.Ledger, error) {
	l, err := ledger.Open(ctx, db, nil)
	if err != nil {
		return nil, err
	}
	return l, db.Migrate(ctx, "ledgerbench", effects)
}

func op(prefix string, i int) ledger.Op {
	fp, _ := ledger.FingerprintOf(map[string]any{"amount": json.Number(strconv.Itoa(i))}, nil, "")
	return ledger.Op{Tenant: "bench", Tool: "charge", Key: fmt.Sprintf("%s-%d", prefix, i), Fingerprint: fp}
}

func effect(o ledger.Op, i int) func(context.Context, *store.Tx) (json.RawMessage, error) {
	return func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO bench_effects (idem_key, amount) VALUES (?, ?)`, o.Key, i); err != nil {
			return nil, err
		}
		return json.RawMessage(fmt.Sprintf(`{"receipt":%q,"amount":%d}`, o.Key, i)), nil
	}
}

// loop runs f from n goroutines for the phase's duration; f gets a unique
// sequence number per call.
func (b *bench) loop(name string, n int, f func(i int) error) phase {
	var next atomic.Int64
	var errs atomic.Int64
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(b.d)
	for w := range n {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				i := int(next.Add(1))
				t := time.Now()
				if err := f(i); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, name+":", err)
					}
					continue
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		})
	}
	wg.Wait()
	p := phase{name: name, elapsed: time.Since(start), errors: errs.Load()}
	for _, l := range lat {
		p.latencies = append(p.latencies, l...)
	}
	p.ops = len(p.latencies)
	return p
}

// do commits new operations: each one claims a fresh key, writes its
// effect row and stores its result in one transaction.
func (b *bench) do(ctx context.Context, l *ledger.Ledger, name string, n int, prefix string) phase {
	return b.loop(name, n, func(i int) error {
		o := op(prefix, i)
		res, err := l.Do(ctx, o, effect(o, i))
		if err == nil && res.Replayed {
			err = fmt.Errorf("fresh key %s replayed", o.Key)
		}
		return err
	})
}

// bare commits one plain row per transaction: what the driver and the
// disk cost before the ledger adds anything.
func (b *bench) bare(ctx context.Context, db *store.DB, name string) phase {
	return b.loop(name, 1, func(i int) error {
		return db.WriteTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO bench_effects (idem_key, amount) VALUES (?, ?)`, "bare", i)
			return err
		})
	})
}

// replay repeats committed operations: nothing runs, the stored result
// comes back.
func (b *bench) replay(ctx context.Context, l *ledger.Ledger, name, prefix string, committed int) phase {
	return b.loop(name, b.writers, func(i int) error {
		k := i%committed + 1
		o := op(prefix, k)
		res, err := l.Do(ctx, o, effect(o, k))
		if err == nil && !res.Replayed {
			err = fmt.Errorf("key %s ran again", o.Key)
		}
		return err
	})
}

// claim runs the two-phase mode: claim and commit, then store the result
// and commit.
func (b *bench) claim(ctx context.Context, l *ledger.Ledger, name string) phase {
	return b.loop(name, 1, func(i int) error {
		c, _, err := l.Claim(ctx, op("claim", i))
		if err != nil {
			return err
		}
		_, err = c.Complete(ctx, json.RawMessage(`{"charged":true}`))
		return err
	})
}
