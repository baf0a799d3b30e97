package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// mailer is an upstream with a mutation and no idempotency of its own
// ("send": every call sends), one that honours its key ("send_keyed":
// a requestId it has seen is not sent again), and a read to reconcile
// with. sent counts what was actually sent.
type mailer struct {
	url  string
	sent atomic.Int64
	// hold, when set, blocks "send" until it is closed, and holdReads
	// "outbox"; entered, when set, is told each tool call that arrives.
	hold, holdReads chan struct{}
	entered         chan string
	// drop, when set, is the number of answers to tools/call that the
	// network in front of the upstream loses after the upstream acted.
	drop atomic.Int64
	// refuse, when set, is the number of tools/call requests answered 503
	// before they reach the upstream.
	refuse     atomic.Int64
	refuseWith atomic.Int64 // the status refused requests get (0: 503)

	mu   sync.Mutex
	seen map[string]bool
}

// arrive tells entered of a call of tool and waits for hold to be
// closed (if set) or the call to be cancelled.
func (m *mailer) arrive(ctx context.Context, tool string, hold chan struct{}) error {
	if m.entered != nil {
		m.entered <- tool
	}
	if hold == nil {
		return nil
	}
	select {
	case <-hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newMailer(t *testing.T) *mailer {
	t.Helper()
	m := &mailer{seen: map[string]bool{}}
	srv := mcptest.NewServer(t, nil)
	type sendArgs struct {
		To        string `json:"to"`
		Text      string `json:"text"`
		RequestID string `json:"requestId,omitempty"`
	}
	must(t, server.AddTypedTool(srv, server.Tool{Name: "send"}, func(ctx context.Context, call *server.CallRequest, in sendArgs) (string, error) {
		if err := m.arrive(ctx, call.Name, m.hold); err != nil {
			return "", err
		}
		m.sent.Add(1)
		return "sent to " + in.To, nil
	}))
	must(t, server.AddTypedTool(srv, server.Tool{Name: "send_keyed"}, func(ctx context.Context, call *server.CallRequest, in sendArgs) (string, error) {
		if in.RequestID == "" && call.KnownMeta.IdempotencyKey != nil {
			must(t, json.Unmarshal(call.KnownMeta.IdempotencyKey, &in.RequestID)) // the key where the protocol carries it
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.seen[in.RequestID] {
			m.seen[in.RequestID] = true
			m.sent.Add(1)
		}
		return "sent " + in.RequestID, nil
	}))
	must(t, server.AddTypedTool(srv, server.Tool{Name: "outbox", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ptr(true)}}, func(ctx context.Context, call *server.CallRequest, in struct{}) (int64, error) {
		if err := m.arrive(ctx, call.Name, m.holdReads); err != nil {
			return 0, err
		}
		return m.sent.Load(), nil
	}))
	h, err := streamhttp.NewHandler(srv, nil)
	must(t, err)
	// The network in front loses the answer of a call the upstream
	// served: the connection is cut once the upstream has acted.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Method") == mcp.MethodToolsCall && m.refuse.Add(-1) >= 0 {
			w.WriteHeader(cmp.Or(int(m.refuseWith.Load()), http.StatusServiceUnavailable))
			return
		}
		if r.Method == http.MethodPost && m.drop.Load() > 0 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if strings.Contains(rec.Body.String(), `"result"`) && m.drop.Add(-1) >= 0 {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	m.url = hs.URL
	return m
}

// keyedFront is a gateway in front of m whose policy makes "send"
// conditional at most once and "send_keyed" conditional with a key the
// upstream honours, on a SQLite ledger.
func keyedFront(t *testing.T, m *mailer, hopts *streamhttp.HandlerOptions) (*front, *ledger.Ledger) {
	t.Helper()
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "mail", URL: m.url}},
		Ledger:    l,
		Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
			"send":       {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, AtMostOnce: true, KeyArgument: "requestId", ReconcileWith: "outbox"}},
			"send_keyed": {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, KeyArgument: "requestId"}},
			"outbox":     {Server: server.Policy{Retry: mcp.RetrySafe}},
		}},
	}, hopts)
	return f, l
}

func send(t *testing.T, c *client.Client, tool, key, to string) *mcp.CallToolResult {
	t.Helper()
	args := map[string]any{"to": to, "text": "hello"}
	if key != "" {
		args["requestId"] = key
	}
	res, err := c.CallTool(context.Background(), tool, args, nil)
	must(t, err)
	return res
}

