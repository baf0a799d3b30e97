package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/interop/everything"
	"github.com/mcprel/mcprel/internal/oauthtest"
)

// readmeLine is a command line of one of the README's sh blocks, with the
// lines its trailing backslashes continue joined to it, and its trailing
// comment removed.
type readmeLine struct {
	number int // in README.md
	text   string
}

// readmeShellLines returns every command line of the README's sh blocks.
func readmeShellLines(t *testing.T) []readmeLine {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []readmeLine
	var cur *readmeLine
	inBlock := false
	for i, l := range strings.Split(string(data), "\n") {
		// A fence may be indented, in a list's item.
		if fence := strings.TrimLeft(l, " "); strings.HasPrefix(fence, "```") {
			inBlock = fence == "```sh"
			continue
		}
		trimmed := strings.TrimSpace(l)
		if !inBlock || (cur == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#"))) {
			continue
		}
		if cur == nil {
			lines = append(lines, readmeLine{number: i + 1})
			cur = &lines[len(lines)-1]
		} else {
			cur.text += " "
		}
		cur.text += strings.TrimSpace(strings.TrimSuffix(trimmed, "\\"))
		if !strings.HasSuffix(trimmed, "\\") {
			cur.text, _, _ = strings.Cut(cur.text, " #")
			cur.text = strings.TrimSpace(cur.text)
			cur = nil
		}
	}
	return lines
}

// Every command line the README shows is run by a test, as written: here,
// or by the test named for it. A line no test runs fails, so an example
// added to the README comes with its test.
func TestReadmeCommandLinesAreTested(t *testing.T) {
	runBy := []struct {
		pattern *regexp.Regexp
		test    string
	}{
		{regexp.MustCompile(`^go run \./cmd/mcprel demo$`), "TestReadmeDemoAndBuildLines"},
		{regexp.MustCompile(`^go build -o bin/mcprel \./cmd/mcprel$`), "TestReadmeDemoAndBuildLines"},
		{regexp.MustCompile(`^make check$`), ".ci/run (CI runs exactly this)"},
		{regexp.MustCompile(`^bin/mcprel serve --http \S+ --payout-url `), "TestReadmePayoutLine"},
		{regexp.MustCompile(`^bin/mcprel serve --http `), "TestReadmeCallAndReviewLines (starts the endpoint the call lines use)"},
		{regexp.MustCompile(`^bin/mcprel gateway .*--oauth-issuer `), "TestReadmeOAuthLine"},
		{regexp.MustCompile(`^bin/mcprel gateway (wrap |--stdio --db \S+ --mcp-config )`), "TestReadmeMCPConfigLines"},
		{regexp.MustCompile(`^bin/mcprel gateway --config examples/gateway/gateway\.yaml( --check)?$`), "TestReadmeConfigLines"},
		{regexp.MustCompile(`^bin/mcprel gateway --http 127\.0\.0\.1:8081 --db "\$PWD/gateway\.db" --upstream "everything=npx `), "TestReadmeGatewayLines (starts the endpoint its call lines use)"},
		{regexp.MustCompile(`^bin/mcprel call --url http://127\.0\.0\.1:8081/`), "TestReadmeGatewayLines"},
		{regexp.MustCompile(`^bin/mcprel (login|logout) `), "TestReadmeSignInLines"},
		{regexp.MustCompile(`^bin/mcprel ledger (list|resolve) --db "\$PWD/gateway\.db" `), "TestReadmeReconcileLines"},
		{regexp.MustCompile(`^bin/mcprel (call|review|probe) `), "TestReadmeCallAndReviewLines"},
		{regexp.MustCompile(`^npx -y @modelcontextprotocol/inspector@`), "TestReadmeCallAndReviewLines (in order, with the lines after it) and internal/interop/inspector TestReadmeInspectorLines"},
		{regexp.MustCompile(`^(git clone <this repository> mcprel|cd your-server && go mod init example\.com/your-server|go work init \. \.\./mcprel)$`), "TestReadmeLibrarySetup"},
	}
	lines := readmeShellLines(t)
	if len(lines) < 10 {
		t.Fatalf("found %d command lines in the README's sh blocks; the parser is broken", len(lines))
	}
	for _, l := range lines {
		covered := ""
		for _, r := range runBy {
			if r.pattern.MatchString(l.text) {
				covered = r.test
				break
			}
		}
		if covered == "" {
			t.Errorf("README.md:%d: no test runs %q: add it to a test and to this list", l.number, l.text)
		} else {
			t.Logf("README.md:%d %s: run by %s", l.number, l.text, covered)
		}
	}
}

