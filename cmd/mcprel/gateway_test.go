package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
// never echo a credential: not one in a URL, a file or the environment,
// whether the mistake is in the credential or in a flag after it.
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
	goodToken := write("token", "secret-file-token\n")
	hostHeader := write("host-header", "Host: evil.example\n")
	badHeader := write("bad-header", "X-Api-Key secret-value\n")
	envFile := write("env", "API_KEY=secret-env\n")
	badEnv := write("bad-env", "# a comment\nAPI_KEY=secret-env\nnot a line secret-line\n")
	spacedKey := write("spaced-key", "API KEY=secret-env\n")
	maxNone := write("policy.yaml", "operations:\n  - name: echo\n    deadlines:\n      idle_timeout: 5s\n      max_timeout: none\n")
	noGuard := write("no-guard.yaml", "operations:\n  - name: send\n    semantics: {kind: mutation}\n    idempotency: {key: required}\n")
	keyUnsaid := write("key-unsaid.yaml", "operations:\n  - name: send\n    semantics: {kind: mutation}\n")
	otherStore := write("other-store.yaml", "operations:\n  - name: send\n    semantics: {kind: mutation}\n    idempotency: {key: required, external_effect_guard: at_most_once, store: {kind: postgres}}\n")
	badYAML := write("bad.yaml", "operations: [\n  - name: echo\n")
	unknownField := write("unknown.yaml", "operations:\n  - name: echo\n    bogus_field: 1\n")
	badJSON := write("bad.json", `{"operations": 3}`)
	big := write("big", strings.Repeat("x", maxSecretFile+1))
	missing := filepath.Join(dir, "missing")
	const http1 = "a=http://127.0.0.1:1/mcp"
	token := []string{"MCPREL_TEST_TOKEN=secret-token-env"}
	for _, tc := range []struct {
		args []string
		env  []string // added to the environment; every value is a secret
		want string
	}{
		{[]string{}, nil, "name at least one upstream"},
		{[]string{"--upstream", "nameonly"}, nil, `--upstream wants NAME=COMMAND or NAME=URL, not "nameonly"`},
		{[]string{"--upstream", "my_server=cat"}, nil, `upstream name "my_server"`},
		{[]string{"--upstream", "a=cat", "--upstream", "a=cat"}, nil, `two upstreams are named "a"`},
		{[]string{"--upstream", "bad=mcprel-no-such-command --flag"}, nil, `upstream "bad": cannot run "mcprel-no-such-command": executable file not found in $PATH`},
		{[]string{"--upstream", `a=node "server.js`}, nil, "--upstream a: unterminated quote"},
		{[]string{"--upstream", "a=http://url-user:url-secret-pw@example.com/mcp"}, nil, `upstream "a": put credentials in a header from the environment or a file, not in the URL`},
		{[]string{"--upstream", "a=sse:ftp://example.com"}, nil, "is not an http:// or https:// URL"},
		// --upstream-token-env
		{[]string{"--upstream", http1, "--upstream-token-env", "a"}, token, `--upstream-token-env wants NAME=VAR, not "a"`},
		{[]string{"--upstream", http1, "--upstream-token-env", "=MCPREL_TEST_TOKEN"}, token, `--upstream-token-env wants NAME=VAR, not "=MCPREL_TEST_TOKEN"`},
		{[]string{"--upstream", http1, "--upstream-token-env", "a="}, token, `--upstream-token-env wants NAME=VAR, not "a="`},
		{[]string{"--upstream", http1, "--upstream-token-env", "b=MCPREL_TEST_TOKEN"}, token, `--upstream-token-env names upstream "b", which no --upstream defines`},
		{[]string{"--upstream", http1, "--upstream-token-env", "a=MCPREL_TEST_UNSET_TOKEN"}, nil, "--upstream-token-env a: environment variable MCPREL_TEST_UNSET_TOKEN is empty or unset"},
		{[]string{"--upstream", http1, "--upstream-token-env", "a=MCPREL_TEST_TOKEN"}, []string{"MCPREL_TEST_TOKEN= \t "}, "--upstream-token-env a: environment variable MCPREL_TEST_TOKEN is empty or unset"},
		{[]string{"--upstream", http1, "--upstream-token-env", "a=MCPREL_TEST_TOKEN"}, []string{"MCPREL_TEST_TOKEN=secret-two\nX-Injected: yes"}, "--upstream-token-env a: environment variable MCPREL_TEST_TOKEN must hold one token on one line"},
		{[]string{"--upstream", "a=cat", "--upstream-token-env", "a=MCPREL_TEST_TOKEN"}, token, `--upstream-token-env: upstream "a" is a stdio server`},
		{[]string{"--upstream", http1, "--upstream-token-env", "a=MCPREL_TEST_TOKEN", "--upstream-limits", "a=rate=fast"}, token, "--upstream-limits a: rate=fast: want a number of at least 0"},
		// --upstream-token-file
		{[]string{"--upstream", http1, "--upstream-token-file", "a"}, nil, `--upstream-token-file wants NAME=FILE, not "a"`},
		{[]string{"--upstream", http1, "--upstream-token-file", "a=" + twoLines}, nil, "--upstream-token-file a: " + twoLines + " must hold one token on one line"},
		{[]string{"--upstream", http1, "--upstream-token-file", "a=" + big}, nil, "--upstream-token-file a: " + big + " is larger than 64 KiB"},
		{[]string{"--upstream", http1, "--upstream-token-file", "a=" + missing}, nil, "--upstream-token-file a: open " + missing + ": no such file"},
		{[]string{"--upstream", http1, "--upstream-token-file", "a=" + goodToken, "--upstream-headers-file", "a=" + badHeader}, nil, `--upstream-headers-file a: ` + badHeader + `: line 1 is not "Header: value"`},
		// --upstream-headers-file
		{[]string{"--upstream", http1, "--upstream-headers-file", "a=" + hostHeader}, nil, "--upstream-headers-file a: " + hostHeader + ": line 1 sets Host, which the gateway's client sets itself"},
		{[]string{"--upstream", http1, "--upstream-headers-file", "a=" + missing}, nil, "--upstream-headers-file a: open " + missing + ": no such file"},
		{[]string{"--upstream", http1, "--upstream-headers-file", "a=" + dir}, nil, "--upstream-headers-file a: read " + dir + ": is a directory"},
		{[]string{"--upstream", "a=cat", "--upstream-headers-file", "a=" + badHeader}, nil, `--upstream-headers-file: upstream "a" is a stdio server`},
		// --upstream-env-file
		{[]string{"--upstream", http1, "--upstream-env-file", "a=" + envFile}, nil, `--upstream-env-file: upstream "a" is an HTTP server`},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a"}, nil, `--upstream-env-file wants NAME=FILE, not "a"`},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a=" + missing}, nil, "--upstream-env-file a: open " + missing + ": no such file"},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a=" + dir}, nil, "--upstream-env-file a: read " + dir + ": is a directory"},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a=" + big}, nil, "--upstream-env-file a: " + big + " is larger than 64 KiB"},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a=" + badEnv}, nil, "--upstream-env-file a: " + badEnv + ": line 3 is not KEY=VALUE"},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a=" + spacedKey}, nil, "--upstream-env-file a: " + spacedKey + ": line 1 is not KEY=VALUE"},
		{[]string{"--upstream", "a=cat", "--upstream-env-file", "a=" + envFile, "--input-wait", "0s"}, nil, "--input-wait must be positive"},
		// --policy
		{[]string{"--upstream", "a=cat", "--policy", maxNone}, nil, "--policy " + maxNone + `: policy of tool "echo": max_timeout "none"`},
		{[]string{"--upstream", "a=cat", "--policy", noGuard}, nil, `policy of tool "send": a keyed tool behind the gateway needs idempotency.external_effect_guard`},
		{[]string{"--upstream", "a=cat", "--policy", keyUnsaid}, nil, `policy of tool "send": a mutation must say whether it is keyed (idempotency.key`},
		{[]string{"--upstream", "a=cat", "--policy", otherStore}, nil, `policy of tool "send" says what the gateway does otherwise (leave these out: the gateway fills them in): idempotency.store.kind is postgres, where the gateway's is sqlite`},
		{[]string{"--upstream", "a=cat", "--policy", missing}, nil, "--policy: open " + missing + ": no such file"},
		{[]string{"--upstream", "a=cat", "--policy", badYAML}, nil, "--policy: " + badYAML + ": yaml: line "},
		{[]string{"--upstream", "a=cat", "--policy", unknownField}, nil, "--policy: " + unknownField + ": yaml: unmarshal errors:\n  line 3: field bogus_field not found"},
		{[]string{"--upstream", "a=cat", "--policy", badJSON}, nil, "--policy: " + badJSON + ": line 1: json: cannot unmarshal"},
		// --upstream-per-tenant
		{[]string{"--upstream", "a=cat", "--upstream-per-tenant", "b"}, nil, `--upstream-per-tenant names upstream "b"`},
		{[]string{"--upstream", http1, "--upstream-per-tenant", "a"}, nil, "has a session per tenant already"},
		// --upstream-capabilities
		{[]string{"--upstream", "a=cat", "--upstream-capabilities", "b=roots"}, nil, `--upstream-capabilities names upstream "b"`},
		{[]string{"--upstream", "a=cat", "--upstream-capabilities", "a=roots,telepathy"}, nil, `--upstream-capabilities a: "telepathy" is not one of elicitation, elicitation-url, sampling, roots`},
		// --upstream-limits
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=speed=3"}, nil, `--upstream-limits a: unknown limit "speed"`},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a="}, nil, "--upstream-limits a: give one or more of concurrent=N"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a"}, nil, "--upstream-limits a: give one or more of concurrent=N"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=concurrent"}, nil, `--upstream-limits a: "concurrent" is not KEY=VALUE`},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=concurrent=1,"}, nil, `--upstream-limits a: "" is not KEY=VALUE`},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=concurrent=-1"}, nil, "--upstream-limits a: concurrent=-1: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=queued=x"}, nil, "--upstream-limits a: queued=x: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=burst=1e3"}, nil, "--upstream-limits a: burst=1e3: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=bytes=1.5"}, nil, "--upstream-limits a: bytes=1.5: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=bytes=99999999999999999999"}, nil, "--upstream-limits a: bytes=99999999999999999999: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=rate=-1"}, nil, "--upstream-limits a: rate=-1: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=rate=NaN"}, nil, "--upstream-limits a: rate=NaN: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "a=rate=Inf"}, nil, "--upstream-limits a: rate=Inf: want a number of at least 0"},
		{[]string{"--upstream", "a=cat", "--upstream-limits", "b=concurrent=1"}, nil, `--upstream-limits names upstream "b"`},
		// --upstream-keep-names
		{[]string{"--upstream", "a=cat", "--upstream-keep-names", "b"}, nil, `--upstream-keep-names names upstream "b", which no --upstream defines`},
		{[]string{"--upstream", "a=cat", "--upstream", "b=cat", "--upstream-keep-names", "a", "--upstream-keep-names", "b"}, nil, "only one upstream may keep its names"},
		// the rest
		{[]string{"--upstream", "a=cat", "--max-upstream-sessions", "0"}, nil, "--max-upstream-sessions must be at least 1"},
		{[]string{"--upstream", "a=cat", "--input-wait", "0s"}, nil, "--input-wait must be positive"},
		{[]string{"--upstream", "a=cat", "--max-concurrent", "0"}, nil, "gateway: --max-concurrent must be at least 1"},
		{[]string{"--upstream", "a=cat", "--stdio", "--http", "127.0.0.1:0"}, []string{"MCPREL_METRICS_TOKEN=secret-metrics-token"}, "gateway: choose one of --stdio and --http"},
	} {
		cmd := exec.Command(binary, append([]string{"gateway"}, tc.args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), tc.env...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("gateway %q: exit %d, %s\nwant exit %d saying %q", tc.args, code, out, exitUsage, tc.want)
		}
		secrets := []string{"secret-one", "secret-two", "secret-file-token", "secret-value", "secret-env", "secret-line", "url-user", "url-secret-pw"}
		for _, kv := range tc.env {
			if _, v, _ := strings.Cut(kv, "="); strings.TrimSpace(v) != "" {
				secrets = append(secrets, v)
			}
		}
		for _, secret := range secrets {
			if strings.Contains(string(out), secret) {
				t.Errorf("gateway %q printed the credential %q: %s", tc.args, secret, out)
			}
		}
	}
}

