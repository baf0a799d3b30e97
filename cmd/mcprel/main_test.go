package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binary is the mcprel command built once for these tests: they run it the
// way a user or an MCP client does, as a child process.
var binary string

// raceEnabled builds the child with -race under go test -race (race_test.go).
var raceEnabled bool

func TestMain(m *testing.M) {
	if file := os.Getenv(mailerEnv); file != "" {
		serveMailer(file) // a gateway started this binary as its upstream
		return
	}
	if mode := os.Getenv(browserEnv); mode != "" {
		os.Exit(playBrowser(mode, os.Args[len(os.Args)-1])) // mcprel opened it as $BROWSER
	}
	dir, err := os.MkdirTemp("", "mcprel-cmd-test")
	if err != nil {
		panic(err)
	}
	// No test signs in where the user's own sign-ins are kept; one that
	// signs in gives a directory of its own.
	os.Setenv("MCPREL_OAUTH_DIR", filepath.Join(dir, "oauth"))
	os.Unsetenv("BROWSER")
	binary = filepath.Join(dir, "mcprel")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("building mcprel: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The scripted exchange of "mcprel demo --wire", frame by frame.
func TestDemoWire(t *testing.T) {
	out, err := exec.Command(binary, "demo", "--wire", "-width", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("mcprel demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		`← {"jsonrpc":"2.0","id":4,"result"`, // the count finished
		`"progressToken":"count-4","progress":3`,
		`msg=request id=5 method=tools/call era=legacy transport=stdio tool=slow_count outcome=cancelled`,
		`msg="handler returned after the request ended; result discarded" id=5`,
		`msg=request id=7 method=tools/call era=legacy transport=stdio tool=echo outcome=completed`,
		`"resultType":"complete"`,
		`"code":-32700`,
		// The ledger: one execution, replays, a conflict, a stored failure.
		`⇒ {"quantity":3,"remaining":7,"reservationId":`,
		`"version":2}; dev.mcprel/replayed=true`,
		`⇒ isError, code idempotency_conflict`,
		`⇒ isError, code insufficient_stock; dev.mcprel/replayed=true`,
		`⇒ isError, code version_conflict`,
		`dev.mcprel/retrySafe=false`,
		// After the restart the record and the stock are still there.
		`"executions":1,`,
		`⇒ {"available":7,"sku":"widget","version":2}`,
		// Tasks: created, completed with the result inlined, cancelled
		// at a checkpoint, and a report resumed by the next process.
		`"resultType":"task"`,
		`: completed, result inlined`,
		`⇒ acknowledged`,
		`: cancelled, cancelled: the worker observed the intent at a checkpoint`,
		`⇒ completed: 60 rows, checksum ` + expectedChecksum(60) + `, worked on by 2 processes`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(text, `"id":5,"result"`) || strings.Contains(text, `"id":5,"error"`) {
		t.Error("the demo's cancelled request 5 got a response")
	}
	if t.Failed() {
		t.Log(text)
	}
}

// Every mistake in a command line exits 2 with a message naming the flag
// as the user typed it, and touches nothing: no database is created.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Commands:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"serve", "--max-concurrent", "0"}, "--max-concurrent must be at least 1, not 0"},
		{[]string{"serve", "--max-queued", "-1"}, "--max-queued must be at least 1, not -1"},
		{[]string{"serve", "--max-message-bytes", "0"}, "--max-message-bytes must be at least 1"},
		{[]string{"serve", "--shutdown-grace", "-1s"}, "--shutdown-grace must not be negative"},
		{[]string{"serve", "--max-tasks", "0"}, "--max-tasks must be at least 1, not 0"},
		{[]string{"serve", "--max-tasks-per-tenant", "-1"}, "--max-tasks-per-tenant must be at least 1, not -1"},
		{[]string{"serve", "--task-workers", "2", "--max-running-per-tenant", "3"}, "--max-running-per-tenant must be between 1 and --task-workers (2), not 3"},
		{[]string{"serve", "--log-format", "xml"}, `--log-format must be text or json, not "xml"`},
		{[]string{"serve", "--log-level", "loud"}, `--log-level must be debug, info, warn or error, not "loud"`},
		{[]string{"serve", "extra"}, `serve: unexpected argument "extra"`},
		{[]string{"serve", "--bogus"}, "serve: unknown flag --bogus (mcprel serve -h lists the flags)"},
		{[]string{"serve", "--max-concurrent", "many"}, `invalid value "many" for flag -max-concurrent`},
		{[]string{"serve", "--stdio", "--http", "127.0.0.1:0"}, "choose one of --stdio and --http"},
		{[]string{"serve", "--http", "localhost"}, `--http wants HOST:PORT`},
		{[]string{"serve", "--http", "127.0.0.1:99999"}, `--http "127.0.0.1:99999": the port must be a number from 0 to 65535`},
		{[]string{"gateway", "--upstream", "a=cat", "--http", "127.0.0.1:-1"}, `--http "127.0.0.1:-1": the port must be a number from 0 to 65535`},
		{[]string{"serve", "--metrics", "127.0.0.1:70000"}, `--metrics "127.0.0.1:70000": the port must be a number from 0 to 65535`},
		{[]string{"serve", "--http", "127.0.0.1:0", "--path", "mcp"}, `--path must be a URL path starting with "/"`},
		{[]string{"serve", "--path", "/x"}, "--path applies to --http only"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--token", "alice"}, `--token wants TENANT=TOKEN, a tenant's name and its token (one of them is missing)`},
		{[]string{"serve", "--http", "127.0.0.1:0", "--allowed-origin", "example.com"}, "--allowed-origin wants scheme://host[:port]"},
		{[]string{"serve", "--synchronous", "fast"}, `--synchronous must be FULL or NORMAL, not "fast"`},
		{[]string{"serve", "--retention", "0s"}, "--retention must be positive"},
		{[]string{"serve", "--db", ""}, "--db must name a SQLite file or a postgres:// URL; it is empty"},
		{[]string{"serve", "--db", "mysql://root@localhost/test"}, `--db: unsupported database URL scheme "mysql://"`},
		{[]string{"ledger"}, "usage: mcprel ledger show"},
		{[]string{"ledger", "show", "--tool", "x"}, "--tool and --key are required"},
		{[]string{"ledger", "show", "--tool", "x", "--key", "k", "--db", "mysql://x/y"}, "unsupported database URL scheme"},
		{[]string{"demo", "--width", "-1"}, "--width must not be negative"},
	} {
		cmd := exec.Command(binary, tc.args...)
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("mcprel %q: exit %d, want 2 and a message with %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("usage errors left files behind: %v", entries)
	}
	for _, v := range []string{"version", "--version", "-v"} {
		if out, err := exec.Command(binary, v).Output(); err != nil || !strings.HasPrefix(string(out), "mcprel ") {
			t.Errorf("mcprel %s = %q, %v", v, out, err)
		}
	}
}

// -h on every command prints its help and exits 0; a bad flag gets the
// flag package's one line and a pointer to -h, not every flag there is;
// a read-only command lists only the flags that mean something to it.
func TestHelpAndBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"serve", "-h"}, {"call", "-h"}, {"review", "-h"}, {"demo", "-h"},
		{"ledger", "-h"}, {"ledger", "--help"}, {"ledger", "show", "-h"},
	} {
		cmd := exec.Command(binary, args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 0 || len(out) == 0 {
			t.Errorf("mcprel %q: exit %d, want 0 and help:\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{"serve", "--bogus"}, {"ledger", "show", "--bogus"}, {"review", "--bogus"}, {"demo", "--bogus"}} {
		cmd := exec.Command(binary, args...)
		out, _ := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		want := fmt.Sprintf(`unknown flag --bogus (mcprel %s -h lists the flags`, strings.Join(args[:len(args)-1], " "))
		if code := cmd.ProcessState.ExitCode(); code != 2 || len(lines) > 3 || !strings.Contains(string(out), want) {
			t.Errorf("mcprel %q: exit %d, %d lines, want 2, a few lines and %q:\n%s", args, code, len(lines), want, out)
		}
	}
	out, _ := exec.Command(binary, "ledger", "show", "-h").CombinedOutput()
	for _, flag := range []string{"-retention", "-synchronous"} {
		if strings.Contains(string(out), flag) {
			t.Errorf("mcprel ledger show -h lists %s, which a read-only command ignores:\n%s", flag, out)
		}
	}
}

// An address that cannot be listened on (taken, say) is a failure
// (exit 1) that names it, and leaves nothing behind: the listeners are
// bound before the database is created.
func TestListenFailureCreatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	for _, args := range [][]string{
		{"serve", "--http", taken},
		{"serve", "--http", "127.0.0.1:0", "--metrics", taken},
		{"gateway", "--upstream", "a=" + binary + " serve --stdio", "--http", taken},
	} {
		dir := t.TempDir()
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), taken) {
			t.Errorf("mcprel %q: exit %d, want 1 and a message naming %s:\n%s", args, code, taken, out)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("mcprel %q failed to listen and left %v behind", args, entries)
		}
	}
}

// Help asked for is the output, not a complaint: -h and --help on every
// command print to stdout (so that it pipes into a pager), exit 0, and
// start with the command's synopsis, then a sentence that says what it
// does, before its flags.
func TestHelpGoesToStdout(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"gateway"}, {"call"}, {"review"}, {"probe"}, {"demo"}, {"ledger", "show"}, {"ledger", "resolve"}} {
		for _, h := range []string{"-h", "--help"} {
			c := exec.Command(binary, append(cmd, h)...)
			var out, errb bytes.Buffer
			c.Stdout, c.Stderr = &out, &errb
			c.Run()
			name := strings.Join(cmd, " ")
			lines := strings.Split(out.String(), "\n")
			if code := c.ProcessState.ExitCode(); code != 0 || errb.Len() > 0 {
				t.Errorf("mcprel %s %s: exit %d, stderr %q; want 0 and nothing on stderr", name, h, code, errb.String())
			}
			if !strings.HasPrefix(lines[0], "usage: mcprel "+name+" ") {
				t.Errorf("mcprel %s %s: the help starts with %q, want the synopsis \"usage: mcprel %s ...\"", name, h, lines[0], name)
			}
			sentence := ""
			for i, l := range lines {
				if l == "" && i+1 < len(lines) {
					sentence = lines[i+1]
					break
				}
			}
			if sentence == "" || strings.HasPrefix(strings.TrimSpace(sentence), "-") {
				t.Errorf("mcprel %s %s: no sentence after the synopsis:\n%s", name, h, out.String())
			}
			if !strings.Contains(out.String(), "  -") {
				t.Errorf("mcprel %s %s lists no flags:\n%s", name, h, out.String())
			}
		}
	}
}

