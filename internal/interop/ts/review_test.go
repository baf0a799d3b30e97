package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/mcprel/mcprel/review"
)

// "mcprel review --stdio" against a server that is not mcprel (the
// TypeScript SDK's, ts-server.mjs): it reviews what can be known — the
// transport's cancellation wire, the reconnect plan of mcprel's client,
// no task support (the SDK's tools declare none) — and asks for the rest
// by name. The tools' annotations are never taken for semantics, so no
// tool is production ready and the command exits 20.
func TestReviewOfANonMcprelServer(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	cmd := exec.CommandContext(ctx, bin, "review", "--json", "--stdio", "node ts-server.mjs")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	var r review.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("review: %v\n%s\n%s", err, out.String(), errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 20 || r.Verdict != review.Refused || len(r.Operations) != 4 {
		t.Fatalf("exit %d, verdict %s, %d operations; stderr:\n%s", code, r.Verdict, len(r.Operations), errb.String())
	}
	for _, op := range r.Operations {
		for _, m := range []string{"semantics.kind", "deadlines.max_timeout", "retry.policy", "flow_control.queue_capacity", "idempotency.key"} {
			if !slices.Contains(op.Missing, m) {
				t.Errorf("%s: %s not asked for; missing %v", op.Name, m, op.Missing)
			}
		}
		if slices.Contains(op.Missing, "transport") || slices.Contains(op.Missing, "tasks.support") {
			t.Errorf("%s: asks for what is known: %v", op.Name, op.Missing)
		}
		if op.Retry.Class != review.ClassUnsafe || op.Transport != "stdio" || len(op.Cancellation) == 0 {
			t.Errorf("%s: class %s, transport %q", op.Name, op.Retry.Class, op.Transport)
		}
	}
}
