package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/probe"
)

// runProbe runs "mcprel probe" with args from the repository's root and
// returns its exit status and output.
func runProbe(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"probe"}, args...)...)
	cmd.Dir = "../.."
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// mcprel serve passes every fixture that applies to it, over stdio and
// over Streamable HTTP, in both eras, with the example policy that lets
// the probe call its demo and lab tools.
func TestProbeServePassesEveryFixture(t *testing.T) {
	dir := t.TempDir()
	stdio := binary + " serve --stdio --lab --log-level warn --db " + filepath.Join(dir, "stdio.db")
	url, _ := startHTTP(t, nil, "--lab", "--log-level", "warn")
	for _, target := range [][]string{{"--stdio", stdio}, {"--url", url}} {
		t.Run(target[0][2:], func(t *testing.T) {
			code, out, errs := runProbe(t, append(target, "--policy", "examples/probe/serve.yaml", "--json")...)
			var rep probe.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("exit %d, %v: %s\n%s", code, err, out, errs)
			}
			for _, r := range rep.Results {
				if r.Status == probe.Failed {
					t.Errorf("fixture %d %s (%s) failed: %s", r.Fixture, r.Name, r.Era, r.Detail)
				}
			}
			if code != 0 || len(rep.Eras) != 2 {
				t.Fatalf("exit %d, eras %v", code, rep.Eras)
			}
			// Every fixture that can apply to the transport did.
			want := 19
			if target[0] == "--url" {
				want = 22
			}
			if n := rep.Count(probe.Passed); n != want {
				for _, r := range rep.Results {
					t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
				}
				t.Fatalf("%d fixtures passed, want %d", n, want)
			}
		})
	}
}

// The probe's exit status says what happened: 2 for a mistake in the
// command line, 1 for a server it could not reach, 21 when a fixture
// failed (here the progress fixture, given a tool that holds until it is
// released and so does not answer within the probe's wait), whose frames
// the JUnit report carries.
func TestProbeExitStatuses(t *testing.T) {
	if code, _, errs := runProbe(t); code != exitUsage || !strings.Contains(errs, "--stdio and --url") {
		t.Errorf("no target: exit %d, %s", code, errs)
	}
	if code, _, errs := runProbe(t, "--url", "http://127.0.0.1:1/mcp", "--only", "99"); code != exitUsage || !strings.Contains(errs, "--only") {
		t.Errorf("a fixture that does not exist: exit %d, %s", code, errs)
	}
	if code, _, errs := runProbe(t, "--stdio", "/nonexistent/mcp-server"); code != exitFailure || !strings.Contains(errs, "could not be reached") {
		t.Errorf("an unreachable server: exit %d, %s", code, errs)
	}
	dir := t.TempDir()
	policy := filepath.Join(dir, "hold.yaml")
	os.WriteFile(policy, []byte("operations:\n  - name: lab_hold\n    semantics: {kind: read-only}\n    progress: {emits: true}\n    probe: {call: true, arguments: {gate: probe}}\n"), 0o644)
	junit := filepath.Join(dir, "probe.xml")
	code, out, errs := runProbe(t, "--stdio", binary+" serve --stdio --lab --log-level warn --db "+filepath.Join(dir, "s.db"),
		"--policy", policy, "--only", "5", "--deadline-wait", "300ms", "--junit", junit)
	if code != exitProbeFailed || !strings.Contains(out, `"lab_hold" did not answer within 300ms`) {
		t.Fatalf("a failing fixture: exit %d\n%s\n%s", code, out, errs)
	}
	xml, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(xml), `lab_hold&#34; did not answer within 300ms`) || !strings.Contains(string(xml), `&#34;method&#34;:&#34;tools/call&#34;`) {
		t.Fatalf("the JUnit report: %v\n%s", err, xml)
	}
}
