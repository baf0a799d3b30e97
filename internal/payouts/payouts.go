// Package payouts is the payment provider mcprel's demo and tests pay
// through: a small HTTP service that behaves like a real one where an
// outbox's delivery meets it. A payout is created by a POST with an
// Idempotency-Key header; the same key with the same body gets the same
// answer however often it is sent, and applies the payout once; the same
// key with another body is refused (422). It can be told to fail (answer
// a status, such as 503 with a Retry-After, a number of times, applying
// nothing) or to stall (apply each payout and hold its answer a while,
// as a provider whose answer is lost does): the two things a dispatcher
// must survive.
//
// Its payouts are rows of the store it is opened on, so that they outlive
// the process serving them, as a real provider's do.
package payouts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/store"
)

// DefaultMaxPayouts bounds the payouts a provider keeps.
const DefaultMaxPayouts = 100_000

// maxBody bounds a request's body.
const maxBody = 64 << 10

// Options configure a Provider.
type Options struct {
	// Token, when set, is the bearer token every request must carry.
	Token string
	// MaxPayouts bounds the payouts kept; past it new ones are refused
	// with a 507 (retryable), as storage a provider has run out of.
	MaxPayouts int
	// OnApplied, when set, runs once a payout is made, before its answer
	// is written: a test or the demo acts at that exact point.
	OnApplied func(key string)
}

// Provider is the payment provider. It is an http.Handler:
//
//	POST /payouts            {"account": "...", "cents": N}, Idempotency-Key required
//	GET  /accounts/{account} what the account was paid
//	GET  /stats              deliveries seen, payouts applied, replays, refusals
type Provider struct {
	db   *store.DB
	opts Options
	mux  *http.ServeMux

	mu         sync.Mutex
	failStatus int
	failLeft   int
	retryAfter time.Duration
	stallUntil time.Time

	deliveries, applied, replayed, refused atomic.Int64
}

var schema = []store.Migration{{
	Version: 1,
	SQL: `CREATE TABLE demo_payouts (
		idem_key TEXT PRIMARY KEY, body_hash TEXT NOT NULL, id TEXT NOT NULL,
		account TEXT NOT NULL, cents BIGINT NOT NULL, created_at BIGINT NOT NULL)`,
}}

// Open returns a provider keeping its payouts in db.
func Open(ctx context.Context, db *store.DB, opts *Options) (*Provider, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxPayouts < 0 {
		return nil, errors.New("payouts: MaxPayouts must not be negative")
	}
	if o.MaxPayouts == 0 {
		o.MaxPayouts = DefaultMaxPayouts
	}
	if err := db.Migrate(ctx, "demo_payouts", schema); err != nil {
		return nil, err
	}
	p := &Provider{db: db, opts: o, mux: http.NewServeMux()}
	p.mux.HandleFunc("POST /payouts", p.create)
	p.mux.HandleFunc("GET /accounts/{account}", p.account)
	p.mux.HandleFunc("GET /stats", p.stats)
	return p, nil
}

// Fail makes the next count payout requests answer status (with a
// Retry-After of retryAfter, when not zero) without applying anything.
func (p *Provider) Fail(status, count int, retryAfter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failStatus, p.failLeft, p.retryAfter = status, count, retryAfter
}

// Stall makes every payout request until d from now apply the payout and
// then hold its answer until then — or until the caller gives up, when
// the answer is lost.
func (p *Provider) Stall(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallUntil = time.Now().Add(d)
}

// Stats are what a provider saw.
type Stats struct {
	// Deliveries counts payout requests, Applied the payouts made,
	// Replayed the requests answered from an earlier one with their key,
	// Refused those refused (a failure it was told to give included).
	Deliveries, Applied, Replayed, Refused int64
}

// Stats returns what the provider saw since it was opened.
func (p *Provider) Stats() Stats {
	return Stats{Deliveries: p.deliveries.Load(), Applied: p.applied.Load(), Replayed: p.replayed.Load(), Refused: p.refused.Load()}
}

// Account is what one account was paid.
type Account struct {
	Account string `json:"account"`
	Payouts int    `json:"payouts"`
	Cents   int64  `json:"cents"`
}