// The gateway over HTTP in front of "mcprel serve --http" that requires
// its own token: the upstream's token (from a file) reaches the upstream,
// the downstream's token (a different one) the gateway only; a call with
// progress goes through; a call the client gives up on is cancelled
// upstream, which both the upstream (its request ends cancelled, long
// before the call would have finished) and the gateway's metrics (the
// cancellation counted as propagated) say; the metrics count every call.
func TestGatewayHTTPInFrontOfServe(t *testing.T) {
	upURL, _ := startHTTP(t, nil, "--auth-token", "upstream-token", "--metrics-path", "/metrics")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("upstream-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gwURL, _, _ := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--auth-token", "downstream-token",
		"--metrics-path", "/metrics",
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
	// 1000 steps of a second: only a cancellation ends it within the
	// bounded waits below.
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
	// The client's error says only that it gave up. The upstream's request
	// ending cancelled says the gateway carried the cancellation there.
	// Each process records a request just after it answers, so their
	// metrics are read until they show it, within a bound.
	upMetrics := strings.TrimSuffix(upURL, "/mcp") + "/metrics"
	awaitMetricLines(t, upMetrics, "upstream-token", [][]string{
		{`mcprel_requests_total{`, `method="tools/call",outcome="completed",tool="echo",transport="http"} 1`},
		{`mcprel_requests_total{`, `method="tools/call",outcome="completed",tool="slow_count",transport="http"} 1`},
		{`mcprel_requests_total{`, `method="tools/call",outcome="cancelled",tool="slow_count",transport="http"} 1`},
	})
	gwMetrics := strings.TrimSuffix(gwURL, "/mcp") + "/metrics"
	awaitMetricLines(t, gwMetrics, "downstream-token", [][]string{
		{`mcprel_gateway_forwarded_total{method="tools/call",name="echo",outcome="ok",upstream="demo"} 1`},
		{`mcprel_gateway_forwarded_total{method="tools/call",name="slow_count",outcome="ok",upstream="demo"} 1`},
		{`mcprel_gateway_forwarded_total{method="tools/call",name="slow_count",outcome="cancelled",upstream="demo"} 1`},
		{`mcprel_gateway_cancellations_propagated_total{upstream="demo"} 1`},
		{`mcprel_gateway_upstream_in_flight{upstream="demo"} 0`},
	})
	// The downstream's token opens the gateway only, not the upstream.
	if code := scrape(t, upMetrics, "downstream-token"); code != http.StatusUnauthorized {
		t.Fatalf("the upstream's metrics with the downstream's token: %d, want %d", code, http.StatusUnauthorized)
	}
}

// A second --upstream prefixes every name with its upstream's, the
// first's included, unless --upstream-keep-names keeps one upstream's
// names as they were: a client of the first gateway goes on calling echo.
func TestGatewayKeepNames(t *testing.T) {
	help, _ := exec.Command(binary, "gateway", "-h").Output()
	if !strings.Contains(string(help), "adding a second renames the first's tools, unless --upstream-keep-names keeps them") {
		t.Errorf("gateway -h does not say that a second --upstream renames the first's tools:\n%s", help)
	}
	first, _ := startHTTP(t, nil)
	second, _ := startHTTP(t, nil)
	gw, _, _ := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--upstream", "first="+first, "--upstream", "second="+second,
		"--upstream-keep-names", "first", "--db", filepath.Join(t.TempDir(), "gw.db"))
	out, errs, code := mcprelCall(t, "--url", gw, "--list")
	if code != 0 || !strings.Contains(out, "\necho {text}\n") || !strings.Contains(out, "\nsecond_echo {text}\n") || strings.Contains(out, "first_echo") {
		t.Fatalf("--list through the gateway: exit %d, want echo kept and second_echo prefixed:\n%s\n%s", code, out, errs)
	}
	for _, tool := range []string{"echo", "second_echo"} {
		if out, errs, code := mcprelCall(t, "--url", gw, tool, "text=kept"); code != 0 || !strings.Contains(out, `"text": "kept"`) {
			t.Errorf("%s through the gateway: exit %d\n%s\n%s", tool, code, out, errs)
		}
	}
}

