package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// serveCommand is the --stdio command line of a fresh mcprel server.
func serveCommand(t *testing.T) string {
	return binary + " serve --stdio --db " + filepath.Join(t.TempDir(), "call.db")
}

// mcprelCall runs "mcprel call" and returns its stdout, stderr and exit
// status.
func mcprelCall(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"call"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// Every way a call ends has its own exit status, over stdio and HTTP.
func TestCallExitCodes(t *testing.T) {
	url, _ := startHTTP(t, nil)
	for _, server := range []struct{ name, flag, value string }{
		{"stdio", "--stdio", ""},
		{"http", "--url", url},
	} {
		t.Run(server.name, func(t *testing.T) {
			at := func() []string {
				if server.flag == "--stdio" {
					return []string{"--stdio", serveCommand(t)}
				}
				return []string{"--url", server.value}
			}
			for _, tc := range []struct {
				name string
				args []string
				code int
				want string // in stdout or stderr
			}{
				{"success", []string{"echo", "text=hello"}, 0, `"text": "hello"`},
				{"typed arguments", []string{"slow_count", "steps=2", "intervalMs=1"}, 0, `"counted": 2`},
				{"JSON arguments", []string{"--args", `{"text":"json"}`, "echo"}, 0, `"text": "json"`},
				{"tool error", []string{"get_inventory", "sku=nope"}, exitToolError, `unknown_sku`},
				{"protocol error", []string{"no_such_tool"}, exitProtocol, `unknown tool`},
				{"idle deadline", []string{"--idle", "200ms", "slow_count", "steps=5", "intervalMs=1000"}, exitIdle, "idle deadline"},
				{"max deadline", []string{"--max", "300ms", "slow_count", "steps=50", "intervalMs=100"}, exitMax, "max deadline"},
				{"bad argument", []string{"slow_count", "steps=three"}, exitUsage, "not an integer"},
				{"list", []string{"--list"}, 0, "generate_report {rows, stepMs?}"},
				{"task", []string{"--task", "generate_report", "rows=3", "stepMs=10"}, 0, `"rows": 3`},
			} {
				t.Run(tc.name, func(t *testing.T) {
					out, errs, code := mcprelCall(t, append(at(), tc.args...)...)
					if code != tc.code || !strings.Contains(out+errs, tc.want) {
						t.Fatalf("exit %d, want %d; want %q in\n%s\n%s", code, tc.code, tc.want, out, errs)
					}
				})
			}
		})
	}
	// Nothing listening: a connection failure.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	if _, errs, code := mcprelCall(t, "--url", dead, "echo", "text=x"); code != exitConnection {
		t.Fatalf("a dead endpoint: exit %d, %s", code, errs)
	}
}

// Ctrl-C (SIGINT to mcprel call) cancels the call the transport's way:
// the server's handler ends cancelled, and the call exits 14 saying that
// the cancellation was written.
func TestCallInterrupted(t *testing.T) {
	all, out := interruptCall(t, "--stdio", serveCommand(t))
	// The server's own log (its last lines, shown because the call did not
	// succeed) says its handler ended cancelled by the client's
	// notification.
	if !strings.Contains(all, "outcome=cancelled") || !strings.Contains(all, "cancelled by the client") {
		t.Fatalf("the server did not record the cancellation:\n%s", all)
	}
	if !strings.Contains(all, "mcprel: call: interrupted: the server was sent notifications/cancelled") {
		t.Fatalf("the message does not say the cancellation was written:\n%s", all)
	}
	var v any
	if json.Unmarshal([]byte(out), &v) == nil {
		t.Fatalf("an interrupted call printed a result: %s", out)
	}
}

