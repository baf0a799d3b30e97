package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/interop/everything"
)

// exampleConfig is the complete example the README starts the gateway
// section from.
const exampleConfig = "../../examples/gateway/gateway.yaml"

// exampleEnv is the environment examples/gateway/gateway.yaml reads its
// credentials from, and a $PATH whose npx and some-mail-mcp-server stand
// in for the real ones: npx runs server-everything as `npm ci` installed
// it (checking it was asked for exactly that), some-mail-mcp-server runs
// this test binary as the mailer mail.yaml describes.
func exampleEnv(t *testing.T, sentFile string) []string {
	t.Helper()
	bin := t.TempDir()
	local := strings.Join(quoted(everything.Command(t)), " ")
	shims := map[string]string{
		"npx": `[ "$*" = "-y @modelcontextprotocol/server-everything" ] || { echo "npx $*: not what the example runs" >&2; exit 1; }
exec ` + local,
		"some-mail-mcp-server": `[ "$*" = "--stdio" ] || exit 1
exec ` + shellQuote(os.Args[0]) + ` -test.run='^$'`,
	}
	for name, body := range shims {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"ALICE_TOKEN=alice-secret-token", "BOB_TOKEN=bob-secret-token", "METRICS_TOKEN=metrics-secret-token",
		"MAIL_API_KEY=mail-secret-key", "TICKETS_TOKEN=tickets-secret-token", mailerEnv + "=" + sentFile}
}

