package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/mcp"
)

// verdictProxy stands in front of an mcprel server and does to each
// tools/call what answer says: nil passes it on; otherwise the call is
// passed on or not (passOn) and the client gets answer's response.
type verdictProxy struct {
	calls atomic.Int32
}

func (p *verdictProxy) start(t *testing.T, upstream string, passOn bool, answer func(w http.ResponseWriter, id json.RawMessage)) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "" // the proxy serves the same path
	rp := httputil.NewSingleHostReverseProxy(u)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.Unmarshal(body, &m)
		if m.Method != mcp.MethodToolsCall || answer == nil {
			rp.ServeHTTP(w, r)
			return
		}
		p.calls.Add(1)
		if passOn {
			rp.ServeHTTP(httptest.NewRecorder(), r) // it ran; its answer is lost on the way
		}
		answer(w, m.ID)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// failedResult answers a call with a failed result carrying code, as a
// gateway in front of a server answers.
func failedResult(code, message string, retryable bool) func(http.ResponseWriter, json.RawMessage) {
	return func(w http.ResponseWriter, id json.RawMessage) {
		body := mcp.Failure{Code: code, Message: message, Retryable: retryable}
		text, _ := json.Marshal(body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","isError":true,"content":[{"type":"text","text":%q}],"_meta":{%q:%s}}}`,
			id, text, mcp.MetaFailure, text)
	}
}

// TestCallExitFollowsTheVerdict: mcprel call's exit status and message
// are the verdict's. Each case failed before the client had one verdict:
// a proxy's 503 was an overload that --trust-server retried though the
// call had run; a gateway's outcome_unknown exited 10; its
// upstream_unavailable told a read both that it may have taken effect and
// that it never reached the server.
func TestCallExitFollowsTheVerdict(t *testing.T) {
	upstream, _ := startHTTP(t, nil)
	for _, tc := range []struct {
		name   string
		passOn bool
		answer func(http.ResponseWriter, json.RawMessage)
		args   []string
		code   int
		sends  int32
		want   string
		never  string
	}{
		{
			name: "a proxy's 503 after passing the call on is never retried for an unsafe tool, trusted or not", passOn: true,
			answer: func(w http.ResponseWriter, _ json.RawMessage) {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
			},
			args: []string{"--trust-server", "--class", "unsafe", "echo", "text=x"}, code: exitReconcile, sends: 1,
			want: "may have taken effect", never: "did not run",
		},
		{
			name: "the same 503 is retried for a safe tool", passOn: true,
			answer: func(w http.ResponseWriter, _ json.RawMessage) {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
			},
			args: []string{"--retries", "1", "--class", "safe", "echo", "text=x"}, code: exitReconcile, sends: 2,
			want: "safe to retry",
		},
		{
			name:   "a gateway's outcome_unknown exits 17",
			answer: failedResult(mcp.FailureOutcomeUnknown, `upstream "u": the connection to it ended while the call was in flight: the call may or may not have taken effect; check before calling again`, false),
			args:   []string{"--class", "unsafe", "echo", "text=x"}, code: exitReconcile, sends: 1,
			want: "may or may not have taken effect",
		},
		{
			name:   "a gateway's upstream_unavailable exits 16 and says only that it never arrived",
			answer: failedResult(mcp.FailureUpstreamUnavailable, `upstream "u" could not be reached; the request never reached it`, true),
			args:   []string{"read_graph_like"}, code: exitConnection, sends: 1,
			want: "never reached it", never: "may have taken effect",
		},
		{
			name:   "a trusted gateway's upstream_unavailable is retried",
			answer: failedResult(mcp.FailureUpstreamUnavailable, `upstream "u" could not be reached; the request never reached it`, true),
			args:   []string{"--trust-server", "--retries", "1", "--class", "unsafe", "read_graph_like"}, code: exitConnection, sends: 2,
			want: "never reached it", never: "may have taken effect",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p verdictProxy
			at := p.start(t, upstream, tc.passOn, tc.answer)
			out, errs, code := mcprelCall(t, append([]string{"--url", at, "--era", "2026"}, tc.args...)...)
			if code != tc.code || p.calls.Load() != tc.sends {
				t.Fatalf("exit %d after %d sends; want %d after %d\nstdout: %s\nstderr: %s", code, p.calls.Load(), tc.code, tc.sends, out, errs)
			}
			if !strings.Contains(errs, tc.want) || tc.never != "" && strings.Contains(errs, tc.never) {
				t.Fatalf("the message says %q; want %q and never %q", errs, tc.want, tc.never)
			}
		})
	}
}