// Over 2025-era HTTP the cancellation is a POST of its own: the first
// Ctrl-C waits for the server to acknowledge it before mcprel call exits,
// so the server has ended the call as cancelled by the client — not by
// the session's end when the client left — and the message says so.
func TestCallInterruptedWaitsForTheCancellation(t *testing.T) {
	url, _, log := startHTTPAt(t, "127.0.0.1:0", nil)
	all, _ := interruptCall(t, "--url", url, "--era", "2025")
	if !strings.Contains(all, "mcprel: call: interrupted: the server was sent notifications/cancelled") {
		t.Fatalf("the message does not say the cancellation was sent:\n%s", all)
	}
	timeout := time.After(20 * time.Second) // a safety net: the line comes when the handler ends
	for {
		select {
		case line := <-log:
			if !strings.Contains(line, "msg=request") || !strings.Contains(line, "tool=slow_count") {
				continue
			}
			if !strings.Contains(line, "outcome=cancelled") || !strings.Contains(line, `cause="cancelled by the client`) {
				t.Fatalf("the server ended the call otherwise than by the client's cancellation: %s", line)
			}
			return
		case <-timeout:
			t.Fatal("the server logged no end of the call")
		}
	}
}

// interruptCall starts a long slow_count with mcprel call at the server
// args name, sends it SIGINT once its progress shows, and returns its
// stderr and stdout after it exited 14.
func interruptCall(t *testing.T, args ...string) (errText, outText string) {
	t.Helper()
	cmd := exec.Command(binary, append(append([]string{"call"}, args...), "slow_count", "steps=1000", "intervalMs=50")...)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the first progress line: the call is running.
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "progress:") {
		n, err := stderr.Read(buf)
		if err != nil {
			t.Fatalf("no progress before %v: %s", err, seen.String())
		}
		seen.Write(buf[:n])
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest := make(chan string)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(stderr)
		rest <- b.String()
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("mcprel call did not exit after SIGINT")
	}
	all := seen.String() + <-rest
	if code := cmd.ProcessState.ExitCode(); code != exitCancelled {
		t.Fatalf("exit %d, want %d\n%s", code, exitCancelled, all)
	}
	return all, out.String()
}

// forwardTo sends r, whose body was read into body, on to target and
// returns the response; when target cannot be reached it answers 502 and
// returns nil. The test proxies share it, each doing its own mischief
// around it.
func forwardTo(w http.ResponseWriter, r *http.Request, target string, body []byte) *http.Response {
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return nil
	}
	return resp
}

// copyHead writes resp's header and status to w.
func copyHead(w http.ResponseWriter, resp *http.Response) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
}