// A keyed call is forwarded once: a retry is answered from the ledger,
// the key with other arguments is refused, and a call without a key is
// forwarded every time and says it is not safe to retry.
func TestKeyedCallIsForwardedOnce(t *testing.T) {
	m := newMailer(t)
	f, _ := keyedFront(t, m, nil)
	for _, era := range []mcp.Era{mcp.Modern, mcp.Legacy} {
		c := f.dial(t, era, nil)
		key := "m-" + era.String()
		before := m.sent.Load()
		first := send(t, c, "send", key, "ops")
		again := send(t, c, "send", key, "ops")
		if first.IsError || again.IsError || text(again) != text(first) || again.Meta[mcp.MetaReplayed] != true || m.sent.Load() != before+1 {
			t.Fatalf("first %+v, retry %+v, %d sent; want the retry replayed and one sent", first, again, m.sent.Load()-before)
		}
		if f := failureOf(t, send(t, c, "send", key, "dev")); f.Code != mcp.FailureKeyConflict || m.sent.Load() != before+1 {
			t.Fatalf("the key with other arguments = %+v", f)
		}
		un1, un2 := send(t, c, "send", "", "ops"), send(t, c, "send", "", "ops")
		if un1.Meta[mcp.MetaRetrySafe] != false || un2.Meta[mcp.MetaRetrySafe] != false || m.sent.Load() != before+3 {
			t.Fatalf("unkeyed calls: %+v, %+v, %d sent", un1.Meta, un2.Meta, m.sent.Load()-before)
		}
	}
}

// The network loses the answer after the upstream sent: the call's
// outcome is unknown, and a retry with its key is not forwarded again —
// it is told outcome_unknown, naming the read to check with — until an
// operator resolves the record.
func TestLostAnswerIsNeverForwardedAgain(t *testing.T) {
	m := newMailer(t)
	f, l := keyedFront(t, m, nil)
	c := f.dial(t, mcp.Modern, nil)
	m.drop.Store(1)
	lost := failureOf(t, send(t, c, "send", "m-1", "ops"))
	if lost.Code != mcp.FailureOutcomeUnknown || lost.Retryable || m.sent.Load() != 1 {
		t.Fatalf("the lost call = %+v, %d sent", lost, m.sent.Load())
	}
	for range 3 {
		retry := failureOf(t, send(t, c, "send", "m-1", "ops"))
		if retry.Code != mcp.FailureOutcomeUnknown || retry.Retryable || !strings.Contains(retry.Message, "outbox") || m.sent.Load() != 1 {
			t.Fatalf("a retry = %+v, %d sent; want outcome_unknown naming outbox, nothing sent", retry, m.sent.Load())
		}
	}
	res, err := c.CallTool(context.Background(), idempotency.LookupTool, map[string]any{"tool": "send", "idempotencyKey": "m-1"}, nil)
	must(t, err)
	var op idempotency.Operation
	must(t, json.Unmarshal([]byte(structured(res)), &op))
	if !op.Found || op.State != "outcome_unknown" || !strings.Contains(op.Reason, "ended while the call was in flight") {
		t.Fatalf("lookup_operation = %+v", op)
	}
	must(t, l.Resolve(context.Background(), "", "send", "m-1", json.RawMessage(`{"content":[{"type":"text","text":"sent to ops (checked)"}]}`)))
	after := send(t, c, "send", "m-1", "ops")
	if after.IsError || text(after) != "sent to ops (checked)" || m.sent.Load() != 1 {
		t.Fatalf("after the operator resolved it = %+v, %d sent", after, m.sent.Load())
	}
}