// Paid returns what account was paid.
func (p *Provider) Paid(ctx context.Context, account string) (Account, error) {
	a := Account{Account: account}
	err := p.db.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(cents), 0) FROM demo_payouts WHERE account = ?`, account).Scan(&a.Payouts, &a.Cents)
	return a, err
}

// Payout is a payout as the provider answers it.
type Payout struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
	Status  string `json:"status"`
	Created int64  `json:"created"`
}

// ServeHTTP serves the provider's API.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.opts.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(p.opts.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="payouts"`)
			answer(w, http.StatusUnauthorized, "authentication_required", "a bearer token is required")
			return
		}
	}
	p.mux.ServeHTTP(w, r)
}

// Client returns an HTTP client whose requests p serves in this process,
// with no listener: the default provider of "mcprel serve".
func (p *Provider) Client() *http.Client {
	return &http.Client{Transport: inProcess{p}, Timeout: 20 * time.Second}
}

type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err // the caller gave up: its answer is lost
	}
	return rec.Result(), nil
}

func (p *Provider) create(w http.ResponseWriter, r *http.Request) {
	p.deliveries.Add(1)
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		p.refuse(w, http.StatusBadRequest, "idempotency_key_required", "an Idempotency-Key header of 1 to 255 characters is required")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		p.refuse(w, http.StatusRequestEntityTooLarge, "body_too_large", "the body is over 64 KiB")
		return
	case err != nil:
		// The sender went away mid-body, most often: nothing was applied.
		p.refuse(w, http.StatusBadRequest, "body_unreadable", "the body could not be read")
		return
	}
	var in struct {
		Account string `json:"account"`
		Cents   int64  `json:"cents"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Account == "" || len(in.Account) > 128 || in.Cents < 1 {
		p.refuse(w, http.StatusBadRequest, "invalid_request", "the body must be {\"account\": 1 to 128 characters, \"cents\": a positive integer}")
		return
	}
	p.mu.Lock()
	failing := p.failLeft > 0
	status, retryAfter := p.failStatus, p.retryAfter
	if failing {
		p.failLeft--
	}
	stall := time.Until(p.stallUntil)
	p.mu.Unlock()
	if failing {
		if retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
		}
		p.refuse(w, status, "unavailable", "the provider was told to fail")
		return
	}

	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	var out Payout
	var prevHash string
	replay, full := false, false
	err = p.db.WriteTx(r.Context(), func(tx *store.Tx) error {
		replay, full = false, false
		var created int64
		err := tx.QueryRow(r.Context(), `SELECT body_hash, id, account, cents, created_at FROM demo_payouts WHERE idem_key = ?`, key).
			Scan(&prevHash, &out.ID, &out.Account, &out.Cents, &created)
		if err == nil {
			replay, out.Created = true, created
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var n int
		if err := tx.QueryRow(r.Context(), `SELECT COUNT(*) FROM demo_payouts`).Scan(&n); err != nil {
			return err
		}
		if n >= p.opts.MaxPayouts {
			full = true
			return nil
		}
		out = Payout{ID: "po_" + strings.ToLower(rand.Text()[:16]), Account: in.Account, Cents: in.Cents, Created: time.Now().Unix()}
		_, err = tx.Exec(r.Context(), `INSERT INTO demo_payouts (idem_key, body_hash, id, account, cents, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			key, hash, out.ID, out.Account, out.Cents, out.Created)
		return err
	})
	switch {
	case err != nil:
		p.refuse(w, http.StatusServiceUnavailable, "unavailable", "the provider could not record the payout; retry with the same key")
		return
	case full:
		p.refuse(w, http.StatusInsufficientStorage, "storage_full", fmt.Sprintf("the provider keeps %d payouts and is full", p.opts.MaxPayouts))
		return
	case replay && prevHash != hash:
		p.refuse(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used for another payout ("+out.ID+"); a key names one request")
		return
	case replay:
		p.replayed.Add(1)
		w.Header().Set("Idempotent-Replayed", "true")
	default:
		p.applied.Add(1)
		if p.opts.OnApplied != nil {
			p.opts.OnApplied(key)
		}
	}
	out.Status = "paid"
	if stall > 0 {
		t := time.NewTimer(stall)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // applied, its answer lost
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(out)
}

func (p *Provider) account(w http.ResponseWriter, r *http.Request) {
	a, err := p.Paid(r.Context(), r.PathValue("account"))
	if err != nil {
		answer(w, http.StatusServiceUnavailable, "unavailable", "the provider could not read the account")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(a)
}

func (p *Provider) stats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(p.Stats())
}

func (p *Provider) refuse(w http.ResponseWriter, status int, code, message string) {
	p.refused.Add(1)
	answer(w, status, code, message)
}

func answer(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": message}})
}