// lossyProxy forwards to target and, for the first tools/call of tool,
// drops the response after the server produced it: the request took
// effect, its answer never arrives.
func lossyProxy(t *testing.T, target, tool string) string {
	t.Helper()
	var mu sync.Mutex
	dropped := false
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		resp := forwardTo(w, r, target, body)
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		mu.Lock()
		drop := !dropped && bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"`+tool+`"`))
		if drop {
			dropped = true
		}
		mu.Unlock()
		if drop {
			panic(http.ErrAbortHandler) // the connection closes without an answer
		}
		copyHead(w, resp)
		w.Write(answer)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// A conditional call (it carries an idempotency key) whose response is
// lost after the server committed is retried with the same key and gets
// the committed result; the ledger says it ran once. An unsafe call whose
// response is lost is not retried: the caller is told to reconcile.
func TestCallRetriesOnlyWhatIsSafe(t *testing.T) {
	db := filepath.Join(t.TempDir(), "retry.db")
	url, _ := startHTTP(t, nil, "--db", db)
	if _, errs, code := mcprelCall(t, "--url", url, "set_stock", "sku=w1", "quantity=10", "expectedVersion=0"); code != 0 {
		t.Fatalf("set_stock: %d %s", code, errs)
	}
	out, errs, code := mcprelCall(t, "--url", lossyProxy(t, url, "reserve_inventory"), "--auto-key", "reserve_inventory", "sku=w1", "quantity=3")
	if code != 0 || !strings.Contains(errs, "retrying") || !strings.Contains(errs, "same idempotency key") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var res struct {
		Meta              map[string]any `json:"_meta"`
		StructuredContent struct{ Remaining int }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Meta["dev.mcprel/replayed"] != true || res.StructuredContent.Remaining != 7 {
		t.Fatalf("the retried reservation: %s (%v)", out, err)
	}
	// The authoritative read: reserved once.
	if out, _, _ := mcprelCall(t, "--url", url, "get_inventory", "sku=w1"); !strings.Contains(out, `"available": 7`) {
		t.Fatalf("stock after the retried reservation: %s", out)
	}

	out, errs, code = mcprelCall(t, "--url", lossyProxy(t, url, "charge_account"), "charge_account", "account=alice", "cents=500")
	if code != exitReconcile || strings.Contains(errs, "retrying") || !strings.Contains(errs, "reconcile") {
		t.Fatalf("an unsafe call with a lost response: exit %d\n%s\n%s", code, out, errs)
	}
}

// serve --metrics: after a call, the scrape counts it, and the HTTP
// endpoint is still the first line on stderr.
func TestServeMetrics(t *testing.T) {
	url, _, rest := startHTTPAt(t, "127.0.0.1:0", nil, "--metrics", "127.0.0.1:0")
	line := <-rest
	metricsURL, ok := strings.CutPrefix(line, "metrics: ")
	if !ok {
		t.Fatalf("the line after the endpoint is %q, want the metrics URL", line)
	}
	if _, errs, code := mcprelCall(t, "--url", url, "echo", "text=counted"); code != 0 {
		t.Fatalf("call: %d %s", code, errs)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `mcprel_requests_total{era="2026-07-28",method="tools/call",outcome="completed",tool="echo",transport="http"} 1`
	if !strings.Contains(string(body), want) {
		t.Fatalf("the scrape lacks %s:\n%s", want, body)
	}
	// A task: it ends, and the runner's events reach the metrics.
	if _, errs, code := mcprelCall(t, "--url", url, "--task", "generate_report", "rows=2", "stepMs=1"); code != 0 {
		t.Fatalf("task: %d %s", code, errs)
	}
	// The runner reports the end just after it commits it, which the
	// client may have read first: read the other process's metrics until
	// they say so (bounded).
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = http.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `mcprel_tasks_ended_total`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{
		`mcprel_tasks_ended_total{status="completed",tool="generate_report"} 1`,
		`mcprel_tasks_running{tool="generate_report"} 0`,
		`mcprel_call_annotations_total{kind="task",tool="generate_report",value="created"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("the scrape lacks %s:\n%s", want, body)
		}
	}
}

