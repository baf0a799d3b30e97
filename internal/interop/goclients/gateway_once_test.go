package goclients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/client/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcprel/mcprel/internal/interop/scenario"
	"github.com/mcprel/mcprel/internal/mcptest"
	relmcp "github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// The gateway these tests start is `mcprel gateway` itself (the binary
// TestMain builds, race-checked under -race) with a policy file, on a
// fresh SQLite ledger: its ledger, store and drivers stay out of this
// module's dependencies, and the policy is read as an operator's is.

// oncePolicy makes "send" conditional — a mutation the upstream does not
// deduplicate, keyed by its argument requestId, forwarded at most once
// and reconciled with "outbox" — and "outbox" a read. It is the review
// vocabulary's (see examples/gateway/mail.yaml), complete enough that the
// reviewer classes send CONDITIONAL.
const oncePolicy = `operations:
  - name: send
    transport: streamable-http
    eras: ["2026-07-28", "2025-11-25"]
    semantics: {kind: mutation, external_effect: true, description: "Sends a message; the upstream does not deduplicate."}
    deadlines: {idle_timeout: 30s, max_timeout: 2m}
    progress: {emits: false, resets_max_deadline: false}
    retry: {policy: same_key_same_args, max_attempts: 3, reconcile_with: outbox}
    idempotency:
      key: optional
      key_argument: requestId
      store: {kind: sqlite, durable: true, shared_by_replicas: false, replicas: 1}
      transaction: {key_claim: true, argument_fingerprint: true, effect_record: false, result: true}
      external_effect_guard: at_most_once
    results: {returned_records: defensive-copy}
    flow_control: &flow {queue_capacity: 1024, queue_scope: per-stream, progress_overflow: coalesce, refetch_flag: true, final_response_preserved: true}
    sse: &sse {headers: ["Content-Type: text/event-stream", "Cache-Control: no-cache, no-transform", "X-Accel-Buffering: no"], proxy_buffering: "off", keepalive_interval: 15s, keepalive_resets_idle: false}
    reconnect: &reconnect {backoff_initial: 250ms, backoff_cap: 8s, jitter: full, last_event_id: legacy-only, refetch: true, replays_unsafe_mutations: false}
    tasks: {support: none}
  - name: outbox
    transport: streamable-http
    eras: ["2026-07-28", "2025-11-25"]
    semantics: {kind: read-only, external_effect: false, description: "How many messages were sent."}
    deadlines: {idle_timeout: 10s, max_timeout: 30s}
    progress: {emits: false, resets_max_deadline: false}
    retry: {policy: safe_only, max_attempts: 3}
    results: {returned_records: defensive-copy}
    flow_control: *flow
    sse: *sse
    reconnect: *reconnect
    tasks: {support: none}
`

// sender is the upstream behind the gateway: an mcprel server over
// Streamable HTTP whose "send" has no idempotency of its own — every
// call that reaches it sends, and sent counts them.
type sender struct {
	url  string
	sent atomic.Int64
	// lose is the number of answers to tools/call "send" that the network
	// between the gateway and the upstream loses after the upstream sent:
	// the connection is cut instead of answered.
	lose atomic.Int64
}

func newSender(t *testing.T) *sender {
	t.Helper()
	s := &sender{}
	srv := mcptest.NewServer(t, nil)
	type sendArgs struct {
		To        string `json:"to"`
		Text      string `json:"text"`
		RequestID string `json:"requestId,omitempty"`
	}
	if err := server.AddTypedTool(srv, server.Tool{Name: "send"}, func(ctx context.Context, call *server.CallRequest, in sendArgs) (string, error) {
		s.sent.Add(1)
		return "sent to " + in.To, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := server.AddTypedTool(srv, server.Tool{Name: "outbox", Annotations: &relmcp.ToolAnnotations{ReadOnlyHint: new(true)}},
		func(ctx context.Context, call *server.CallRequest, in struct{}) (int64, error) {
			return s.sent.Load(), nil
		}); err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || s.lose.Load() == 0 {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &req) != nil || req.Method != relmcp.MethodToolsCall || req.Params.Name != "send" || s.lose.Add(-1) < 0 {
			h.ServeHTTP(w, r)
			return
		}
		// The upstream serves the call in full (it has sent when
		// ServeHTTP returns); its answer never leaves.
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hs.Close)
	s.url = hs.URL
	return s
}

// onceGateway runs `mcprel gateway --http` with oncePolicy in front of up,
// on a fresh ledger, and returns its endpoint and its log, which is
// shown if the test fails.
func onceGateway(t *testing.T, up *sender) (string, *serverLog) {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(oncePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoint, rest := startListening(t, "gateway", "--http", "127.0.0.1:0", "--log-format", "json",
		"--policy", policy, "--db", filepath.Join(dir, "gateway.db"), "--upstream", "mail="+up.url)
	log := newServerLog()
	go log.consume(rest)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", log)
		}
	})
	return endpoint, log
}