// An upstream that honours the key gets the gateway's own retry of a
// call whose answer was lost, with the same key: it dedupes, the call
// succeeds, and its answer is stored for later retries.
func TestUpstreamThatHonoursTheKeyGetsTheRetry(t *testing.T) {
	m := newMailer(t)
	f, _ := keyedFront(t, m, nil)
	c := f.dial(t, mcp.Legacy, nil)
	m.drop.Store(1)
	first := send(t, c, "send_keyed", "k-1", "ops")
	if first.IsError || text(first) != "sent "+ledger.DerivedKey("", "send_keyed", "k-1") || m.sent.Load() != 1 {
		t.Fatalf("the call whose first answer was lost = %+v, %d sent", first, m.sent.Load())
	}
	if rec := f.awaitForward(t, "send_keyed"); rec.Retries != 1 || rec.Outcome != gateway.OutcomeOK {
		t.Fatalf("the forward was recorded %+v, want one retry, ok", rec)
	}
	if again := send(t, c, "send_keyed", "k-1", "ops"); again.Meta[mcp.MetaReplayed] != true || m.sent.Load() != 1 {
		t.Fatalf("a retry = %+v, %d sent; want it replayed", again, m.sent.Load())
	}
	// Every answer lost, the gateway's retries spent: the caller is told
	// the outcome is unknown and that its own retry with the key is safe —
	// which it is: the key is free, and the upstream dedupes.
	m.drop.Store(100)
	lost := failureOf(t, send(t, c, "send_keyed", "k-2", "ops"))
	if lost.Code != mcp.FailureOutcomeUnknown || !lost.Retryable || !strings.Contains(lost.Message, "same idempotency key") {
		t.Fatalf("a keyed call whose every answer was lost = %+v, want a retryable outcome_unknown", lost)
	}
	m.drop.Store(0)
	if again := send(t, c, "send_keyed", "k-2", "ops"); again.IsError || text(again) != "sent "+ledger.DerivedKey("", "send_keyed", "k-2") || m.sent.Load() != 2 {
		t.Fatalf("the caller's retry = %+v, %d sent; want it sent again and deduplicated upstream", again, m.sent.Load())
	}
}

// The gateway retries a safe tool whose answer was lost, and never an
// unsafe one, nor a keyed one whose upstream does not honour the key.
func TestGatewayRetriesOnlyWhatCannotRunTwice(t *testing.T) {
	m := newMailer(t)
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	f := newFront(t, gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "mail", URL: m.url}},
		Ledger:    l,
		Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{
			"outbox": {Server: server.Policy{Retry: mcp.RetrySafe}},
			"send":   {Keyed: &idempotency.Policy{Key: idempotency.KeyOptional, External: true, AtMostOnce: true, KeyArgument: "requestId"}},
		}},
	}, nil)
	c := f.dial(t, mcp.Modern, nil)
	m.drop.Store(1)
	res, err := c.CallTool(context.Background(), "outbox", nil, nil)
	must(t, err)
	if res.IsError || f.awaitForward(t, "outbox").Retries != 1 {
		t.Fatalf("a safe read whose answer was lost = %+v", res)
	}
	m.drop.Store(1)
	if fail := failureOf(t, send(t, c, "send", "", "ops")); fail.Code != mcp.FailureOutcomeUnknown || m.sent.Load() != 1 {
		t.Fatalf("an unkeyed mutation whose answer was lost = %+v, %d sent; want outcome_unknown, sent once", fail, m.sent.Load())
	}
	m.drop.Store(1)
	if fail := failureOf(t, send(t, c, "send", "once-1", "ops")); fail.Code != mcp.FailureOutcomeUnknown || m.sent.Load() != 2 {
		t.Fatalf("a keyed call at most once whose answer was lost = %+v, %d sent; want outcome_unknown, sent once", fail, m.sent.Load())
	}
}

// Duplicates while the first is forwarded get the retryable in-progress
// answer; one call reaches the upstream.
func TestConcurrentDuplicatesReachTheUpstreamOnce(t *testing.T) {
	m := newMailer(t)
	m.hold = make(chan struct{})
	f, _ := keyedFront(t, m, nil)
	c := f.dial(t, mcp.Modern, nil)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := c.CallTool(context.Background(), "send", map[string]any{"to": "ops", "text": "hello", "requestId": "d-1"}, nil)
		done <- res
	}()
	f.awaitInProgress(t, c, "send", "d-1")
	for range 3 {
		dup := failureOf(t, send(t, c, "send", "d-1", "ops"))
		if dup.Code != mcp.FailureInProgress || !dup.Retryable || dup.RetryAfterMs <= 0 {
			t.Fatalf("a duplicate = %+v", dup)
		}
	}
	close(m.hold)
	if first := recv(t, done, "the first call's answer"); first == nil || first.IsError {
		t.Fatalf("the first call = %+v", first)
	}
	if again := send(t, c, "send", "d-1", "ops"); again.Meta[mcp.MetaReplayed] != true || m.sent.Load() != 1 {
		t.Fatalf("after it = %+v, %d sent", again, m.sent.Load())
	}
}