// gatewayCheck runs "mcprel gateway --config FILE --check ARGS" in env,
// returning its exit status and output.
func gatewayCheck(t *testing.T, env []string, file string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"gateway", "--config", file, "--check"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// The example config, as written: --check prints what would run (every
// upstream, the policy's verdicts, no credential), and the gateway it
// configures serves both stdio upstreams to a tenant of its tokens — the
// mail server's names kept, everything's prefixed — and sends a keyed
// e-mail once however often it is asked; the HTTP upstream nobody serves
// here is waited for, not fatal. Only the addresses and the database are
// overridden on the command line, as a flag overrides the file.
func TestGatewayConfigExample(t *testing.T) {
	dir := t.TempDir()
	sentFile := filepath.Join(dir, "sent")
	env := exampleEnv(t, sentFile)
	code, out := gatewayCheck(t, env, exampleConfig)
	if code != 0 {
		t.Fatalf("--check: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"listener              Streamable HTTP on 127.0.0.1:8080, path /mcp",
		"bearer tokens of 2 tenants",
		"upstream everything   stdio: npx -y @modelcontextprotocol/server-everything; limits",
		"upstream mail         stdio: some-mail-mcp-server --stdio; env MAIL_API_KEY; names kept",
		"upstream tickets      http: http://127.0.0.1:3001/mcp; headers Authorization",
		"tool send_email     refused: forwarded as conditional",
		"tool list_sent      production-ready: forwarded as safe",
		"the configuration holds: nothing was opened or started",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--check does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Errorf("--check printed a credential:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exampleConfig), "gateway.db")); err == nil {
		t.Errorf("--check created the example's database")
	}

	example, _ := filepath.Abs(exampleConfig)
	url, _, _ := startConfigGateway(t, dir, env, "gateway", "--config", example,
		"--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
	c, err := client.DialHTTP(t.Context(), url, &client.Options{Header: http.Header{"Authorization": {"Bearer alice-secret-token"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools, err := c.ListTools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"everything_echo", "send_email", "list_sent"} {
		if !slices.Contains(names, want) {
			t.Fatalf("the example's gateway lists %q, want %s among them", names, want)
		}
	}
	res, err := c.CallTool(t.Context(), "everything_echo", map[string]any{"message": "hi"}, nil)
	if err != nil || res.IsError || !strings.Contains(resultText(res), "hi") {
		t.Fatalf("everything_echo: %+v %v", res, err)
	}
	for range 3 {
		res, err := c.CallTool(t.Context(), "send_email", map[string]any{"to": "ops", "requestId": "example-1"}, nil)
		if err != nil || res.IsError {
			t.Fatalf("send_email: %+v %v", res, err)
		}
	}
	if n := countLines(t, sentFile); n != 1 {
		t.Errorf("the keyed e-mail was sent %d times, want once", n)
	}
	if _, err := client.DialHTTP(context.Background(), url, &client.Options{Header: http.Header{"Authorization": {"Bearer wrong"}}}); err == nil {
		t.Errorf("a token the file does not name was let in")
	}
}

// writeConfig writes a config file of text in a directory of its own.
func writeConfig(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every mistake in a config file is refused, exit status 2, naming the
// file, the line and the key, and never the value it holds.
func TestGatewayConfigRefusals(t *testing.T) {
	up := "upstreams:\n  a:\n    command: " + binary + "\n    args: [serve, --stdio]\n"
	env := []string{"SET_TOKEN=set-secret-token"}
	for _, tc := range []struct {
		name, text string
		args       []string
		want       string
	}{
		{"inline env secret", up + "    env:\n      GITHUB_TOKEN: ghp_abcdefghijklmnop\n", nil,
			":6: upstreams.a.env.GITHUB_TOKEN: a secret written inline: write ${env:NAME}"},
		{"inline header", "upstreams:\n  h:\n    url: http://127.0.0.1:1/mcp\n    headers:\n      Authorization: Bearer abcdefgh\n", nil,
			":5: upstreams.h.headers.Authorization: a secret written inline"},
		{"token shape under any name", up + "    env:\n      SETTING: sk-ant-abcdefghijklmnop\n", nil,
			":6: upstreams.a.env.SETTING: a secret written inline"},
		{"secret in a url", "upstreams:\n  h:\n    url: http://127.0.0.1:1/mcp?access_token=abcdefgh\n", nil,
			":3: upstreams.h.url: a secret written inline in the query (access_token)"},
		{"inline auth-token", "auth-token: abcdefgh\nhttp: 127.0.0.1:0\n" + up, nil,
			":1: auth-token: a secret written inline: name it by reference, ${env:NAME}"},
		{"inline tenant token", "http: 127.0.0.1:0\ntoken: [alice=abcdefgh]\n" + up, nil,
			":2: token: a secret written inline: name it by reference, alice=${env:NAME}"},
		{"password in the database url", "db: postgres://u:abcdefgh@127.0.0.1/x\n" + up, nil,
			":1: db: a secret written inline"},
		{"unset reference", "http: 127.0.0.1:0\nauth-token: ${env:MCPREL_TEST_UNSET_VARIABLE}\n" + up, nil,
			":2: auth-token: environment variable MCPREL_TEST_UNSET_VARIABLE is unset or empty"},
		{"duplicate upstream", up + "  a:\n    command: " + binary + "\n", nil,
			":5: upstreams.a: a second upstream of that name (the first is on line 2)"},
		{"unknown key", "htpp: 127.0.0.1:0\n" + up, nil,
			":1: htpp: not a setting of mcprel gateway"},
		{"wrong type", "max-concurrent: many\n" + up, nil,
			":1: max-concurrent: takes a whole number"},
		{"quoted switch", "metrics-open: \"yes\"\n" + up, nil,
			":1: metrics-open: takes true or false"},
		{"list for one value", "http: [a, b]\n" + up, nil,
			":1: http: takes one value, not a list"},
		{"command that does not exist", "upstreams:\n  a:\n    command: mcprel-no-such-program\n", nil,
			`:3: upstreams.a.command: "mcprel-no-such-program" is not a program this gateway can start (not found in $PATH)`},
		{"unknown upstream setting", up + "    cwd: /tmp\n", nil,
			":5: upstreams.a.cwd: not a setting of an upstream"},
		{"unknown server type", "upstreams:\n  a:\n    type: ws\n    url: ws://127.0.0.1/x\n", nil,
			`:3: upstreams.a: type "ws" is not one the gateway serves`},
		{"bad upstream name", "upstreams:\n  a_b:\n    command: " + binary + "\n", nil,
			":2: upstreams.a_b: an upstream's name is 1 to 32 characters of [A-Za-z0-9-]"},
		{"per-upstream flag at the top", "upstream-limits: [a=concurrent=1]\n" + up, nil,
			":1: upstream-limits: write it under its upstream, as limits"},
		{"the file names itself", "config: other.yaml\n" + up, nil,
			":1: config: only on the command line"},
		{"contradiction", "stdio: true\nhttp: 127.0.0.1:0\n" + up, nil,
			"choose one of --stdio and --http (" + "CONFIG" + ": http on line 2, stdio on line 1)"},
		{"bad limits", up + "    limits: {concurrent: lots}\n", nil,
			":5: upstreams.a.limits.concurrent: takes a number"},
		{"policy at odds with itself", up + "policy:\n  operations:\n    - name: a_send\n      semantics: {kind: read-only}\n      idempotency: {key: required, key_argument: id}\n", nil,
			`policy of tool "a_send" calls it read-only`},
		{"inline policy error on its line", up + "policy:\n  operations:\n    - name: x\n      colour: red\n", nil,
			"line 8: field colour not found"},
		{"per-tenant on HTTP", "upstreams:\n  h:\n    url: http://127.0.0.1:1/mcp\n    per-tenant: true\n", nil,
			"--upstream-per-tenant h: it is an HTTP upstream"},
		{"a token without its tenant", "http: 127.0.0.1:0\ntoken: [\"=${env:SET_TOKEN}\"]\n" + up, nil,
			":2: token: wants TENANT=${env:NAME}"},
		{"a secret in an argument", up[:len(up)-len("    args: [serve, --stdio]\n")] + "    args: [serve, --api-key=abcdefgh]\n", nil,
			":4: upstreams.a.args: a secret written inline"},
		{"a url with a password in env", up + "    env:\n      UPSTREAM_URL: postgres://u:abcdefgh@h/db\n", nil,
			":6: upstreams.a.env.UPSTREAM_URL: a secret written inline"},
		{"a key header", "upstreams:\n  h:\n    url: http://127.0.0.1:1/mcp\n    headers:\n      X-Key: abcdefgh\n", nil,
			":5: upstreams.h.headers.X-Key: a secret written inline"},
		{"a password in a url flag", "otlp-endpoint: https://u:abcdefgh@collector:4318\n" + up, nil,
			":1: otlp-endpoint: a secret written inline in the URL"},
		{"a tag that quotes the value", "upstreams:\n  h:\n    url: !!float \"https://u:abcdefgh@127.0.0.1:1/mcp\"\n", nil,
			":3: upstreams.h.url: cannot be read as the string"},
		{"an alias carries a value", "upstreams:\n  h:\n    env: {U: &u \"http://127.0.0.1:1/mcp\"}\n    url: *u\n", nil,
			":4: upstreams.h: YAML aliases (*name) are not read under upstreams"},
		{"a password in a database url's query", "db: postgres://u@127.0.0.1/x?sslpassword=abcdefgh\n" + up, nil,
			":1: db: a secret written inline"},
		{"a policy no tool can match", up + "  b:\n    command: " + binary + "\n    args: [serve, --stdio]\n" +
			"policy:\n  operations:\n    - name: echo\n      semantics: {kind: read-only}\n", nil,
			`operation "echo" names no tool this gateway serves: with several upstreams every tool is served as UPSTREAM_tool (a_echo, say)`},
		{"a secret inline, the flag given on the command line too", "http: 127.0.0.1:0\nauth-token: abcdefgh\n" + up, []string{"--auth-token", "from-the-command-line"},
			":2: auth-token: a secret written inline"},
		{"a token as the argument after its flag", up[:len(up)-len("    args: [serve, --stdio]\n")] + "    args: [serve, --auth-token, abcdefgh]\n", nil,
			":4: upstreams.a.args: a secret written inline"},
		{"a stored login without its key", "key-file: nokey.b64\nupstreams:\n  h:\n    url: http://127.0.0.1:1/mcp\n    oauth-login: true\n", nil,
			"--key-file: open "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeConfig(t, "gateway.yaml", tc.text)
			code, out := gatewayCheck(t, env, file, tc.args...)
			want := strings.ReplaceAll(tc.want, "CONFIG", file)
			if code != exitUsage || !strings.Contains(out, want) {
				t.Errorf("exit %d, want %d, saying %q:\n%s", code, exitUsage, want, out)
			}
			if strings.Contains(out, "abcdefgh") || strings.Contains(out, "set-secret-token") || strings.Contains(out, "from-the-command-line") {
				t.Errorf("the refusal quotes a value of the file:\n%s", out)
			}
		})
	}
}

// A flag on the command line overrides the file's setting; the file's
// relative paths are the file's directory's; JSON is read as well as
// YAML; a reference the environment sets is used, and never printed.
func TestGatewayConfigOverridesAndJSON(t *testing.T) {
	env := []string{"SET_TOKEN=set-secret-token"}
	file := writeConfig(t, "gateway.json", fmt.Sprintf(`{
  "http": "127.0.0.1:0",
  "db": "here.db",
  "auth-token": "${env:SET_TOKEN}",
  "upstreams": {"a": {"command": %q, "args": ["serve", "--stdio"], "limits": {"concurrent": 2}}},
  "policy": {"operations": [{"name": "echo", "semantics": {"kind": "read-only"}}]}
}`, binary))
	code, out := gatewayCheck(t, env, file)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{"Streamable HTTP on 127.0.0.1:0", "SQLite file " + filepath.Join(filepath.Dir(file), "here.db"), "a bearer token", "tool echo", "forwarded as safe"} {
		if !strings.Contains(out, want) {
			t.Errorf("--check does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "set-secret-token") {
		t.Errorf("--check printed the token:\n%s", out)
	}
	code, out = gatewayCheck(t, env, file, "--stdio", "--http", "", "--db", "other.db")
	if code != 0 || !regexp.MustCompile(`listener +stdio`).MatchString(out) || !strings.Contains(out, "SQLite file other.db") {
		t.Errorf("the command line did not override the file: exit %d\n%s", code, out)
	}
	cmd := exec.Command(binary, "gateway", "--check")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "--check and --watch need --config FILE") {
		t.Errorf("--check without --config: %s", out)
	}
}

// The README's --config lines work as written, from the repository's
// root: --check prints what would run, and the gateway it starts (its
// addresses and database overridden on the command line, as the README
// says a flag overrides the file) serves the example's upstreams.
func TestReadmeConfigLines(t *testing.T) {
	dir := t.TempDir()
	env := exampleEnv(t, filepath.Join(dir, "sent"))
	lines := readmeLinesWith(t, "bin/mcprel gateway --config ")
	if len(lines) != 2 {
		t.Fatalf("the README has %d --config lines, want the --check line and the run line: change this test with it", len(lines))
	}
	for _, l := range lines {
		words, err := splitCommand(strings.Replace(l.text, "bin/mcprel", binary, 1))
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		if slices.Contains(words, "--check") {
			cmd := exec.Command(words[0], words[1:]...)
			cmd.Dir, cmd.Env = "../..", append(os.Environ(), env...)
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != 0 || !strings.Contains(string(out), "the configuration holds") {
				t.Errorf("README.md:%d: %s\nexit %d\n%s", l.number, l.text, cmd.ProcessState.ExitCode(), out)
			}
			continue
		}
		root, _ := filepath.Abs("../..")
		args := append(words[1:], "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
		for i, a := range args {
			if strings.HasPrefix(a, "examples/") {
				args[i] = filepath.Join(root, a)
			}
		}
		url, _, _ := startConfigGateway(t, dir, env, args...)
		c, err := client.DialHTTP(t.Context(), url, &client.Options{Header: http.Header{"Authorization": {"Bearer bob-secret-token"}}})
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		if _, err := c.ListTools(t.Context()); err != nil {
			t.Errorf("README.md:%d: %v", l.number, err)
		}
		c.Close()
	}
}

// What --check shows of an upstream is the file's words: a reference as
// written, never what it resolves to; a database named by reference is
// read from the environment and shown without its password; a disabled
// upstream is left out, its settings too; a credential the command line
// gives an upstream replaces every one the file gives it.
func TestGatewayConfigShowsReferencesNotValues(t *testing.T) {
	env := []string{"SET_TOKEN=set-secret-token", "MCPREL_TEST_DB_URL=postgres://u:set-secret-token@127.0.0.1/x?sslmode=disable"}
	file := writeConfig(t, "gateway.yaml", `db: ${env:MCPREL_TEST_DB_URL}
upstreams:
  a:
    command: `+binary+`
    args: [serve, --stdio, --auth-token, "${env:SET_TOKEN}"]
  off:
    command: `+binary+`
    disabled: true
    limits: {concurrent: 2}
  h:
    url: http://127.0.0.1:1/mcp
    token-file: token.txt
`)
	if err := os.WriteFile(filepath.Join(filepath.Dir(file), "token.txt"), []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := gatewayCheck(t, env, file)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{"serve --stdio --auth-token '${env:SET_TOKEN}'", "PostgreSQL postgres://u:xxxxx@127.0.0.1/x"} {
		if !strings.Contains(out, want) {
			t.Errorf("--check does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "set-secret-token") || strings.Contains(out, "upstream off") {
		t.Errorf("--check printed a resolved secret or a disabled upstream:\n%s", out)
	}

	t.Setenv("MCPREL_TEST_CLI_TOKEN", "cli-token")
	p, err := planGateway([]string{"--config", file, "--upstream-token-env", "h=MCPREL_TEST_CLI_TOKEN"}, io.Discard, io.Discard,
		func(name string) (string, bool) {
			for _, kv := range env {
				if k, v, _ := strings.Cut(kv, "="); k == name {
					return v, true
				}
			}
			return "", false
		})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.byName["h"].Header.Get("Authorization"); got != "Bearer cli-token" {
		t.Errorf("with --upstream-token-env on the command line, upstream h sends %q", got)
	}
}
