package gateway_test

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
)

// The gateway's policy comes from a policy in mcprel review's
// vocabulary: a tool the review classes safe is forwarded as safe with
// its deadlines; every other tool — one the policy does not name, one
// whose upstream annotates it read-only among them — is unsafe, with the
// unsafe defaults. The listing says so in each tool's _meta.
func TestPolicyFromReview(t *testing.T) {
	rp, err := review.Parse("policy.yaml", []byte(`
operations:
  - name: echo
    semantics: {kind: read-only, external_effect: false}
    deadlines: {idle_timeout: 2s, max_timeout: 7s}
  - name: progress
    semantics: {kind: mutation}
    idempotency: {key: none}
    deadlines: {idle_timeout: 3s, max_timeout: 11s}
`))
	must(t, err)
	p, err := gateway.PolicyFromReview(rp, gateway.DefaultFacts)
	must(t, err)
	u := newUpstream(t)
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: u.url}}, Policy: p}, nil)
	tools, err := f.dial(t, 0, nil).ListTools(context.Background())
	must(t, err)
	want := map[string][3]any{ // class, idle ms, max ms
		"echo":     {mcp.RetryClassSafe, 2000.0, 7000.0},
		"progress": {mcp.RetryClassUnsafe, 3000.0, 11000.0},
		// hang is not named; ask is not either, though the upstream's
		// annotations could say anything: unsafe.
		"hang": {mcp.RetryClassUnsafe, float64(gateway.DefaultUnsafeDeadlines.Idle.Milliseconds()), float64(gateway.DefaultUnsafeDeadlines.Max.Milliseconds())},
	}
	for _, tl := range tools {
		w, ok := want[tl.Name]
		if !ok {
			continue
		}
		got := [3]any{tl.Meta[mcp.MetaRetryClass], tl.Meta[mcp.MetaIdleTimeoutMs], tl.Meta[mcp.MetaMaxTimeoutMs]}
		if got != w {
			t.Errorf("%s: class, idle, max = %v, want %v", tl.Name, got, w)
		}
		delete(want, tl.Name)
	}
	if len(want) > 0 {
		t.Fatalf("tools not listed: %v", want)
	}

	// What the gateway cannot enforce is refused, naming the tool.
	for _, bad := range []struct{ yaml, want string }{
		{"operations:\n  - name: x\n    deadlines: {max_timeout: none}\n", `"x"`},
		{"operations:\n  - name: x\n    deadlines: {idle_timeout: none}\n", "idle clock"},
	} {
		rp, err := review.Parse("p.yaml", []byte(bad.yaml))
		must(t, err)
		if _, err := gateway.PolicyFromReview(rp, gateway.DefaultFacts); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error naming %s", bad.yaml, err, bad.want)
		}
	}
}

