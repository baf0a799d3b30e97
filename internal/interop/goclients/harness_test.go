// Package goclients_test runs the interop scenario with the Go clients
// nobody here wrote — the official Go SDK (github.com/modelcontextprotocol/
// go-sdk) and mcp-go (github.com/mark3labs/mcp-go) — against `mcprel serve`
// over stdio and Streamable HTTP, in both protocol eras. It is a module of
// its own so that those SDKs never enter mcprel's dependencies.
package goclients_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/interop/scenario"
)

// binary is mcprel, built once for the package (with -race under go test
// -race, so the server is race-checked under each client's load).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcprel-goclients")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "mcprel")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	// Built in mcprel's own module, with its own dependencies.
	build := exec.Command("go", append(args, "./cmd/mcprel")...)
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("building mcprel: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitLimit bounds every wait: reaching it fails the test; a passing run
// never comes near it.
const waitLimit = 30 * time.Second

// serverLog collects the JSON log lines of one mcprel process.
type serverLog struct {
	mu      sync.Mutex
	lines   []map[string]any
	changed chan struct{}
}

func newServerLog() *serverLog { return &serverLog{changed: make(chan struct{})} }

// Write takes log output (one JSON record per line).
func (l *serverLog) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			rec = map[string]any{"msg": "(not JSON) " + sc.Text()}
		}
		l.mu.Lock()
		l.lines = append(l.lines, rec)
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	}
}

// await waits for a record matching all of want and returns it.
func (l *serverLog) await(t *testing.T, what string, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		l.mu.Lock()
		i := slices.IndexFunc(l.lines, func(rec map[string]any) bool { return matches(rec, want) })
		var rec map[string]any
		if i >= 0 {
			rec = l.lines[i]
		}
		changed := l.changed
		l.mu.Unlock()
		if rec != nil {
			return rec
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the server never logged %s (%v)\n%s", what, want, l)
		}
	}
}

