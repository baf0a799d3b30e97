package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/mcp"
)

// fixtureEnv is the environment the fixtures' ${env:NAME} and ${NAME}
// are resolved from.
func fixtureEnv(name string) (string, bool) {
	v, ok := map[string]string{"GITHUB_TOKEN": "gh-token", "REMOTE_TOKEN": "remote-token", "API_KEY": "api-key"}[name]
	return v, ok
}

// Both clients' files map to upstreams named by their keys, in order:
// Claude's mcpServers without a type (stdio by its command), with "http"
// and "sse"; VS Code's servers with theirs, in a file with comments and
// trailing commas; placeholders resolved from the environment, with a
// default; a disabled server left out.
func TestMCPConfigParse(t *testing.T) {
	for _, tc := range []struct {
		file string
		key  string
		want []configUpstream
	}{
		{"claude_desktop_config.json", claudeKey, []configUpstream{
			{"filesystem", gateway.Upstream{Name: "filesystem", Transport: gateway.Stdio,
				Command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"}}},
			{"github_tools", gateway.Upstream{Name: "github-tools", Transport: gateway.Stdio,
				Command: []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server"},
				Env:     []string{"GITHUB_TOKEN=gh-token", "LOG_LEVEL=info"}}},
			{"remote", gateway.Upstream{Name: "remote", Transport: gateway.StreamableHTTP, URL: "https://mcp.example.com/mcp",
				Header: map[string][]string{"Authorization": {"Bearer remote-token"}, "X-Team": {"blue"}}}},
			{"old.sse", gateway.Upstream{Name: "old-sse", Transport: gateway.SSE, URL: "https://old.example.com/sse"}},
		}},
		{"vscode_mcp.json", vscodeKey, []configUpstream{
			{"memory", gateway.Upstream{Name: "memory", Transport: gateway.Stdio,
				Command: []string{"npx", "-y", "@modelcontextprotocol/server-memory"}, Env: []string{"MEMORY_FILE=/tmp/memory.json"}}},
			{"api", gateway.Upstream{Name: "api", Transport: gateway.StreamableHTTP, URL: "https://api.example.com/mcp?team=a//b",
				Header: map[string][]string{"X-Api-Key": {"api-key"}}}},
		}},
	} {
		c, err := readClientConfig(filepath.Join("testdata", "mcpconfig", tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if c.key != tc.key {
			t.Errorf("%s: servers under %q, want %q", tc.file, c.key, tc.key)
		}
		got, err := c.upstreams(fixtureEnv)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.file, got, tc.want)
		}
	}
}

// Every server the gateway cannot serve is reported by its entry, each
// with its own reason, in one refusal (exit 2) before anything starts;
// no value of the file (an environment variable's, a header's, a URL's)
// is ever printed.
func TestMCPConfigRefusals(t *testing.T) {
	file, _ := filepath.Abs(filepath.Join("testdata", "mcpconfig", "unmappable.json"))
	want := []string{
		`entry "prompted": headers Authorization asks for ${input:api-key}, a prompt of VS Code's that only VS Code can answer: put the value in the gateway's environment and write ${env:NAME}`,
		`entry "websocket": type "ws" is not one the gateway serves (stdio, http, sse)`,
		`entry "in-a-folder": "cwd" not understood (the gateway maps type, command, args, env, url, headers and disabled)`,
		`entry "workspace": args[0] holds ${workspaceFolder}, which the gateway does not resolve (it resolves ${env:NAME})`,
		`entry "nothing": a stdio server needs a command`,
		`entry "mixed": url holds credentials: put them in headers, from the environment (${env:NAME})`,
		`entry "not-a-url": url is not an http:// or https:// URL`,
		`entry "host-header": headers Host: sets Host, which the gateway's client sets itself`,
		`entry "args-not-strings": args must be a list of strings`,
		`entry "neither": "timeout" not understood`,
		`entry "a-name-far-too-long-for-an-upstream-x": its key must give an upstream name of 1 to 32 characters`,
		`entry "same-name": its upstream name "same-name" is entry "same_name"'s too (each character outside [A-Za-z0-9-] becomes -): rename one`,
	}
	// The gateway resolves ${env:NAME} as it starts; wrap leaves it to the
	// gateway, which runs in the client's environment, not wrap's.
	unset := `entry "unset": env TOKEN holds ${env:MCPREL_TEST_UNSET_VARIABLE}, and the environment variable MCPREL_TEST_UNSET_VARIABLE is unset or empty`
	for _, tc := range []struct{ args, want []string }{
		{[]string{"gateway", "--stdio", "--mcp-config", file}, append(want, unset, "13 of its 15 servers cannot be served")},
		{[]string{"gateway", "wrap", file}, append(want, "12 of its 15 servers cannot be served")},
	} {
		args := tc.args
		cmd := exec.Command(binary, args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage {
			t.Errorf("%q: exit %d, want %d:\n%s", args, code, exitUsage, out)
		}
		if tc.args[1] == "wrap" && strings.Contains(string(out), `entry "unset"`) {
			t.Errorf("wrap resolved ${env:NAME} in its own environment:\n%s", out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%q does not say\n  %s\nit says:\n%s", args, w, out)
			}
		}
		if strings.Contains(string(out), `"fine"`) {
			t.Errorf("%q reports the entry it can serve:\n%s", args, out)
		}
		if strings.Contains(string(out), "secret") {
			t.Errorf("%q printed a value of the file:\n%s", args, out)
		}
	}
	// A key renamed is said, whatever follows.
	renamed := filepath.Join(t.TempDir(), "renamed.json")
	os.WriteFile(renamed, []byte(`{"mcpServers": {"my_server": {"command": "cat"}}}`), 0o600)
	cmd := exec.Command(binary, "gateway", "--mcp-config", renamed, "--max-upstream-sessions", "0")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), `--mcp-config: entry "my_server" is upstream "my-server"`) || cmd.ProcessState.ExitCode() != exitUsage {
		t.Errorf("a renamed key is not said: %s", out)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ content, want string }{
		{`{"mcp": {"servers": {}}}`, `has neither "mcpServers" (Claude Desktop, .mcp.json) nor "servers" (VS Code) at its top level`},
		{`{"mcpServers": {"a": {"command": "node"}}, "servers": {}}`, `has both "mcpServers" and "servers"`},
		{`{"mcpServers": {}}`, `"mcpServers" names no server`},
		{`{"mcpServers": []}`, `"mcpServers" is not an object of servers`},
		{`{"mcpServers": {"a": {"command": "node"}, "a": {"command": "secret"}}}`, `the key "a" is given twice`},
		{`[1]`, `is not a JSON object`},
		{`{"mcpServers": {"a": {"command": "node", "disabled": true}}}`, `every server of "mcpServers" is disabled`},
	} {
		p := write("config.json", tc.content)
		for _, args := range [][]string{{"gateway", "--stdio", "--mcp-config", p}, {"gateway", "wrap", p}} {
			cmd := exec.Command(binary, args...)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "secret") {
				t.Errorf("%s: %q: exit %d, %s\nwant exit %d saying %q", tc.content, args, code, out, exitUsage, tc.want)
			}
		}
	}
}

