package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
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
			key := "k-" + strconv.Itoa(run) + "-" + strconv.Itoa(i)
			fp, _ := ledger.FingerprintOf(map[string]any{"q": json.Number(strconv.Itoa(i))}, nil, "")
			o := ledger.Op{Tenant: "t", Tool: "reserve", Key: key, Fingerprint: fp}
			_, err := l.Do(ctx, o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
				_, err := tx.Exec(ctx, `INSERT INTO effects (tenant, idem_key, quantity) VALUES (?, ?, ?)`, "t", key, i)
				return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), err
			})
			if err != nil {
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
				key := "w-" + strconv.FormatInt(i, 10)
				fp, _ := ledger.FingerprintOf(map[string]any{"q": json.Number(strconv.FormatInt(i, 10))}, nil, "")
				o := ledger.Op{Tenant: "t", Tool: "reserve", Key: key, Fingerprint: fp}
				_, err := l.Do(ctx, o, func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
					_, err := tx.Exec(ctx, `INSERT INTO effects (tenant, idem_key, quantity) VALUES (?, ?, ?)`, "t", key, i)
					return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), err
				})
				if err != nil {
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
