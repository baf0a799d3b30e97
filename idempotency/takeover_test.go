package idempotency_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// clock is the ledger's clock (ledger.Options.Now), moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

// The ledger stores milliseconds; so does the clock.
func newClock() *clock { return &clock{now: time.UnixMilli(time.Now().UnixMilli())} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// answer is what a held handler returns when the test lets it go.
type answer func() (*mcp.CallToolResult, error)

// hold is one call a replica's handler holds until the test answers it.
type hold struct {
	entered chan struct{}
	answer  chan answer
}

// replicas are two servers in front of one receiver, each with a ledger
// handle of its own on one database and one clock: replica "a" and
// replica "b" of a gateway. Their tool "send" answers at once with the
// replica's name, unless the test holds the call (hold).
type replicas struct {
	t       *testing.T
	clk     *clock
	a, b    *mcptest.Client
	ledgers map[string]*ledger.Ledger
	mu      sync.Mutex
	held    map[string]*hold // by replica and key
	runs    atomic.Int64
	nextID  atomic.Int64
}

func newReplicas(t *testing.T, dsn string, p idempotency.Policy) *replicas {
	t.Helper()
	p.KeyArgument = "requestId" // as sendParams gives it
	r := &replicas{t: t, clk: newClock(), ledgers: map[string]*ledger.Ledger{}, held: map[string]*hold{}}
	clients := map[string]*mcptest.Client{}
	for _, name := range []string{"a", "b"} {
		// A lease far longer than the test: the holder's renewals never
		// come; the test moves the ledger's clock past the lease instead,
		// as a replica stopped past its lease finds it on resuming.
		l := ledgertest.Open(t, dsn, nil, &ledger.Options{Lease: time.Hour, Now: r.clk.Now}, "")
		srv := mcptest.NewServer(t, nil)
		err := srv.AddTool(server.Tool{Name: "send", Policy: server.Policy{MaxTimeout: 24 * time.Hour}}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			r.runs.Add(1)
			r.mu.Lock()
			h := r.held[name+"/"+idempotency.Key(req)]
			r.mu.Unlock()
			if h == nil {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent by " + name)}}, nil
			}
			close(h.entered)
			return (<-h.answer)()
		}, idempotency.Keyed(l, p))
		if err != nil {
			t.Fatal(err)
		}
		r.ledgers[name] = l
		clients[name] = mcptest.Stdio(t, srv, nil)
	}
	r.a, r.b = clients["a"], clients["b"]
	return r
}

// start sends a call with key to replica's client and waits until its
// handler holds it; the returned function answers it and returns what
// the call's client got.
func (r *replicas) start(replica, key string) func(answer) callResult {
	r.t.Helper()
	h := &hold{entered: make(chan struct{}), answer: make(chan answer, 1)}
	r.mu.Lock()
	r.held[replica+"/"+key] = h
	r.mu.Unlock()
	c := r.client(replica)
	id := r.nextID.Add(1)
	c.Request(id, mcp.MethodToolsCall, sendParams(key, nil))
	select {
	case <-h.entered:
	case <-time.After(mcptest.Timeout):
		r.t.Fatalf("the call with key %s never reached replica %s's handler", key, replica)
	}
	return func(a answer) callResult {
		r.t.Helper()
		h.answer <- a
		f, _ := c.Await(id)
		return result(r.t, f)
	}
}

// call makes a call with key on replica and returns what its client got.
func (r *replicas) call(replica, key string) callResult {
	r.t.Helper()
	return result(r.t, r.client(replica).Call(r.nextID.Add(1), mcp.MethodToolsCall, sendParams(key, nil)))
}

func (r *replicas) client(replica string) *mcptest.Client {
	if replica == "a" {
		return r.a
	}
	return r.b
}

func sent(text string) answer {
	return func() (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(text)}}, nil
	}
}

func failed(err error) answer {
	return func() (*mcp.CallToolResult, error) { return nil, err }
}

// text is a tool result's first text.
func text(t *testing.T, r callResult) string {
	t.Helper()
	var body struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(r.raw, &body); err != nil || len(body.Content) == 0 {
		t.Fatalf("no text in %s", r.raw)
	}
	return body.Content[0].Text
}

