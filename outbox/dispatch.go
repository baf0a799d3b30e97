package outbox

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/store"
)

// Receiver is where intents of one target go. Deliver sends one delivery
// and says what the receiver made of it; it must pass d.Key on as the
// receiver's own idempotency key, so that a delivery made again (after a
// lost answer, a crash, a lease taken over) is applied once.
type Receiver interface {
	Deliver(ctx context.Context, d Delivery) Answer
}

// Delivery is one attempt at delivering an intent.
type Delivery struct {
	// Operation is the intent's id; Key the key every attempt carries.
	Operation, Key       string
	Tenant, Tool, Target string
	Request              json.RawMessage
	// Attempt counts from 1.
	Attempt int
}

// Defaults of DispatcherOptions.
const (
	// DefaultWorkers: a delivery mostly waits on its receiver; four fell
	// seconds behind 8 callers of a keyed tool (delivery's BenchmarkOutbox).
	DefaultWorkers     = 16
	DefaultLease       = 30 * time.Second
	DefaultPoll        = time.Second
	DefaultBackoffBase = 500 * time.Millisecond
	DefaultBackoffCap  = 5 * time.Minute
	// maxRetryAfter bounds what a receiver's Retry-After may ask.
	maxRetryAfter = time.Hour
)

// DispatcherOptions configure a Dispatcher. Receivers is required.
type DispatcherOptions struct {
	// Receivers are the targets this process delivers to, by name. An
	// intent of a target not here is left for a process that has it
	// (retried later, never failed for that).
	Receivers map[string]Receiver
	// Owner names this dispatcher in its leases; "" draws one.
	Owner string
	// Workers bounds the deliveries in flight at once.
	Workers int
	// Lease is how long a claimed intent is this dispatcher's before
	// another may take it (a live delivery renews it).
	Lease time.Duration
	// Poll is how often the store is read for due intents another
	// process recorded, or retries come due.
	Poll time.Duration
	// BackoffBase and BackoffCap bound the capped, jittered exponential
	// wait between attempts at one intent; a receiver's Retry-After is
	// honoured (up to an hour) when it asks for longer.
	BackoffBase, BackoffCap time.Duration
	Logger                  *slog.Logger
}

// Dispatcher delivers an outbox's intents.
type Dispatcher struct {
	o    *Outbox
	opts DispatcherOptions
	log  *slog.Logger
	wake chan struct{}

	mu      sync.Mutex
	waiters map[string][]chan struct{} // by operation id: closed when it ends here
}

// NewDispatcher checks opts and returns a dispatcher of o's intents.
func NewDispatcher(o *Outbox, opts *DispatcherOptions) (*Dispatcher, error) {
	var op DispatcherOptions
	if opts != nil {
		op = *opts
	}
	if op.Workers < 0 || op.Lease < 0 || op.Poll < 0 || op.BackoffBase < 0 || op.BackoffCap < 0 {
		return nil, errors.New("outbox: negative dispatcher options are errors")
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if op.Workers == 0 {
		op.Workers = DefaultWorkers
	}
	def(&op.Lease, DefaultLease)
	def(&op.Poll, DefaultPoll)
	def(&op.BackoffBase, DefaultBackoffBase)
	def(&op.BackoffCap, DefaultBackoffCap)
	if op.Owner == "" {
		op.Owner = "dispatcher-" + crand.Text()[:12]
	}
	if op.Logger == nil {
		op.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{o: o, opts: op, log: op.Logger, wake: make(chan struct{}, 1), waiters: map[string][]chan struct{}{}}, nil
}

// Outbox is the store the dispatcher delivers from.
func (d *Dispatcher) Outbox() *Outbox { return d.o }

// Has reports whether the dispatcher delivers to target.
func (d *Dispatcher) Has(target string) bool { return d.opts.Receivers[target] != nil }

// Notify tells the dispatcher an intent was committed: it looks for due
// intents at once rather than at its next poll.
func (d *Dispatcher) Notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// housekeeping is how often the dispatcher gives up on intents too long
// undelivered and reaps ended ones.
const housekeeping = time.Minute

// Run delivers until ctx ends, and then waits for the deliveries in
// flight to be recorded and gives up its leases (Release). On SQLite only
// the dispatcher that holds the store's dispatch lease delivers; the
// others stand by.
func (d *Dispatcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := d.o.Release(rctx, d.opts.Owner); err != nil {
			d.log.Warn("outbox: could not give up this dispatcher's leases; the next delivers once they expire", "err", err)
		}
	}()
	slots := make(chan struct{}, d.opts.Workers)
	poll := time.NewTicker(d.opts.Poll)
	defer poll.Stop()
	lastHousekeeping := time.Time{}
	sqlite := d.o.db.Dialect() == store.SQLite
	var renewAt time.Time // when the SQLite dispatch lease is next renewed
	for ctx.Err() == nil {
		if time.Since(lastHousekeeping) > housekeeping {
			lastHousekeeping = time.Now()
			if _, err := d.o.GiveUp(ctx, 100); err != nil && ctx.Err() == nil {
				d.log.Warn("outbox: could not give up on undelivered intents", "err", err)
			}
			if _, err := d.o.Reap(ctx, 500); err != nil && ctx.Err() == nil {
				d.log.Warn("outbox: could not reap ended intents", "err", err)
			}
		}
		held := true
		if sqlite && time.Now().After(renewAt) {
			// Taken, or renewed once a third of it has passed: not a
			// write on every wake-up. (The lease only keeps a second
			// dispatcher of the file idle; intents are claimed apart
			// either way.)
			var err error
			if held, err = d.o.HoldDispatch(ctx, d.opts.Owner, d.opts.Lease); err != nil && ctx.Err() == nil {
				d.log.Warn("outbox: could not take the dispatch lease", "err", err)
			}
			if held {
				renewAt = time.Now().Add(d.opts.Lease / 3)
			}
		}
		if free := d.opts.Workers - len(slots); held && free > 0 {
			ops, err := d.o.Claim(ctx, d.opts.Owner, free, d.opts.Lease)
			if err != nil && ctx.Err() == nil {
				d.log.Warn("outbox: could not claim due intents", "err", err)
			}
			for _, op := range ops {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots; d.Notify() }()
					d.deliver(ctx, op)
				})
			}
			if len(ops) == free {
				continue // more may be due
			}
		}
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-poll.C:
		}
	}
}