// A database that cannot be opened is a failure (exit 1) that says why.
func TestDatabaseErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--stdio", "--db", filepath.Join(dir, "missing", "x.db")}, "its directory " + filepath.Join(dir, "missing") + " does not exist"},
		{[]string{"serve", "--stdio", "--db", dir}, "it is a directory"},
		{[]string{"ledger", "show", "--tool", "x", "--key", "k", "--db", filepath.Join(dir, "absent.db")}, "no such file"},
	} {
		cmd := exec.Command(binary, tc.args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "(14)") {
			t.Errorf("mcprel %q: exit %d, want 1 and a message with %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}

// child is a running "mcprel serve --stdio".
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *bytes.Buffer
}

func startServe(t *testing.T, args ...string) *child {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--stdio"}, args...)...)
	cmd.Dir = t.TempDir() // where the default ledger file goes
	c := &child{t: t, cmd: cmd, lines: make(chan string, 256), stderr: &bytes.Buffer{}}
	cmd.Stderr = c.stderr
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return c
}

func (c *child) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, s+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *child) next() (string, bool) {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		return l, ok
	case <-time.After(20 * time.Second):
		c.t.Fatal("no output from the server")
	}
	return "", false
}

func (c *child) wait() int {
	c.t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.t.Fatal("the server did not exit")
	}
	return c.cmd.ProcessState.ExitCode()
}

