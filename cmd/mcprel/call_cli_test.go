package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// Flags may follow the tool and its arguments, as the README writes them;
// after "--" everything is the tool's; a flag mistake is one line that
// names it, not the whole usage.
func TestCallFlagsAnywhere(t *testing.T) {
	url, _ := startHTTP(t, nil)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"flags after the arguments", []string{"--url", url, "slow_count", "steps=2", "intervalMs=1", "--idle", "5s", "--max", "1m"}, 0, `"counted": 2`},
		{"a bool flag last", []string{"--url", url, "echo", "text=hi", "--retries=0", "--trust-server"}, 0, `"text": "hi"`},
		{"--url after the tool", []string{"echo", "--url", url, "text=between"}, 0, `"text": "between"`},
		{"-- ends the flags", []string{"--url", url, "echo", "--", "text=--max"}, 0, `"text": "--max"`},
		{"a flag after -- is an argument", []string{"--url", url, "echo", "text=x", "--", "--max"}, exitUsage, `arguments are key=value pairs, not "--max"`},
		{"unknown flag", []string{"--url", url, "echo", "text=x", "--bogus"}, exitUsage, "call: unknown flag --bogus (mcprel call -h lists the flags"},
		{"missing value", []string{"--url", url, "echo", "text=x", "--max"}, exitUsage, "call: flag --max needs a value"},
		{"bad value", []string{"--url", url, "echo", "text=x", "--max", "soon"}, exitUsage, `call: invalid value "soon" for flag -max`},
		{"list then a tool", []string{"--url", url, "--list", "echo"}, exitUsage, `--list takes no tool name, not "echo"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := mcprelCall(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errs, tc.want) {
				t.Fatalf("exit %d, want %d; want %q in\n%s\n%s", code, tc.code, tc.want, out, errs)
			}
			if code == exitUsage && strings.Count(errs, "\n") != 1 {
				t.Fatalf("a usage mistake printed more than its one line:\n%s", errs)
			}
		})
	}
}

// "mcprel call -h" exits 0 and its exit-status table names every status
// the command uses, with the meaning callFailure gives it.
func TestCallHelpListsExitStatuses(t *testing.T) {
	errs, _, code := mcprelCall(t, "-h") // the help, on stdout
	if code != 0 {
		t.Fatalf("call -h exited %d", code)
	}
	for status, meaning := range map[int]string{
		0: "the tool succeeded", 2: "a mistake in the command line", exitToolError: "the tool reported a failure",
		exitProtocol: "a JSON-RPC error", exitIdle: "the idle deadline fired", exitMax: "the maximum deadline fired",
		exitCancelled: "interrupted", exitOverloaded: "the server refused the request for now (overloaded, rate limited,",
		exitConnection: "the request was never sent: the server could not be reached (or a", exitReconcile: "the outcome is unknown: the call may or may not have taken effect",
		exitSignIn: "the server wants credentials it was not given: the sign-in failed",
	} {
		found := false
		for _, line := range strings.Split(errs, "\n") {
			if strings.HasPrefix(line, fmt.Sprintf("  %-3d ", status)) && strings.Contains(line, meaning) {
				found = true
			}
		}
		if !found {
			t.Errorf("call -h lacks status %d (%s):\n%s", status, meaning, errs)
		}
	}
	for _, flag := range []string{"-server-stderr", "-idle", "-max", "Flags may come before or after the tool", "-sign-in-timeout", "-no-browser", "-oauth-client-id", "-oauth-dir"} {
		if !strings.Contains(errs, flag) {
			t.Errorf("call -h lacks %q", flag)
		}
	}
}

func clipText(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

// A URL that cannot name an HTTP endpoint is a mistake in the command
// line (2) that says what is wrong with it, never "no connection" (16).
func TestCallBadURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"not-a-url", `--url "not-a-url" has no scheme; give the endpoint's http:// or https:// URL`},
		{"ftp://example.com/mcp", `the scheme must be http or https, not "ftp"`},
		{"http:///mcp", `names no host`},
		{"http://[::1/mcp", `is not a URL`},
	} {
		_, errs, code := mcprelCall(t, "--url", tc.url, "echo", "text=x")
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("--url %q: exit %d, want %d and %q:\n%s", tc.url, code, exitUsage, tc.want, errs)
		}
	}
	if _, errs, code := runReview("--from-server", "not-a-url"); code != exitUsage || !strings.Contains(errs, `--from-server "not-a-url" has no scheme`) {
		t.Errorf("review --from-server not-a-url: exit %d\n%s", code, errs)
	}
	if _, errs, code := mcprelCall(t, "--stdio", `mcprel "serve`, "echo"); code != exitUsage || !strings.Contains(errs, "--stdio: unterminated quote") {
		t.Errorf("an unterminated quote in --stdio: exit %d\n%s", code, errs)
	}
}