// awaitInProgress waits until the ledger holds key for tool, as
// lookup_operation shows it.
func (f *front) awaitInProgress(t *testing.T, c *client.Client, tool, key string) {
	t.Helper()
	for range 2000 {
		res, err := c.CallTool(context.Background(), idempotency.LookupTool, map[string]any{"tool": tool, "idempotencyKey": key}, nil)
		must(t, err)
		if strings.Contains(structured(res), `"state":"in_progress"`) {
			return
		}
	}
	t.Fatalf("%s %s was never in progress", tool, key)
}

// A keyed call refused before it reached the server (a 429) frees its
// key: the retry is forwarded, and sends once. A 503 proves nothing — a
// proxy answers it after passing the request on — so the key's outcome
// is unknown then, and the call is not sent again.
func TestKeyedCallThatNeverRanRunsOnRetry(t *testing.T) {
	m := newMailer(t)
	f, l := keyedFront(t, m, nil)
	c := f.dial(t, mcp.Modern, nil)
	m.refuseWith.Store(http.StatusServiceUnavailable)
	m.refuse.Store(1)
	if f := failureOf(t, send(t, c, "send", "n-503", "ops")); f.Code != mcp.FailureOutcomeUnknown || f.Retryable {
		t.Fatalf("a keyed call answered 503 = %+v, want outcome_unknown", f)
	}
	if f := failureOf(t, send(t, c, "send", "n-503", "ops")); f.Code != mcp.FailureOutcomeUnknown || m.sent.Load() != 0 {
		t.Fatalf("its retry = %+v, %d sent; want outcome_unknown, nothing sent", f, m.sent.Load())
	}
	m.refuseWith.Store(http.StatusTooManyRequests)
	m.refuse.Store(1)
	refused := failureOf(t, send(t, c, "send", "n-1", "ops"))
	if refused.Code != mcp.FailureUpstreamUnavailable || !refused.Retryable || m.sent.Load() != 0 {
		t.Fatalf("the refused call = %+v, %d sent", refused, m.sent.Load())
	}
	if _, err := l.Lookup(context.Background(), "", "send", "n-1"); err == nil {
		t.Fatal("a call that never ran upstream left its key claimed")
	}
	if again := send(t, c, "send", "n-1", "ops"); again.IsError || again.Meta[mcp.MetaReplayed] != false || m.sent.Load() != 1 {
		t.Fatalf("the retry = %+v, %d sent", again, m.sent.Load())
	}
}