// Every npx the README's code shows (a command line, a client's
// configuration) runs with -y: without it npx asks before it installs a
// package, and a client that starts it without a terminal, or a reader
// who pastes the line into a script, waits for an answer forever.
func TestReadmeNpxNeverAsks(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	npx := regexp.MustCompile(`\bnpx\s+(\S+)`)
	inCode, found := false, 0
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode && l != "```"
			continue
		}
		if !inCode {
			continue
		}
		for _, m := range npx.FindAllStringSubmatch(l, -1) {
			found++
			if m[1] != "-y" {
				t.Errorf("README.md:%d: npx without -y asks before it installs: %s", i+1, strings.TrimSpace(l))
			}
		}
	}
	if found == 0 {
		t.Fatal("found no npx in the README's code; the parser is broken")
	}
}

// The shell lines of the README and docs/ run the binary the README
// builds (bin/mcprel, after its go build line) or go run ./cmd/mcprel —
// never a bare mcprel, which nothing installs on the reader's PATH.
func TestDocsRunTheBinaryTheReadmeBuilds(t *testing.T) {
	docs, _ := filepath.Glob("../../docs/*.md")
	bare := regexp.MustCompile(`(^|[\s"'])mcprel\s`)
	checked := 0
	for _, file := range append(docs, "../../README.md") {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for i, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "```") {
				inBlock = l == "```sh"
				continue
			}
			if !inBlock || strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			checked++
			if code, _, _ := strings.Cut(l, " #"); bare.MatchString(code) {
				t.Errorf("%s:%d runs a bare mcprel, which nothing installs: %s", strings.TrimPrefix(file, "../../"), i+1, l)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no shell lines; the parser is broken")
	}
}

// readmeLinesWith returns the README's command lines that start with prefix.
func readmeLinesWith(t *testing.T, prefix string) []readmeLine {
	var out []readmeLine
	for _, l := range readmeShellLines(t) {
		if strings.HasPrefix(l.text, prefix) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("the README shows no %q line", prefix)
	}
	return out
}

// Every "mcprel call", "mcprel review" and "mcprel probe" command line the
// README shows works as written, in order, from the repository's root
// with $PWD a fresh directory, and so do the Inspector's lines before them
// (when `npm ci` installed it in internal/interop/inspector): run as a
// reader runs them, one after the other against one server — the README's
// "mcprel serve --http" line, started in $PWD, so that its ./mcprel.db is
// the $PWD/mcprel.db the stdio lines name — where they name
// http://127.0.0.1:8080/mcp. A line that stops working, or that works only
// on a database the lines before it did not touch, fails here.
func TestReadmeCallAndReviewLines(t *testing.T) {
	dir := t.TempDir()
	var serve readmeLine
	for _, l := range readmeLinesWith(t, "bin/mcprel serve --http ") {
		if !strings.Contains(l.text, "--payout-url") { // TestReadmePayoutLine's
			serve = l
			break
		}
	}
	words, err := splitCommand(serve.text)
	if err != nil || len(words) < 4 {
		t.Fatalf("README.md:%d: %q: %v", serve.number, serve.text, err)
	}
	url, _, _ := startEndpointIn(t, dir, nil, append([]string{"serve", "--http", words[3]}, words[4:]...)...)
	inspector := readmeInspector(t)
	var lines []readmeLine
	for _, l := range readmeShellLines(t) {
		if strings.Contains(l.text, gatewayURL) {
			continue // TestReadmeGatewayLines
		}
		if strings.HasPrefix(l.text, readmeNpxInspector+" ") {
			lines = append(lines, l)
		}
		for _, cmd := range []string{"call", "review", "probe"} {
			if strings.HasPrefix(l.text, "bin/mcprel "+cmd+" ") {
				lines = append(lines, l)
			}
		}
	}
	for _, l := range lines {
		if inspector == "" && strings.HasPrefix(l.text, readmeNpxInspector) {
			t.Logf("README.md:%d not run: the Inspector is not installed in internal/interop/inspector", l.number)
			continue
		}
		cmdline := strings.NewReplacer(readmeNpxInspector, inspector, "http://127.0.0.1:8080/mcp", url, "$PWD", dir, "bin/mcprel", binary).Replace(l.text)
		words, err := splitCommand(cmdline)
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		cmd := exec.Command(words[0], words[1:]...)
		cmd.Dir = "../.."
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("README.md:%d: %s\nexit %d\n%s\n%s", l.number, l.text, code, clipText(out.String()), errb.String())
			continue
		}
		t.Logf("README.md:%d works: %s", l.number, l.text)
	}
}