// deliver makes one attempt at op and records how it went.
func (d *Dispatcher) deliver(ctx context.Context, op Operation) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The lease is renewed while the receiver takes its time; lost, the
	// attempt is abandoned (its answer could not be recorded anyway).
	var renewing sync.WaitGroup
	renewing.Go(func() {
		t := time.NewTicker(max(d.opts.Lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-dctx.Done():
				return
			case <-t.C:
				if err := d.o.Renew(context.WithoutCancel(dctx), op, d.opts.Owner, d.opts.Lease); errors.Is(err, ErrLeaseLost) {
					cancel()
					return
				}
			}
		}
	})
	rc := d.opts.Receivers[op.Target]
	var a Answer
	if rc == nil {
		a = Answer{Verdict: Retry, Error: fmt.Sprintf("no receiver named %q in this process", op.Target), RetryAfter: d.opts.BackoffCap}
	} else {
		a = rc.Deliver(dctx, Delivery{Operation: op.ID, Key: op.DeliveryKey, Tenant: op.Tenant, Tool: op.Tool, Target: op.Target,
			Request: op.Request, Attempt: op.Attempts})
	}
	cancel()
	renewing.Wait()
	if ctx.Err() != nil && a.Verdict == Retry {
		return // stopping: the lease runs out and the intent is claimed again
	}
	wait := d.backoff(op.Attempts, a.RetryAfter)
	err := d.o.Deliver(context.WithoutCancel(ctx), op, d.opts.Owner, a, time.Now().Add(wait))
	switch {
	case errors.Is(err, ErrLeaseLost):
		d.log.Warn("outbox: a delivery ended after its lease was lost; another dispatcher has the intent", "operation", op.ID, "target", op.Target)
	case err != nil:
		d.log.Warn("outbox: could not record a delivery; the intent is delivered again when its lease expires", "operation", op.ID, "err", err)
	case a.Verdict == Retry:
		d.log.Info("outbox: delivery to be retried", "operation", op.ID, "target", op.Target, "attempt", op.Attempts, "next", wait, "status", a.Status, "error", a.Error)
		time.AfterFunc(wait, d.Notify)
	default:
		if a.Verdict == Refused {
			d.log.Warn("outbox: the receiver refused an intent for good", "operation", op.ID, "target", op.Target, "status", a.Status)
		}
		d.ended(op.ID)
	}
}

// backoff is the wait before attempt+1: capped and jittered, doubling
// from BackoffBase, or the receiver's Retry-After when longer.
func (d *Dispatcher) backoff(attempt int, retryAfter time.Duration) time.Duration {
	w := d.opts.BackoffBase << min(max(attempt-1, 0), 30)
	if w <= 0 || w > d.opts.BackoffCap {
		w = d.opts.BackoffCap
	}
	w = w/2 + time.Duration(rand.Int64N(int64(w/2)+1))
	return max(w, min(retryAfter, maxRetryAfter))
}

