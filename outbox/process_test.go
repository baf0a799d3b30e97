package outbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/store"
)

// The test binary doubles as the process the crash test kills: with
// childEnv set it runs that role and exits.
const childEnv = "MCPREL_OUTBOX_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "payouts":
		payoutsChild()
	default:
		fmt.Fprintln(os.Stderr, "unknown child role", os.Getenv(childEnv))
		os.Exit(2)
	}
	os.Exit(0)
}

// Where a payouts child is killed at its KILL_AT-th payout: before it,
// inside the keyed transaction after the intent was recorded, right after
// the commit (before the dispatcher was told), once the provider answered
// its delivery (before the answer was recorded), or — by the parent — the
// moment the provider applied it (its answer lost with the child), or
// after a random delay, wherever the child then is.
var killPhases = []string{"before", "intent", "committed", "answered", "applied", "parent"}

const (
	payoutsPerChild = 8
	crashTenant     = "crash"
	crashTool       = "send_payout"
	crashTarget     = "payouts"
)

func crashKey(iter, i int) string     { return fmt.Sprintf("po-%03d-%d", iter, i) }
func crashAccount(iter, i int) string { return fmt.Sprintf("acct-%03d-%d", iter, i) }

func crashOp(iter, i int) ledger.Op {
	fp, err := ledger.FingerprintOf(map[string]any{"account": crashAccount(iter, i), "cents": json.Number(strconv.Itoa(i + 1))}, nil, "")
	if err != nil {
		panic(err)
	}
	return ledger.Op{Tenant: crashTenant, Tool: crashTool, Key: crashKey(iter, i), Fingerprint: fp}
}

// pay is the keyed call's effect: an intent for the provider, recorded in
// the call's transaction.
func pay(o *outbox.Outbox, iter, i int, inTx func()) func(context.Context, *store.Tx) (json.RawMessage, error) {
	return func(ctx context.Context, tx *store.Tx) (json.RawMessage, error) {
		body, _ := json.Marshal(map[string]any{"account": crashAccount(iter, i), "cents": i + 1})
		op, err := o.Put(ctx, tx, outbox.Intent{Tenant: crashTenant, Tool: crashTool, Key: crashKey(iter, i), Target: crashTarget, Request: body})
		if err != nil {
			return nil, err
		}
		inTx()
		return json.Marshal(map[string]string{"operation": op.ID})
	}
}

// killAt is a receiver that kills its process once the delivery of the
// KILL_AT-th payout is answered, before the answer is recorded.
type killAt struct {
	next    outbox.Receiver
	account string
}

func (k killAt) Deliver(ctx context.Context, d outbox.Delivery) outbox.Answer {
	a := k.next.Deliver(ctx, d)
	var body struct{ Account string }
	json.Unmarshal(d.Request, &body)
	if body.Account == k.account {
		die()
	}
	return a
}

func die() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// payoutsChild makes payoutsPerChild keyed payouts, its dispatcher
// delivering them to the provider at URL as they commit, and waits until
// each is delivered; it kills itself where PHASE and KILL_AT say.
func payoutsChild() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	db, err := store.Open(ctx, os.Getenv("DSN"), nil)
	if err != nil {
		fail(err)
	}
	l, err := ledger.Open(ctx, db, nil)
	if err != nil {
		fail(err)
	}
	o, err := outbox.Open(ctx, db, nil)
	if err != nil {
		fail(err)
	}
	iter, _ := strconv.Atoi(os.Getenv("ITER"))
	at, _ := strconv.Atoi(os.Getenv("KILL_AT"))
	phase := os.Getenv("PHASE")
	here := func(i int, where string) {
		if i == at && where == phase {
			die()
		}
	}
	var rc outbox.Receiver = &outbox.HTTPReceiver{URL: os.Getenv("URL")}
	if phase == "answered" {
		rc = killAt{rc, crashAccount(iter, at)}
	}
	// A lease far longer than the child lives: only the parent, its clock
	// moved past it, takes over what the child held.
	d, err := outbox.NewDispatcher(o, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{crashTarget: rc},
		Lease: time.Hour, Poll: 10 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: 10 * time.Millisecond})
	if err != nil {
		fail(err)
	}
	go d.Run(ctx)
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) // until the parent says go
	var ids []string
	for i := range payoutsPerChild {
		here(i, "before")
		res, err := l.Do(ctx, crashOp(iter, i), pay(o, iter, i, func() { here(i, "intent") }))
		if err != nil {
			fail(err)
		}
		here(i, "committed")
		d.Notify()
		var out struct{ Operation string }
		json.Unmarshal(res.Data, &out)
		ids = append(ids, out.Operation)
	}
	for _, id := range ids {
		if _, err := d.Wait(ctx, crashTenant, id); err != nil {
			fail(err)
		}
	}
}