// Tenants' keys are their own: the same key in two tenants is two calls,
// and one tenant cannot look up another's.
func TestKeyedCallsAreTheTenants(t *testing.T) {
	m := newMailer(t)
	f, _ := keyedFront(t, m, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	a := f.dial(t, mcp.Modern, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-a"}}})
	b := f.dial(t, mcp.Modern, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-b"}}})
	send(t, a, "send", "same", "ops")
	if res := send(t, b, "send", "same", "ops"); res.IsError || res.Meta[mcp.MetaReplayed] != false || m.sent.Load() != 2 {
		t.Fatalf("bob's call with alice's key = %+v, %d sent", res, m.sent.Load())
	}
	res, err := b.CallTool(context.Background(), idempotency.LookupTool, map[string]any{"tool": "send", "idempotencyKey": "same"}, nil)
	must(t, err)
	if !strings.Contains(structured(res), `"state":"committed"`) || !strings.Contains(structured(res), "sent to ops") {
		t.Fatalf("bob's lookup = %s", structured(res))
	}
}

// Two tenants who choose one key for a tool whose upstream deduplicates
// by it are two operations there too: the upstream is sent a key derived
// from the tenant, the tool and the caller's key, never the caller's own,
// so neither tenant is answered with the other's result. lookup_operation
// names the key the upstream was sent.
func TestUpstreamKeysAreTheTenants(t *testing.T) {
	m := newMailer(t)
	f, _ := keyedFront(t, m, &streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	a := f.dial(t, mcp.Modern, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-a"}}})
	b := f.dial(t, mcp.Legacy, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-b"}}})
	forAlice, forBob := ledger.DerivedKey("alice", "send_keyed", "order-1"), ledger.DerivedKey("bob", "send_keyed", "order-1")
	if res := send(t, a, "send_keyed", "order-1", "ops"); res.IsError || text(res) != "sent "+forAlice {
		t.Fatalf("alice's call = %+v, want the upstream sent %s", res, forAlice)
	}
	if res := send(t, b, "send_keyed", "order-1", "ops"); res.IsError || res.Meta[mcp.MetaReplayed] != false || text(res) != "sent "+forBob || m.sent.Load() != 2 {
		t.Fatalf("bob's call with alice's key = %+v, %d sent; want it sent with %s", res, m.sent.Load(), forBob)
	}
	// A retry sends the same key again: the upstream still deduplicates.
	if again := send(t, a, "send_keyed", "order-1", "ops"); again.IsError || text(again) != "sent "+forAlice || m.sent.Load() != 2 {
		t.Fatalf("alice's retry = %+v, %d sent", again, m.sent.Load())
	}
	// A key in _meta, where the protocol carries it, is sent derived too.
	res, err := a.CallTool(context.Background(), "send_keyed", map[string]any{"to": "ops", "text": "hello"},
		&client.CallOptions{Meta: map[string]any{mcp.MetaIdempotencyKey: "order-2"}})
	must(t, err)
	if want := ledger.DerivedKey("alice", "send_keyed", "order-2"); res.IsError || text(res) != "sent "+want {
		t.Fatalf("alice's call keyed in _meta = %+v, want the upstream sent %s", res, want)
	}
	// An upstream that reads its arguments and _meta as Go's
	// encoding/json does matches names in any case: a key spelt another
	// way would reach it as the caller gave it, and tenants would share
	// it again. Such a call is refused, and nothing is sent.
	sent := m.sent.Load()
	for _, spelt := range []struct {
		args map[string]any
		meta map[string]any
	}{
		{map[string]any{"to": "ops", "text": "hello"}, map[string]any{"DEV.MCPREL/IDEMPOTENCYKEY": "order-3"}},
		{map[string]any{"to": "ops", "text": "hello", "requestId": "order-4", "requestid": forAlice}, nil},
		{map[string]any{"to": "ops", "text": "hello", "requeſtId": "order-5"}, nil}, // ſ folds to s
		{map[string]any{"to": "ops", "text": "hello", "requestId": "order-6"}, map[string]any{mcp.MetaIdempotencyKey: "order-6", "dev.mcprel/IdempotencyKey": forAlice}},
	} {
		for _, c := range []*client.Client{a, b} {
			res, err := c.CallTool(context.Background(), "send_keyed", spelt.args, &client.CallOptions{Meta: spelt.meta})
			must(t, err)
			if f := failureOf(t, res); f.Code != mcp.FailureInvalidArguments || m.sent.Load() != sent {
				t.Fatalf("a key spelt another way (%v, _meta %v) = %+v, %d sent; want invalid_arguments, nothing sent", spelt.args, spelt.meta, f, m.sent.Load()-sent)
			}
		}
	}
	res, err = b.CallTool(context.Background(), idempotency.LookupTool, map[string]any{"tool": "send_keyed", "idempotencyKey": "order-1"}, nil)
	must(t, err)
	var op idempotency.Operation
	must(t, json.Unmarshal([]byte(structured(res)), &op))
	if op.UpstreamKey != forBob {
		t.Fatalf("bob's lookup names upstream key %q, want %q", op.UpstreamKey, forBob)
	}

	// A tool the policy does not name has no ledger at the gateway, but
	// its upstream may deduplicate by the key all the same: the key goes
	// derived too, whatever the case of its name.
	open := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "mail", URL: m.url}}},
		&streamhttp.HandlerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	a2 := open.dial(t, mcp.Modern, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-a"}}})
	b2 := open.dial(t, mcp.Legacy, &client.Options{Header: http.Header{"Authorization": {"Bearer tok-b"}}})
	res, err = a2.CallTool(context.Background(), "send_keyed", map[string]any{"to": "ops", "text": "hi"}, &client.CallOptions{Meta: map[string]any{mcp.MetaIdempotencyKey: "order-9"}})
	must(t, err)
	if res.IsError || text(res) != "sent "+ledger.DerivedKey("alice", "send_keyed", "order-9") {
		t.Fatalf("alice's call of a tool the policy does not name = %+v", res)
	}
	res, err = b2.CallTool(context.Background(), "send_keyed", map[string]any{"to": "ops", "text": "hi"}, &client.CallOptions{Meta: map[string]any{strings.ToUpper(mcp.MetaIdempotencyKey): "order-9"}})
	must(t, err)
	if res.IsError || strings.Contains(text(res), "order-9") || m.sent.Load() != 5 {
		t.Fatalf("bob's call with alice's key under another case = %+v, %d sent; want it sent with a key of his own", res, m.sent.Load())
	}
}