// A refused connection says so, exits 16, and names the client once.
func TestCallConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	_, errs, code := mcprelCall(t, "--url", dead, "echo", "text=x")
	want := "mcprel: call: connecting: client: could not connect to " + dead + ": connection refused\n"
	if code != exitConnection || errs != want {
		t.Fatalf("exit %d, want %d and %q; got %q", code, exitConnection, want, errs)
	}
	// A stdio server that dies before it answers: the prefix once too.
	_, errs, code = mcprelCall(t, "--stdio", binary+" serve --stdio --db "+filepath.Join(t.TempDir(), "missing", "x.db"), "echo", "text=x")
	if code != exitConnection || strings.Count(errs, "client:") != 1 {
		t.Fatalf("a server that died at start: exit %d, want %d with one client: prefix\n%s", code, exitConnection, errs)
	}
}

// A server that answers with a redirect, while connecting or to the call
// itself, is not followed: mcprel call exits 11 (the server refused the
// request: it did not run it, and would refuse it again) with a message
// naming the status and where the redirect pointed, and nothing — not the
// token, not the call — reaches that address.
func TestCallRedirectIsRefused(t *testing.T) {
	var mu sync.Mutex
	var reached []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		reached = append(reached, fmt.Sprintf("%s Authorization=%q body=%s", r.Method, r.Header.Get("Authorization"), body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	}))
	t.Cleanup(elsewhere.Close)
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "pay", InputSchema: []byte(`{"type":"object"}`)}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("paid")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, method, want string }{
		{"connecting", mcp.MethodDiscover, "mcprel: call: connecting: client: the server answered HTTP 307, a redirect to "},
		{"the call", mcp.MethodToolsCall, "mcprel: call: client: the server answered HTTP 307, a redirect to "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get(mcp.HeaderMethod) == tc.method {
					w.Header().Set("Location", elsewhere.URL+"/mcp")
					w.WriteHeader(http.StatusTemporaryRedirect)
					return
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(origin.Close)
			out, errs, code := mcprelCall(t, "--url", origin.URL+"/mcp", "--token", "secret", "pay")
			want := tc.want + elsewhere.URL + "/mcp, which the client does not follow"
			if code != exitProtocol || !strings.Contains(errs, want) {
				t.Fatalf("exit %d, want %d and %q in\n%s\n%s", code, exitProtocol, want, out, errs)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reached) != 0 {
		t.Fatalf("the redirect was followed: %q", reached)
	}
}

// unsafeSlowServer serves, over 2026-07-28 HTTP, a tool "wait" that
// advertises no retry class (so unsafe) and runs until it is cancelled.
func unsafeSlowServer(t *testing.T) string {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "wait", InputSchema: []byte(`{"type":"object"}`)}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		req.ReportProgress(1, 0, "waiting")
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// The advice after a deadline follows the retry class: a tool the server
// advertises as safe is safe to call again (the server's word, said as
// such), one it advertises as nothing keeps the warning to find out
// first.
func TestCallDeadlineAdviceFollowsRetryClass(t *testing.T) {
	url, _ := startHTTP(t, nil)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		want     string
		unwanted string
	}{
		{"advertised safe", []string{"--url", url, "--max", "300ms", "slow_count", "steps=50", "intervalMs=100"}, exitMax,
			`The server advertises tool "slow_count" as safe to retry (dev.mcprel/retryClass "safe")`, "read the state it changes"},
		{"advertised safe, idle", []string{"--url", url, "--idle", "200ms", "--retries", "0", "slow_count", "steps=5", "intervalMs=1000"}, exitIdle,
			`as safe to retry`, "read the state it changes"},
		{"trusted safe", []string{"--url", url, "--trust-server", "--max", "300ms", "slow_count", "steps=50", "intervalMs=100"}, exitMax,
			`tool "slow_count" is safe to retry`, "may have taken effect"},
		{"safe by --class", []string{"--url", url, "--class", "safe", "--max", "300ms", "slow_count", "steps=50", "intervalMs=100"}, exitMax,
			`tool "slow_count" is safe to retry`, "may have taken effect"},
		{"unsafe by --class", []string{"--url", url, "--class", "unsafe", "--max", "300ms", "slow_count", "steps=50", "intervalMs=100"}, exitMax,
			"read the state it changes", "safe to retry"},
		{"conditional with a key", []string{"--url", unsafeSlowServer(t), "--class", "conditional", "--idempotency-key", "k-1", "--max", "300ms", "wait"}, exitMax,
			"calling tool \"wait\" again is safe with the same arguments and idempotency key (--idempotency-key k-1)", "read the state it changes"},
		{"advertised unsafe", []string{"--url", unsafeSlowServer(t), "--max", "300ms", "wait"}, exitMax,
			`may have taken effect (it reached its maximum deadline and the client cancelled it) and is not retried because nothing deduplicates its effects; before calling it again, read the state it changes`, "safe to retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := mcprelCall(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) || strings.Contains(errs, tc.unwanted) {
				t.Fatalf("exit %d, want %d; want %q and not %q in\n%s\n%s", code, tc.code, tc.want, tc.unwanted, out, errs)
			}
		})
	}
}

