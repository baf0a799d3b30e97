package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/delivery"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/store"
)

// provider is the demo payment provider on a loopback listener of its
// own, requiring token, with the time each payout request arrived.
type provider struct {
	*payouts.Provider
	url string

	mu       sync.Mutex
	arrivals []time.Time
}

func startProvider(t *testing.T, token string) *provider {
	t.Helper()
	db, err := store.Open(context.Background(), storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p := &provider{}
	if p.Provider, err = payouts.Open(context.Background(), db, &payouts.Options{Token: token}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/payouts" {
			p.mu.Lock()
			p.arrivals = append(p.arrivals, time.Now())
			p.mu.Unlock()
		}
		p.Provider.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	p.url = hs.URL + "/payouts"
	return p
}

func (p *provider) gaps() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(p.arrivals); i++ {
		out = append(out, p.arrivals[i].Sub(p.arrivals[i-1]))
	}
	return out
}

// dialAs connects the client package to url as the holder of token.
func dialAs(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.DialHTTP(context.Background(), url, &client.Options{Header: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// payout calls send_payout and returns its result's delivery.
func payout(t *testing.T, c *client.Client, account string, cents int, key string) (*mcp.CallToolResult, delivery.Status) {
	t.Helper()
	res, err := c.CallTool(context.Background(), "send_payout", map[string]any{"account": account, "cents": cents, "idempotencyKey": key}, nil)
	if err != nil || res.IsError {
		t.Fatalf("send_payout %s: %v %+v", key, err, res)
	}
	return res, deliveryOf(t, res.Meta[mcp.MetaDelivery])
}

func deliveryOf(t *testing.T, v any) delivery.Status {
	t.Helper()
	b, _ := json.Marshal(v)
	var ds []delivery.Status
	if err := json.Unmarshal(b, &ds); err != nil || len(ds) != 1 {
		t.Fatalf("delivery %s (%v): want one", b, err)
	}
	return ds[0]
}

// payoutLookup is what lookup_operation answers of a payout, with its
// deliveries decoded.
type payoutLookup struct {
	idempotency.Operation
	Deliveries []delivery.Status `json:"deliveries"`
}

// lookupPayout asks lookup_operation about key, and returns what it said.
func lookupPayout(t *testing.T, c *client.Client, key string) payoutLookup {
	t.Helper()
	res, err := c.CallTool(context.Background(), "lookup_operation", map[string]any{"tool": "send_payout", "idempotencyKey": key}, nil)
	if err != nil || res.IsError {
		t.Fatalf("lookup_operation %s: %v %+v", key, err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out payoutLookup
	json.Unmarshal(b, &out)
	return out
}

// awaitDelivery asks lookup_operation until key's delivery ends.
func awaitDelivery(t *testing.T, c *client.Client, key string) payoutLookup {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := lookupPayout(t, c, key)
		if len(got.Deliveries) == 1 && got.Deliveries[0].State != "pending" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's delivery still pending after 30 s: %+v", key, got)
		}
		time.Sleep(50 * time.Millisecond) // the dispatcher is another process
	}
}

// A provider that answers 503 with a Retry-After three times: the payout
// is committed and answered pending (the call waits 2 s, the provider
// fails for 3), delivered on the fourth attempt, the attempts spaced by
// the Retry-After or the backoff, whichever is longer, and no more,
// and paid once; a retry with the key returns the same operation, now
// delivered, and pays nothing more.
func TestServePayoutOutlastsAnUnavailableProvider(t *testing.T) {
	p := startProvider(t, "provider-secret")
	p.Fail(http.StatusServiceUnavailable, 3, time.Second)
	url, _ := startHTTP(t, []string{"MCPREL_PAYOUT_TOKEN=provider-secret"}, "--auth-token", "client-secret", "--payout-url", p.url)
	c := dialAs(t, url, "client-secret")

	_, first := payout(t, c, "alice", 500, "po-1")
	if first.State != "pending" || first.Target != "payouts" {
		t.Fatalf("with the provider failing for 3 s, the call's delivery = %+v, want pending", first)
	}
	done := awaitDelivery(t, c, "po-1")
	d := done.Deliveries[0]
	if d.State != "delivered" || d.Attempts != 4 || d.Operation != first.Operation || !jsonContains(d.Answer, `"status":201`) {
		t.Fatalf("after the failures: %+v %s; want delivered on the fourth attempt", d, d.Answer)
	}
	for i, g := range p.gaps() {
		// The wait after attempt n is the Retry-After (1 s) or the
		// backoff's bound (500 ms doubled n-1 times), whichever is longer;
		// scheduling adds a little.
		bound := max(time.Second, 500*time.Millisecond<<i)
		if g < 990*time.Millisecond || g > bound+time.Second {
			t.Errorf("attempt %d came %v after the one before: want between the Retry-After (1 s) and %v", i+2, g, bound)
		}
	}
	again, d2 := payout(t, c, "alice", 500, "po-1")
	if again.Meta[mcp.MetaReplayed] != true || d2.Operation != first.Operation || d2.State != "delivered" {
		t.Fatalf("a retry with the key: replayed %v, delivery %+v", again.Meta[mcp.MetaReplayed], d2)
	}
	if paid, _ := p.Paid(context.Background(), "alice"); paid.Payouts != 1 || paid.Cents != 500 {
		t.Fatalf("alice was paid %+v, want once", paid)
	}
	if s := p.Stats(); s.Deliveries != 4 || s.Applied != 1 {
		t.Fatalf("provider stats %+v, want 4 deliveries, 1 payout", s)
	}
}

// A provider's refusal for good (a 4xx that is neither a conflict nor a
// rate limit) ends the delivery failed, with its answer, in the result,
// in lookup_operation and in "mcprel ledger show"; it is never retried,
// not by a retry of the key either.
func TestServePayoutRefusedForGood(t *testing.T) {
	p := startProvider(t, "")
	p.Fail(http.StatusUnprocessableEntity, 1, 0)
	db := filepath.Join(t.TempDir(), "payouts.db")
	url, _ := startHTTP(t, nil, "--db", db, "--auth-token", "client-secret", "--payout-url", p.url)
	c := dialAs(t, url, "client-secret")

	_, d := payout(t, c, "bob", 700, "po-refused")
	if d.State != "failed" || !jsonContains(d.Answer, `"status":422`) {
		t.Fatalf("the refused payout's delivery = %+v %s, want failed with the 422", d, d.Answer)
	}
	got := lookupPayout(t, c, "po-refused")
	if got.State != "committed" || len(got.Deliveries) != 1 || got.Deliveries[0].State != "failed" || !strings.Contains(got.Advice, "is not retried") {
		t.Fatalf("lookup_operation: %+v", got)
	}
	if _, again := payout(t, c, "bob", 700, "po-refused"); again.State != "failed" || again.Operation != d.Operation || again.Attempts != 1 {
		t.Fatalf("a retry with the key: %+v, want the same failed delivery", again)
	}
	out, err := exec.Command(binary, "ledger", "show", "--db", db, "--tool", "send_payout", "--key", "po-refused").Output()
	if err != nil || !strings.Contains(string(out), `"state": "failed"`) || !strings.Contains(string(out), `"status": 422`) {
		t.Fatalf("ledger show: %v\n%s", err, out)
	}
	if s := p.Stats(); s.Deliveries != 1 || s.Applied != 0 {
		t.Fatalf("provider stats %+v, want the one refused delivery", s)
	}
}

// Two tenants that both use the key k1 make two payouts, each with a
// delivery key of its own, and each sees its own operation only.
func TestServePayoutsAreTenantScoped(t *testing.T) {
	p := startProvider(t, "")
	url, _ := startHTTP(t, nil, "--token", "acme=ta", "--token", "globex=tg", "--payout-url", p.url)
	acme, globex := dialAs(t, url, "ta"), dialAs(t, url, "tg")
	_, a := payout(t, acme, "shared", 100, "k1")
	_, g := payout(t, globex, "shared", 100, "k1")
	if a.Operation == g.Operation || a.State != "delivered" || g.State != "delivered" {
		t.Fatalf("two tenants' k1: %+v and %+v, want two delivered operations", a, g)
	}
	if paid, _ := p.Paid(context.Background(), "shared"); paid.Payouts != 2 {
		t.Fatalf("the provider made %d payouts, want one per tenant", paid.Payouts)
	}
	payout(t, acme, "only-acme", 5, "k2")
	if got := lookupPayout(t, globex, "k2"); got.Found || len(got.Deliveries) != 0 {
		t.Fatalf("globex sees acme's k2: %+v", got)
	}
	if got := lookupPayout(t, globex, "k1"); len(got.Deliveries) != 1 || got.Deliveries[0].Operation != g.Operation {
		t.Fatalf("globex's k1: %+v, want its own operation %s", got, g.Operation)
	}
}

// Replicas on one PostgreSQL database share the outbox: payouts made on
// either are delivered once each, by one of them.
func TestServeReplicasDeliverEachPayoutOnce(t *testing.T) {
	dsn := storetest.Postgres(t)
	p := startProvider(t, "")
	urlA, _ := startHTTP(t, nil, "--db", dsn, "--auth-token", "s", "--payout-url", p.url)
	urlB, _ := startHTTP(t, nil, "--db", dsn, "--auth-token", "s", "--payout-url", p.url)
	a, b := dialAs(t, urlA, "s"), dialAs(t, urlB, "s")
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			key := "rep-" + string(rune('a'+i))
			if _, err := c.CallTool(context.Background(), "send_payout", map[string]any{"account": key, "cents": 1, "idempotencyKey": key}, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		key := "rep-" + string(rune('a'+i))
		if got := awaitDelivery(t, b, key); got.Deliveries[0].State != "delivered" {
			t.Fatalf("%s: %+v", key, got)
		}
	}
	if s := p.Stats(); s.Applied != n || s.Deliveries != n {
		t.Fatalf("provider stats %+v, want %d deliveries, each applied once", s, n)
	}
}

// jsonContains reports whether the compact JSON b contains s.
func jsonContains(b json.RawMessage, s string) bool { return strings.Contains(string(b), s) }