// --metrics-path serves the metrics on the MCP listener, behind its Host
// check and the metrics token.
func TestServeMetricsOnTheEndpoint(t *testing.T) {
	url, _ := startHTTP(t, []string{"MCPREL_METRICS_TOKEN=s3cret"}, "--metrics-path", "/metrics")
	metricsURL := strings.TrimSuffix(url, "/mcp") + "/metrics"
	get := func(host, token string) int {
		req, _ := http.NewRequest(http.MethodGet, metricsURL, nil)
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("", "s3cret"); code != http.StatusOK {
		t.Fatalf("with the token: %d", code)
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code := get("evil.example", "s3cret"); code != http.StatusForbidden {
		t.Fatalf("a rebinding Host: %d", code)
	}
	cmd := exec.Command(binary, "serve", "--stdio", "--metrics-path", "/metrics")
	if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "--metrics-path needs --http") {
		t.Fatalf("--metrics-path without --http: %v %s", err, out)
	}
}

// scrape reads url with token (none when empty) and returns the status.
func scrape(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The metrics are never easier to read than the endpoint: without a
// metrics token of their own they require the endpoint's tokens, on the
// MCP listener and on a listener of their own; serving them open beside
// an authenticated endpoint is an explicit choice that serve announces.
func TestServeMetricsRequireTheEndpointsTokens(t *testing.T) {
	t.Run("path beside tenant tokens", func(t *testing.T) {
		url, _ := startHTTP(t, nil, "--token", "alice=tok-a", "--token", "bob=tok-b", "--metrics-path", "/metrics")
		metricsURL := strings.TrimSuffix(url, "/mcp") + "/metrics"
		for token, want := range map[string]int{"": 401, "wrong": 401, "tok-a": 200, "tok-b": 200} {
			if code := scrape(t, metricsURL, token); code != want {
				t.Errorf("token %q: %d, want %d", token, code, want)
			}
		}
	})
	t.Run("own listener beside the auth token", func(t *testing.T) {
		_, _, rest := startHTTPAt(t, "127.0.0.1:0", []string{"MCPREL_AUTH_TOKEN=s3cret"}, "--metrics", "127.0.0.1:0")
		metricsURL, ok := strings.CutPrefix(<-rest, "metrics: ")
		if !ok {
			t.Fatal("no metrics URL after the endpoint's")
		}
		for token, want := range map[string]int{"": 401, "wrong": 401, "s3cret": 200} {
			if code := scrape(t, metricsURL, token); code != want {
				t.Errorf("token %q: %d, want %d", token, code, want)
			}
		}
	})
	t.Run("opened on purpose", func(t *testing.T) {
		url, _, rest := startHTTPAt(t, "127.0.0.1:0", nil, "--auth-token", "s3cret", "--metrics-path", "/metrics", "--metrics-open")
		warned := false
		for line := range rest {
			if strings.Contains(line, "without authentication (--metrics-open)") {
				warned = true
				break
			}
		}
		if !warned {
			t.Fatal("serve did not say that the metrics are open")
		}
		if code := scrape(t, strings.TrimSuffix(url, "/mcp")+"/metrics", ""); code != http.StatusOK {
			t.Fatalf("open metrics without a token: %d", code)
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "a=t", "--metrics-tenants", "--metrics", "127.0.0.1:0"}, "--metrics-tenants names every tenant"},
		{[]string{"--metrics-token", "m", "--metrics-open", "--metrics", "127.0.0.1:0"}, "choose one of --metrics-token and --metrics-open"},
	} {
		cmd := exec.Command(binary, append([]string{"serve", "--http", "127.0.0.1:0"}, tc.args...)...)
		cmd.Dir = t.TempDir()
		if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("serve %q: %v %s, want exit %d saying %q", tc.args, err, out, exitUsage, tc.want)
		}
	}
}

// --max and --idle apply to --task: --max bounds the whole wait and
// --idle the time without a change of the task's status; when either
// fires, the call exits with that clock's status, says tasks/cancel was
// sent, and the task (told to cancel) ends cancelled at its next
// checkpoint.
func TestCallTaskClocks(t *testing.T) {
	url, _ := startHTTP(t, nil, "--lab")
	for _, tc := range []struct {
		gate  string
		flags []string
		code  int
		clock string
	}{
		{"max", []string{"--max", "2s"}, exitMax, "max deadline (2s)"},
		{"idle", []string{"--idle", "1s", "--max", "1m"}, exitIdle, "idle deadline (1s)"},
	} {
		t.Run(tc.gate, func(t *testing.T) {
			args := append([]string{"--url", url, "--task"}, tc.flags...)
			_, stderr, code := mcprelCall(t, append(args, "lab_task", "gate="+tc.gate)...)
			if code != tc.code || !strings.Contains(stderr, tc.clock) || !strings.Contains(stderr, "acknowledged tasks/cancel") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d, the %s and tasks/cancel acknowledged", code, stderr, tc.code, tc.clock)
			}
			_, after, ok := strings.Cut(stderr, "; task ")
			id, _, _ := strings.Cut(after, " ")
			if !ok || id == "" {
				t.Fatalf("no task id in %q", stderr)
			}
			// Released, the task reaches its next checkpoint, which
			// observes the cancellation intent.
			if _, stderr, code := mcprelCall(t, "--url", url, "lab_release", "gate="+tc.gate); code != 0 {
				t.Fatalf("lab_release: exit %d: %s", code, stderr)
			}
			c, err := client.DialHTTP(t.Context(), url, &client.Options{Capabilities: mcp.ClientCapabilities{
				Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for status := ""; status != "cancelled"; {
				raw, err := c.Request(t.Context(), mcp.MethodTasksGet, id, map[string]any{"taskId": id}, nil)
				if err != nil {
					t.Fatal(err)
				}
				var got struct{ Status string }
				json.Unmarshal(raw, &got)
				if status = got.Status; status != "working" && status != "cancelled" {
					t.Fatalf("task %s ended %s; want cancelled", id, status)
				}
			}
		})
	}
}
