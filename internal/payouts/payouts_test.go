package payouts_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/store"
)

func open(t *testing.T, dsn string, opts *payouts.Options) *payouts.Provider {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p, err := payouts.Open(context.Background(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type reply struct {
	status     int
	retryAfter string
	replayed   string
	body       map[string]any
}

func post(t *testing.T, h http.Handler, key, token, body string) reply {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/payouts", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	out := reply{status: w.Code, retryAfter: w.Header().Get("Retry-After"), replayed: w.Header().Get("Idempotent-Replayed")}
	json.Unmarshal(w.Body.Bytes(), &out.body)
	return out
}

func errorCode(r reply) any {
	e, _ := r.body["error"].(map[string]any)
	return e["code"]
}

// A key names one payout: the same key and body get the same answer and
// pay once; the same key with another body is refused, paying nothing.
func TestAKeyPaysOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		p := open(t, dsn, nil)
		first := post(t, p, "k1", "", `{"account":"alice","cents":500}`)
		again := post(t, p, "k1", "", `{"account":"alice","cents":500}`)
		if first.status != 201 || again.status != 201 || first.body["id"] != again.body["id"] || again.replayed != "true" || first.replayed != "" {
			t.Fatalf("first %+v, again %+v: want the same payout, the second replayed", first, again)
		}
		other := post(t, p, "k1", "", `{"account":"alice","cents":501}`)
		if other.status != 422 || errorCode(other) != "idempotency_key_reused" {
			t.Fatalf("the key with another body: %+v, want 422 idempotency_key_reused", other)
		}
		if a, err := p.Paid(context.Background(), "alice"); err != nil || a.Payouts != 1 || a.Cents != 500 {
			t.Fatalf("alice was paid %+v, %v; want one payout of 500", a, err)
		}
		if s := p.Stats(); s != (payouts.Stats{Deliveries: 3, Applied: 1, Replayed: 1, Refused: 1}) {
			t.Fatalf("stats %+v", s)
		}
	})
}

// What a provider refuses, it says why, and applies nothing.
func TestBadRequestsAreRefused(t *testing.T) {
	p := open(t, storetest.SQLite(t), &payouts.Options{Token: "secret", MaxPayouts: 1})
	for _, c := range []struct {
		name, key, token, body string
		status                 int
		code                   string
	}{
		{"no token", "k", "", `{"account":"a","cents":1}`, 401, "authentication_required"},
		{"a wrong token", "k", "guess", `{"account":"a","cents":1}`, 401, "authentication_required"},
		{"no key", "", "secret", `{"account":"a","cents":1}`, 400, "idempotency_key_required"},
		{"no account", "k", "secret", `{"cents":1}`, 400, "invalid_request"},
		{"no cents", "k", "secret", `{"account":"a","cents":0}`, 400, "invalid_request"},
		{"not JSON", "k", "secret", `account=a`, 400, "invalid_request"},
		{"too large", "k", "secret", `{"account":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "body_too_large"},
	} {
		if r := post(t, p, c.key, c.token, c.body); r.status != c.status || errorCode(r) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	// A sender that goes away mid-body is not told its body was too large.
	r := httptest.NewRequest(http.MethodPost, "/payouts", io.MultiReader(strings.NewReader(`{"account":"a",`), iotest.ErrReader(io.ErrUnexpectedEOF)))
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("Authorization", "Bearer secret")
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	var cut map[string]any
	json.Unmarshal(w.Body.Bytes(), &cut)
	if got := errorCode(reply{body: cut}); w.Code != 400 || got != "body_unreadable" {
		t.Errorf("a body cut short: %d %v, want 400 body_unreadable", w.Code, cut)
	}
	if r := post(t, p, "k", "secret", `{"account":"a","cents":1}`); r.status != 201 {
		t.Fatalf("a good request: %+v", r)
	}
	if r := post(t, p, "k2", "secret", `{"account":"a","cents":1}`); r.status != 507 || errorCode(r) != "storage_full" {
		t.Fatalf("past MaxPayouts: %+v, want 507 storage_full", r)
	}
	if s := p.Stats(); s.Applied != 1 {
		t.Fatalf("%d applied, want 1", s.Applied)
	}
}

// Told to fail, a provider answers the status it was given, with its
// Retry-After, that many times, applying nothing; then it pays.
func TestFailAppliesNothing(t *testing.T) {
	p := open(t, storetest.SQLite(t), nil)
	p.Fail(503, 2, 1500*time.Millisecond)
	for range 2 {
		if r := post(t, p, "k", "", `{"account":"bob","cents":7}`); r.status != 503 || r.retryAfter != "2" {
			t.Fatalf("failing: %+v, want 503 with Retry-After 2", r)
		}
	}
	if a, _ := p.Paid(context.Background(), "bob"); a.Payouts != 0 {
		t.Fatalf("a failed request paid: %+v", a)
	}
	if r := post(t, p, "k", "", `{"account":"bob","cents":7}`); r.status != 201 || r.replayed != "" {
		t.Fatalf("after the failures: %+v, want the payout made", r)
	}
}

// Stalled, a provider pays and holds its answer; a caller that gives up
// loses the answer, and the same key then gets the payout made, not a
// second one.
func TestStallLosesTheAnswerNotThePayout(t *testing.T) {
	applied := make(chan string, 1)
	p := open(t, storetest.SQLite(t), &payouts.Options{OnApplied: func(key string) { applied <- key }})
	p.Stall(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://payouts/payouts", strings.NewReader(`{"account":"carol","cents":9}`))
	r.Header.Set("Idempotency-Key", "k")
	done := make(chan error, 1)
	go func() {
		resp, err := p.Client().Do(r)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-applied // the payout is made; its answer is held
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the stalled request was answered")
	}
	p.Stall(0)
	again := post(t, p, "k", "", `{"account":"carol","cents":9}`)
	if again.status != 201 || again.replayed != "true" {
		t.Fatalf("the key again: %+v, want the payout made, replayed", again)
	}
	if a, _ := p.Paid(context.Background(), "carol"); a.Payouts != 1 {
		t.Fatalf("carol was paid %d times", a.Payouts)
	}
}