// A policy says what only its operator knows of a tool, and the gateway
// fills in the rest: a keyed mutation that names its key, its guard and
// its read is CONDITIONAL as it stands, its key claimed before the call
// is forwarded. What the gateway would forward as less than the policy
// says of it is refused at start-up, naming the inputs missing or at
// odds — never run as an unsafe tool without a word.
func TestPolicyNeverWeakensWhatItNames(t *testing.T) {
	rp, err := review.Parse("policy.yaml", []byte(`
operations:
  - name: send
    semantics: {kind: mutation}
    retry: {reconcile_with: outbox}
    idempotency: {key: required, key_argument: requestId, external_effect_guard: at_most_once}
`))
	must(t, err)
	p, err := gateway.PolicyFromReview(rp, gateway.DefaultFacts)
	must(t, err)
	want := idempotency.Policy{Key: idempotency.KeyRequired, External: true, AtMostOnce: true, KeyArgument: "requestId", ReconcileWith: "outbox"}
	if tp := p.Tools["send"]; tp.Server.Retry != mcp.RetryConditional || tp.Keyed == nil || !reflect.DeepEqual(*tp.Keyed, want) {
		t.Fatalf("the keyed mutation = %+v (keyed %+v), want conditional, keyed %+v", tp, tp.Keyed, want)
	}
	if rp.Operations[0].Idempotency.Store.Kind != nil {
		t.Fatal("PolicyFromReview changed the policy it was given")
	}
	m := newMailer(t)
	f := newFront(t, gateway.Options{Upstreams: []gateway.Upstream{{Name: "mail", URL: m.url}},
		Ledger: ledgertest.Open(t, storetest.SQLite(t), nil, nil, ""), Policy: p}, nil)
	c := f.dial(t, mcp.Modern, nil)
	send(t, c, "send", "k-1", "ops")
	if again := send(t, c, "send", "k-1", "ops"); again.Meta[mcp.MetaReplayed] != true || m.sent.Load() != 1 {
		t.Fatalf("a retry with the key = %+v, %d sent; want it replayed, sent once", again, m.sent.Load())
	}
	if f := failureOf(t, send(t, c, "send", "", "ops")); f.Code != mcp.FailureKeyRequired || m.sent.Load() != 1 {
		t.Fatalf("a call without the required key = %+v, %d sent", f, m.sent.Load())
	}

	for _, bad := range []struct{ name, yaml, want string }{
		{"no kind", "  - name: x\n    deadlines: {idle_timeout: 1s, max_timeout: 2s}\n", "semantics.kind"},
		{"read with an effect", "  - name: x\n    semantics: {kind: read-only, external_effect: true}\n",
			`calls it read-only, but the review classes it UNSAFE, not SAFE`},
		{"key unsaid", "  - name: x\n    semantics: {kind: mutation}\n", "idempotency.key: required, optional or none"},
		{"no guard", "  - name: x\n    semantics: {kind: mutation}\n    idempotency: {key: optional}\n", "external_effect_guard: upstream_key"},
		{"guard without key", "  - name: x\n    semantics: {kind: mutation}\n    idempotency: {key: none, external_effect_guard: upstream_key}\n", "say which it is"},
		{"version", "  - name: x\n    semantics: {kind: mutation}\n    idempotency: {key: version}\n", `"version"`},
		{"effect in the gateway", "  - name: x\n    semantics: {kind: mutation, external_effect: false}\n    idempotency: {key: required}\n", "external_effect is false"},
		{"a store not run", "  - name: x\n    semantics: {kind: mutation}\n    idempotency: {key: required, external_effect_guard: at_most_once, store: {kind: process-memory}}\n",
			"idempotency.store.kind is process-memory, where the gateway's is sqlite"},
		{"a transaction not held", "  - name: x\n    semantics: {kind: mutation}\n    idempotency: {key: required, external_effect_guard: at_most_once, transaction: {result: false}}\n",
			"idempotency.transaction.result is false, where the gateway's is true"},
		{"read with a key", "  - name: x\n    semantics: {kind: read-only}\n    idempotency: {key: required, key_argument: requestId, external_effect_guard: at_most_once}\n",
			"calls it read-only, but gives it an idempotency key"},
		{"read with a key argument", "  - name: x\n    semantics: {kind: read-only}\n    idempotency: {key_argument: requestId}\n", "calls it read-only, but gives it an idempotency key"},
		{"read with a guard", "  - name: x\n    semantics: {kind: read-only}\n    idempotency: {key: none, external_effect_guard: upstream_key}\n", "calls it read-only, but gives it an idempotency key"},
		{"unbounded queue", "  - name: x\n    semantics: {kind: read-only}\n    flow_control: {queue_capacity: unbounded}\n", "flow_control.queue_capacity is unbounded"},
	} {
		rp, err := review.Parse("p.yaml", []byte("operations:\n"+bad.yaml))
		must(t, err)
		if _, err := gateway.PolicyFromReview(rp, gateway.DefaultFacts); err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: %v, want an error naming x and saying %s", bad.name, err, bad.want)
		}
	}
}

