// Package inspector_test runs the interop scenario with the MCP Inspector
// CLI (@modelcontextprotocol/inspector 2.12.0, which validates results
// against each tool's outputSchema) against `mcprel serve` over stdio and
// Streamable HTTP, in both eras, directly and through `mcprel gateway`. Each step is one run of the CLI, as a user
// would type it; the ledger's SQLite file carries the state from one to the
// next. The CLI has no way to ask for progress or to cancel a call: the
// SDK and Go client suites cover those.
//
// It needs `npm ci` here (which brings Node 22 with the Inspector); without
// it the test skips, unless MCPREL_REQUIRE_INTEROP=1 makes that a failure.
package inspector_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/scenario"
)

const (
	node      = "node_modules/.bin/node"
	inspector = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
)

func TestInspectorCLI(t *testing.T) {
	if _, err := os.Stat(inspector); err != nil {
		why := "internal/interop/inspector/node_modules is missing: run `npm ci` in internal/interop/inspector"
		if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
			t.Fatal(why + " (MCPREL_REQUIRE_INTEROP=1)")
		}
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "mcprel")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../../cmd/mcprel").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, era := range []string{"legacy", "modern"} {
		t.Run("stdio-"+era, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "ledger.db")
			runInspector(t, ctx, era, []string{bin, "serve", "--stdio", "--db", db})
		})
		t.Run("http-"+era, func(t *testing.T) {
			url := startHTTP(t, ctx, bin)
			runInspector(t, ctx, era, []string{"--server-url", url, "--transport", "http"})
		})
		// The same through mcprel gateway in front of mcprel serve: a
		// gateway started by each CLI run over stdio (2026-07-28), one
		// gateway over HTTP (2025-11-25). (The other pairs of era and
		// transport cost a minute and are the Go and TypeScript clients'.)
		t.Run("gateway-stdio-"+era, func(t *testing.T) {
			if era != "modern" {
				t.Skip("run in the 2026-07-28 era only")
			}
			up := startHTTP(t, ctx, bin, "serve")
			// No --log-level here: the Inspector takes it for its own flag.
			runInspector(t, ctx, era, []string{bin, "gateway", "--stdio", "--db", filepath.Join(t.TempDir(), "gateway.db"), "--upstream", "demo=" + up})
		})
		t.Run("gateway-http-"+era, func(t *testing.T) {
			if era != "legacy" {
				t.Skip("run in the 2025-11-25 era only")
			}
			up := startHTTP(t, ctx, bin, "serve")
			url := startHTTP(t, ctx, bin, "gateway", "--upstream", "demo="+up)
			runInspector(t, ctx, era, []string{"--server-url", url, "--transport", "http"})
		})
	}
}

// runInspector runs the scenario's steps, one CLI run each, against target
// (a server command line, or --server-url arguments).
func runInspector(t *testing.T, ctx context.Context, era string, target []string) {
	t.Helper()
	cli := func(args ...string) (result json.RawMessage, stderr string) {
		t.Helper()
		all := append([]string{inspector, "--cli", "--format", "json", "-q", "--protocol-era", era}, target...)
		cmd := exec.CommandContext(ctx, node, append(all, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cmd.Run() // a tool failure exits non-zero with the result on stdout
		var env struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(out.Bytes(), &env); err != nil || env.Result == nil {
			return nil, fmt.Sprintf("no result (exit %d): %s %s", cmd.ProcessState.ExitCode(), out.Bytes(), errOut.Bytes())
		}
		return env.Result, ""
	}

	s := scenario.Load()
	list, problem := cli("--method", "tools/list")
	if problem != "" {
		t.Fatalf("tools/list: %s", problem)
	}
	var tools struct{ Tools []struct{ Name string } }
	json.Unmarshal(list, &tools)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, s.Tools) {
		t.Errorf("tools/list = %v, want %v", names, s.Tools)
	}

	run := &scenario.Run{}
	for _, step := range append(s.Steps, s.Progress) { // the progress step, as a plain call
		args, _ := json.Marshal(step.Args)
		cmd := []string{"--method", "tools/call", "--tool-name", step.Tool, "--tool-args-json", string(args)}
		for k, v := range step.Meta {
			cmd = append(cmd, "--tool-metadata", fmt.Sprintf("%s=%v", k, v))
		}
		res, problem := cli(cmd...)
		if problem == "" {
			problem = run.Judge(step, res)
		}
		if problem != "" {
			t.Errorf("%s: %s", step.Name, problem)
		}
	}
}

// startHTTP starts `mcprel serve --http` (or the command given, with
// its arguments: a gateway) and returns its endpoint URL.
func startHTTP(t *testing.T, ctx context.Context, bin string, command ...string) string {
	t.Helper()
	if len(command) == 0 {
		command = []string{"serve"}
	}
	args := append(slices.Clone(command), "--http", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "ledger.db"), "--log-level", "warn")
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "http://") {
		t.Fatalf("mcprel serve --http printed %q", lines.Text())
	}
	url := lines.Text()
	go func() {
		for lines.Scan() {
		}
	}()
	return url
}
