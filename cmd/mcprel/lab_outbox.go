package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/store"
)

// heldProvider is the demo payment provider as the outbox record drives
// it: while holding, a payout to one account is held before the provider
// sees it (the delivery in flight, nothing paid), and one to another is
// paid and its answer held (the answer lost). It records the key of every
// delivery by account.
type heldProvider struct {
	*payouts.Provider
	before, after string // the accounts held
	arrived       chan string

	mu      sync.Mutex
	holding bool
	keys    map[string]map[string]bool
}

func (p *heldProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in struct{ Account string }
	json.Unmarshal(body, &in)
	p.mu.Lock()
	holding := p.holding
	if r.URL.Path == "/payouts" {
		if p.keys[in.Account] == nil {
			p.keys[in.Account] = map[string]bool{}
		}
		p.keys[in.Account][r.Header.Get("Idempotency-Key")] = true
	}
	p.mu.Unlock()
	switch {
	case holding && in.Account == p.before:
		p.arrived <- in.Account
		<-r.Context().Done() // its sender dies waiting
	case holding && in.Account == p.after:
		p.Provider.ServeHTTP(&heldAnswer{ResponseWriter: w, held: func() {
			p.arrived <- in.Account
			<-r.Context().Done()
		}}, r)
	default:
		p.Provider.ServeHTTP(w, r)
	}
}

// heldAnswer holds a response once its status is known — the payout
// made — until held returns, and then drops it.
type heldAnswer struct {
	http.ResponseWriter
	held    func()
	dropped bool
}

func (h *heldAnswer) WriteHeader(int) {
	h.held()
	h.dropped = true
}

func (h *heldAnswer) Write(b []byte) (int, error) {
	if !h.dropped {
		h.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}

// outboxRecord is the outbox's record: two payouts committed, their
// deliveries unanswered — one held before the provider took it, one paid
// and its answer lost — when the server is SIGKILLed; restarted on the
// same database, the server delivers both again, with the same keys, and
// the provider, which honours keys, has paid each once.
func outboxRecord(ctx context.Context, self, db string) (Record, error) {
	r := Record{Section: "outbox", Name: "the server SIGKILLed between the commit and the delivery, then restarted"}
	dir, err := os.MkdirTemp("", "mcprel-provider")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	pdb, err := store.Open(ctx, filepath.Join(dir, "provider.db"), nil)
	if err != nil {
		return r, err
	}
	defer pdb.Close()
	token := rand.Text()
	p := &heldProvider{before: "demo-alice", after: "demo-bob", arrived: make(chan string, 2), holding: true, keys: map[string]map[string]bool{}}
	if p.Provider, err = payouts.Open(ctx, pdb, &payouts.Options{Token: token}); err != nil {
		return r, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()

	// A short outbox lease: the restarted server takes over the dead
	// one's deliveries a second after it died.
	env := []string{"MCPREL_PAYOUT_TOKEN=" + token}
	flags := []string{"--payout-url", "http://" + ln.Addr().String() + "/payouts", "--outbox-lease", "1s"}
	first, err := startHTTPLab(ctx, self, db, env, flags...)
	if err != nil {
		return r, err
	}
	c, err := client.DialHTTP(ctx, first.url, nil)
	if err != nil {
		first.stop()
		return r, err
	}
	pays := []struct{ account, key string }{{p.before, "demo-payout-1"}, {p.after, "demo-payout-2"}}
	answers := make([]labOutcome, len(pays))
	errs := make([]error, len(pays))
	var wg sync.WaitGroup
	for i, pay := range pays {
		wg.Go(func() {
			answers[i], errs[i] = callTool(ctx, c, "send_payout", map[string]any{"account": pay.account, "cents": 2500, "idempotencyKey": pay.key})
		})
	}
	wg.Wait()
	c.Close()
	if err := errors.Join(errs...); err != nil {
		first.stop()
		return r, err
	}
	for range pays {
		<-p.arrived // both deliveries are at the provider, unanswered
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.logs.wait()
	first.cmd.Wait()
	p.mu.Lock()
	p.holding = false
	p.mu.Unlock()
	for i, pay := range pays {
		r.add(fmt.Sprintf("%s's call answered", pay.account), fmt.Sprintf("%v, operation %v (the provider holds its delivery)", answers[i].field("status"), answers[i].field("operationId")))
	}
	r.add("server", "SIGKILLed: "+p.before+"'s delivery held before the provider took it, "+p.after+"'s paid and its answer held")

	second, err := startHTTPLab(ctx, self, db, env, flags...)
	if err != nil {
		return r, err
	}
	defer second.stop()
	c, err = client.DialHTTP(ctx, second.url, nil)
	if err != nil {
		return r, err
	}
	defer c.Close()
	for _, pay := range pays {
		got, err := awaitLabDelivery(ctx, c, pay.key)
		if err != nil {
			return r, err
		}
		paid, err := p.Paid(ctx, pay.account)
		if err != nil {
			return r, err
		}
		times := fmt.Sprintf("%d times", paid.Payouts)
		if paid.Payouts == 1 {
			times = "once"
		}
		r.add(fmt.Sprintf("%s after the restart", pay.account), fmt.Sprintf("%s on attempt %d; paid %s", got.State, got.Attempts, times))
	}
	replay, err := callTool(ctx, c, "send_payout", map[string]any{"account": p.after, "cents": 2500, "idempotencyKey": "demo-payout-2"})
	if err != nil {
		return r, err
	}
	r.add("a retry with "+p.after+"'s key", fmt.Sprintf("replayed %v, the same operation: %v", replay.replayed, replay.field("operationId") == answers[1].field("operationId")))
	s := p.Stats()
	r.add("provider", fmt.Sprintf("%d deliveries reached it, %d payouts made, %d answered from its key", s.Deliveries, s.Applied, s.Replayed))
	p.mu.Lock()
	oneKey := len(p.keys[p.before]) == 1 && len(p.keys[p.after]) == 1
	p.mu.Unlock()
	r.add("one delivery key per payout", oneKey)
	return r, nil
}

// labDelivery is a payout's delivery as lookup_operation shows it.
type labDelivery struct {
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
}

// awaitLabDelivery asks lookup_operation until key's delivery ended.
func awaitLabDelivery(ctx context.Context, c *client.Client, key string) (labDelivery, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := callTool(ctx, c, "lookup_operation", map[string]any{"tool": "send_payout", "idempotencyKey": key})
		if err != nil {
			return labDelivery{}, err
		}
		var got struct{ Deliveries []labDelivery }
		json.Unmarshal(o.structured, &got)
		if len(got.Deliveries) == 1 && got.Deliveries[0].State != "pending" {
			return got.Deliveries[0], nil
		}
		if time.Now().After(deadline) {
			return labDelivery{}, fmt.Errorf("demo: the payout %s was not delivered 30 s after the restart", key)
		}
		time.Sleep(50 * time.Millisecond) // the restarted server delivers on its own time
	}
}