// readmeNpxInspector is how the README starts the Inspector.
const readmeNpxInspector = "npx -y @modelcontextprotocol/inspector@2.12.0"

// readmeInspector is the command line that runs the Inspector `npm ci`
// installed in internal/interop/inspector, pinned to the README's
// version, standing in for what npx would download: "" when it is not
// installed, unless MCPREL_REQUIRE_INTEROP=1 makes that a failure.
func readmeInspector(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../internal/interop/inspector/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(dir, ".bin", "node")
	launcher := filepath.Join(dir, "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	for _, f := range []string{node, launcher} {
		if _, err := os.Stat(f); err != nil {
			if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
				t.Fatalf("the Inspector is not installed: run `npm ci` in internal/interop/inspector (MCPREL_REQUIRE_INTEROP=1): %v", err)
			}
			return ""
		}
	}
	return strings.Join(quoted([]string{node, launcher}), " ")
}

// gatewayURL is the endpoint the README's gateway line serves.
const gatewayURL = "http://127.0.0.1:8081/mcp"

// The README's "mcprel gateway" line and the call lines that use it work
// as written, in order, with server-everything as `npm ci` installed it
// in internal/interop/everything standing in for what `npx -y` would
// download, and a free port for 8081: its echo answers, its long-running
// operation reports progress to the end.
func TestReadmeGatewayLines(t *testing.T) {
	everything.Require(t)
	dir := t.TempDir()
	var gw readmeLine
	for _, l := range readmeLinesWith(t, "bin/mcprel gateway ") {
		if !strings.Contains(l.text, "--oauth-issuer") && !strings.Contains(l.text, "--config") { // TestReadmeOAuthLine's, TestReadmeConfigLines'
			gw = l
			break
		}
	}
	npx := "npx -y @modelcontextprotocol/server-everything@2026.8.31"
	if !strings.Contains(gw.text, npx) || !strings.Contains(gw.text, "127.0.0.1:8081") {
		t.Fatalf("README.md:%d: %q no longer runs %q on 127.0.0.1:8081; change this test with it", gw.number, gw.text, npx)
	}
	local := strings.Join(quoted(everything.Command(t)), " ")
	cmdline := strings.NewReplacer(npx, local, "127.0.0.1:8081", "127.0.0.1:0", "$PWD", dir).Replace(gw.text)
	words, err := splitCommand(cmdline)
	if err != nil {
		t.Fatalf("README.md:%d: %v", gw.number, err)
	}
	url, _, _ := startEndpoint(t, nil, words[1:]...)
	want := map[string]string{"echo": "Echo: hello", "trigger-long-running-operation": "Long running operation completed"}
	for _, l := range readmeLinesWith(t, "bin/mcprel call --url "+gatewayURL) {
		words, err := splitCommand(strings.NewReplacer(gatewayURL, url, "bin/mcprel", binary).Replace(l.text))
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		cmd := exec.Command(words[0], words[1:]...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("README.md:%d: %s\nexit %d\n%s\n%s", l.number, l.text, code, clipText(out.String()), errb.String())
			continue
		}
		tool := words[4]
		if !strings.Contains(out.String(), want[tool]) {
			t.Errorf("README.md:%d: %s printed %s, want %q in it", l.number, l.text, clipText(out.String()), want[tool])
		}
		if tool == "trigger-long-running-operation" && !strings.Contains(errb.String(), "4/4") && !strings.Contains(errb.String(), "progress 4") {
			t.Errorf("README.md:%d: no progress to the last step on stderr:\n%s", l.number, errb.String())
		}
		t.Logf("README.md:%d works: %s", l.number, l.text)
	}
}

