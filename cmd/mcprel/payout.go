package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
)

// The payout demo: send_payout, whose effect is a POST to a payment
// provider — a call to someone else, which no transaction holds. Its
// handler records an intent in the key's transaction (delivery.Send);
// the outbox's dispatcher delivers it once that commits, with a delivery
// key derived from the operation, until the provider acknowledges it or
// refuses it for good.

// payoutTarget is the outbox target send_payout's intents go to.
const payoutTarget = "payouts"

// payoutWait is how long send_payout waits for the provider's answer
// before it answers with the intent pending.
const payoutWait = 2 * time.Second

// outboxFlags are serve's flags for the outbox and the payment provider.
type outboxFlags struct {
	payoutURL, payoutToken *string
	lease                  *time.Duration
	maxPerTenant, max      *int
}

func (f *outboxFlags) register(fs *flag.FlagSet) {
	f.payoutURL = fs.String("payout-url", "", "the payment provider send_payout POSTs to (with an Idempotency-Key header); default: the demo provider, in this process, keeping its payouts in the database")
	f.payoutToken = fs.String("payout-token", "", "the bearer token for --payout-url (or set MCPREL_PAYOUT_TOKEN); sent to the provider only")
	f.lease = fs.Duration("outbox-lease", outbox.DefaultLease, "how long a delivery outlives a process that died making it before another process (or this one, restarted) delivers it again")
	f.maxPerTenant = fs.Int("max-pending-deliveries-per-tenant", outbox.DefaultMaxPendingPerTenant, "undelivered intents one tenant may have at once; past it a call is refused as overloaded, retryable (give every replica the same)")
	f.max = fs.Int("max-pending-deliveries", outbox.DefaultMaxPending, "undelivered intents all tenants may have at once (give every replica the same)")
}

// apply checks the flags and configures the outbox in opts. It returns
// the receiver of the in-process demo provider, whose client is set once
// the runtime's store is open (see startPayouts), or nil.
func (f *outboxFlags) apply(opts *host.Options) (*outbox.HTTPReceiver, error) {
	if *f.lease <= 0 {
		return nil, usagef("serve: --outbox-lease must be positive, not %v", *f.lease)
	}
	if *f.maxPerTenant < 1 || *f.max < 1 {
		return nil, usagef("serve: --max-pending-deliveries-per-tenant and --max-pending-deliveries must be at least 1")
	}
	opts.Outbox = outbox.Options{MaxPendingPerTenant: *f.maxPerTenant, MaxPending: *f.max}
	opts.Dispatcher = outbox.DispatcherOptions{Lease: *f.lease}
	token := cmp.Or(*f.payoutToken, os.Getenv("MCPREL_PAYOUT_TOKEN"))
	var recv *outbox.HTTPReceiver
	if *f.payoutURL != "" {
		u, err := url.Parse(*f.payoutURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usagef("serve: --payout-url wants an http:// or https:// URL, such as https://payments.example.com/payouts, not %q", *f.payoutURL)
		}
		if u.User != nil {
			return nil, usagef("serve: --payout-url must not carry credentials: give the token in MCPREL_PAYOUT_TOKEN")
		}
		recv = &outbox.HTTPReceiver{URL: *f.payoutURL}
		if token != "" {
			recv.Header = http.Header{"Authorization": {"Bearer " + token}}
		}
	} else {
		if token != "" {
			return nil, usagef("serve: --payout-token is for --payout-url; the demo provider in this process needs none")
		}
		recv = &outbox.HTTPReceiver{URL: "http://payouts.in-process/payouts"}
	}
	opts.Dispatcher.Receivers = map[string]outbox.Receiver{payoutTarget: recv}
	if *f.payoutURL != "" {
		return nil, nil
	}
	return recv, nil
}

// startPayouts opens the demo provider in the runtime's store and points
// recv at it, before the dispatcher runs.
func startPayouts(ctx context.Context, rt *host.Runtime, recv *outbox.HTTPReceiver) error {
	if recv == nil {
		return nil
	}
	p, err := payouts.Open(ctx, rt.Ledger().DB(), nil)
	if err != nil {
		return err
	}
	recv.Client = p.Client()
	return nil
}

type payoutArgs struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

type payoutResult struct {
	OperationID string `json:"operationId"`
	Account     string `json:"account"`
	Cents       int64  `json:"cents"`
	Status      string `json:"status"`
}

// addPayoutTool registers send_payout, keyed in l, its payouts delivered
// by d.
func addPayoutTool(srv *server.Server, l *ledger.Ledger, d *outbox.Dispatcher) error {
	return server.AddTypedTool(srv, server.Tool{
		Name: "send_payout",
		Description: "Pays cents to an account through the payment provider. idempotencyKey is required: a new UUID per " +
			"payout, the same one on every retry. The payout is recorded with the key and then delivered to the provider " +
			"until it acknowledges it, carrying a key of its own derived from yours, so the provider pays once however " +
			"often it is delivered. The result gives the operation's id; its _meta dev.mcprel/delivery says whether the " +
			"provider has paid (delivered, with its answer), is still to (pending) or refused (failed). A retry with the " +
			"same key returns the same operation and never pays again; after a lost response retry with the key or ask " +
			"lookup_operation.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"account":` + nameSchema + `,"cents":{"type":"integer","minimum":1,"maximum":100000000},` +
			`"idempotencyKey":` + keySchema + `},"required":["account","cents","idempotencyKey"],"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(false), DestructiveHint: mcp.Bool(false), IdempotentHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(true)},
	}, func(ctx context.Context, req *server.CallRequest, in payoutArgs) (payoutResult, error) {
		id, err := delivery.Send(ctx, req, payoutTarget, in)
		if err != nil {
			return payoutResult{}, err
		}
		return payoutResult{OperationID: id, Account: in.Account, Cents: in.Cents, Status: "accepted"}, nil
	},
		delivery.Outbox(d, delivery.Policy{Wait: payoutWait}),
		idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyRequired, Fields: []string{"account", "cents"}}))
}