// judgeLog waits for the gateway to log calls calls of send, and checks
// that it logged exactly the idempotency outcomes want ("executed",
// "replayed", "conflict", "unknown": how many of each), and no error.
func judgeLog(t *testing.T, log *serverLog, calls int, want map[string]int) {
	t.Helper()
	call := map[string]any{"msg": "request", "method": "tools/call", "tool": "send"}
	deadline := time.After(waitLimit)
	for {
		log.mu.Lock()
		changed := log.changed
		log.mu.Unlock()
		if log.count(call) >= calls {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the gateway logged %d calls of send, want %d", log.count(call), calls)
		}
	}
	for outcome, n := range want {
		if got := log.count(map[string]any{"msg": "request", "method": "tools/call", "tool": "send", "idempotency": outcome}); got != n {
			t.Errorf("the gateway logged %d calls of send with idempotency %q, want %d", got, outcome, n)
		}
	}
	if n := log.count(map[string]any{"level": "ERROR"}); n > 0 {
		t.Errorf("the gateway logged %d errors", n)
	}
}

// onceClient connects one client library to the gateway at endpoint in
// one era (its protocol version).
type onceClient func(t *testing.T, endpoint, version string) peer

var onceClients = map[string]onceClient{
	"go-sdk": func(t *testing.T, endpoint, version string) peer {
		return connectGoSDK(t, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, version)
	},
	"mcp-go": func(t *testing.T, endpoint, version string) peer {
		tr, err := mcpgo.NewStreamableHTTP(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		return connectMCPGo(t, tr, version)
	},
}

var onceEras = []string{"2025-11-25", "2026-07-28"}

// dialOnce connects c to the gateway at endpoint in era, closed when the
// test ends.
func dialOnce(t *testing.T, c onceClient, endpoint, era string) peer {
	t.Helper()
	p := c(t, endpoint, era)
	t.Cleanup(func() { p.close() })
	return p
}

// toolResult is a call's result as the client library handed it over,
// re-encoded.
type toolResult struct {
	Meta    map[string]any `json:"_meta"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Structured json.RawMessage `json:"structuredContent"`
	IsError    bool            `json:"isError"`
	raw        string
}

func (r toolResult) text() string {
	if len(r.Content) == 0 {
		return ""
	}
	return r.Content[0].Text
}

// failure is the structured failure a failed result carries in its first
// text content.
func (r toolResult) failure(t *testing.T) relmcp.Failure {
	t.Helper()
	if !r.IsError {
		t.Fatalf("the call succeeded: %s", r.raw)
	}
	var f relmcp.Failure
	if err := json.Unmarshal([]byte(r.text()), &f); err != nil {
		t.Fatalf("the failed result %s is not structured: %v", r.raw, err)
	}
	return f
}

// callOnce calls tool with args through p, within waitLimit.
func callOnce(t *testing.T, p peer, tool string, args map[string]any) toolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	raw, err := p.call(ctx, scenario.Step{Name: tool, Tool: tool, Args: args}, nil)
	if err != nil {
		t.Fatalf("%s %v: the client failed: %v", tool, args, err)
	}
	res := toolResult{raw: string(raw)}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("%s: the client's result %s: %v", tool, raw, err)
	}
	return res
}

func sendOnce(t *testing.T, p peer, key, to string) toolResult {
	t.Helper()
	return callOnce(t, p, "send", map[string]any{"to": to, "text": "hello", "requestId": key})
}

// lookupOnce is the gateway's record of key, as lookup_operation answers.
func lookupOnce(t *testing.T, p peer, key string) map[string]any {
	t.Helper()
	res := callOnce(t, p, "lookup_operation", map[string]any{"tool": "send", "idempotencyKey": key})
	var op map[string]any
	if res.IsError || json.Unmarshal(res.Structured, &op) != nil {
		t.Fatalf("lookup_operation %s = %s", key, res.raw)
	}
	return op
}

// The official Go SDK's client (v1.8.0), in both eras, calls a
// conditional tool through the gateway's ledger: the retry with the same
// requestId is answered from the ledger (_meta dev.mcprel/replayed true,
// the first answer's text) without reaching the upstream, and the key
// with other arguments is refused with idempotency_conflict; the upstream
// sent once.
func TestGoSDKKeyedCallThroughGatewayRunsOnce(t *testing.T) {
	for _, era := range onceEras {
		t.Run(era, func(t *testing.T) { keyedCallRunsOnce(t, onceClients["go-sdk"], era) })
	}
}

// mcp-go's client (v1.2.1), in both eras, calls a conditional tool
// through the gateway's ledger: replayed retry, refused conflict, one
// send (as TestGoSDKKeyedCallThroughGatewayRunsOnce).
func TestMCPGoKeyedCallThroughGatewayRunsOnce(t *testing.T) {
	for _, era := range onceEras {
		t.Run(era, func(t *testing.T) { keyedCallRunsOnce(t, onceClients["mcp-go"], era) })
	}
}

// keyedCallRunsOnce is the scenario of both: forwarded once, replayed,
// refused with other arguments, committed in the record, replayed again.
func keyedCallRunsOnce(t *testing.T, c onceClient, era string) {
	up := newSender(t)
	endpoint, log := onceGateway(t, up)
	p := dialOnce(t, c, endpoint, era)
	const key = "req-1"
	first := sendOnce(t, p, key, "ops")
	if first.IsError || first.text() != "sent to ops" || first.Meta[relmcp.MetaReplayed] != false || up.sent.Load() != 1 {
		t.Fatalf("the first call = %s, %d sent; want it forwarded (replayed false) and sent once", first.raw, up.sent.Load())
	}
	again := sendOnce(t, p, key, "ops")
	if again.IsError || again.text() != first.text() || again.Meta[relmcp.MetaReplayed] != true || up.sent.Load() != 1 {
		t.Fatalf("the retry = %s, %d sent; want the first answer replayed from the ledger, nothing sent", again.raw, up.sent.Load())
	}
	if f := sendOnce(t, p, key, "dev").failure(t); f.Code != relmcp.FailureKeyConflict || f.Retryable || up.sent.Load() != 1 {
		t.Fatalf("the key with other arguments = %+v, %d sent; want %s, nothing sent", f, up.sent.Load(), relmcp.FailureKeyConflict)
	}
	if op := lookupOnce(t, p, key); op["found"] != true || op["state"] != "committed" || !strings.Contains(string(mustJSON(op["result"])), "sent to ops") {
		t.Fatalf("lookup_operation = %v; want the committed answer", op)
	}
	// The ledger stored the answer, and still answers with it.
	if last := sendOnce(t, p, key, "ops"); last.Meta[relmcp.MetaReplayed] != true || last.text() != first.text() || up.sent.Load() != 1 {
		t.Fatalf("after the conflict = %s, %d sent", last.raw, up.sent.Load())
	}
	judgeLog(t, log, 4, map[string]int{"executed": 1, "replayed": 2, "conflict": 1})
}

// The answer of a keyed call is lost between the gateway and the upstream
// after the upstream sent (the connection is cut): the Go SDK's client —
// and mcp-go's — in both eras, is told outcome_unknown, not retryable;
// its retry with the key is told outcome_unknown again, naming the read
// to reconcile with, and is never forwarded; lookup_operation shows the
// unknown outcome. The upstream sent once.
func TestGoClientsLostAnswerThroughGatewayIsNeverResent(t *testing.T) {
	for _, name := range []string{"go-sdk", "mcp-go"} {
		for _, era := range onceEras {
			t.Run(name+"/"+era, func(t *testing.T) {
				up := newSender(t)
				endpoint, log := onceGateway(t, up)
				p := dialOnce(t, onceClients[name], endpoint, era)
				up.lose.Store(1)
				lost := sendOnce(t, p, "req-lost", "ops").failure(t)
				if lost.Code != relmcp.FailureOutcomeUnknown || lost.Retryable || up.sent.Load() != 1 {
					t.Fatalf("the call whose answer was lost = %+v, %d sent; want %s, not retryable, sent once", lost, up.sent.Load(), relmcp.FailureOutcomeUnknown)
				}
				for range 2 {
					retry := sendOnce(t, p, "req-lost", "ops").failure(t)
					if retry.Code != relmcp.FailureOutcomeUnknown || retry.Retryable || !strings.Contains(retry.Message, "outbox") || up.sent.Load() != 1 {
						t.Fatalf("a retry = %+v, %d sent; want %s naming outbox, nothing sent", retry, up.sent.Load(), relmcp.FailureOutcomeUnknown)
					}
				}
				if op := lookupOnce(t, p, "req-lost"); op["found"] != true || op["state"] != "outcome_unknown" {
					t.Fatalf("lookup_operation = %v; want outcome_unknown", op)
				}
				// The link to the upstream still serves: another key is
				// forwarded, and sends.
				if next := sendOnce(t, p, "req-next", "ops"); next.IsError || next.Meta[relmcp.MetaReplayed] != false || up.sent.Load() != 2 {
					t.Fatalf("a call with another key = %s, %d sent", next.raw, up.sent.Load())
				}
				judgeLog(t, log, 4, map[string]int{"unknown": 3, "executed": 1})
			})
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