// The README's OAuth line works as written, a test authorization server
// standing in for auth.example.com and the local server-everything for
// npx: its metadata names the public URL and the issuer, a call without
// a token is challenged to find them, and a token issued for the public
// URL calls a tool.
func TestReadmeOAuthLine(t *testing.T) {
	everything.Require(t)
	dir := t.TempDir()
	l := readmeLinesWith(t, "bin/mcprel gateway --http 127.0.0.1:8080 --public-url https://mcp.example.com/mcp")[0]
	as := oauthtest.New(t, oauthtest.Options{})
	npx := "npx -y @modelcontextprotocol/server-everything@2026.8.31"
	local := strings.Join(quoted(everything.Command(t)), " ")
	cmdline := strings.NewReplacer(npx, local, "127.0.0.1:8080", "127.0.0.1:0", "$PWD", dir, "https://auth.example.com", as.Issuer()).Replace(l.text)
	words, err := splitCommand(cmdline)
	if err != nil {
		t.Fatalf("README.md:%d: %v", l.number, err)
	}
	url, _, _ := startEndpoint(t, nil, words[1:]...)
	const public = "https://mcp.example.com/mcp"
	resp, err := http.Get(strings.TrimSuffix(url, "/mcp") + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var prm map[string]any
	json.NewDecoder(resp.Body).Decode(&prm)
	resp.Body.Close()
	if prm["resource"] != public || !jsonHas(prm["authorization_servers"], as.Issuer()) {
		t.Fatalf("README.md:%d: the metadata is %v", l.number, prm)
	}
	status, challenge, _ := oauthPost(t, url, "", modernCall(1, "echo", `{"message":"hello"}`), nil)
	if status != 401 || !strings.Contains(challenge, `resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("README.md:%d: without a token: %d %s", l.number, status, challenge)
	}
	token := as.Token(t, oauthtest.Claims{Subject: "alice", Audience: []string{public}, Scope: "mcp:tools"})
	c, err := client.DialHTTP(t.Context(), url, &client.Options{Header: map[string][]string{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.CallTool(t.Context(), "echo", map[string]any{"message": "hello"}, nil)
	var content []byte
	if err == nil {
		content, _ = json.Marshal(res.Content)
	}
	if err != nil || res.IsError || !strings.Contains(string(content), "Echo: hello") {
		t.Fatalf("README.md:%d: echo with a token: %v %+v", l.number, err, res)
	}
}

// quoted is words as shell words, each double-quoted.
func quoted(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = strconv.Quote(w)
	}
	return out
}

// The README's first commands: the demo, run with go run from the
// repository's root, and the build of the binary a client is pointed at.
func TestReadmeDemoAndBuildLines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo")
	}
	bin := filepath.Join(t.TempDir(), "bin", "mcprel")
	for _, l := range []readmeLine{readmeLinesWith(t, "go build -o bin/mcprel ")[0], readmeLinesWith(t, "go run ./cmd/mcprel demo")[0]} {
		words := strings.Fields(strings.ReplaceAll(l.text, "bin/mcprel", bin))
		cmd := exec.Command(words[0], words[1:]...)
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v\n%s", l.number, l.text, err, clipText(string(out)))
		}
		if strings.Contains(l.text, "demo") && !strings.Contains(string(out), "== lab:") {
			t.Errorf("README.md:%d: the demo printed no records:\n%s", l.number, clipText(string(out)))
		}
	}
	if _, err := os.Stat(bin); err != nil {
		t.Errorf("the README's go build line built nothing: %v", err)
	}
}

// The README's library set-up, as written, in a fresh directory beside a
// copy of this repository (standing in for the clone), builds the README's
// hello example: the set-up itself needs no network, and the build needs
// no module but mcprel's own requirements.
func TestReadmeLibrarySetup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "mcprel")); err != nil { // git clone <this repository> mcprel
		t.Fatal(err)
	}
	server := filepath.Join(dir, "your-server")
	if err := os.Mkdir(server, 0o755); err != nil {
		t.Fatal(err)
	}
	hello, err := os.ReadFile(filepath.Join(root, "examples", "hello", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(server, "main.go"), hello, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, l := range readmeShellLines(t) {
		switch {
		case strings.HasPrefix(l.text, "cd your-server && "):
			run(server, strings.Fields(strings.TrimPrefix(l.text, "cd your-server && "))...)
		case strings.HasPrefix(l.text, "go work init "):
			run(server, strings.Fields(l.text)...)
		}
	}
	// The build may reach the module proxy, as a user's first build does:
	// a workspace loads the go.mod of every module mcprel requires, which
	// a build of mcprel alone never fetches (go-isatty, say), so on a
	// fresh module cache an offline build fails where the user's works.
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "hello"), ".")
	cmd.Dir = server
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in the README's workspace: %v\n%s", err, out)
	}
}

// The README's "mcprel serve --payout-url" line works as written, with a
// provider of the test's own in place of its example URL and the token in
// MCPREL_PAYOUT_TOKEN, as it says: a payout is delivered there, once,
// carrying the token.
func TestReadmePayoutLine(t *testing.T) {
	l := readmeLinesWith(t, "bin/mcprel serve --http 127.0.0.1:0 --payout-url ")[0]
	words, err := splitCommand(strings.ReplaceAll(l.text, "bin/mcprel", binary))
	if err != nil || len(words) != 6 {
		t.Fatalf("README.md:%d: %q: %v; change this test with it", l.number, l.text, err)
	}
	p := startProvider(t, "readme-token")
	words[5] = p.url
	url, _, _ := startEndpoint(t, []string{"MCPREL_PAYOUT_TOKEN=readme-token"}, words[1:]...)
	c, err := client.DialHTTP(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, d := payout(t, c, "reader", 42, "readme-1"); d.State != "delivered" {
		t.Fatalf("README.md:%d: the payout's delivery is %+v", l.number, d)
	}
	if paid, _ := p.Paid(context.Background(), "reader"); paid.Payouts != 1 {
		t.Fatalf("README.md:%d: the provider paid %+v", l.number, paid)
	}
}

// The README's sign-in lines work as written, in order: login against a
// server that wants OAuth (mcprel serve --oauth-issuer, with a test
// authorization server, on a free port for 8080) signs in through the
// browser (the test binary plays it), the call lines after it are served
// without another sign-in, and logout forgets the tokens.
func TestReadmeSignInLines(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	endpoint, _, _ := startEndpoint(t, nil, "serve", "--http", "127.0.0.1:0", "--oauth-issuer", as.Issuer(), "--oauth-scopes", "mcp:tools")
	login := readmeLinesWith(t, "bin/mcprel login ")[0]
	logout := readmeLinesWith(t, "bin/mcprel logout ")[0]
	if logout.number < login.number {
		t.Fatalf("README.md:%d: logout comes before login; change this test with it", logout.number)
	}
	dir := filepath.Join(t.TempDir(), "oauth")
	env := signInEnv(t, dir, "approve")
	ran := 0
	for _, l := range readmeShellLines(t) {
		if l.number < login.number || l.number > logout.number {
			continue
		}
		words, err := splitCommand(strings.NewReplacer("http://127.0.0.1:8080/mcp", endpoint, "bin/mcprel", binary).Replace(l.text))
		if err != nil {
			t.Fatalf("README.md:%d: %v", l.number, err)
		}
		out, errs, code := mcprelEnv(t, env, words[1:]...)
		want := map[string]string{"login": "signed in to " + endpoint, "call": `"text": "hi"`, "logout": "signed out of " + endpoint}[words[1]]
		if code != 0 || want == "" || !strings.Contains(out, want) {
			t.Fatalf("README.md:%d: %s\nexit %d, want %q in\n%s\n%s", l.number, l.text, code, want, clipText(out), errs)
		}
		if signedIn := strings.Contains(errs, "asks you to sign in"); signedIn != (words[1] == "login") {
			t.Fatalf("README.md:%d: %s: signed in: %v\n%s", l.number, l.text, signedIn, errs)
		}
		ran++
		t.Logf("README.md:%d works: %s", l.number, l.text)
	}
	if ran < 3 || len(as.AuthorizationRequests()) != 1 {
		t.Fatalf("ran %d lines, with %d authorization requests", ran, len(as.AuthorizationRequests()))
	}
}
