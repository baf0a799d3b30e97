package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// Mistakes on the gateway's command line are named as typed, exit 2, and
// never echo a credential.
func TestGatewayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	twoLines := write("two-lines", "secret-one\nsecret-two\n")
	hostHeader := write("host-header", "Host: evil.example\n")
	badHeader := write("bad-header", "X-Api-Key secret-value\n")
	envFile := write("env", "API_KEY=secret-env\n")
	maxNone := write("policy.yaml", "operations:\n  - name: echo\n    deadlines:\n      idle_timeout: 5s\n      max_timeout: none\n")
	big := write("big", strings.Repeat("x", maxSecretFile+1))
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{}, nil, "name at least one upstream"},
		{[]string{"--upstream", "nameonly"}, nil, `--upstream wants NAME=COMMAND or NAME=URL, not "nameonly"`},
		{[]string{"--upstream", "my_server=cat"}, nil, `upstream name "my_server"`},
		{[]string{"--upstream", "a=cat", "--upstream", "a=cat"}, nil, `two upstreams are named "a"`},
		{[]string{"--upstream", `a=node "server.js`}, nil, "--upstream a: unterminated quote"},
		{[]string{"--upstream", "a=http://user:pw@example.com/mcp"}, nil, "not in the URL"},
		{[]string{"--upstream", "a=sse:ftp://example.com"}, nil, "is not an http:// or https:// URL"},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-token-env", "b=TOKEN"}, nil, `names upstream "b", which no --upstream defines`},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-token-env", "a=MCPREL_TEST_UNSET_TOKEN"}, nil, "environment variable MCPREL_TEST_UNSET_TOKEN is empty or unset"},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-token-file", "a=" + twoLines}, nil, "must hold one token on one line"},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-token-file", "a=" + big}, nil, "is larger than 64 KiB"},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-headers-file", "a=" + hostHeader}, nil, "sets Host, which the gateway's client sets itself"},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-headers-file", "a=" + badHeader}, nil, `line 1 is not "Header: value"`},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-env-file", "a=" + envFile}, nil, "is an HTTP server"},
		{[]string{"--upstream", "a=cat", "--upstream-token-env", "a=HOME"}, nil, "is a stdio server"},
		{[]string{"--upstream", "a=cat", "--policy", maxNone}, nil, `max_timeout "none"`},
		{[]string{"--upstream", "a=cat", "--policy", filepath.Join(dir, "missing.yaml")}, nil, "missing.yaml"},
		{[]string{"--upstream", "a=cat", "--upstream-per-tenant", "b"}, nil, `--upstream-per-tenant names upstream "b"`},
		{[]string{"--upstream", "a=http://127.0.0.1:1/mcp", "--upstream-per-tenant", "a"}, nil, "has a session per tenant already"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=speed=3"}, nil, `unknown limit "speed"`},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=concurrent=-1"}, nil, "concurrent=-1: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=rate=NaN"}, nil, "rate=NaN"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "b=concurrent=1"}, nil, `--upstream-limits names upstream "b"`},
		{[]string{"--upstream", "a=cat", "--max-upstream-sessions", "0"}, nil, "--max-upstream-sessions must be at least 1"},
		{[]string{"--upstream", "a=cat", "--input-wait", "0s"}, nil, "--input-wait must be positive"},
		{[]string{"--upstream", "a=cat", "--max-concurrent", "0"}, nil, "gateway: --max-concurrent must be at least 1"},
		{[]string{"--upstream", "a=cat", "--stdio", "--http", "127.0.0.1:0"}, nil, "gateway: choose one of --stdio and --http"},
	} {
		cmd := exec.Command(binary, append([]string{"gateway"}, tc.args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), tc.env...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("gateway %q: exit %d, %s\nwant exit %d saying %q", tc.args, code, out, exitUsage, tc.want)
		}
		for _, secret := range []string{"secret-one", "secret-value", "secret-env"} {
			if strings.Contains(string(out), secret) {
				t.Errorf("gateway %q printed a credential: %s", tc.args, out)
			}
		}
	}
}

// The gateway over HTTP in front of "mcprel serve --http" that requires
// its own token: the upstream's token (from a file) reaches the upstream,
// the downstream's token (a different one) the gateway only; a call with
// progress and a cancellation go through; the gateway's metrics count it.
func TestGatewayHTTPInFrontOfServe(t *testing.T) {
	upURL, _ := startHTTP(t, nil, "--auth-token", "upstream-token")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("upstream-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gwURL, _, _ := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--auth-token", "downstream-token",
		"--upstream", "demo="+upURL, "--upstream-token-file", "demo="+tokenFile,
		"--db", filepath.Join(t.TempDir(), "gw.db"))
	c, err := client.DialHTTP(t.Context(), gwURL, &client.Options{Header: map[string][]string{"Authorization": {"Bearer downstream-token"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.CallTool(t.Context(), "echo", map[string]any{"text": "through the gateway"}, nil)
	if err != nil || res.IsError {
		t.Fatalf("echo through the gateway: %v %+v", err, res)
	}
	var reports []float64
	res, err = c.CallTool(t.Context(), "slow_count", map[string]any{"steps": 3, "intervalMs": 1}, &client.CallOptions{
		OnProgress: func(p client.Progress) { reports = append(reports, p.Progress) }})
	if err != nil || res.IsError || len(reports) == 0 {
		t.Fatalf("slow_count through the gateway: %v %+v, progress %v", err, res, reports)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = c.CallTool(ctx, "slow_count", map[string]any{"steps": 1000, "intervalMs": 1000}, nil)
	var ce *client.CancelledError
	if !errors.As(err, &ce) {
		t.Fatalf("a cancelled call through the gateway ended with %v", err)
	}
	if c.Era() != mcp.Modern {
		t.Fatalf("the gateway spoke %v", c.Era())
	}
}
