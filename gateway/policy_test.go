package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
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
    semantics: {kind: mutation, external_effect: false}
    deadlines: {idle_timeout: 3s, max_timeout: 11s}
`))
	must(t, err)
	p, err := gateway.PolicyFromReview(rp)
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
		if _, err := gateway.PolicyFromReview(rp); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error naming %s", bad.yaml, err, bad.want)
		}
	}
}
