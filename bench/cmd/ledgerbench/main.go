// Command ledgerbench measures the idempotency ledger against the disk it
// runs on and against raw transactions, in paired rounds: each round
// measures the raw fsync rate (write 4 KiB + fsync), a bare one-row SQLite
// commit, a raw transaction writing the rows a keyed operation writes,
// and committed ledger operations per second on SQLite with one
// writer and with several concurrent writers (latency percentiles too);
// then, once, the replay path and the two-phase mode; then PostgreSQL,
// where each round measures raw transactions writing the same rows and
// the ledger with several workers. The medians of the rounds' ratios are
// the result: a ratio to a baseline measured beside it, never a rate
// compared across runs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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
	rounds := flag.Int("rounds", 5, "paired rounds of the baselines and the ledger; the ratios' medians are reported")
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
	b := &bench{dir: *dir, d: *duration, writers: *writers, rounds: max(*rounds, 1)}
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
	rounds  int
	fsync   float64 // per second, measured in the current round
}

func (b *bench) report(p measure.Phase) { measure.Report(p, b.fsync) }

func (b *bench) loop(name string, n int, f func(i int) error) measure.Phase {
	return measure.Loop(name, n, b.d, f)
}

func (b *bench) run(pg, sync string) error {
	ctx := context.Background()
	fmt.Printf("dir %s, %v per phase, %d writers, %d rounds; ratios are to the fsync rate\n\n", b.dir, b.d, b.writers, b.rounds)

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
	// Each round measures the baselines and the ledger back to back, so
	// that a ratio compares phases under the same conditions; the medians
	// of the rounds' ratios are the result.
	var loneRatios, rawRatios, groupRatios []float64
	var seq measure.Phase
	for r := 1; r <= b.rounds; r++ {
		fmt.Printf("round %d\n", r)
		fsync, err := measure.FsyncRate(b.dir, b.d)
		if err != nil {
			return err
		}
		b.fsync = fsync.Rate()
		b.report(fsync)
		bare := b.bare(ctx, db, "sqlite "+sync+", bare 1-row commit")
		b.report(bare)
		raw := b.rawShape(ctx, db, "sqlite "+sync+", raw effect+record", fmt.Sprintf("raw%d", r), 1, false)
		b.report(raw)
		one := b.do(ctx, l, "sqlite "+sync+", 1 writer", 1, fmt.Sprintf("seq%d", r))
		b.report(one)
		conc := b.do(ctx, l, fmt.Sprintf("sqlite %s, %d writers", sync, b.writers), b.writers, fmt.Sprintf("conc%d", r))
		b.report(conc)
		loneRatios = append(loneRatios, one.Rate()/bare.Rate())
		rawRatios = append(rawRatios, one.Rate()/raw.Rate())
		groupRatios = append(groupRatios, conc.Rate()/fsync.Rate())
		if r == 1 {
			seq = one
		}
	}
	fmt.Printf("\n%-34s %9.2f× a bare commit (rounds: %s)\n", "  sqlite 1 writer, median", median(loneRatios), list(loneRatios))
	fmt.Printf("%-34s %9.2f× a raw effect+record (rounds: %s)\n", "", median(rawRatios), list(rawRatios))
	fmt.Printf("%-34s %9.2f× the fsync rate (rounds: %s)\n\n", fmt.Sprintf("  sqlite %d writers, median", b.writers), median(groupRatios), list(groupRatios))
	b.report(b.replay(ctx, l, fmt.Sprintf("sqlite replay, %d readers", b.writers), "seq1", seq.Ops))
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
	// The baselines: the same rows through the same pool with no ledger,
	// in the ledger's three statements (claim, effect, result) and in the
	// fewest that write them (effect, then the record with its result).
	var sameRatios, fewestRatios []float64
	for r := 1; r <= b.rounds; r++ {
		fmt.Printf("round %d\n", r)
		same := b.rawShape(ctx, pdb, fmt.Sprintf("postgres raw, claim+effect+result, %d", b.writers), fmt.Sprintf("praw3-%d", r), b.writers, true)
		b.report(same)
		fewest := b.rawShape(ctx, pdb, fmt.Sprintf("postgres raw, effect+record, %d", b.writers), fmt.Sprintf("praw2-%d", r), b.writers, false)
		b.report(fewest)
		conc := b.do(ctx, pl, fmt.Sprintf("postgres, %d workers", b.writers), b.writers, fmt.Sprintf("pconc%d", r))
		b.report(conc)
		sameRatios = append(sameRatios, conc.Rate()/same.Rate())
		fewestRatios = append(fewestRatios, conc.Rate()/fewest.Rate())
	}
	fmt.Printf("\n%-34s %9.2f× claim+effect+result (rounds: %s)\n", fmt.Sprintf("  postgres %d workers, median", b.writers), median(sameRatios), list(sameRatios))
	fmt.Printf("%-34s %9.2f× effect+record (rounds: %s)\n", "", median(fewestRatios), list(fewestRatios))
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func list(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
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

// rawShape commits what a keyed operation writes — an effect row and a
// ledger record — without the ledger: as the ledger does it (claim the
// record, write the effect, store the result) or in the fewest statements
// (the effect, then the record with its result in one insert).
func (b *bench) rawShape(ctx context.Context, db *store.DB, name, prefix string, writers int, claimFirst bool) measure.Phase {
	return b.loop(name, writers, func(i int) error {
		o := op(prefix, i)
		now := time.Now().UnixMilli()
		expires := now + ledger.DefaultRetention.Milliseconds()
		result := fmt.Sprintf(`{"receipt":%q,"amount":%d}`, o.Key, i)
		return db.WriteTx(ctx, func(tx *store.Tx) error {
			if claimFirst {
				if _, err := tx.Exec(ctx, `INSERT INTO mcprel_ledger (tenant, tool, idem_key, fingerprint, state, created_at, expires_at, executions)
					VALUES (?, ?, ?, ?, 2, ?, ?, 1)`, o.Tenant, o.Tool, o.Key, o.Fingerprint[:], now, expires); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO bench_effects (idem_key, amount) VALUES (?, ?)`, o.Key, i); err != nil {
				return err
			}
			if claimFirst {
				_, err := tx.Exec(ctx, `UPDATE mcprel_ledger SET result = ?, executed_at = ? WHERE tenant = ? AND tool = ? AND idem_key = ?`,
					result, now, o.Tenant, o.Tool, o.Key)
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO mcprel_ledger (tenant, tool, idem_key, fingerprint, state, result, created_at, executed_at, expires_at, executions)
				VALUES (?, ?, ?, ?, 2, ?, ?, ?, ?, 1)`, o.Tenant, o.Tool, o.Key, o.Fingerprint[:], result, now, now, expires)
			return err
		})
	})
}