// drainingProxy forwards to target; before it forwards the first
// tools/call of tool, it sends serve SIGTERM and waits until the server
// refuses new requests, so that the call it forwards meets a server that
// is shutting down after the caller connected and listed the tools.
func drainingProxy(t *testing.T, target, tool string, serve *exec.Cmd) string {
	t.Helper()
	var once sync.Once
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"`+tool+`"`)) {
			once.Do(func() {
				serve.Process.Signal(syscall.SIGTERM)
				awaitDraining(t, target)
			})
		}
		resp := forwardTo(w, r, target, body)
		if resp == nil {
			return
		}
		defer resp.Body.Close()
		copyHead(w, resp)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// awaitDraining returns once the server at url answers a new request
// with 503: it is shutting down, and still listening.
func awaitDraining(t *testing.T, url string) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(modernCall(99, "echo", `{"text":"probe"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("probing the draining server: %v", err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return
		}
	}
	t.Error("the server did not start refusing requests after SIGTERM")
}

// A server shut down gracefully (SIGTERM) while a call is on its way
// answers that it is shutting down; mcprel call exits 15 with the server's
// words, not 17 (unknown outcome) or 16 (no connection). A lab_hold held
// at its gate keeps the server in its grace, listening, meanwhile.
func TestCallServerShuttingDown(t *testing.T) {
	url, serve := startHTTP(t, nil, "--lab", "--shutdown-grace", "30s")
	held := exec.Command(binary, "call", "--url", url, "lab_hold", "gate=g")
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Process.Kill(); held.Wait() })
	if _, errs, code := mcprelCall(t, "--url", url, "lab_wait", "gate=g"); code != 0 {
		t.Fatalf("lab_wait: exit %d\n%s", code, errs)
	}
	// Connected and listed; the server is told to shut down before the
	// call itself reaches it. charge_account without a key is unsafe.
	_, errs, code := mcprelCall(t, "--url", drainingProxy(t, url, "charge_account", serve), "charge_account", "account=alice", "cents=5")
	if code != exitOverloaded || !strings.Contains(errs, `the server is shutting down and refused the request (it answered -31002 "server shutting down")`) ||
		!strings.Contains(errs, "says the call did not run") {
		t.Fatalf("a call refused by a server shutting down: exit %d, want %d\n%s", code, exitOverloaded, errs)
	}
	// A call that connects while the server drains: the same.
	_, errs, code = mcprelCall(t, "--url", url, "echo", "text=x")
	if code != exitOverloaded || !strings.Contains(errs, `call: connecting: the server is shutting down and refused the request (it answered -31002 "server shutting down")`) {
		t.Fatalf("connecting to a server shutting down: exit %d, want %d\n%s", code, exitOverloaded, errs)
	}
}

