package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/review"
)

// runReview runs "mcprel review" in the test's process.
func runReview(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"review"}, args...), strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

// The exit status says whether every operation is production ready (0),
// one is refused (20), the policy is invalid (1) or the command line is
// wrong (2).
func TestReviewExitStatuses(t *testing.T) {
	good, _ := filepath.Glob("../../examples/review/*.yaml")
	broken, _ := filepath.Glob("../../examples/review/broken/*.yaml")
	if len(good) == 0 || len(broken) == 0 {
		t.Fatal("no example policies")
	}
	for _, f := range good {
		if out, errs, code := runReview(f); code != 0 || !strings.Contains(out, "Verdict: **production ready**") {
			t.Errorf("%s: exit %d, %s\n%s", f, code, errs, out)
		}
	}
	for _, f := range broken {
		if out, _, code := runReview(f, "--json"); code != exitRefused || !json.Valid([]byte(out)) || !strings.Contains(out, `"verdict": "refused"`) {
			t.Errorf("%s: exit %d, want %d with a JSON report", f, code, exitRefused)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("operations:\n  - name: a\n    idle_timeout: 5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := runReview(bad); code != exitFailure || !strings.Contains(errs, "line 3: field idle_timeout not found") {
		t.Errorf("invalid policy: exit %d, %q", code, errs)
	}
	for _, args := range [][]string{
		{},
		{good[0], good[1]},
		{good[0], "--stdio", "mcprel serve --stdio"},
		{"--from-server", "http://127.0.0.1:1/mcp", "--stdio", "x"},
		{good[0], "--token", "t"},
		{"--bogus"},
	} {
		if _, errs, code := runReview(args...); code != exitUsage {
			t.Errorf("review %q: exit %d (%s), want %d", args, code, errs, exitUsage)
		}
	}
	if _, _, code := runReview(filepath.Join(t.TempDir(), "absent.yaml")); code != exitFailure {
		t.Errorf("absent file: exit %d, want %d", code, exitFailure)
	}
}

// reviewMcprel reviews a running mcprel server's tools and checks that
// every demo tool is production ready from what the server advertises.
func reviewMcprel(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"review", "--json"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	var r review.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("review: %v\n%s\n%s", err, out.String(), errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || r.Verdict != review.ProductionReady {
		for _, op := range r.Operations {
			t.Logf("%s: %s %v missing %v", op.Name, op.Verdict, op.Codes(), op.Missing)
		}
		t.Fatalf("exit %d, verdict %s", code, r.Verdict)
	}
	classes := map[string]string{}
	for _, op := range r.Operations {
		classes[op.Name] = op.Retry.Class + "/" + op.Retry.WithoutKey
	}
	for name, want := range map[string]string{
		"echo": "SAFE/", "slow_count": "SAFE/", "get_inventory": "SAFE/", "lookup_operation": "SAFE/", "generate_report": "SAFE/",
		"reserve_inventory": "CONDITIONAL/", "set_stock": "CONDITIONAL/", "charge_account": "CONDITIONAL/UNSAFE",
	} {
		if classes[name] != want {
			t.Errorf("%s: class %q, want %q", name, classes[name], want)
		}
	}
}

// "mcprel review --stdio" and "--from-server" build every demo tool's
// policy from what mcprel serve advertises, and each passes.
func TestReviewMcprelServe(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		reviewMcprel(t, "--stdio", serveCommand(t)+" --log-level warn")
	})
	t.Run("http", func(t *testing.T) {
		url, _ := startHTTP(t, nil)
		reviewMcprel(t, "--from-server", url)
	})
}
