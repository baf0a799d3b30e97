// Command outbox is an mcprel server whose tool pays through a payment
// provider: the payout is recorded with the call's idempotency key and
// delivered once that commits, with a key of its own, until the provider
// takes it. The README shows this file; a test keeps the two identical.
package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/transport/stdio"
)

type payArgs struct {
	Account        string `json:"account"`
	Cents          int    `json:"cents"`
	IdempotencyKey string `json:"idempotencyKey" jsonschema:"a new UUID per payout, reused on every retry"`
}

func main() {
	ctx := context.Background()
	db, err := store.Open(ctx, "payouts.db", nil) // or a postgres:// URL
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	l, err := ledger.Open(ctx, db, nil)
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.Open(ctx, db, nil) // in the ledger's store: one transaction holds both
	if err != nil {
		log.Fatal(err)
	}
	// The provider gets each payout as a POST with an Idempotency-Key
	// header, the same on every delivery of one operation.
	d, err := outbox.NewDispatcher(ob, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{
		"payments": &outbox.HTTPReceiver{
			URL:    os.Getenv("PAYMENTS_URL"),
			Header: http.Header{"Authorization": {"Bearer " + os.Getenv("PAYMENTS_TOKEN")}},
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	dispatching, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { d.Run(dispatching); close(stopped) }()

	srv, err := server.New(mcp.Implementation{Name: "payouts", Version: "1.0.0"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = server.AddTypedTool(srv, server.Tool{
		Name:        "pay",
		Description: "Pays cents to an account. Retry with the same idempotencyKey: it never pays twice.",
	}, func(ctx context.Context, call *server.CallRequest, in payArgs) (string, error) {
		// The intent commits with the key's record, or not at all.
		id, err := delivery.Send(ctx, call, "payments", map[string]any{"account": in.Account, "cents": in.Cents})
		return "payout " + id + " accepted", err
	},
		delivery.Outbox(d, delivery.Policy{Wait: 2 * time.Second}), // the provider's answer, if it comes within 2 s
		idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyRequired, Fields: []string{"account", "cents"}}))
	if err != nil {
		log.Fatal(err)
	}
	err = stdio.NewConn(srv, os.Stdin, os.Stdout, nil).Serve(ctx)
	stop() // deliveries in flight are recorded, the rest left to the next start
	<-stopped
	if err != nil {
		log.Fatal(err)
	}
}
