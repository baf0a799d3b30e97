package delivery_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// provider is a receiver that applies each delivery key once, as a
// payment provider does, and counts what it saw.
type provider struct {
	mu         sync.Mutex
	deliveries int
	applied    map[string]json.RawMessage // by key
	hold       chan struct{}              // when set, deliveries wait for it
}

func (p *provider) Deliver(ctx context.Context, d outbox.Delivery) outbox.Answer {
	if p.hold != nil {
		select {
		case <-p.hold:
		case <-ctx.Done():
			return outbox.Answer{Verdict: outbox.Retry, Error: "no answer"}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deliveries++
	if p.applied == nil {
		p.applied = map[string]json.RawMessage{}
	}
	if _, ok := p.applied[d.Key]; !ok {
		p.applied[d.Key] = d.Request
	}
	return outbox.Answer{Verdict: outbox.Acknowledged, Status: 200, Body: json.RawMessage(`{"payout":"po_` + d.Key[7:13] + `"}`)}
}

func (p *provider) count() (deliveries, applied int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deliveries, len(p.applied)
}

// payouts is a server with a keyed tool whose effect is a payout: an
// intent for the provider, recorded in the key's transaction.
func payouts(t *testing.T, dsn string, p *provider, pol delivery.Policy) (*client.Client, *outbox.Outbox) {
	t.Helper()
	l := ledgertest.Open(t, dsn, nil, nil, "")
	ob, err := outbox.Open(context.Background(), l.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := outbox.NewDispatcher(ob, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": p}, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := mcptest.NewServer(t, nil)
	type payout struct {
		Account string `json:"account"`
		Cents   int    `json:"cents"`
		Fail    bool   `json:"fail,omitempty"`
		Key     string `json:"idempotencyKey"`
	}
	err = server.AddTypedTool(srv, server.Tool{Name: "send_payout"}, func(ctx context.Context, call *server.CallRequest, in payout) (map[string]any, error) {
		id, err := delivery.Send(ctx, call, "payouts", map[string]any{"account": in.Account, "cents": in.Cents})
		if err != nil {
			return nil, err
		}
		if in.Fail { // after the intent: rolls it back with the key
			return nil, &mcp.ToolError{Code: "ledger_busy", Message: "try again", Retryable: true}
		}
		return map[string]any{"payoutId": id, "status": "accepted"}, nil
	}, delivery.Outbox(d, pol), idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyRequired, Fields: []string{"account", "cents"}}))
	if err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := client.DialHTTP(context.Background(), hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ob
}

func deliveries(t *testing.T, res *mcp.CallToolResult) []delivery.Status {
	t.Helper()
	b, _ := json.Marshal(res.Meta[mcp.MetaDelivery])
	var out []delivery.Status
	if err := json.Unmarshal(b, &out); err != nil || len(out) != 1 {
		t.Fatalf("the result's delivery _meta = %s (%v)", b, err)
	}
	return out
}

func payoutID(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	var out struct {
		PayoutID string `json:"payoutId"`
	}
	json.Unmarshal(b, &out)
	return out.PayoutID
}

// A keyed call's payout is an intent, committed with its key and
// delivered once it is; a retry with the key gets the same operation, as
// it now stands, and records none; a failure after the intent takes it
// back with the key; the provider applies the payout once.
func TestPayoutIsDeliveredOnceAndReplayed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		p := &provider{}
		c, ob := payouts(t, dsn, p, delivery.Policy{Wait: 10 * time.Second})
		tools, err := c.ListTools(ctx)
		if err != nil || len(tools) != 1 || tools[0].Meta[mcp.MetaEffect] != mcp.EffectOutbox {
			t.Fatalf("the tool's listing = %+v, %v; want its effect the outbox's", tools, err)
		}
		args := map[string]any{"account": "acct-1", "cents": 500, "idempotencyKey": "po-1"}
		first, err := c.CallTool(ctx, "send_payout", args, nil)
		if err != nil || first.IsError {
			t.Fatalf("send_payout = %+v, %v", first, err)
		}
		id := payoutID(t, first)
		st := deliveries(t, first)[0]
		if id == "" || st.Operation != id || st.State != "delivered" || !strings.Contains(string(st.Answer), `"payout":"po_`) {
			t.Fatalf("the waiting call's delivery = %+v (payout %q)", st, id)
		}
		again, err := c.CallTool(ctx, "send_payout", args, nil)
		if err != nil || again.Meta[mcp.MetaReplayed] != true || payoutID(t, again) != id || deliveries(t, again)[0].State != "delivered" {
			t.Fatalf("the retry = %+v, %v", again, err)
		}
		if ops, _ := ob.Lookup(ctx, "", "send_payout", "po-1"); len(ops) != 1 {
			t.Fatalf("%d intents for one key", len(ops))
		}
		failed, err := c.CallTool(ctx, "send_payout", map[string]any{"account": "acct-2", "cents": 1, "fail": true, "idempotencyKey": "po-2"}, nil)
		if err != nil || !failed.IsError {
			t.Fatalf("a call that fails after its intent = %+v, %v", failed, err)
		}
		if ops, _ := ob.Lookup(ctx, "", "send_payout", "po-2"); len(ops) != 0 {
			t.Fatalf("the failed call's intent was kept: %+v", ops)
		}
		if deliveries, applied := p.count(); deliveries != 1 || applied != 1 {
			t.Fatalf("the provider saw %d deliveries and applied %d payouts, want 1 and 1", deliveries, applied)
		}
	})
}

