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
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/mcprel/mcprel/bench/internal/measure"
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

func (b *bench) report(p measure.Phase) { measure.Report(p, b.fsync) }

func (b *bench) loop(name string, n int, f func(i int) error) measure.Phase {
	return measure.Loop(name, n, b.d, f)
}

func (b *bench) run(pg, sync string) error {
	ctx := context.Background()
	fsync, err := measure.FsyncRate(b.dir, b.d)
	if err != nil {
		return err
	}
	b.fsync = fsync.Rate()
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
	fmt.Printf("%-34s %9.2f× a bare commit\n", "  ledger / bare commit", seq.Rate()/bare.Rate())
	b.report(b.do(ctx, l, fmt.Sprintf("sqlite %s, %d writers", sync, b.writers), b.writers, "conc"))
	b.report(b.replay(ctx, l, fmt.Sprintf("sqlite replay, %d readers", b.writers), "seq", seq.Ops))
	twoPhase := b.claim(ctx, l, "sqlite two-phase, 1 writer")
	b.report(twoPhase)
	fmt.Printf("%-34s %9.2f× the one-transaction mode\n", "  two-phase / one transaction", twoPhase.Rate()/seq.Rate())

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

// do commits new operations: each one claims a fresh key, writes its
// effect row and stores its result in one transaction.
func (b *bench) do(ctx context.Context, l *ledger.Ledger, name string, n int, prefix string) measure.Phase {
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
func (b *bench) bare(ctx context.Context, db *store.DB, name string) measure.Phase {
	return b.loop(name, 1, func(i int) error {
		return db.WriteTx(ctx, func(tx *store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO bench_effects (idem_key, amount) VALUES (?, ?)`, "bare", i)
			return err
		})
	})
}

// replay repeats committed operations: nothing runs, the stored result
// comes back.
func (b *bench) replay(ctx context.Context, l *ledger.Ledger, name, prefix string, committed int) measure.Phase {
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
func (b *bench) claim(ctx context.Context, l *ledger.Ledger, name string) measure.Phase {
	return b.loop(name, 1, func(i int) error {
		c, _, err := l.Claim(ctx, op("claim", i))
		if err != nil {
			return err
		}
		_, err = c.Complete(ctx, json.RawMessage(`{"charged":true}`))
		return err
	})
}
