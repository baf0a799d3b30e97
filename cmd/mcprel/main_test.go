package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
	dir, err := os.MkdirTemp("", "mcprel-cmd-test")
	if err != nil {
		panic(err)
	}
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

func TestDemo(t *testing.T) {
	out, err := exec.Command(binary, "demo", "-width", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("mcprel demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		`← {"jsonrpc":"2.0","id":4,"result"`, // the count finished
		`"progressToken":"count-4","progress":3`,
		`msg=request id=5 method=tools/call tool=slow_count outcome=cancelled`,
		`msg="handler returned after the request ended; result discarded" id=5`,
		`msg=request id=7 method=tools/call tool=echo outcome=completed`,
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

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"serve", "--max-concurrent", "0"},
		{"serve", "--log-format", "xml"},
		{"serve", "--log-level", "loud"},
		{"serve", "extra"},
	} {
		cmd := exec.Command(binary, args...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("mcprel %v: err %v, want exit status 2\n%s", args, err, out)
		}
	}
	if out, err := exec.Command(binary, "version").Output(); err != nil || !strings.HasPrefix(string(out), "mcprel ") {
		t.Errorf("mcprel version = %q, %v", out, err)
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

// startHTTP starts "mcprel serve --http 127.0.0.1:0" with args (and env
// added to the environment) in a temporary directory, and returns the
// endpoint URL it prints on its first stderr line.
func startHTTP(t *testing.T, env []string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	cmd.Dir = t.TempDir() // where the default ledger file goes
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
	go func() { // keep draining the log
		for lines.Scan() {
		}
	}()
	return url, cmd
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