// A replica stopped past its lease resumes and finishes a call forwarded
// at most once, after the other replica has told a retry the key's outcome
// is unknown: the ledger keeps "unknown", so that is what the resumed
// replica's client is told too, not the answer it got. One key, one
// outcome, whatever the resumed handler ends with: a success, a failure
// after the request may have left (the ledger's record wins over its own
// "unknown" when an operator has resolved the key meanwhile), or a failure
// that proves it never left.
func TestResumedHolderAtMostOnceAnswersWithTheLedger(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		r := newReplicas(t, dsn, idempotency.Policy{External: true, AtMostOnce: true})
		expire := func(key string) mcp.Failure {
			t.Helper()
			r.clk.Advance(2 * time.Hour) // replica a is stopped past its lease
			f := r.call("b", key).failure(t)
			if f.Code != mcp.FailureOutcomeUnknown || f.Retryable {
				t.Fatalf("%s: replica b's retry = %+v, want outcome_unknown", key, f)
			}
			return f
		}

		// It succeeds.
		finish := r.start("a", "m-1")
		told := expire("m-1")
		got := finish(sent("sent by a"))
		if !got.IsError {
			t.Fatalf("m-1: the resumed replica's client got %s, though every retry is told outcome_unknown", got.raw)
		}
		if f := got.failure(t); f.Code != mcp.FailureOutcomeUnknown || f.Retryable || f.Details["reason"] != told.Details["reason"] {
			t.Fatalf("m-1: the resumed replica's client got %+v, want what the ledger says: %+v", f, told)
		}
		for _, replica := range []string{"a", "b"} {
			if f := r.call(replica, "m-1").failure(t); f.Code != mcp.FailureOutcomeUnknown {
				t.Fatalf("m-1: a later retry on %s = %+v", replica, f)
			}
		}
		if rec, err := r.ledgers["a"].Lookup(context.Background(), "", "send", "m-1"); err != nil || rec.State != ledger.OutcomeUnknown {
			t.Fatalf("m-1: record %+v, %v", rec, err)
		}

		// It fails after the request may have left, and an operator has
		// resolved the key meanwhile: the resolution is the outcome.
		finish = r.start("a", "m-2")
		expire("m-2")
		if err := r.ledgers["b"].Resolve(context.Background(), "", "send", "m-2", json.RawMessage(`{"content":[{"type":"text","text":"delivered, found by hand"}]}`)); err != nil {
			t.Fatal(err)
		}
		got = finish(failed(&mcp.ToolError{Code: mcp.FailureOutcomeUnknown, Message: "the connection to the receiver ended with the call in flight"}))
		if got.IsError || text(t, got) != "delivered, found by hand" || got.Meta[mcp.MetaReplayed] != true {
			t.Fatalf("m-2: the resumed replica's client got %s, want the resolved result replayed", got.raw)
		}

		// It fails before the request left (NotRun): the key is not freed
		// by it, and its client is told what retries are.
		finish = r.start("a", "m-3")
		expire("m-3")
		got = finish(failed(idempotency.NotRun(&mcp.ToolError{Code: mcp.FailureUpstreamUnavailable, Message: "the receiver is down", Retryable: true})))
		if f := got.failure(t); f.Code != mcp.FailureOutcomeUnknown {
			t.Fatalf("m-3: the resumed replica's client got %+v, want outcome_unknown as the ledger says", f)
		}
		if n := r.runs.Load(); n != 3 {
			t.Fatalf("%d runs, want 3: no key ran twice", n)
		}
	})
}

// Where the receiver honours the key, a stopped replica's claim is taken
// over and the call runs again with the same key. The resumed replica's
// client is told what the ledger records — the result the taker stored,
// or that the taker still runs it — never its own answer, and never that
// the ledger failed.
func TestResumedHolderOfATakenKeyAnswersWithTheLedger(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		r := newReplicas(t, dsn, idempotency.Policy{External: true})

		// The taker finished first: its result is the key's.
		finish := r.start("a", "p-1")
		r.clk.Advance(2 * time.Hour)
		if got := r.call("b", "p-1"); got.IsError || text(t, got) != "sent by b" {
			t.Fatalf("p-1: the taker's call = %s", got.raw)
		}
		got := finish(sent("sent by a"))
		if got.IsError || text(t, got) != "sent by b" || got.Meta[mcp.MetaReplayed] != true {
			t.Fatalf("p-1: the resumed replica's client got %s, want the taker's stored result, replayed", got.raw)
		}

		// The taker still runs it: in progress, retryable.
		finish = r.start("a", "p-2")
		r.clk.Advance(2 * time.Hour)
		finishB := r.start("b", "p-2")
		got = finish(sent("sent by a"))
		if f := got.failure(t); f.Code != mcp.FailureInProgress || !f.Retryable || f.RetryAfterMs <= 0 {
			t.Fatalf("p-2: the resumed replica's client got %s, want in_progress while the taker runs", got.raw)
		}
		if got := finishB(sent("sent by b")); got.IsError || text(t, got) != "sent by b" {
			t.Fatalf("p-2: the taker's client got %s", got.raw)
		}
		if got := r.call("a", "p-2"); text(t, got) != "sent by b" || got.Meta[mcp.MetaReplayed] != true {
			t.Fatalf("p-2: a retry got %s", got.raw)
		}

		// The resumed handler fails (its claim would be released): the
		// taker's result is still the key's outcome.
		finish = r.start("a", "p-3")
		r.clk.Advance(2 * time.Hour)
		r.call("b", "p-3")
		got = finish(failed(&mcp.ToolError{Code: mcp.FailureOverloaded, Message: "busy", Retryable: true, RetryAfter: time.Second}))
		if got.IsError || text(t, got) != "sent by b" || got.Meta[mcp.MetaReplayed] != true {
			t.Fatalf("p-3: the resumed replica's client got %s, want the taker's stored result", got.raw)
		}
		if rec, err := r.ledgers["a"].Lookup(context.Background(), "", "send", "p-3"); err != nil || rec.State != ledger.Committed || !strings.Contains(string(rec.Result), "sent by b") {
			t.Fatalf("p-3: record %+v, %v; the failed holder's release must not touch the taker's record", rec, err)
		}
	})
}