const countCall = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_count","arguments":{"steps":%STEPS%,"intervalMs":100},"_meta":{"progressToken":"t","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`

// TestSIGTERMLetsRunningCallsFinish: on SIGTERM the server stops taking new
// work but lets a running call finish within the grace, then exits 0.
func TestSIGTERMLetsRunningCallsFinish(t *testing.T) {
	c := startServe(t, "--shutdown-grace", "30s")
	c.send(strings.Replace(countCall, "%STEPS%", "3", 1))
	if l, _ := c.next(); !strings.Contains(l, `"progress":1`) {
		t.Fatalf("first frame %s, want progress", l)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	var sawResult bool
	for {
		l, ok := c.next()
		if !ok {
			break
		}
		var f struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		json.Unmarshal([]byte(l), &f)
		if f.ID != nil && *f.ID == 2 && strings.Contains(string(f.Result), `"counted":3`) {
			sawResult = true
		}
	}
	if !sawResult {
		t.Fatalf("the running call's result was not written before exit\nstderr:\n%s", c.stderr)
	}
	if code := c.wait(); code != 0 {
		t.Fatalf("exit status %d, want 0\nstderr:\n%s", code, c.stderr)
	}
}

// TestSIGTERMCancelsAfterGrace: a call still running when the grace ends is
// cancelled (no response) and the server exits.
func TestSIGTERMCancelsAfterGrace(t *testing.T) {
	c := startServe(t, "--shutdown-grace", "1ms")
	c.send(strings.Replace(countCall, "%STEPS%", "100000", 1))
	if l, _ := c.next(); !strings.Contains(l, `"progress":1`) {
		t.Fatalf("first frame %s, want progress", l)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	for {
		l, ok := c.next()
		if !ok {
			break
		}
		if strings.Contains(l, `"id":2,`) {
			t.Fatalf("a call cancelled by shutdown got a response: %s", l)
		}
	}
	c.wait()
	if !strings.Contains(c.stderr.String(), `outcome=cancelled`) || !strings.Contains(c.stderr.String(), `cause="server shutting down"`) {
		t.Fatalf("log does not record the cancellation by shutdown:\n%s", c.stderr)
	}
}

// TestEOFExitsPromptly: closing stdin ends the server even with a call in
// flight, which is cancelled.
func TestEOFExitsPromptly(t *testing.T) {
	c := startServe(t)
	c.send(strings.Replace(countCall, "%STEPS%", "100000", 1))
	c.next()
	c.in.Close()
	for {
		if _, ok := c.next(); !ok {
			break
		}
	}
	if code := c.wait(); code != 0 {
		t.Fatalf("exit status %d\n%s", code, c.stderr)
	}
	if !strings.Contains(c.stderr.String(), `cause="connection closed"`) {
		t.Fatalf("log lacks the cancellation:\n%s", c.stderr)
	}
}

// A client that closes the server's stderr as soon as it closes stdin (as
// mcp-go's stdio client does) must not kill the server with SIGPIPE while it
// logs the end of the connection: it exits 0.
func TestClosedStderrDoesNotKill(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--stdio", "--db", filepath.Join(t.TempDir(), "ledger.db"))
	stderr, _ := cmd.StderrPipe()
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	stderr.Close()
	// Every request logs a line to the closed stderr; the answers still come.
	lines := bufio.NewScanner(out)
	for i := 1; i <= 3; i++ {
		io.WriteString(in, modernCall(i, "echo", `{"text":"hi"}`)+"\n")
		if !lines.Scan() || !strings.Contains(lines.Text(), `"hi"`) {
			t.Fatalf("call %d: %q, %v", i, lines.Text(), lines.Err())
		}
	}
	in.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server ended with %v, want exit status 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit on EOF")
	}
}

// startHTTP starts "mcprel serve --http 127.0.0.1:0" with args (and env
// added to the environment) in a temporary directory, and returns the
// endpoint URL it prints on its first stderr line.
func startHTTP(t *testing.T, env []string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	url, cmd, _ := startHTTPAt(t, "127.0.0.1:0", env, args...)
	return url, cmd
}

// startHTTPAt is startHTTP on addr; it also returns the stderr lines that
// follow the URL, as they come.
func startHTTPAt(t *testing.T, addr string, env []string, args ...string) (string, *exec.Cmd, <-chan string) {
	t.Helper()
	return startEndpoint(t, env, append([]string{"serve", "--http", addr}, args...)...)
}

// startEndpoint runs mcprel with args, a command that serves HTTP and
// prints its endpoint URL first on stderr (serve, gateway).
func startEndpoint(t *testing.T, env []string, args ...string) (string, *exec.Cmd, <-chan string) {
	t.Helper()
	return startEndpointIn(t, t.TempDir(), env, args...)
}

// startEndpointIn is startEndpoint in dir, where the default ledger file
// goes.
func startEndpointIn(t *testing.T, dir string, env []string, args ...string) (string, *exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	if !lines.Scan() {
		t.Fatal("no output on stderr")
	}
	url := lines.Text()
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") {
		t.Fatalf("first stderr line %q is not the endpoint URL", url)
	}
	rest := make(chan string, 64)
	go func() { // keep draining the log
		defer close(rest)
		for lines.Scan() {
			select {
			case rest <- lines.Text():
			default: // nobody is reading them
			}
		}
	}()
	return url, cmd, rest
}

// Bound to every interface, the server prints a URL a client can use (a
// loopback host, which its Host check accepts, not [::]) and says which
// Host and Origin values it accepts.
func TestServeHTTPOnAllInterfaces(t *testing.T) {
	url, _, rest := startHTTPAt(t, "0.0.0.0:0", nil, "--auth-token", "secret", "--allowed-host", "mcp.example.com")
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(modernCall(1, "echo", `{"text":"hi"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("the printed URL %s answered %d %s", url, resp.StatusCode, body)
	}
	timeout := time.After(20 * time.Second) // a safety net: the line comes before the URL is served
	for {
		select {
		case line := <-rest:
			if !strings.Contains(line, "the Host header must name an allowed host") {
				continue
			}
			if !strings.Contains(line, "mcp.example.com") || !strings.Contains(line, "127.0.0.1") {
				t.Errorf("the allowed hosts line does not list them: %s", line)
			}
			return
		case <-timeout:
			t.Fatal("no stderr line says which Host values are allowed")
		}
	}
}

// TestServeHTTP: --http prints the endpoint on a line of its own, serves
// both eras there, and on SIGTERM lets a running call finish, then exits 0.
func TestServeHTTP(t *testing.T) {
	url, cmd := startHTTP(t, nil, "--shutdown-grace", "30s")

	post := func(body, method, name string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	resp := post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"over http"},`+meta+`}}`, "tools/call", "echo")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "over http") {
		t.Fatalf("echo over HTTP: %d %s", resp.StatusCode, body)
	}

	// A long call with progress, then SIGTERM once it is running.
	slow := post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_count","arguments":{"steps":3,"intervalMs":100},`+meta[:len(meta)-1]+`,"progressToken":"p"}}}`, "tools/call", "slow_count")
	events := bufio.NewScanner(slow.Body)
	for events.Scan() && !strings.Contains(events.Text(), `"progress":1`) {
	}
	cmd.Process.Signal(syscall.SIGTERM)
	var sawResult bool
	for events.Scan() {
		if strings.Contains(events.Text(), `"id":2,"result"`) && strings.Contains(events.Text(), `"counted":3`) {
			sawResult = true
		}
	}
	if !sawResult {
		t.Fatal("the running call did not finish during the graceful shutdown")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit after SIGTERM")
	}
}