// writeTwoServers writes a client configuration, in the shape of key
// ("mcpServers" or "servers"), whose two servers are "mcprel serve
// --stdio", the first one's key holding a _ and its database given by
// its env, as a secret would be.
func writeTwoServers(t *testing.T, dir, key string) string {
	t.Helper()
	typ := map[string]any{}
	if key == vscodeKey {
		typ["type"] = "stdio"
	}
	entry := func(extra map[string]any) map[string]any {
		e := map[string]any{"command": binary}
		for k, v := range typ {
			e[k] = v
		}
		for k, v := range extra {
			e[k] = v
		}
		return e
	}
	config := map[string]any{
		"keep": "this member",
		key: map[string]any{
			"first_one": entry(map[string]any{"args": []string{"serve", "--stdio"}, "env": map[string]string{"MCPREL_DB": filepath.Join(dir, "first.db")}}),
			"second":    entry(map[string]any{"args": []string{"serve", "--stdio", "--db", filepath.Join(dir, "second.db")}}),
		},
	}
	data, _ := json.MarshalIndent(config, "", "  ")
	path := filepath.Join(dir, "client.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// callBoth has a client, over stdio, list the tools of command (a
// gateway in front of writeTwoServers' two) and call each server's echo
// through it, prefixed by the server's name.
func callBoth(t *testing.T, dir string, command []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.DialStdio(ctx, command, nil)
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	defer c.Close()
	tools, err := c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, name := range []string{"first-one_echo", "second_echo"} {
		if !slices.Contains(names, name) {
			t.Fatalf("%q lists %q, want %s among them", command, names, name)
		}
		res, err := c.CallTool(ctx, name, map[string]any{"text": "hello " + name}, nil)
		if err != nil || res.IsError || len(res.Content) == 0 || !strings.Contains(resultText(res), "hello "+name) {
			t.Errorf("%s through %q: %+v %v", name, command, res, err)
		}
	}
	// The first server's env reached it: its database is where it says.
	if _, err := os.Stat(filepath.Join(dir, "first.db")); err != nil {
		t.Errorf("the first server's env did not reach it: %v", err)
	}
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// "gateway --stdio --mcp-config FILE" serves both servers of a Claude
// file and of a VS Code file, each tool prefixed by its server's key
// (the _ made a -), each server given its env.
func TestGatewayMCPConfigServesBoth(t *testing.T) {
	for _, key := range []string{claudeKey, vscodeKey} {
		t.Run(key, func(t *testing.T) {
			dir := t.TempDir()
			path := writeTwoServers(t, dir, key)
			callBoth(t, dir, []string{binary, "gateway", "--stdio", "--mcp-config", path, "--db", filepath.Join(dir, "gw.db")})
		})
	}
}

// "gateway wrap" prints the wrapped file and writes nothing; with
// --write it rewrites the file in the client's own shape, the one entry
// that a client runs as it would (its command and args, from another
// directory) serving both servers; it refuses to wrap twice or to
// overwrite a backup; --undo puts the original back, byte for byte.
func TestGatewayWrap(t *testing.T) {
	for _, key := range []string{claudeKey, vscodeKey} {
		t.Run(key, func(t *testing.T) {
			dir := t.TempDir()
			path := writeTwoServers(t, dir, key)
			orig, _ := os.ReadFile(path)
			run := func(wantCode int, args ...string) string {
				t.Helper()
				cmd := exec.Command(binary, append([]string{"gateway", "wrap"}, args...)...)
				cmd.Dir = t.TempDir()
				out, _ := cmd.CombinedOutput()
				if code := cmd.ProcessState.ExitCode(); code != wantCode {
					t.Fatalf("wrap %q: exit %d, want %d:\n%s", args, code, wantCode, out)
				}
				return string(out)
			}
			printed := run(0, path)
			if now, _ := os.ReadFile(path); string(now) != string(orig) || fileExists(path+wrapBackupSuffix) || fileExists(path+wrapUpstreamsSuffix) {
				t.Fatalf("wrap without --write changed the files")
			}
			if !strings.Contains(printed, "printed, nothing written; --write writes it to "+path) {
				t.Errorf("wrap does not say that it wrote nothing:\n%s", printed)
			}
			out := run(0, "--write", path, "--db", filepath.Join(dir, "gw.db"))
			if !strings.Contains(out, "undo: ") || !strings.Contains(out, "gateway wrap --undo "+path) {
				t.Errorf("wrap --write does not say how to undo it:\n%s", out)
			}
			if got, _ := os.ReadFile(path + wrapBackupSuffix); string(got) != string(orig) {
				t.Errorf("the backup is not the original")
			}
			var wrapped map[string]json.RawMessage
			data, _ := os.ReadFile(path)
			if err := json.Unmarshal(data, &wrapped); err != nil {
				t.Fatal(err)
			}
			if string(wrapped["keep"]) != `"this member"` {
				t.Errorf("wrap lost the file's other members:\n%s", data)
			}
			var servers map[string]struct {
				Type    string   `json:"type"`
				Command string   `json:"command"`
				Args    []string `json:"args"`
			}
			if err := json.Unmarshal(wrapped[key], &servers); err != nil || len(servers) != 1 {
				t.Fatalf("wrapped %s: %v\n%s", key, err, data)
			}
			e := servers[wrapEntry]
			wantType := map[string]string{claudeKey: "", vscodeKey: "stdio"}[key]
			if e.Type != wantType || !filepath.IsAbs(e.Command) || !slices.Equal(e.Args[:3], []string{"gateway", "--stdio", "--mcp-config"}) || e.Args[3] != path+wrapUpstreamsSuffix {
				t.Errorf("the wrapped entry is %+v", e)
			}
			if !strings.Contains(printed, e.Args[3]) {
				t.Errorf("the printed config differs from the written one:\n%s\n%s", printed, data)
			}
			if info, err := os.Stat(e.Args[3]); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("the servers' copy (their env is credentials) is not the user's alone: %v %v", info.Mode(), err)
			}
			callBoth(t, dir, append([]string{e.Command}, e.Args...))
			if out := run(exitUsage, "--write", path); !strings.Contains(out, "is wrapped already") {
				t.Errorf("wrapping twice: %s", out)
			}
			os.WriteFile(filepath.Join(dir, "other.json"), orig, 0o600)
			os.WriteFile(filepath.Join(dir, "other.json.bak"), []byte("an earlier one"), 0o600)
			if out := run(exitUsage, "--write", filepath.Join(dir, "other.json")); !strings.Contains(out, "other.json.bak exists") {
				t.Errorf("overwriting a backup: %s", out)
			}
			if out := run(exitUsage, "--undo", filepath.Join(dir, "other.json")); !strings.Contains(out, "is not wrapped (changed since?): give --force") {
				t.Errorf("undoing over a file not wrapped: %s", out)
			}
			run(0, "--undo", path)
			if now, _ := os.ReadFile(path); string(now) != string(orig) || fileExists(path+wrapBackupSuffix) || fileExists(path+wrapUpstreamsSuffix) {
				t.Errorf("undo did not put the original back alone:\n%s", now)
			}
			if out := run(exitUsage, "--undo", path); !strings.Contains(out, "there is nothing to put back") {
				t.Errorf("undoing twice: %s", out)
			}
		})
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// The README's --mcp-config and wrap lines work as written, in order, on
// a .mcp.json of two servers: the gateway serves both; wrap prints and
// writes nothing; wrap --write makes the file's one entry a gateway a
// client runs to reach both; wrap --undo puts the file back as it was.
func TestReadmeMCPConfigLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".mcp.json")
	if err := os.Rename(writeTwoServers(t, dir, claudeKey), path); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(path)
	var lines []readmeLine
	for _, l := range readmeLinesWith(t, "bin/mcprel gateway ") {
		if strings.Contains(l.text, ".mcp.json") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("found %d README lines of --mcp-config and wrap, want 4; change this test with them", len(lines))
	}
	for _, l := range lines {
		words, err := splitCommand(strings.NewReplacer("bin/mcprel", binary, "$PWD", dir, ".mcp.json", path).Replace(l.text))
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		if words[2] == "--stdio" {
			callBoth(t, dir, words)
			t.Logf("README.md:%d works: %s", l.number, l.text)
			continue
		}
		cmd := exec.Command(words[0], words[1:]...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("README.md:%d: %s: exit %d\n%s", l.number, l.text, code, out)
		}
		now, _ := os.ReadFile(path)
		switch words[3] {
		case path:
			if string(now) != string(orig) || !strings.Contains(string(out), `"`+wrapEntry+`": {`) {
				t.Errorf("README.md:%d: %s changed the file or printed no wrapped one:\n%s", l.number, l.text, out)
			}
		case "--write":
			var wrapped struct {
				MCPServers map[string]struct {
					Command string   `json:"command"`
					Args    []string `json:"args"`
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal(now, &wrapped); err != nil || len(wrapped.MCPServers) != 1 {
				t.Fatalf("README.md:%d: %s wrote %s (%v)", l.number, l.text, now, err)
			}
			e := wrapped.MCPServers[wrapEntry]
			callBoth(t, dir, append([]string{e.Command}, e.Args...))
		case "--undo":
			if string(now) != string(orig) {
				t.Errorf("README.md:%d: %s left %s", l.number, l.text, now)
			}
		}
		t.Logf("README.md:%d works: %s", l.number, l.text)
	}
}

// wrap writes --db into the client's file and prints it: a database URL
// holding a password is refused, and not echoed.
func TestGatewayWrapRefusesAPasswordInTheDatabase(t *testing.T) {
	dir := t.TempDir()
	path := writeTwoServers(t, dir, claudeKey)
	cmd := exec.Command(binary, "gateway", "wrap", "--db", "postgres://u:wrap-secret-pw@127.0.0.1/x", path)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "--db holds a password") || strings.Contains(string(out), "wrap-secret-pw") {
		t.Errorf("exit %d:\n%s", cmd.ProcessState.ExitCode(), out)
	}
	cmd = exec.Command(binary, "gateway", "wrap", "--db", "postgres://u@127.0.0.1/x", path)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "postgres://u@127.0.0.1/x") {
		t.Errorf("a URL without a password: %v\n%s", err, out)
	}
}
