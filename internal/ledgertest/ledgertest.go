// Package ledgertest opens a ledger on a test's database, and the schema a
// test's effects write to, with everything closed when the test ends.
package ledgertest

import (
	"context"
	"testing"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/store"
)

// Open opens the database at dsn (see package storetest for fresh ones)
// and a ledger in it, and applies migrations, a schema of the test's own
// under component (none when migrations is empty). Options may be nil.
func Open(t testing.TB, dsn string, storeOpts *store.Options, ledgerOpts *ledger.Options, component string, migrations ...store.Migration) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dsn, storeOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := ledger.Open(ctx, db, ledgerOpts)
	if err != nil {
		t.Fatal(err)
	}
	if len(migrations) > 0 {
		if err := db.Migrate(ctx, component, migrations); err != nil {
			t.Fatal(err)
		}
	}
	return l
}
