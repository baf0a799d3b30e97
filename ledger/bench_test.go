package ledger_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// BenchmarkLoneWriter is one writer committing on SQLite: a bare one-row
// commit, and a fresh keyed operation through the ledger writing the same
// row. Their ratio is what the ledger costs a writer (bench/cmd/ledgerbench
// reports it against the disk's fsync rate).
func BenchmarkLoneWriter(b *testing.B) {
	ctx := context.Background()
	l := open(b, storetest.SQLite(b), nil)
	db := l.DB()
	b.Run("bare", func(b *testing.B) {
		for i := range b.N {
			err := db.WriteTx(ctx, func(tx *store.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO effects (tenant, idem_key, quantity) VALUES (?, ?, ?)`, "bare", "b-"+strconv.Itoa(i), i)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	run := 0
	b.Run("ledger", func(b *testing.B) {
		run++ // fresh keys in every run, or the next one only replays
		for i := range b.N {
			o := freshOp("k-"+strconv.Itoa(run)+"-"+strconv.Itoa(i), i)
			if _, err := l.Do(ctx, o, reserve(nil, o, i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEightWriters is eight writers committing fresh keyed operations
// on SQLite at once: they share group commits (ops/commit is the mean
// batch), so a commit's fsync is spread over the batch and what each
// operation costs in CPU decides the rate.
func BenchmarkEightWriters(b *testing.B) {
	ctx := context.Background()
	l := open(b, storetest.SQLite(b), nil)
	db := l.DB()
	before := db.WriteStats()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				o := freshOp("w-"+strconv.FormatInt(i, 10), int(i))
				if _, err := l.Do(ctx, o, reserve(nil, o, int(i))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	after := db.WriteStats()
	b.ReportMetric(float64(after.Operations-before.Operations)/float64(after.Commits-before.Commits), "ops/commit")
}

// freshOp is the benchmarks' keyed operation on key, its fingerprint
// built directly (no JSON to parse in the timed loop); reserve is its
// effect, one effects row.
func freshOp(key string, quantity int) ledger.Op {
	fp, _ := ledger.FingerprintOf(map[string]any{"quantity": json.Number(strconv.Itoa(quantity))}, nil, "")
	return ledger.Op{Tenant: "t", Tool: "reserve", Key: key, Fingerprint: fp}
}