// awaitMetricLines reads the metrics at url (with a bearer token) until,
// for each of want, one line starts with its first fragment and contains
// the others; it fails the test with the last scrape after 20 seconds.
func awaitMetricLines(t *testing.T, url, token string, want [][]string) {
	t.Helper()
	var body string
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scraping %s: %d %s", url, resp.StatusCode, data)
		}
		body, missing = string(data), nil
		for _, w := range want {
			if !hasMetricLine(body, w) {
				missing = append(missing, strings.Join(w, " … "))
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var near []string // the scrape's lines of the metrics wanted
			for _, line := range strings.Split(body, "\n") {
				for _, w := range want {
					if name, _, _ := strings.Cut(w[0], "{"); strings.HasPrefix(line, name) {
						near = append(near, line)
						break
					}
				}
			}
			t.Fatalf("%s lacks, after 20s:\n%s\nit has:\n%s", url, strings.Join(missing, "\n"), strings.Join(near, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hasMetricLine reports whether a line of body starts with frags[0] and
// contains the rest.
func hasMetricLine(body string, frags []string) bool {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, frags[0]) {
			continue
		}
		ok := true
		for _, f := range frags[1:] {
			ok = ok && strings.Contains(line, f)
		}
		if ok {
			return true
		}
	}
	return false
}

// What a call forwards (a file's contents, a message) is its caller's:
// the gateway's request line holds the arguments only at --log-level
// debug, never at the default info.
func TestGatewayLogsArgumentsAtDebugOnly(t *testing.T) {
	up, _ := startHTTP(t, nil)
	for _, level := range []string{"info", "debug"} {
		gw, _, log := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--upstream", "demo="+up, "--log-level", level,
			"--db", filepath.Join(t.TempDir(), "gw.db"))
		if out, errs, code := mcprelCall(t, "--url", gw, "echo", "text=the-callers-words"); code != 0 {
			t.Fatalf("echo through the gateway: exit %d\n%s\n%s", code, out, errs)
		}
		line := awaitLogLine(t, log, "msg=request", "tool=echo")
		if has := strings.Contains(line, "the-callers-words"); has != (level == "debug") {
			t.Errorf("--log-level %s: the request line %q; want the arguments at debug only", level, line)
		}
	}
}

// awaitLogLine returns the first line from log holding every one of
// frags, within 20 seconds (a safety net: the line comes once the
// request ended).
func awaitLogLine(t *testing.T, log <-chan string, frags ...string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-log:
			if !ok {
				t.Fatalf("the log ended without a line holding %q", frags)
			}
			all := true
			for _, f := range frags {
				all = all && strings.Contains(line, f)
			}
			if all {
				return line
			}
		case <-timeout:
			t.Fatalf("no log line holds %q", frags)
		}
	}
}

// --upstream-capabilities says what a shared connection declares.
func TestParseUpstreamCapabilities(t *testing.T) {
	for list, want := range map[string]string{
		"none":                        `{}`,
		"roots":                       `{"roots":{}}`,
		"elicitation,sampling":        `{"sampling":{},"elicitation":{"form":{}}}`,
		"elicitation-url,elicitation": `{"elicitation":{"url":{},"form":{}}}`,
	} {
		caps, err := parseCapabilities(list)
		if err != nil {
			t.Fatalf("%s: %v", list, err)
		}
		if got, _ := json.Marshal(caps); string(got) != want {
			t.Errorf("%s declares %s, want %s", list, got, want)
		}
	}
}