// A stdio server's log stays out of "call --stdio" and "review --stdio"
// output unless --server-stderr asks for it; its last lines are shown when
// the call or the review fails.
func TestServerStderrKeptUnlessAsked(t *testing.T) {
	serveCmd := func() string { return binary + " serve --stdio --db " + filepath.Join(t.TempDir(), "s.db") }
	broken := binary + " serve --stdio --db " + filepath.Join(t.TempDir(), "missing", "x.db")
	review := func(args ...string) (string, int) {
		cmd := exec.Command(binary, append([]string{"review"}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		return errb.String(), cmd.ProcessState.ExitCode()
	}
	const logLine = "level=INFO msg=request"
	const cause = "store: cannot open the SQLite file"
	for _, tc := range []struct {
		name     string
		run      func() (string, int)
		code     int
		want     []string
		unwanted []string
	}{
		{"call, success", func() (string, int) { _, e, c := mcprelCall(t, "--stdio", serveCmd(), "echo", "text=hi"); return e, c }, 0,
			nil, []string{logLine, "server's stderr"}},
		{"call, passed through", func() (string, int) {
			_, e, c := mcprelCall(t, "--stdio", serveCmd(), "echo", "text=hi", "--server-stderr")
			return e, c
		}, 0, []string{logLine + " id=3 method=tools/call"}, []string{"server's stderr"}},
		{"call, server fails", func() (string, int) { _, e, c := mcprelCall(t, "--stdio", broken, "echo", "text=hi"); return e, c }, exitConnection,
			[]string{"mcprel: the server's stderr (--server-stderr passes it through):\n  mcprel: " + cause}, nil},
		{"call, the call fails", func() (string, int) {
			_, e, c := mcprelCall(t, "--stdio", serveCmd(), "--max", "300ms", "slow_count", "steps=50", "intervalMs=100")
			return e, c
		}, exitMax, []string{"server's stderr", "outcome=cancelled"}, nil},
		{"call, the tool fails", func() (string, int) {
			_, e, c := mcprelCall(t, "--stdio", serveCmd(), "get_inventory", "sku=nope")
			return e, c
		}, exitToolError,
			nil, []string{logLine, "server's stderr"}},
		{"review, success", func() (string, int) { return review("--stdio", serveCmd()) }, 0, nil, []string{logLine, "server's stderr"}},
		{"review, passed through", func() (string, int) { return review("--stdio", serveCmd(), "--server-stderr") }, 0,
			[]string{logLine + " id=2 method=tools/list"}, []string{"server's stderr"}},
		{"review, server fails", func() (string, int) { return review("--stdio", broken) }, exitFailure,
			[]string{"mcprel: the server's stderr (--server-stderr passes it through):\n  mcprel: " + cause}, nil},
		{"--server-stderr needs --stdio", func() (string, int) {
			_, e, c := mcprelCall(t, "--url", "http://127.0.0.1:1/mcp", "--server-stderr", "echo")
			return e, c
		}, exitUsage,
			[]string{"--server-stderr applies to --stdio only"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs, code := tc.run()
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", code, tc.code, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			for _, u := range tc.unwanted {
				if strings.Contains(errs, u) {
					t.Errorf("stderr has %q:\n%s", u, errs)
				}
			}
		})
	}
}

// The kept stderr is bounded in lines and bytes, keeps the latest, and
// cuts a line too long to keep whole.
func TestStderrTailBounds(t *testing.T) {
	var tail stderrTail
	w := bufio.NewWriterSize(&tail, 7) // writes that split lines anywhere
	for i := range 1000 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	fmt.Fprintf(w, "%s\n", strings.Repeat("x", 100<<10))
	fmt.Fprintf(w, "partial")
	w.Flush()
	var out bytes.Buffer
	tail.show(&out)
	text := out.String()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 1+stderrTailLines+1 { // the heading, the lines, the partial one
		t.Fatalf("%d lines shown, want %d:\n%s", len(lines), stderrTailLines+2, text)
	}
	if !strings.Contains(lines[0], fmt.Sprintf("the last %d lines", stderrTailLines+1)) ||
		lines[len(lines)-1] != "  partial" || lines[len(lines)-3] != "  line 999" {
		t.Fatalf("not the latest lines:\n%s", text[:min(len(text), 500)])
	}
	if long := lines[len(lines)-2]; len(long) != 2+stderrTailLineBytes+len(" …") || !strings.HasSuffix(long, " …") {
		t.Fatalf("the long line is %d bytes, want it cut to %d", len(long), stderrTailLineBytes)
	}
	if len(text) > stderrTailBytes+stderrTailLineBytes+200 {
		t.Fatalf("%d bytes shown", len(text))
	}
	tail = stderrTail{}
	for range 100 {
		tail.Write([]byte(strings.Repeat("y", stderrTailLineBytes-1) + "\n"))
	}
	if tail.size > stderrTailBytes {
		t.Fatalf("%d bytes kept, over the %d bound", tail.size, stderrTailBytes)
	}
}

// --auto-key says the key it made, on one line of stderr before the call
// is sent, with how to use it: a call made again with that key is the same
// operation (the server replays it), and the key finds its record.
func TestCallAutoKeyShowsTheKey(t *testing.T) {
	url, _ := startHTTP(t, nil)
	if _, errs, code := mcprelCall(t, "--url", url, "set_stock", "sku=auto", "quantity=5", "expectedVersion=0"); code != 0 {
		t.Fatalf("set_stock: exit %d\n%s", code, errs)
	}
	out, errs, code := mcprelCall(t, "--url", url, "reserve_inventory", "sku=auto", "quantity=2", "--auto-key")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	m := regexp.MustCompile(`(?m)^mcprel call: --auto-key made the idempotency key (k-[a-z0-9]+): .*--idempotency-key ([^\s;]+).*ledger show --tool reserve_inventory --key ([^\s;)]+).*$`).FindStringSubmatch(errs)
	if m == nil || m[2] != m[1] || m[3] != m[1] {
		t.Fatalf("stderr does not say the key and how to retry or look it up with it:\n%s", errs)
	}
	again, errs, code := mcprelCall(t, "--url", url, "reserve_inventory", "sku=auto", "quantity=2", "--idempotency-key", m[1])
	if code != 0 || !strings.Contains(again, `"dev.mcprel/replayed": true`) {
		t.Fatalf("the call made again with the key it printed was not replayed: exit %d\n%s\n%s", code, again, errs)
	}
	if reservation := regexp.MustCompile(`"reservationId": "[^"]+"`); reservation.FindString(out) != reservation.FindString(again) {
		t.Fatalf("the replay is another reservation:\n%s\n%s", out, again)
	}
}

// --list is for a reader: each tool on a short block — its name and
// arguments (required ones bare, optional ones with "?") on a line, then
// the first sentence of its description — not every schema in full;
// --list --json prints the tools as the server lists them, schemas
// included, for a program.
func TestCallListNamesAndDescribes(t *testing.T) {
	url, _ := startHTTP(t, nil)
	out, errs, code := mcprelCall(t, "--url", url, "--list")
	if code != 0 {
		t.Fatalf("--list: exit %d\n%s", code, errs)
	}
	tools := listTools(t, url)
	if lines := strings.Count(out, "\n"); lines > 2*len(tools)+2 {
		t.Errorf("--list printed %d lines for %d tools:\n%s", lines, len(tools), out)
	}
	for _, want := range []string{
		"charge_account {account, cents, idempotencyKey?}\n    Charges cents to an account and writes a receipt.\n",
		"echo {text}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--list lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "inputSchema") {
		t.Errorf("--list printed schemas:\n%s", out)
	}
	out, errs, code = mcprelCall(t, "--url", url, "--list", "--json")
	var listed []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != len(tools) || len(listed[0].InputSchema) == 0 {
		t.Fatalf("--list --json: exit %d, want every tool with its schema as JSON:\n%s\n%s", code, out, errs)
	}
	if _, errs, code := mcprelCall(t, "--url", url, "--json", "echo", "text=x"); code != exitUsage || !strings.Contains(errs, "--json goes with --list") {
		t.Errorf("--json without --list: exit %d\n%s", code, errs)
	}
}

// listTools lists the tools of the server at url, through package client.
func listTools(t *testing.T, url string) []mcp.Tool {
	t.Helper()
	c, err := client.DialHTTP(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

// A URL whose path the server answers with 404 is a mistake in the URL
// (exit 2), said as such: the server was reached, and serves nothing
// there; the message names the path mcprel serves its endpoint at.
func TestWrongPathSaysTheServerAnswered404(t *testing.T) {
	url, _ := startHTTP(t, nil)
	wrong := strings.TrimSuffix(url, "/mcp") + "/wrong"
	want := "the server at " + wrong + " answered HTTP 404 (Not Found): it serves no MCP endpoint at that URL; mcprel serves its endpoint at /mcp: " + url
	if _, errs, code := mcprelCall(t, "--url", wrong, "echo", "text=x"); code != exitUsage || !strings.Contains(errs, "call: "+want) || strings.Contains(errs, "reach") {
		t.Errorf("call --url %s: exit %d, want %d and %q:\n%s", wrong, code, exitUsage, want, errs)
	}
	if _, errs, code := runReview("--from-server", wrong); code != exitUsage || !strings.Contains(errs, "review: "+want) || strings.Contains(errs, "reach") {
		t.Errorf("review --from-server %s: exit %d, want %d and %q:\n%s", wrong, code, exitUsage, want, errs)
	}
}