// Without Wait the call answers once the intent is committed, pending;
// the operation is delivered after, and a retry shows it delivered.
func TestPayoutAcceptedThenDelivered(t *testing.T) {
	ctx := context.Background()
	p := &provider{hold: make(chan struct{})}
	c, ob := payouts(t, storetest.SQLite(t), p, delivery.Policy{})
	args := map[string]any{"account": "acct-1", "cents": 500, "idempotencyKey": "po-1"}
	first, err := c.CallTool(ctx, "send_payout", args, nil)
	if err != nil || first.IsError || deliveries(t, first)[0].State != "pending" {
		t.Fatalf("send_payout = %+v, %v; want accepted, pending", first, err)
	}
	close(p.hold)
	d, err := outbox.NewDispatcher(ob, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": p}})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if op, err := d.Wait(waitCtx, "", payoutID(t, first)); err != nil || op.State != outbox.Delivered {
		t.Fatalf("the operation = %+v, %v", op, err)
	}
	again, err := c.CallTool(ctx, "send_payout", args, nil)
	if err != nil || deliveries(t, again)[0].State != "delivered" {
		t.Fatalf("the retry = %+v, %v", again, err)
	}
}

// The policy goes around a keyed tool with a transaction, and says so.
func TestOutboxNeedsAKeyedTransaction(t *testing.T) {
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	ob, err := outbox.Open(context.Background(), l.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := outbox.NewDispatcher(ob, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": &provider{}}})
	srv := mcptest.NewServer(t, nil)
	h := func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	if err := srv.AddTool(server.Tool{Name: "plain"}, h, delivery.Outbox(d, delivery.Policy{})); err == nil || !strings.Contains(err.Error(), "before idempotency.Keyed") {
		t.Fatalf("an unkeyed tool with an outbox = %v", err)
	}
	if err := srv.AddTool(server.Tool{Name: "external"}, h, delivery.Outbox(d, delivery.Policy{}),
		idempotency.Keyed(l, idempotency.Policy{External: true})); err == nil {
		t.Fatal("an External keyed tool took an outbox")
	}
	// Keyed is known by what it did, not by the _meta it advertises: a
	// tool whose author wrote a keyed, transactional effect into its
	// _meta has no transaction to record an intent in.
	looksKeyed := server.Tool{Name: "looks-keyed", Meta: mcp.Meta{mcp.MetaKeyMode: "required", mcp.MetaEffect: mcp.EffectInTransaction}}
	if err := srv.AddTool(looksKeyed, h, delivery.Outbox(d, delivery.Policy{})); err == nil || !strings.Contains(err.Error(), "before idempotency.Keyed") {
		t.Fatalf("a tool no ledger wrapped, whose _meta looks keyed, with an outbox = %v", err)
	}
	if err := srv.AddTool(server.Tool{Name: "twice"}, h, delivery.Outbox(d, delivery.Policy{}), delivery.Outbox(d, delivery.Policy{}),
		idempotency.Keyed(l, idempotency.Policy{})); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Fatalf("two outboxes = %v", err)
	}
	if err := srv.AddTool(server.Tool{Name: "send"}, h, delivery.Outbox(d, delivery.Policy{}), idempotency.Keyed(l, idempotency.Policy{})); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plain", "external", "looks-keyed", "twice"} {
		if srv.HasTool(name) {
			t.Errorf("refused tool %s was registered", name)
		}
	}
}