// ended wakes whoever waits for id here.
func (d *Dispatcher) ended(id string) {
	d.mu.Lock()
	for _, ch := range d.waiters[id] {
		close(ch)
	}
	delete(d.waiters, id)
	d.mu.Unlock()
}

// Wait returns the tenant's operation id once it is no longer pending —
// delivered or failed — or, when ctx ends first, as it is then. A
// delivery this process makes wakes it at once; another process's is
// seen at the next poll.
func (d *Dispatcher) Wait(ctx context.Context, tenant, id string) (Operation, error) {
	for {
		ch := make(chan struct{})
		d.mu.Lock()
		d.waiters[id] = append(d.waiters[id], ch)
		d.mu.Unlock()
		op, err := d.o.Get(context.WithoutCancel(ctx), tenant, id)
		if err != nil || op.State != Pending {
			d.forget(id, ch)
			return op, err
		}
		timer := time.NewTimer(d.opts.Poll)
		select {
		case <-ch:
		case <-timer.C:
			d.forget(id, ch)
		case <-ctx.Done():
			timer.Stop()
			d.forget(id, ch)
			return op, nil
		}
		timer.Stop()
	}
}

func (d *Dispatcher) forget(id string, ch chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	chans := d.waiters[id]
	for i, c := range chans {
		if c == ch {
			d.waiters[id] = append(chans[:i], chans[i+1:]...)
			break
		}
	}
	if len(d.waiters[id]) == 0 {
		delete(d.waiters, id)
	}
}

// HTTPReceiver delivers an intent's request as the JSON body of a POST to
// URL, with the delivery key in an Idempotency-Key header, as payment
// providers take it: a 2xx acknowledges it; a 408, 409 (the same key in
// flight), 425, 429 or 5xx, or no answer, is retried (after the
// Retry-After it asks for, if any); any other 4xx refuses it for good
// (a 422: the key was used with another body).
//
// A redirect (301, 302, 303, 307, 308) is never followed: the request,
// its key and Header (the credential) go to URL and nowhere else. It is
// retried like a 503, its answer's Error naming where it pointed: the
// receiver at URL did not take the delivery, and may be moving; an
// operator who points URL at its new address gets the intents still
// pending delivered there, with their keys.
type HTTPReceiver struct {
	URL string
	// Header is sent with every delivery (a credential).
	Header http.Header
	// Client sends the requests; nil means one with a 20 s timeout. It is
	// used through a shallow copy whose CheckRedirect refuses every
	// redirect (Client itself is not changed).
	Client *http.Client
}

// Deliver POSTs one delivery.
func (h *HTTPReceiver) Deliver(ctx context.Context, d Delivery) Answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, strings.NewReader(string(d.Request)))
	if err != nil {
		return Answer{Verdict: Refused, Error: err.Error()}
	}
	for k, v := range h.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", d.Key)
	hc := defaultClient
	if h.Client != nil {
		hc = withoutRedirects(h.Client)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{Verdict: Retry, Error: "no answer: " + strings.TrimPrefix(err.Error(), "Post \""+h.URL+"\": ")}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	a := Answer{Status: resp.StatusCode, Body: asJSON(body)}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		a.Verdict = Acknowledged
	case isRedirect(s):
		a.Verdict = Retry
		a.Error = redirected(resp)
		a.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	case s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusTooEarly, s == http.StatusTooManyRequests, s >= 500:
		a.Verdict = Retry
		a.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	default:
		a.Verdict = Refused
	}
	return a
}

var defaultClient = withoutRedirects(&http.Client{Timeout: 20 * time.Second})

// withoutRedirects is a shallow copy of hc whose CheckRedirect hands a
// redirect back as the answer instead of following it: a delivery's
// request, key and credential go only to the receiver's URL.
func withoutRedirects(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// isRedirect reports whether status is one net/http would follow.
func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// redirected says what a redirect was, and where it pointed (resolved
// against the request's URL, a password in it redacted, clipped).
func redirected(resp *http.Response) string {
	where := "naming no Location"
	if loc := resp.Header.Get("Location"); loc != "" {
		if u, err := resp.Location(); err == nil {
			loc = u.Redacted()
		}
		if len(loc) > 200 {
			loc = strings.ToValidUTF8(loc[:200], "") + "…"
		}
		where = "to " + loc
	}
	return fmt.Sprintf("the receiver answered HTTP %d, a redirect %s, which the outbox does not follow: nothing was delivered there", resp.StatusCode, where)
}

// asJSON is b if it is JSON, else b as a JSON string.
func asJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

// parseRetryAfter reads a Retry-After header: delta-seconds or an
// HTTP-date; 0 when absent or unreadable. (Package retry has the
// client's reading of it; the durable layer does not reach up to it.)
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
		return min(time.Duration(secs)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}