// count returns how many records match want.
func (l *serverLog) count(want map[string]any) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rec := range l.lines {
		if matches(rec, want) {
			n++
		}
	}
	return n
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, rec := range l.lines {
		line, _ := json.Marshal(rec)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func matches(rec, want map[string]any) bool {
	for k, v := range want {
		if fmt.Sprint(rec[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// stdioServer returns the command line and log of a stdio server the
// client will spawn, on a fresh ledger. The log fills as the server writes.
func stdioServer(t *testing.T) (*exec.Cmd, *serverLog) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(binary, "serve", "--stdio", "--db", filepath.Join(dir, "ledger.db"), "--log-format", "json")
	log := newServerLog()
	r, w := io.Pipe()
	cmd.Stderr = w
	go log.consume(r)
	t.Cleanup(func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		w.Close()
	})
	return cmd, log
}

// httpServer starts `mcprel serve --http` on a fresh ledger and returns its
// endpoint URL and log.
func httpServer(t *testing.T) (string, *serverLog) {
	t.Helper()
	url, rest := startListening(t, "serve", "--http", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "ledger.db"), "--log-format", "json")
	log := newServerLog()
	go log.consume(rest)
	return url, log
}

// startListening runs mcprel with args, which make it listen over HTTP,
// and returns the endpoint URL it prints first on stderr and the rest of
// its stderr, which the caller must drain.
func startListening(t *testing.T, args ...string) (string, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	br := bufio.NewReader(stderr)
	url, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(url, "http://") {
		t.Fatalf("mcprel %s printed %q, %v", strings.Join(args[:2], " "), url, err)
	}
	return strings.TrimSpace(url), br
}

// peer is one client library connected to one server, in one era.
type peer interface {
	// tools lists the tools' names.
	tools(ctx context.Context) ([]string, error)
	// call runs a step and returns the result as received, re-encoded as
	// JSON; onProgress, if set, asks for progress and gets each value.
	// A progress handler stays registered after the call returns, since
	// the last notification may be handled after the response.
	call(ctx context.Context, step scenario.Step, onProgress func(float64)) (json.RawMessage, error)
	close() error
}

// cancelBehaviour is how a client's cancellation shows on the server.
type cancelBehaviour struct {
	// cause is the cancellation's cause in the server's log: what the
	// client signalled.
	cause string
	// gap describes a peer defect that makes the server unable to see
	// the cancellation; the test then checks that the call went on until
	// the client left, and ended then with cause.
	gap string
}

// runScenario runs the whole script through p and judges every answer,
// then the progress and cancellation steps against the server's log.
func runScenario(t *testing.T, p peer, log *serverLog, cancel cancelBehaviour) {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), 2*waitLimit)
	defer stop()
	s := scenario.Load()

	names, err := p.tools(ctx)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	slices.Sort(names)
	if !slices.Equal(names, s.Tools) {
		t.Errorf("tools/list = %v, want %v", names, s.Tools)
	}

	run := &scenario.Run{}
	for _, step := range s.Steps {
		res, err := p.call(ctx, step, nil)
		if err != nil {
			t.Errorf("%s: the client failed: %v", step.Name, err)
			continue
		}
		if problem := run.Judge(step, res); problem != "" {
			t.Errorf("%s: %s\n%s", step.Name, problem, res)
		}
	}

	// Progress: increasing values ending at the last step, then the result.
	// The server rate-limits progress (coalescing, newest wins) but always
	// writes the last value before the result. Clients hand notifications
	// to their handlers on another goroutine than responses, so the last
	// value may reach the handler just after the call returns: wait for it.
	var mu sync.Mutex
	var values []float64
	last := make(chan struct{})
	res, err := p.call(ctx, s.Progress, func(v float64) {
		mu.Lock()
		values = append(values, v)
		mu.Unlock()
		if v == s.Progress.LastProgress {
			close(last)
		}
	})
	if err != nil {
		t.Errorf("progress: the client failed: %v", err)
	} else if problem := run.Judge(s.Progress, res); problem != "" {
		t.Errorf("progress: %s", problem)
	}
	select {
	case <-last:
	case <-time.After(waitLimit):
	}
	mu.Lock()
	if len(values) == 0 || !increasing(values) || values[len(values)-1] != s.Progress.LastProgress {
		t.Errorf("progress values %v: want increasing values ending at %v", values, s.Progress.LastProgress)
	}
	mu.Unlock()

	// Cancellation: cancel the call as soon as it reports progress.
	cctx, cancelCall := context.WithCancel(ctx)
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := p.call(cctx, s.Cancel, func(float64) { once.Do(func() { close(started) }) })
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatal("the long call never reported progress")
	}
	cancelCall()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the cancelled call returned a result")
		}
	case <-time.After(waitLimit):
		t.Fatal("the cancelled call did not return")
	}
	slow := map[string]any{"msg": "request", "method": "tools/call", "tool": s.Cancel.Tool}
	if cancel.gap == "" {
		rec := log.await(t, "the cancelled call", withOutcome(slow, "cancelled"))
		if cause, _ := rec["cause"].(string); !strings.HasPrefix(cause, cancel.cause) {
			t.Errorf("the call was cancelled with cause %q, want %q", rec["cause"], cancel.cause)
		}
		log.await(t, "the cancelled handler returning", map[string]any{"msg": "handler returned after the request ended; result discarded", "id": rec["id"]})
	}
	// The connection still serves.
	if res, err := p.call(ctx, s.Steps[0], nil); err != nil || run.Judge(s.Steps[0], res) != "" {
		t.Errorf("after the cancellation: %s, %v", res, err)
	}
	if cancel.gap != "" && log.count(withOutcome(slow, "cancelled")) != 0 {
		t.Errorf("the server cancelled a call whose client sent no cancellation (%s)", cancel.gap)
	}
	if err := p.close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cancel.gap != "" {
		// The server could not see the cancellation; the call ends with
		// the connection (stdio EOF, or the session's DELETE).
		rec := log.await(t, "the abandoned call ending", withOutcome(slow, "cancelled"))
		if rec["cause"] != cancel.cause {
			t.Errorf("the abandoned call ended with cause %q, want %q", rec["cause"], cancel.cause)
		}
		t.Logf("peer gap: %s; the server ended the call when the client left (cause %q)", cancel.gap, rec["cause"])
	}
	if n := log.count(map[string]any{"level": "ERROR"}); n > 0 {
		t.Errorf("the server logged %d errors:\n%s", n, log)
	}
	if t.Failed() {
		t.Logf("server log:\n%s", log)
	}
}

func withOutcome(m map[string]any, outcome string) map[string]any {
	out := map[string]any{"outcome": outcome}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func increasing(v []float64) bool {
	for i := 1; i < len(v); i++ {
		if v[i] <= v[i-1] {
			return false
		}
	}
	return true
}
