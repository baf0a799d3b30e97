// Command ledger is an mcprel server whose tool changes state: each
// reservation runs at most once per idempotency key, however often it is
// retried. The README shows this file; a test keeps the two identical.
package main

import (
	"context"
	"log"
	"os"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/transport/stdio"
)

type reserveArgs struct {
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity" jsonschema:"units to reserve"`
	IdempotencyKey string `json:"idempotencyKey" jsonschema:"a new UUID per reservation, reused on every retry"`
}

func main() {
	ctx := context.Background()
	// A SQLite file here; a postgres:// URL when replicas share the work.
	db, err := store.Open(ctx, "reservations.db", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := ledger.Open(ctx, db, nil) // records kept 24 h by default
	if err != nil {
		log.Fatal(err)
	}
	err = db.Migrate(ctx, "reservations", []store.Migration{{Version: 1,
		SQL: `CREATE TABLE reservations (sku TEXT NOT NULL, quantity BIGINT NOT NULL)`}})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(mcp.Implementation{Name: "reservations", Version: "1.0.0"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = server.AddTypedTool(srv, server.Tool{
		Name:        "reserve",
		Description: "Reserves stock. Retry with the same idempotencyKey: it never reserves twice.",
	}, func(ctx context.Context, call *server.CallRequest, in reserveArgs) (string, error) {
		// idempotency.Tx(call) is the transaction that also claims the key
		// and stores this result: the row, the record and the result
		// commit together.
		_, err := idempotency.Tx(call).Exec(ctx, `INSERT INTO reservations (sku, quantity) VALUES (?, ?)`, in.SKU, in.Quantity)
		return "reserved", err
	}, idempotency.Keyed(l, idempotency.Policy{
		Key:    idempotency.KeyRequired,
		Fields: []string{"sku", "quantity"}, // what the key is bound to
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := stdio.NewConn(srv, os.Stdin, os.Stdout, nil).Serve(ctx); err != nil {
		log.Fatal(err)
	}
}