// The example policy, reviewed as the gateway runs it: a mutation
// claimed at most once is CONDITIONAL (a retry with its key never runs it
// twice) and still not production ready (an answer lost leaves its
// outcome unknown); one whose upstream enforces the key passes; a keyless
// one is UNSAFE; the read is SAFE. Without the gateway's facts the review
// asks for them.
func TestExamplePolicyAsTheGatewayRunsIt(t *testing.T) {
	want := map[string]struct {
		class   string
		verdict string
		codes   []review.Code
	}{
		"send_email":    {review.ClassConditional, review.Refused, []review.Code{review.CodeEffectOutsideBoundary}},
		"send_receipt":  {review.ClassConditional, review.ProductionReady, nil},
		"purge_mailbox": {review.ClassUnsafe, review.ProductionReady, nil},
		"list_sent":     {review.ClassSafe, review.ProductionReady, nil},
	}
	mail, err := os.ReadFile("../examples/gateway/mail.yaml")
	must(t, err)
	for _, facts := range []gateway.Facts{gateway.DefaultFacts, {Transport: "stdio", Store: "postgres"}} {
		rp, err := review.Parse("mail.yaml", mail)
		must(t, err)
		if bare := review.Review(rp); bare.Verdict != review.Refused || len(bare.Operations[0].Missing) == 0 {
			t.Fatalf("the policy alone was not asked for the gateway's facts: %+v", bare.Operations[0].Missing)
		}
		must(t, facts.Complete(rp))
		r := review.Review(rp)
		if len(r.Operations) != len(want) {
			t.Fatalf("%d operations reviewed", len(r.Operations))
		}
		for _, op := range r.Operations {
			w := want[op.Name]
			if op.Retry.Class != w.class || op.Verdict != w.verdict || !slices.Equal(op.Codes(), w.codes) || len(op.Missing) != 0 {
				t.Errorf("%+v: %s: %s, %s %v, missing %v; want %s, %s %v", facts, op.Name, op.Retry.Class, op.Verdict, op.Codes(), op.Missing, w.class, w.verdict, w.codes)
			}
		}
	}
	// Without a read to reconcile with, the review says so.
	rp, err := review.Parse("x.yaml", []byte(strings.Replace(string(mail), "reconcile_with: list_sent", "", 1)))
	must(t, err)
	must(t, gateway.DefaultFacts.Complete(rp))
	if ws := review.Review(rp).Operations[0].Warnings; !slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(w, "at_most_once") }) {
		t.Errorf("no warning for at_most_once without reconcile_with: %v", ws)
	}
}

