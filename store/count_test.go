package store

import (
	"context"
	"testing"

	"github.com/mcprel/mcprel/internal/storetest"
)

// CountAtMost counts up to its bound and says when it stopped there, on
// both databases, its WHERE's placeholders before its own.
func TestCountAtMost(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db, err := Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		component := "store-count-test"
		if err := db.Migrate(ctx, component, []Migration{{Version: 1,
			SQLite:   `DROP TABLE IF EXISTS store_count_items; CREATE TABLE store_count_items (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL)`,
			Postgres: `DROP TABLE IF EXISTS store_count_items; CREATE TABLE store_count_items (id BIGINT PRIMARY KEY, kind INTEGER NOT NULL)`}}); err != nil {
			t.Fatal(err)
		}
		defer db.WriteTx(ctx, func(tx *Tx) error {
			tx.Exec(ctx, `DELETE FROM mcprel_migrations WHERE component = ?`, component)
			_, err := tx.Exec(ctx, `DROP TABLE store_count_items`)
			return err
		})
		if err := db.WriteTx(ctx, func(tx *Tx) error {
			for i := range 5 {
				if _, err := tx.Exec(ctx, `INSERT INTO store_count_items (id, kind) VALUES (?, ?)`, i, i%2); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			max, kind, want int
			capped          bool
		}{{10, 0, 3, false}, {3, 0, 3, false}, {2, 0, 2, true}, {1, 1, 1, true}, {5, 1, 2, false}} {
			db.ReadTx(ctx, func(tx *Tx) error {
				n, capped, err := tx.CountAtMost(ctx, tc.max, `store_count_items WHERE kind = ?`, tc.kind)
				if err != nil || n != tc.want || capped != tc.capped {
					t.Errorf("at most %d of kind %d: %d, capped %v, %v; want %d, capped %v", tc.max, tc.kind, n, capped, err, tc.want, tc.capped)
				}
				return nil
			})
		}
	})
}
