package review_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
)

func parseFile(t *testing.T, path string) *review.Policy {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := review.Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func codes(r review.Report) []review.Code {
	var out []review.Code
	for _, op := range r.Operations {
		for _, c := range op.Codes() {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// Each demo tool's policy, as mcprel serve serves it, is production ready.
func TestDemoToolPoliciesPass(t *testing.T) {
	files, err := filepath.Glob("../examples/review/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		r := review.Review(parseFile(t, f))
		if r.Verdict != review.ProductionReady {
			t.Errorf("%s: %s, refusals %v", f, r.Verdict, codes(r))
		}
		for _, op := range r.Operations {
			names = append(names, op.Name)
			if len(op.Warnings) > 0 {
				t.Errorf("%s: %s: warnings %q", f, op.Name, op.Warnings)
			}
		}
	}
	slices.Sort(names)
	want := []string{"charge_account", "echo", "generate_report", "get_inventory", "lookup_operation", "reserve_inventory", "set_stock", "slow_count"}
	if !slices.Equal(names, want) {
		t.Fatalf("examples cover %v, want every demo tool %v", names, want)
	}
}

// Each broken example is refused with exactly its reason.
func TestBrokenPoliciesRefusedForTheirReason(t *testing.T) {
	want := map[string]review.Code{
		"retry_on_timeout":               review.CodeRetryOnTimeoutOnly,
		"process_local_ledger":           review.CodeProcessLocalLedger,
		"effect_outside_boundary":        review.CodeEffectOutsideBoundary,
		"aliased_records":                review.CodeAliasedRecords,
		"unspecified_queue_capacity":     review.CodeQueueCapacityUnspecified,
		"no_max_timeout":                 review.CodeNoMaxTimeout,
		"progress_resets_every_deadline": review.CodeProgressResetsEveryDeadline,
		"missing_inputs":                 review.CodeMissingInput,
	}
	files, _ := filepath.Glob("../examples/review/broken/*.yaml")
	if len(files) != len(want) {
		t.Fatalf("%d broken examples, want %d", len(files), len(want))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		code, ok := want[name]
		if !ok {
			t.Errorf("%s: no expected reason", f)
			continue
		}
		r := review.Review(parseFile(t, f))
		if got := codes(r); r.Verdict != review.Refused || !slices.Equal(got, []review.Code{code}) {
			t.Errorf("%s: verdict %s, codes %v, want refused with exactly %s", f, r.Verdict, got, code)
		}
		for _, op := range r.Operations {
			for _, ref := range op.Refusals {
				if ref.Message == "" {
					t.Errorf("%s: refusal %s has no sentence", f, ref.Code)
				}
			}
		}
	}
}

// full is an operation that needs every conditional input: a mutation
// over Streamable HTTP with an external effect, progress and Tasks.
const full = `
operations:
  - name: full
    transport: streamable-http
    semantics: {kind: mutation, external_effect: true}
    deadlines: {idle_timeout: 30s, max_timeout: 2m}
    progress: {emits: true, strictly_increasing: true, rate_limit: 50ms, resets_idle_deadline: true, resets_max_deadline: false}
    retry: {policy: same_key_same_args}
    idempotency:
      key: required
      store: {kind: postgres, durable: true, shared_by_replicas: true}
      transaction: {key_claim: true, argument_fingerprint: true, effect_record: true, result: true}
      external_effect_guard: outbox
    results: {returned_records: defensive-copy}
    flow_control: {queue_capacity: 64, queue_scope: per-stream, progress_overflow: coalesce, refetch_flag: true, final_response_preserved: true}
    sse:
      headers: ["Content-Type: text/event-stream", "Cache-Control: no-cache", "X-Accel-Buffering: no"]
      proxy_buffering: "off"
      keepalive_interval: 15s
      keepalive_resets_idle: false
    reconnect: {backoff_initial: 250ms, backoff_cap: 8s, jitter: full, last_event_id: legacy-only, refetch: true, replays_unsafe_mutations: false}
    tasks: {support: optional, cancel: cooperative, durable: true, poll_until_terminal: true}
`

// required are the inputs full cannot do without, written out here rather
// than taken from the package, so that the two keep each other honest.
var required = []string{
	"transport", "semantics.kind", "semantics.external_effect",
	"deadlines.idle_timeout", "deadlines.max_timeout",
	"progress.emits", "progress.strictly_increasing", "progress.rate_limit", "progress.resets_idle_deadline", "progress.resets_max_deadline",
	"retry.policy",
	"idempotency.key", "idempotency.store.kind", "idempotency.store.durable", "idempotency.store.shared_by_replicas",
	"idempotency.transaction.key_claim", "idempotency.transaction.argument_fingerprint", "idempotency.transaction.effect_record", "idempotency.transaction.result",
	"idempotency.external_effect_guard",
	"results.returned_records",
	"flow_control.queue_capacity", "flow_control.queue_scope", "flow_control.progress_overflow", "flow_control.refetch_flag", "flow_control.final_response_preserved",
	"sse.headers", "sse.proxy_buffering", "sse.keepalive_interval", "sse.keepalive_resets_idle",
	"reconnect.backoff_initial", "reconnect.backoff_cap", "reconnect.jitter", "reconnect.last_event_id", "reconnect.refetch", "reconnect.replays_unsafe_mutations",
	"tasks.support", "tasks.cancel", "tasks.durable", "tasks.poll_until_terminal",
}

// deleted returns full's YAML with the field at path removed.
func deleted(t *testing.T, path string) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(full), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc["operations"].([]any)[0].(map[string]any)
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		m = m[p].(map[string]any)
	}
	if _, ok := m[parts[len(parts)-1]]; !ok {
		t.Fatalf("full has no %s", path)
	}
	delete(m, parts[len(parts)-1])
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The reviewer never says "production ready" for a policy missing a
// required input, and names the input.
func TestMissingRequiredInputIsNeverReady(t *testing.T) {
	p, err := review.Parse("full.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if r := review.Review(p); r.Verdict != review.ProductionReady || len(r.Operations[0].Warnings) > 0 {
		t.Fatalf("the full policy: %s %v %q", r.Verdict, codes(r), r.Operations[0].Warnings)
	}
	for _, path := range required {
		t.Run(path, func(t *testing.T) {
			p, err := review.Parse("full.yaml", deleted(t, path))
			if err != nil {
				t.Fatal(err)
			}
			r := review.Review(p)
			op := r.Operations[0]
			if r.Verdict == review.ProductionReady || op.Verdict == review.ProductionReady {
				t.Fatalf("production ready without %s", path)
			}
			if !slices.Contains(op.Missing, path) {
				t.Fatalf("missing %v, want %s named", op.Missing, path)
			}
			want := review.CodeMissingInput
			switch path {
			case "deadlines.max_timeout":
				want = review.CodeNoMaxTimeout
			case "flow_control.queue_capacity":
				want = review.CodeQueueCapacityUnspecified
			}
			if !slices.Contains(op.Codes(), want) {
				t.Fatalf("codes %v, want %s", op.Codes(), want)
			}
		})
	}
}

// Every test a fixture names exists in this repository, in the file named.
func TestFixtureTestsExist(t *testing.T) {
	refs := review.AllFixtureTests()
	if len(refs) == 0 {
		t.Fatal("no fixture tests")
	}
	for _, ref := range refs {
		data, err := os.ReadFile(filepath.Join("..", ref.File))
		if err != nil {
			t.Errorf("%s: %v", ref.Name, err)
			continue
		}
		if !strings.Contains(string(data), "func "+ref.Name+"(") {
			t.Errorf("%s has no func %s(", ref.File, ref.Name)
		}
	}
	r := review.Review(parseFile(t, "../examples/review/reserve_inventory.yaml"))
	if n := len(r.Operations[0].Fixtures); n != 12 {
		t.Fatalf("%d fixtures, want the 12 required", n)
	}
}

// Every section of the checklist is in the report, in both formats.
func TestReportSections(t *testing.T) {
	r := review.Review(parseFile(t, "../examples/review/reserve_inventory.yaml"))
	op := r.Operations[0]
	if len(op.Cancellation) == 0 || len(op.Races) != 4 || len(op.Deadlines.Rules) == 0 || op.Retry.Class != review.ClassConditional ||
		len(op.Boundary.Inside) != 4 || len(op.FlowControl) == 0 || len(op.Reconnect) == 0 || len(op.Tasks.Steps) == 0 {
		t.Fatalf("incomplete report: %+v", op)
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"### Cancellation wire", "### Race table", "### Deadline policy", "### Retry class: CONDITIONAL",
		"### Idempotency boundary", "### Flow control", "### Reconnect plan", "### Durable Tasks", "### Required fixtures",
		"Streamable HTTP 2026-07-28", "never POSTs notifications/cancelled"} {
		if !strings.Contains(md.String(), h) {
			t.Errorf("the Markdown lacks %q", h)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"verdict":"production-ready"`, `"races"`, `"idempotencyBoundary"`, `"fixtures"`, `"missing":[]`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("the JSON lacks %s", k)
		}
	}
}

func TestRetryClasses(t *testing.T) {
	for _, tc := range []struct {
		file, class, withoutKey string
	}{
		{"echo", review.ClassSafe, ""},
		{"reserve_inventory", review.ClassConditional, ""},
		{"charge_account", review.ClassConditional, review.ClassUnsafe},
		{"set_stock", review.ClassConditional, ""},
	} {
		op := review.Review(parseFile(t, "../examples/review/"+tc.file+".yaml")).Operations[0]
		if op.Retry.Class != tc.class || op.Retry.WithoutKey != tc.withoutKey {
			t.Errorf("%s: %s/%s, want %s/%s", tc.file, op.Retry.Class, op.Retry.WithoutKey, tc.class, tc.withoutKey)
		}
	}
	// A mutation without a key is UNSAFE, and honestly so: not refused.
	p, err := review.Parse("x.yaml", []byte(strings.Replace(strings.Replace(full, "key: required", "key: none", 1), "policy: same_key_same_args", "policy: never", 1)))
	if err != nil {
		t.Fatal(err)
	}
	op := review.Review(p).Operations[0]
	if op.Retry.Class != review.ClassUnsafe || op.Verdict != review.ProductionReady {
		t.Fatalf("keyless mutation: %s, %s %v", op.Retry.Class, op.Verdict, op.Codes())
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown.yaml", "operations:\n  - name: a\n    transprot: stdio\n", "line 3: field transprot not found"},
		{"enum.yaml", "operations:\n  - name: a\n    transport: grpc\n", `transport: "grpc" is not one of stdio, streamable-http`},
		{"dur.yaml", "operations:\n  - name: a\n    deadlines: {idle_timeout: 30}\n", `line 3: "30" has no unit`},
		{"dur2.yaml", "operations:\n  - name: a\n    deadlines: {max_timeout: soon}\n", `"soon" is not a duration`},
		{"cap.yaml", "operations:\n  - name: a\n    flow_control: {queue_capacity: -1}\n", `"-1" is not a capacity`},
		{"empty.yaml", "", "empty"},
		{"none.yaml", "operations: []\n", "no operations"},
		{"dup.yaml", "operations:\n  - name: a\n  - name: a\n", "listed twice"},
		{"noname.yaml", "operations:\n  - transport: stdio\n", "name is required"},
		{"p.json", "{\"operations\": [{\"name\": \"a\",\n \"bogus\": 1}]}", `line 2: json: unknown field "bogus"`},
		{"p.json", `{"operations": [{"name": "a", "deadlines": {"idle_timeout": 30}}]}`, "a duration must be a string"},
	} {
		_, err := review.Parse(tc.name, []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// JSON by sniffing, without an extension.
	p, err := review.Parse("policy", []byte(`{"operations": [{"name": "a", "transport": "stdio", "flow_control": {"queue_capacity": 8}}]}`))
	if err != nil || p.Operations[0].FlowControl.QueueCapacity.N != 8 {
		t.Fatalf("sniffed JSON: %+v, %v", p, err)
	}
}

// From what an mcprel server advertises, a keyed tool's whole policy is
// known; of a tool from another server, only the protocol's facts, and its
// annotations are never read as semantics.
func TestFromTools(t *testing.T) {
	mcprelMeta := mcp.Meta{
		mcp.MetaRetryClass: "conditional", mcp.MetaIdleTimeoutMs: float64(30000), mcp.MetaMaxTimeoutMs: float64(60000),
		mcp.MetaKeyMode: "required", mcp.MetaLedgerStore: "postgres", mcp.MetaLedgerShared: true,
		mcp.MetaLedgerTransaction: []any{"key_claim", "argument_fingerprint", "effect_record", "result"},
		mcp.MetaEffect:            "in_transaction", mcp.MetaReturnedRecords: "defensive-copy",
		mcp.MetaProgressIntervalMs: float64(50), mcp.MetaQueueCapacity: float64(1024), mcp.MetaKeepAliveMs: float64(15000),
	}
	readOnly := true
	// A tool whose effect is another service's, delivered through the
	// transactional outbox: the intent commits with the key, inside the
	// boundary.
	outboxMeta := maps.Clone(mcprelMeta)
	outboxMeta[mcp.MetaEffect] = "outbox"
	p := review.FromTools(review.Server{Transport: "streamable-http", Loopback: true, Tools: []mcp.Tool{
		{Name: "reserve", Meta: mcprelMeta},
		{Name: "foreign", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &readOnly, IdempotentHint: &readOnly}},
		{Name: "send_payout", Meta: outboxMeta},
	}})
	r := review.Review(p)
	if op := r.Operations[0]; op.Verdict != review.ProductionReady || op.Retry.Class != review.ClassConditional {
		t.Fatalf("mcprel tool: %s %v missing %v", op.Verdict, op.Codes(), op.Missing)
	}
	if op := r.Operations[2]; op.Verdict != review.ProductionReady || op.Retry.Class != review.ClassConditional {
		t.Fatalf("a tool with an outbox: %s %v missing %v", op.Verdict, op.Codes(), op.Missing)
	}
	op := r.Operations[1]
	if op.Verdict == review.ProductionReady || op.Retry.Class != review.ClassUnsafe {
		t.Fatalf("foreign tool: %s %s", op.Verdict, op.Retry.Class)
	}
	for _, m := range []string{"semantics.kind", "deadlines.max_timeout", "flow_control.queue_capacity", "retry.policy"} {
		if !slices.Contains(op.Missing, m) {
			t.Errorf("foreign tool: %s not asked for (missing %v)", m, op.Missing)
		}
	}
	if slices.Contains(op.Missing, "tasks.support") || slices.Contains(op.Missing, "reconnect.jitter") {
		t.Errorf("foreign tool: asked for what is known: %v", op.Missing)
	}
}