// paidBy is the provider as the crash test sees it: every delivery's key
// by account, and a hook the parent kills the child from.
type paidBy struct {
	*payouts.Provider
	mu      sync.Mutex
	keys    map[string]map[string]int // account → Idempotency-Key → deliveries
	applied func(key string)
}

func (p *paidBy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body = io.NopCloser(bytes.NewReader(raw))
	var in struct{ Account string }
	json.Unmarshal(raw, &in)
	p.mu.Lock()
	if p.keys[in.Account] == nil {
		p.keys[in.Account] = map[string]int{}
	}
	p.keys[in.Account][r.Header.Get("Idempotency-Key")]++
	p.mu.Unlock()
	p.Provider.ServeHTTP(w, r)
}

// Payout children SIGKILLed at random points of commit and delivery, 100
// times on each store (MCPREL_SOAK_KILLS sets how many). After each kill, before any retry, every ledger
// record has exactly one intent and every intent its record; then every
// key is retried (a committed one replays, recording nothing) and a new
// dispatcher delivers what is left: the provider, which honours keys, has
// paid each account exactly once, every delivery of a payout carried the
// operation's delivery key, and no intent was lost.
func TestPayoutsSurviveSIGKILL(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		o := open(t, dsn, nil)
		l, err := ledger.Open(ctx, o.DB(), nil)
		if err != nil {
			t.Fatal(err)
		}
		// The provider keeps its payouts in a store of its own.
		pdb, err := store.Open(ctx, storetest.SQLite(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pdb.Close() })
		p := &paidBy{keys: map[string]map[string]int{}}
		p.Provider, err = payouts.Open(ctx, pdb, &payouts.Options{OnApplied: func(key string) {
			p.mu.Lock()
			f := p.applied
			p.mu.Unlock()
			if f != nil {
				f(key)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(p)
		t.Cleanup(hs.Close)

		// The parent's clock is two hours ahead: the children's leases (an
		// hour) have expired for it.
		outbox.SetClock(o, func() time.Time { return time.Now().Add(2 * time.Hour) })
		rng := rand.New(rand.NewPCG(24, 7)) // fixed: the same kill points every run
		// MCPREL_SOAK_KILLS=1000 runs a longer soak.
		iterations := 100
		if n, err := strconv.Atoi(os.Getenv("MCPREL_SOAK_KILLS")); err == nil && n > 0 {
			iterations = n
		}
		kills := map[string]int{}
		for iter := range iterations {
			phase := killPhases[rng.IntN(len(killPhases))]
			at := rng.IntN(payoutsPerChild)
			delay := time.Duration(rng.IntN(40_000)) * time.Microsecond
			app := fmt.Sprintf("mcprel-outbox-crash-%d-%d", os.Getpid(), iter)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=payouts", "DSN="+storetest.Tagged(dsn, app), "URL="+hs.URL+"/payouts",
				"ITER="+strconv.Itoa(iter), "PHASE="+phase, "KILL_AT="+strconv.Itoa(at))
			cmd.Stderr = os.Stderr
			out, _ := cmd.StdoutPipe()
			in, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killMe, proc := outbox.DeliveryKey(crashTenant, crashTool, crashKey(iter, at), crashTarget), cmd.Process
			p.mu.Lock()
			p.applied = func(key string) {
				if phase == "applied" && key == killMe {
					proc.Signal(syscall.SIGKILL)
				}
			}
			p.mu.Unlock()
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("iteration %d: child said %q, %v", iter, line, err)
			}
			in.Close() // go: the hook is set
			// A child that outlives every kill point by far is stuck: its
			// goroutines, which SIGQUIT prints to stderr, say where.
			stuck := time.AfterFunc(time.Minute, func() { cmd.Process.Signal(syscall.SIGQUIT) })
			if phase == "parent" {
				// Not synchronisation: the random delay is the kill point.
				time.Sleep(delay)
				cmd.Process.Signal(syscall.SIGKILL)
			}
			err := cmd.Wait()
			stuck.Stop()
			status, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			killed := status.Signaled() && status.Signal() == syscall.SIGKILL
			switch {
			case killed:
				kills[phase]++
			case phase == "parent" && err == nil:
				kills["finished first"]++
			default:
				t.Fatalf("iteration %d (%s at %d): child ended with %v, want SIGKILL", iter, phase, at, err)
			}
			p.mu.Lock()
			p.applied = nil
			p.mu.Unlock()
			storetest.AwaitBackendsGone(t, dsn, app)
			// On SQLite the child may leave its dispatch lease (an hour)
			// behind, which keeps the next child's dispatcher standing by.
			// It has expired on the parent's clock: take it over and give
			// it up, here and not only if the parent's dispatcher below
			// gets to it before it stops.
			if _, err := o.HoldDispatch(ctx, "parent", time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := o.Release(ctx, "parent"); err != nil {
				t.Fatal(err)
			}

			// Before any retry: a record has its one intent, an intent its
			// record.
			ops := map[string]outbox.Operation{}
			for i := range payoutsPerChild {
				key := crashKey(iter, i)
				_, lerr := l.Lookup(ctx, crashTenant, crashTool, key)
				found, err := o.Lookup(ctx, crashTenant, crashTool, key)
				if err != nil {
					t.Fatal(err)
				}
				if recorded := lerr == nil; recorded != (len(found) == 1) || len(found) > 1 {
					t.Fatalf("iteration %d (%s at %d): key %s recorded %v (%v) with %d intents", iter, phase, at, key, recorded, lerr, len(found))
				}
				if len(found) == 1 {
					ops[key] = found[0]
				}
			}
			// The kill point is exact: the payouts before it committed, the
			// rest did not — but for a kill at a delivery, while later
			// payouts may have committed meanwhile.
			switch phase {
			case "before", "intent":
				if len(ops) != at {
					t.Fatalf("iteration %d (%s at %d): %d payouts committed, want %d", iter, phase, at, len(ops), at)
				}
			case "committed":
				if len(ops) != at+1 {
					t.Fatalf("iteration %d (%s at %d): %d payouts committed, want %d", iter, phase, at, len(ops), at+1)
				}
			case "answered", "applied":
				if len(ops) < at+1 {
					t.Fatalf("iteration %d (%s at %d): %d payouts committed, want at least %d", iter, phase, at, len(ops), at+1)
				}
			}

			// Retry every key: a committed one replays and records nothing.
			for i := range payoutsPerChild {
				key := crashKey(iter, i)
				ran := false
				res, err := l.Do(ctx, crashOp(iter, i), pay(o, iter, i, func() { ran = true }))
				if err != nil {
					t.Fatalf("iteration %d: retrying %s: %v", iter, key, err)
				}
				_, had := ops[key]
				if ran == had || res.Replayed != had {
					t.Fatalf("iteration %d: retrying %s (committed before: %v): ran %v, replayed %v", iter, key, had, ran, res.Replayed)
				}
			}

			// A new dispatcher delivers what is left.
			d, err := outbox.NewDispatcher(o, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{crashTarget: &outbox.HTTPReceiver{URL: hs.URL + "/payouts"}},
				Lease: time.Minute, Poll: 10 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			dctx, stop := context.WithCancel(ctx)
			stopped := make(chan struct{})
			go func() { d.Run(dctx); close(stopped) }()
			for i := range payoutsPerChild {
				key := crashKey(iter, i)
				found, err := o.Lookup(ctx, crashTenant, crashTool, key)
				if err != nil || len(found) != 1 {
					t.Fatalf("iteration %d: after the retries %s has %d intents (%v)", iter, key, len(found), err)
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				op, err := d.Wait(wctx, crashTenant, found[0].ID)
				cancel()
				if err != nil || op.State != outbox.Delivered {
					t.Fatalf("iteration %d (%s at %d): %s is %v (%v): lost", iter, phase, at, key, op.State, err)
				}
				paid, err := p.Paid(ctx, crashAccount(iter, i))
				if err != nil || paid.Payouts != 1 || paid.Cents != int64(i+1) {
					t.Fatalf("iteration %d (%s at %d): %s paid %+v (%v), want once, %d cents", iter, phase, at, crashAccount(iter, i), paid, err, i+1)
				}
				p.mu.Lock()
				keys := p.keys[crashAccount(iter, i)]
				p.mu.Unlock()
				want := outbox.DeliveryKey(crashTenant, crashTool, key, crashTarget)
				if len(keys) != 1 || keys[want] == 0 {
					t.Fatalf("iteration %d: %s was delivered with keys %v, want only %s", iter, key, keys, want)
				}
				if keys[want] > 1 {
					kills["redelivered"]++
				}
			}
			stop()
			<-stopped
		}
		t.Logf("%d runs: killed %v; stats %+v", iterations, kills, p.Stats())
		if s := p.Stats(); s.Applied != int64(iterations*payoutsPerChild) {
			t.Fatalf("the provider applied %d payouts, want %d", s.Applied, iterations*payoutsPerChild)
		}
	})
}
