package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/outbox"
)

// receiver answers deliveries from a script and records them.
type receiver struct {
	mu         sync.Mutex
	deliveries []outbox.Delivery
	byOp       map[string]int
	answers    []outbox.Answer // answered in turn; the last one after
}

func (r *receiver) Deliver(ctx context.Context, d outbox.Delivery) outbox.Answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries = append(r.deliveries, d)
	if r.byOp == nil {
		r.byOp = map[string]int{}
	}
	r.byOp[d.Operation]++
	a := outbox.Answer{Verdict: outbox.Acknowledged, Status: 200, Body: json.RawMessage(`{"ok":true}`)}
	if len(r.answers) > 0 {
		a = r.answers[0]
		if len(r.answers) > 1 {
			r.answers = r.answers[1:]
		}
	}
	return a
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.deliveries)
}

func dispatch(t *testing.T, o *outbox.Outbox, opts outbox.DispatcherOptions) *outbox.Dispatcher {
	t.Helper()
	if opts.Poll == 0 {
		opts.Poll = 20 * time.Millisecond
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase, opts.BackoffCap = 5*time.Millisecond, 20*time.Millisecond
	}
	d, err := outbox.NewDispatcher(o, &opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

func waitEnded(t *testing.T, d *outbox.Dispatcher, tenant, id string) outbox.Operation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op, err := d.Wait(ctx, tenant, id)
	if err != nil || op.State == outbox.Pending {
		t.Fatalf("the intent did not end: %+v, %v", op, err)
	}
	return op
}

// The dispatcher delivers an intent until the receiver takes it, after a
// backoff between attempts, every attempt with the same key; the answer
// is kept, and nothing is delivered again after.
func TestDispatcherRetriesUntilAcknowledged(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		o := open(t, dsn, nil)
		rc := &receiver{answers: []outbox.Answer{
			{Verdict: outbox.Retry, Status: 503},
			{Verdict: outbox.Retry, Error: "no answer: connection refused"},
			{Verdict: outbox.Acknowledged, Status: 201, Body: json.RawMessage(`{"payout":"po_1"}`)},
		}}
		d := dispatch(t, o, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": rc}})
		op, err := put(t, o, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		d.Notify()
		got := waitEnded(t, d, "acme", op.ID)
		if got.State != outbox.Delivered || got.Attempts != 3 || !jsonHas(got.Answer, `"payout":"po_1"`) {
			t.Fatalf("delivered = %+v %s", got, got.Answer)
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for _, del := range rc.deliveries {
			if del.Key != op.DeliveryKey || string(del.Request) != string(op.Request) {
				t.Fatalf("a delivery carried %q %s, want the operation's key and request", del.Key, del.Request)
			}
		}
		if len(rc.deliveries) != 3 {
			t.Fatalf("%d deliveries, want 3", len(rc.deliveries))
		}
	})
}

// A refusal ends the intent failed, with the receiver's answer, and it is
// never delivered again; an intent of a receiver this process does not
// have waits for one that does.
func TestRefusalEndsItAndUnknownTargetsWait(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, nil)
		rc := &receiver{answers: []outbox.Answer{{Verdict: outbox.Refused, Status: 422, Body: json.RawMessage(`{"error":"key reused"}`)}}}
		d := dispatch(t, o, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": rc}})
		op, err := put(t, o, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		elsewhere := intent("acme", "k2")
		elsewhere.Target = "ledger-service"
		other, err := put(t, o, elsewhere, false)
		if err != nil {
			t.Fatal(err)
		}
		d.Notify()
		got := waitEnded(t, d, "acme", op.ID)
		if got.State != outbox.Failed || !jsonHas(got.Answer, `"status":422`) {
			t.Fatalf("refused = %+v %s", got, got.Answer)
		}
		waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if still, _ := d.Wait(waitCtx, "acme", other.ID); still.State != outbox.Pending {
			t.Fatalf("an intent no receiver here takes ended %s", still.State)
		}
		if n := rc.count(); n != 1 {
			t.Fatalf("%d deliveries of a refused intent, want 1", n)
		}
	})
}

// Two dispatchers on one PostgreSQL database — two replicas — share the
// intents: each is delivered by one of them, once.
func TestReplicasDeliverEachIntentOnce(t *testing.T) {
	dsn := storetest.Postgres(t)
	o1, o2 := open(t, dsn, nil), open(t, dsn, nil)
	r1, r2 := &receiver{}, &receiver{}
	d1 := dispatch(t, o1, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": r1}, Workers: 2})
	d2 := dispatch(t, o2, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": r2}, Workers: 2})
	var ids []string
	for i := range 40 {
		op, err := put(t, o1, intent("acme", fmt.Sprint("k", i)), false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, op.ID)
		d1.Notify()
		d2.Notify()
	}
	for _, id := range ids {
		waitEnded(t, d1, "acme", id)
	}
	both := map[string]int{}
	for _, r := range []*receiver{r1, r2} {
		r.mu.Lock()
		for id, n := range r.byOp {
			both[id] += n
		}
		r.mu.Unlock()
	}
	for _, id := range ids {
		if both[id] != 1 {
			t.Fatalf("intent %s was delivered %d times", id, both[id])
		}
	}
	if r1.count() == 0 || r2.count() == 0 {
		t.Logf("one replica delivered everything (%d, %d)", r1.count(), r2.count())
	}
}

// On SQLite one dispatcher per file delivers: the one holding the
// dispatch lease; another stands by.
func TestOneDispatcherPerSQLiteFile(t *testing.T) {
	dsn := storetest.SQLite(t)
	o1, o2 := open(t, dsn, nil), open(t, dsn, nil)
	r1, r2 := &receiver{}, &receiver{}
	d1 := dispatch(t, o1, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": r1}})
	d2 := dispatch(t, o2, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": r2}})
	var ids []string
	for i := range 10 {
		op, err := put(t, o1, intent("acme", fmt.Sprint("k", i)), false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, op.ID)
		d1.Notify()
		d2.Notify()
	}
	for _, id := range ids {
		waitEnded(t, d1, "acme", id)
	}
	if (r1.count() == 0) == (r2.count() == 0) {
		t.Fatalf("deliveries by both dispatchers of one SQLite file: %d and %d", r1.count(), r2.count())
	}
}

// The HTTP receiver posts the request with the key in Idempotency-Key and
// reads the answer as a payment provider means it.
func TestHTTPReceiverVerdicts(t *testing.T) {
	var gotKey string
	status := http.StatusOK
	retryAfter := ""
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("Idempotency-Key")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		fmt.Fprint(w, `{"status":"seen"}`)
	}))
	defer hs.Close()
	rc := &outbox.HTTPReceiver{URL: hs.URL}
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       outbox.Verdict
		wait       time.Duration
	}{
		{200, "", outbox.Acknowledged, 0},
		{201, "", outbox.Acknowledged, 0},
		{409, "", outbox.Retry, 0},
		{429, "7", outbox.Retry, 7 * time.Second},
		{503, "", outbox.Retry, 0},
		{400, "", outbox.Refused, 0},
		{422, "", outbox.Refused, 0},
	} {
		status, retryAfter = tc.status, tc.retryAfter
		a := rc.Deliver(context.Background(), outbox.Delivery{Key: "mcprel-k", Request: json.RawMessage(`{}`)})
		if a.Verdict != tc.want || a.Status != tc.status || a.RetryAfter != tc.wait || !jsonHas(a.Body, `"status":"seen"`) || gotKey != "mcprel-k" {
			t.Errorf("HTTP %d: %+v (key %q)", tc.status, a, gotKey)
		}
	}
	hs.Close()
	if a := rc.Deliver(context.Background(), outbox.Delivery{Key: "k", Request: json.RawMessage(`{}`)}); a.Verdict != outbox.Retry || a.Error == "" {
		t.Errorf("no answer: %+v", a)
	}
}

// redirectTarget is the server a provider's redirect points at: it
// records what reaches it and answers 200, as a server that took the
// payout would.
type redirectTarget struct {
	mu  sync.Mutex
	got []string
}

func (rt *redirectTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rt.mu.Lock()
	rt.got = append(rt.got, fmt.Sprintf("%s Authorization=%q Idempotency-Key=%q body=%s", r.Method, r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), body))
	rt.mu.Unlock()
	fmt.Fprint(w, `{"id":"po_elsewhere","status":"paid"}`)
}