// A tool the gateway forwards is served with the policies its ToolPolicy
// is made of, as they are written: the ledger wraps a keyed tool with
// exactly its Keyed policy (its key mode, argument, fingerprint fields,
// at-most-once, read to reconcile with) — a task's with its key claiming
// the task's creation instead — and the server runs it with its Server
// policy, the class and clocks tools/list advertises. Were the gateway to
// restate a policy on the way (a default of its own, a field dropped),
// what is enforced would differ from what is written here.
func TestToolIsServedWithItsOwnPolicies(t *testing.T) {
	send := idempotency.Policy{Key: idempotency.KeyRequired, External: true, AtMostOnce: true,
		KeyArgument: "requestId", ReconcileWith: "outbox", Fields: []string{"to", "text"}, Preconditions: []string{"no_mailbox"}}
	sendKeyed := idempotency.Policy{Key: idempotency.KeyOptional, External: true, KeyArgument: "requestId"}
	policies := map[string]gateway.ToolPolicy{
		"send": {Server: server.Policy{IdleTimeout: 3 * time.Second, MaxTimeout: 9 * time.Second, MaxConcurrent: 4, Secret: []string{"text"}},
			Keyed: &send},
		"send_keyed": {Server: server.Policy{Retry: mcp.RetryConditional}, Keyed: &sendKeyed, Task: &taskserver.Policy{Required: true}},
		"outbox":     {Server: server.Policy{Retry: mcp.RetrySafe, IdleTimeout: 2 * time.Second, MaxTimeout: 4 * time.Second}, Task: &taskserver.Policy{}},
	}
	// What each tool is served with, as the outermost policy sees it once
	// the gateway's have wrapped it.
	type served struct {
		server  server.Policy
		keyed   idempotency.Policy
		isKeyed bool
		task    string
	}
	var mu sync.Mutex
	got := map[string]served{}
	capture := func(tl *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		s := served{server: tl.Policy}
		s.keyed, s.isKeyed = idempotency.PolicyOf(tl)
		if tl.Execution != nil {
			s.task = tl.Execution.TaskSupport
		}
		mu.Lock()
		got[tl.Name] = s
		mu.Unlock()
		return next, nil
	}
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	st, err := tasks.Open(context.Background(), l.DB(), nil)
	must(t, err)
	srv := mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond, Interceptors: []server.ToolInterceptor{capture}})
	ts, err := taskserver.New(srv, st, nil)
	must(t, err)
	t.Cleanup(func() { ts.Shutdown(context.Background()) })
	m := newMailer(t)
	f := newFrontOn(t, srv, gateway.Options{Upstreams: []gateway.Upstream{{Name: "mail", URL: m.url}},
		Ledger: l, Tasks: ts, Policy: &gateway.Policy{Tools: policies}}, nil)

	// The server's policy is the ToolPolicy's Server, with the class a
	// key makes conditional and the gateway's defaults for clocks left
	// zero; the gateway adds only its upstream's share (none here) and
	// Waits.
	wantServer := map[string]server.Policy{
		"send": {Retry: mcp.RetryConditional, IdleTimeout: 3 * time.Second, MaxTimeout: 9 * time.Second, MaxConcurrent: 4, Secret: []string{"text"}},
		"send_keyed": {Retry: mcp.RetryConditional,
			IdleTimeout: gateway.DefaultUnsafeDeadlines.Idle, MaxTimeout: gateway.DefaultUnsafeDeadlines.Max},
		"outbox": {Retry: mcp.RetrySafe, IdleTimeout: 2 * time.Second, MaxTimeout: 4 * time.Second},
	}
	// The ledger's is the ToolPolicy's Keyed; a task's key claims the
	// task's creation in the ledger's transaction, so that one is not
	// External.
	taskKeyed := sendKeyed
	taskKeyed.External, taskKeyed.AtMostOnce = false, false
	wantKeyed := map[string]*idempotency.Policy{"send": &send, "send_keyed": &taskKeyed}
	wantTask := map[string]string{"send_keyed": mcp.TaskRequired, "outbox": mcp.TaskOptional}

	mu.Lock()
	for name := range policies {
		s, ok := got[name]
		if !ok {
			t.Fatalf("%s was not served", name)
		}
		if !s.server.Waits {
			t.Errorf("%s: served as a tool that computes (Waits false), not one that waits on its upstream", name)
		}
		s.server.Waits = false
		if !reflect.DeepEqual(s.server, wantServer[name]) {
			t.Errorf("%s: served with server policy %+v, want %+v", name, s.server, wantServer[name])
		}
		if w := wantKeyed[name]; s.isKeyed != (w != nil) || w != nil && !reflect.DeepEqual(s.keyed, *w) {
			t.Errorf("%s: wrapped by the ledger with %+v (keyed %v), want %+v", name, s.keyed, s.isKeyed, w)
		}
		if s.task != wantTask[name] {
			t.Errorf("%s: task support %q, want %q", name, s.task, wantTask[name])
		}
	}
	mu.Unlock()

	// And tools/list says what runs.
	tools, err := f.dial(t, mcp.Legacy, nil).ListTools(context.Background())
	must(t, err)
	listed := 0
	for _, tl := range tools {
		w, ok := wantServer[tl.Name]
		if !ok {
			continue
		}
		listed++
		if tl.Meta[mcp.MetaRetryClass] != w.Retry.String() || tl.Meta[mcp.MetaIdleTimeoutMs] != float64(w.IdleTimeout.Milliseconds()) ||
			tl.Meta[mcp.MetaMaxTimeoutMs] != float64(w.MaxTimeout.Milliseconds()) {
			t.Errorf("%s: listed as %v, idle %v, max %v; want %+v", tl.Name, tl.Meta[mcp.MetaRetryClass], tl.Meta[mcp.MetaIdleTimeoutMs], tl.Meta[mcp.MetaMaxTimeoutMs], w)
		}
		wantMode := ""
		if k := wantKeyed[tl.Name]; k != nil {
			wantMode = k.Key.String()
		}
		if mode, _ := tl.Meta[mcp.MetaKeyMode].(string); mode != wantMode {
			t.Errorf("%s: listed key mode %q, want %q", tl.Name, mode, wantMode)
		}
	}
	if listed != len(wantServer) {
		t.Fatalf("%d of %d tools listed", listed, len(wantServer))
	}
	if tl := toolNamed(tools, "send"); tl == nil || tl.Meta[mcp.MetaEffect] != mcp.EffectAtMostOnce {
		t.Errorf("send: effect %v, want %s", tl, mcp.EffectAtMostOnce)
	}
}

