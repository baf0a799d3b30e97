package goservers

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcprel/mcprel/review"
)

// "mcprel review --stdio" against the official Go SDK's server and
// mcp-go's: what they advertise says nothing of a tool's semantics, its
// deadlines or its queue, so the review asks for those by name, classes
// every tool UNSAFE (annotations are not semantics) and refuses: exit 20.
// What can be known — the transport's cancellation wire — is reviewed.
func TestReviewOfGoPeers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	mcprel := filepath.Join(t.TempDir(), "mcprel")
	if out, err := exec.CommandContext(ctx, "go", "build", "-C", "../../..", "-o", mcprel, "./cmd/mcprel").CombinedOutput(); err != nil {
		t.Fatalf("go build mcprel: %v\n%s", err, out)
	}
	for _, dir := range []string{"gosdk-server", "mcpgo-server"} {
		t.Run(dir, func(t *testing.T) {
			peer := build(t, dir)
			cmd := exec.CommandContext(ctx, mcprel, "review", "--json", "--stdio", peer)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			cmd.Run()
			var r review.Report
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("review: %v\n%s\n%s", err, out.String(), errb.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 20 || r.Verdict != review.Refused || len(r.Operations) == 0 {
				t.Fatalf("exit %d, verdict %s, %d operations; stderr:\n%s", code, r.Verdict, len(r.Operations), errb.String())
			}
			for _, op := range r.Operations {
				for _, m := range []string{"semantics.kind", "deadlines.max_timeout", "retry.policy", "flow_control.queue_capacity"} {
					if !slices.Contains(op.Missing, m) {
						t.Errorf("%s: %s not asked for; missing %v", op.Name, m, op.Missing)
					}
				}
				if op.Retry.Class != review.ClassUnsafe || op.Transport != "stdio" || len(op.Cancellation) == 0 {
					t.Errorf("%s: class %s, transport %q, %d cancellation wires", op.Name, op.Retry.Class, op.Transport, len(op.Cancellation))
				}
			}
		})
	}
}