func (rt *redirectTarget) nothing(t *testing.T) {
	t.Helper()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.got) != 0 {
		t.Fatalf("the redirect was followed: its target received %q", rt.got)
	}
}

// redirectingProvider answers every POST with status and a Location of
// target, telling hits of each.
func redirectingProvider(t *testing.T, status int, target string, hits chan<- struct{}) *httptest.Server {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", target)
		w.WriteHeader(status)
		if hits != nil {
			hits <- struct{}{}
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

// A provider that answers with a redirect does not get it followed: the
// request, its Idempotency-Key and the provider's credential go nowhere
// else, whichever client the receiver was given (one whose CheckRedirect
// would follow is used without it, and left as it was). The delivery is
// not acknowledged: it is retried, since the provider did not take it
// (it may be moving, and an operator who points URL at its new address
// gets the intents still pending delivered there with their keys), and
// the answer says where the redirect pointed.
func TestHTTPReceiverFollowsNoRedirect(t *testing.T) {
	target := &redirectTarget{}
	elsewhere := httptest.NewServer(target)
	defer elsewhere.Close()
	asked := 0
	follows := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { asked++; return nil }}
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, hc := range []*http.Client{nil, follows} {
			hs := redirectingProvider(t, status, elsewhere.URL+"/payouts", nil)
			rc := &outbox.HTTPReceiver{URL: hs.URL + "/payouts", Header: http.Header{"Authorization": {"Bearer provider-token"}}, Client: hc}
			a := rc.Deliver(context.Background(), outbox.Delivery{Key: "mcprel-k", Request: json.RawMessage(`{"account":"a-1","cents":500}`)})
			want := fmt.Sprintf("the receiver answered HTTP %d, a redirect to %s/payouts, which the outbox does not follow", status, elsewhere.URL)
			if a.Verdict != outbox.Retry || a.Status != status || !strings.Contains(a.Error, want) {
				t.Errorf("HTTP %d (own client: %v): %+v; want a retry whose error says %q", status, hc != nil, a, want)
			}
		}
	}
	target.nothing(t)
	if asked != 0 || follows.CheckRedirect(nil, nil) != nil || asked != 1 {
		t.Fatal("the receiver asked its client's CheckRedirect, or replaced it")
	}
}