func toolNamed(tools []mcp.Tool, name string) *mcp.Tool {
	for i := range tools {
		if tools[i].Name == name {
			return &tools[i]
		}
	}
	return nil
}

// A ToolPolicy the gateway cannot serve as written is refused by New,
// naming the tool and what is at odds.
func TestToolPolicyRefused(t *testing.T) {
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	st, err := tasks.Open(context.Background(), l.DB(), nil)
	must(t, err)
	srv := mcptest.NewServer(t, nil)
	ts, err := taskserver.New(srv, st, nil)
	must(t, err)
	t.Cleanup(func() { ts.Shutdown(context.Background()) })
	group, err := server.NewLimitGroup("g", server.Limits{})
	must(t, err)
	keyed := &idempotency.Policy{External: true, AtMostOnce: true}
	for _, bad := range []struct {
		name string
		tp   gateway.ToolPolicy
		want string
	}{
		{"not external", gateway.ToolPolicy{Keyed: &idempotency.Policy{}}, "Keyed.External"},
		{"conditional without a key", gateway.ToolPolicy{Server: server.Policy{Retry: mcp.RetryConditional}}, "give its ledger policy"},
		{"a keyed read", gateway.ToolPolicy{Server: server.Policy{Retry: mcp.RetrySafe}, Keyed: keyed}, "not conditional"},
		{"a keyed optional task", gateway.ToolPolicy{Keyed: keyed, Task: &taskserver.Policy{}}, "must require it"},
		{"resumable", gateway.ToolPolicy{Task: &taskserver.Policy{Resumable: true}}, "Task.Resumable"},
		{"a timeout class", gateway.ToolPolicy{Server: server.Policy{Timeout: server.TimeoutFast}}, "Server.Timeout"},
		{"a group", gateway.ToolPolicy{Server: server.Policy{Group: group}}, "Server.Group"},
		{"negative", gateway.ToolPolicy{Server: server.Policy{MaxTimeout: -1}}, "negative"},
	} {
		_, err := gateway.New(srv, &gateway.Options{Upstreams: []gateway.Upstream{{Name: "up", URL: "http://127.0.0.1:1"}},
			Ledger: l, Tasks: ts, Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"x": bad.tp}}})
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: %v, want an error naming x and saying %s", bad.name, err, bad.want)
		}
	}
}
