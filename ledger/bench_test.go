package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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