// Through the dispatcher, an intent whose provider redirects is never
// recorded delivered: it stays pending, its answer naming where the
// redirect pointed, and the redirect's target gets nothing.
func TestRedirectedIntentIsNotDelivered(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		target := &redirectTarget{}
		elsewhere := httptest.NewServer(target)
		defer elsewhere.Close()
		hits := make(chan struct{}, 16)
		hs := redirectingProvider(t, http.StatusTemporaryRedirect, elsewhere.URL+"/payouts", hits)
		o := open(t, dsn, nil)
		rc := &outbox.HTTPReceiver{URL: hs.URL + "/payouts", Header: http.Header{"Authorization": {"Bearer provider-token"}}}
		d := dispatch(t, o, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": rc}})
		op, err := put(t, o, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		// The wait ends when the intent does, or at the second attempt,
		// which is claimed only once the first one's answer was recorded.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go func() {
			for range 2 {
				select {
				case <-hits:
				case <-ctx.Done():
					return
				}
			}
			cancel()
		}()
		d.Notify()
		if ended, err := d.Wait(ctx, "acme", op.ID); err != nil || ended.State != outbox.Pending {
			t.Fatalf("the redirected intent ended %s (%v), answer %s", ended.State, err, ended.Answer)
		}
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Fatal("the provider was not asked a second time")
		}
		got, err := o.Get(context.Background(), "acme", op.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != outbox.Pending || !jsonHas(got.Answer, `"status":307`) || !jsonHas(got.Answer, "a redirect to "+elsewhere.URL+"/payouts") {
			t.Fatalf("the redirected intent: %+v %s; want it pending, its answer naming the redirect", got, got.Answer)
		}
		target.nothing(t)
	})
}

// holder is a receiver that holds every delivery until its caller gives
// up, telling entered when one arrives: a delivery in flight at a stop.
type holder struct{ entered chan string }

func (h *holder) Deliver(ctx context.Context, d outbox.Delivery) outbox.Answer {
	h.entered <- d.Key
	<-ctx.Done()
	return outbox.Answer{Verdict: outbox.Retry, Error: "no answer"}
}

// A dispatcher stopped in order while delivering gives up its leases: the
// next one — another process, or this one restarted — delivers at once,
// with the same key, not an hour later when they would have expired.
func TestAStoppedDispatcherReleasesItsLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		o1, o2 := open(t, dsn, nil), open(t, dsn, nil)
		op, err := put(t, o1, intent("acme", "k1"), false)
		if err != nil {
			t.Fatal(err)
		}
		h := &holder{entered: make(chan string, 1)}
		d1, err := outbox.NewDispatcher(o1, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": h},
			Lease: time.Hour, Poll: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { d1.Run(ctx); close(stopped) }()
		firstKey := <-h.entered
		stop()
		<-stopped

		r := &receiver{}
		d2 := dispatch(t, o2, outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{"payouts": r}, Lease: time.Hour})
		got := waitEnded(t, d2, "acme", op.ID)
		if got.State != outbox.Delivered || got.Attempts != 2 || r.count() != 1 || r.deliveries[0].Key != firstKey {
			t.Fatalf("after the first dispatcher stopped: %+v, %d deliveries; want delivered on the second attempt with the key %s", got, r.count(), firstKey)
		}
	})
}