// A call whose first attempt was passed on and its answer lost, and whose
// retry was refused (429), may have run: it exits 17, not 15 ("nothing
// ran"). Before, only the last attempt was judged.
func TestCallLostThenRefusedIsUnknown(t *testing.T) {
	upstream, _ := startHTTP(t, nil)
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = ""
	rp := httputil.NewSingleHostReverseProxy(u)
	var calls atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
		}
		json.Unmarshal(body, &m)
		switch {
		case m.Method != mcp.MethodToolsCall:
			rp.ServeHTTP(w, r)
		case calls.Add(1) == 1:
			rp.ServeHTTP(httptest.NewRecorder(), r) // it ran
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // and its answer is lost
			}
		default:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}
	}))
	defer hs.Close()
	out, errs, code := mcprelCall(t, "--url", hs.URL+"/mcp", "--era", "2026", "--retries", "1", "--idempotency-key", "k-1", "echo", "text=x")
	if code != exitReconcile || calls.Load() != 2 || !strings.Contains(errs, "--idempotency-key k-1") {
		t.Fatalf("exit %d after %d sends; want 17 after 2, with the key to call again with\nstdout: %s\nstderr: %s", code, calls.Load(), out, errs)
	}
}

// Tried as a new user would: the stdio server behind "mcprel gateway"
// crashed and does not come back, and a call through the gateway exits
// 16 — the request never reached the server — saying only that, never
// also that it may have taken effect (it exited 17 and said both).
func TestCallThroughAGatewayWhoseUpstreamCrashed(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "up.sh")
	up := fmt.Sprintf("if [ -e %[1]s/started ]; then exit 1; fi\ntouch %[1]s/started\necho $$ > %[1]s/pid\nexec %[2]s serve --stdio --log-level warn --db %[1]s/u.db\n", dir, binary)
	if err := os.WriteFile(script, []byte(up), 0o700); err != nil {
		t.Fatal(err)
	}
	gwURL, _, _ := startEndpoint(t, nil, "gateway", "--http", "127.0.0.1:0", "--metrics-path", "/metrics", "--metrics-open",
		"--upstream", "u=sh "+script, "--db", filepath.Join(dir, "gw.db"))
	if _, errs, code := mcprelCall(t, "--url", gwURL, "echo", "text=x"); code != 0 {
		t.Fatalf("a call before the crash: exit %d\n%s", code, errs)
	}
	pid, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("kill", "-9", strings.TrimSpace(string(pid))).Run(); err != nil {
		t.Fatal(err)
	}
	awaitMetricLines(t, strings.TrimSuffix(gwURL, "/mcp")+"/metrics", "", [][]string{
		{`mcprel_gateway_upstream_events_total{kind="died",upstream="u"} 1`},
	})
	_, errs, code := mcprelCall(t, "--url", gwURL, "echo", "text=x")
	if code != exitConnection || !strings.Contains(errs, "never reached") || strings.Contains(errs, "may have taken effect") {
		t.Fatalf("a call after the crash: exit %d, want %d, saying only that it never reached the server:\n%s", code, exitConnection, errs)
	}
}

// A mistake found on the way to the call (a --class no rule knows) is the
// command line's: exit 2, said once, not an unknown outcome.
func TestCallBadClassIsAUsageError(t *testing.T) {
	_, errs, code := mcprelCall(t, "--stdio", serveCommand(t), "--class", "bogus", "echo", "text=x")
	if code != exitUsage || !strings.Contains(errs, `--class must be safe, conditional or unsafe, not "bogus"`) || strings.Contains(errs, "call: call:") {
		t.Fatalf("--class bogus: exit %d, want %d with the reason said once:\n%s", code, exitUsage, errs)
	}
}
