// Package ts_test checks that the official TypeScript MCP SDK clients work
// against `mcprel serve`: over stdio here, over Streamable HTTP in
// http_test.go. stdio-client.mjs drives the server with the SDK; this test
// then judges from the server side, using what the server logged
// (stderr.log) and what it wrote on stdout (wire.log), with what the client
// wrote (stdin.log) to tell which request was which.
//
// It needs Node 20+ and `npm ci` in this directory; without them it skips,
// unless MCPREL_REQUIRE_INTEROP=1 makes that a failure.
package ts_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// buildFlags are added to `go build` of the server and nodeEnv to the
// client's environment; race_test.go sets them so that `go test -race` also
// race-checks the server under the SDK's load.
var buildFlags, nodeEnv []string

func TestTypeScriptSDKOverStdio(t *testing.T) {
	requireNode(t)
	// Bounds a hung server or client; a passing run takes about a second
	// after the build.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)

	for _, tc := range []struct{ sdk, era string }{
		{"v1", "legacy"}, // @modelcontextprotocol/sdk 1.32.2
		{"v2", "modern"}, // @modelcontextprotocol/client 2.4.0, pinned to 2026-07-28
	} {
		t.Run(tc.sdk+"-"+tc.era, func(t *testing.T) {
			s := runClient(t, ctx, bin, tc.sdk)
			checkEra(t, s, tc.era)
			checkCancelled(t, s)
			checkOthersCompleted(t, s)
		})
	}
}

// requireNode skips the test, or fails it under MCPREL_REQUIRE_INTEROP=1,
// unless Node and this directory's node_modules are there.
func requireNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		skipOrFail(t, "node is not on PATH: install Node 20+ and run `npm ci` in internal/interop/ts")
	}
	if _, err := os.Stat("node_modules"); err != nil {
		skipOrFail(t, "internal/interop/ts/node_modules is missing: run `npm ci` in internal/interop/ts")
	}
}

// buildServer builds cmd/mcprel, with buildFlags, into a temporary
// directory and returns the binary's path.
func buildServer(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcprel")
	args := append(append([]string{"build"}, buildFlags...), "-o", bin, "../../../cmd/mcprel")
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
		t.Fatal(why + " (MCPREL_REQUIRE_INTEROP=1)")
	}
	t.Skip(why)
}

// session is one SDK run as the session's server process saw it.
type session struct {
	summary struct{ ServerPid int }
	log     []map[string]string // stderr.log, one map per slog line
	sent    []frame             // stdin.log: what the client wrote
	wire    []frame             // wire.log: what the server wrote
}

// frame holds the JSON-RPC fields the checks look at.
type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID     json.RawMessage            `json:"requestId"`     // notifications/cancelled
		ProgressToken json.RawMessage            `json:"progressToken"` // notifications/progress
		Progress      float64                    `json:"progress"`
		Meta          map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

func (f frame) isRequest() bool  { return f.Method != "" && f.ID != nil }
func (f frame) isResponse() bool { return f.Method == "" && f.ID != nil }

func runClient(t *testing.T, ctx context.Context, bin, sdk string) *session {
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "node", "stdio-client.mjs", bin, out, sdk)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), nodeEnv...)
	cmd.WaitDelay = 10 * time.Second // don't wait forever on pipes a stray child holds
	err := cmd.Run()
	s := &session{}
	if jerr := json.Unmarshal(stdout.Bytes(), &s.summary); err != nil || jerr != nil || s.summary.ServerPid == 0 {
		t.Fatalf("node stdio-client.mjs %s: %v %v\nstdout:\n%s\nstderr:\n%s", sdk, err, jerr, &stdout, &stderr)
	}
	t.Logf("client summary: %s", compactJSON(stdout.Bytes()))

	// The summary names the session's server process; a v2 client also ran
	// a throwaway sibling for its server/discover probe, with its own dir.
	dir := filepath.Join(out, fmt.Sprintf("server-%d", s.summary.ServerPid))
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	stderrLog, wireLog, stdinLog := read("stderr.log"), read("wire.log"), read("stdin.log")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr.log:\n%s\nstdin.log:\n%s\nwire.log:\n%s", stderrLog, stdinLog, wireLog)
		}
	})
	if bytes.Contains(stderrLog, []byte("DATA RACE")) {
		t.Error("the server reported a data race")
	}
	for line := range strings.Lines(string(stderrLog)) {
		rec := parseLogLine(strings.TrimSuffix(line, "\n"))
		if rec["time"] == "" || rec["level"] == "" || rec["msg"] == "" {
			t.Errorf("stderr.log line is not a log record: %q", line)
		} else if rec["level"] != "INFO" {
			t.Errorf("unexpected %s log line: %q", rec["level"], line)
		}
		s.log = append(s.log, rec)
	}
	s.sent, s.wire = parseFrames(t, "stdin.log", stdinLog), parseFrames(t, "wire.log", wireLog)

	if others, _ := filepath.Glob(filepath.Join(out, "server-*")); len(others) > 1 {
		t.Logf("%d server processes ran; the others were the SDK's version probe", len(others))
	}
	return s
}

// parseFrames reads newline-delimited JSON, one message a line, as stdio
// requires: a line that is not one JSON message fails the test.
func parseFrames(t *testing.T, name string, data []byte) []frame {
	t.Helper()
	var frames []frame
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("%s: line %d is not a JSON message: %v: %q", name, len(frames)+1, err, sc.Bytes())
		}
		frames = append(frames, f)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return frames
}

// parseLogLine reads one JSON log line into field → text. The id keeps
// its JSON form (a number, or a quoted string), so it compares directly
// with the raw id of a frame on the wire.
func parseLogLine(line string) map[string]string {
	var fields map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &fields) != nil {
		return nil
	}
	kv := make(map[string]string, len(fields))
	for k, raw := range fields {
		var s string
		if k != "id" && json.Unmarshal(raw, &s) == nil {
			kv[k] = s
		} else {
			kv[k] = string(raw)
		}
	}
	return kv
}

// records returns the log lines with msg=msg whose fields include want.
func (s *session) records(msg string, want map[string]string) []map[string]string {
	return findRecords(s.log, msg, want)
}

// findRecords returns the records in log with msg=msg whose fields include
// want.
func findRecords(log []map[string]string, msg string, want map[string]string) []map[string]string {
	var out []map[string]string
	for _, rec := range log {
		if rec["msg"] == msg && matches(rec, want) {
			out = append(out, rec)
		}
	}
	return out
}

func matches(rec, want map[string]string) bool {
	for k, v := range want {
		if rec[k] != v {
			return false
		}
	}
	return true
}

// sentRequest returns the request the client sent with this id.
func (s *session) sentRequest(id string) (frame, bool) {
	i := slices.IndexFunc(s.sent, func(f frame) bool { return f.isRequest() && string(f.ID) == id })
	if i < 0 {
		return frame{}, false
	}
	return s.sent[i], true
}

// responses returns the wire indexes of the server's responses to id, given
// as JSON text.
func (s *session) responses(id string) []int {
	var out []int
	for i, f := range s.wire {
		if f.isResponse() && string(f.ID) == id {
			out = append(out, i)
		}
	}
	return out
}

// progress returns the wire indexes of progress notifications for token.
func (s *session) progress(token json.RawMessage) []int {
	var out []int
	for i, f := range s.wire {
		if f.Method == "notifications/progress" && token != nil && bytes.Equal(f.Params.ProgressToken, token) {
			out = append(out, i)
		}
	}
	return out
}

// checkEra verifies from both directions of the wire which era was spoken.
func checkEra(t *testing.T, s *session, era string) {
	initIdx := slices.IndexFunc(s.sent, func(f frame) bool { return f.Method == "initialize" })
	switch era {
	case "legacy":
		if initIdx < 0 {
			t.Fatal("the client sent no initialize")
		}
		resp := s.responses(string(s.sent[initIdx].ID))
		if len(resp) != 1 {
			t.Fatalf("initialize got %d responses", len(resp))
		}
		var res struct{ ProtocolVersion string }
		if err := json.Unmarshal(s.wire[resp[0]].Result, &res); err != nil || res.ProtocolVersion != "2025-11-25" {
			t.Errorf("initialize result protocolVersion %q (%v), want 2025-11-25", res.ProtocolVersion, err)
		}
	case "modern":
		if initIdx >= 0 {
			t.Error("a 2026-07-28 client sent initialize")
		}
		for _, f := range s.sent {
			if f.isRequest() && string(f.Params.Meta["io.modelcontextprotocol/protocolVersion"]) != `"2026-07-28"` {
				t.Errorf("request %s %s carries protocolVersion %s, want 2026-07-28", f.ID, f.Method, f.Params.Meta["io.modelcontextprotocol/protocolVersion"])
			}
		}
		for _, f := range s.wire {
			var res struct{ ResultType string }
			if f.Result != nil && (json.Unmarshal(f.Result, &res) != nil || res.ResultType != "complete") {
				t.Errorf("result for %s has resultType %q, want complete", f.ID, res.ResultType)
			}
		}
	}
}

// checkCancelled verifies, from the server side, what became of the
// slow_count call the client aborted.
func checkCancelled(t *testing.T, s *session) {
	// (a) The server logged it as cancelled by the client.
	cancelled := s.records("request", map[string]string{"method": "tools/call", "tool": "slow_count", "outcome": "cancelled"})
	if len(cancelled) != 1 {
		t.Fatalf("%d slow_count calls logged as cancelled, want 1", len(cancelled))
	}
	id := cancelled[0]["id"]
	if !strings.HasPrefix(cancelled[0]["cause"], "cancelled by the client") {
		t.Errorf("cancelled call %s has cause %q, want one from the client", id, cancelled[0]["cause"])
	}
	req, ok := s.sentRequest(id)
	if !ok {
		t.Fatalf("the client sent no request with the cancelled id %s", id)
	}

	// (b) Its handler stopped, and what it returned went nowhere.
	if n := len(s.records("handler returned after the request ended; result discarded", map[string]string{"id": id, "outcome": "cancelled"})); n != 1 {
		t.Errorf("%d 'result discarded' lines for %s, want 1: the handler did not stop", n, id)
	}

	// The SDK's cancel signal: notifications/cancelled, then the next call.
	cancelIdx := slices.IndexFunc(s.sent, func(f frame) bool {
		return f.Method == "notifications/cancelled" && string(f.Params.RequestID) == id
	})
	if cancelIdx < 0 {
		t.Fatalf("the client sent no notifications/cancelled for %s", id)
	}
	nextIdx := slices.IndexFunc(s.sent[cancelIdx:], frame.isRequest)
	if nextIdx < 0 {
		t.Fatal("the client sent no request after its notifications/cancelled")
	}
	next := s.sent[cancelIdx+nextIdx]

	// (c) No response for it, and no progress once the cancel took effect.
	// The server reads stdin in order, so by the time it answers the
	// request sent after the cancel it has processed the cancel: any
	// progress for the token after that answer would be a leak.
	if n := len(s.responses(id)); n != 0 {
		t.Errorf("the server sent %d responses to the cancelled request %s", n, id)
	}
	token := req.Params.Meta["progressToken"]
	prog := s.progress(token)
	after := s.responses(string(next.ID))
	switch {
	case token == nil:
		t.Errorf("the cancelled request %s carried no progress token", id)
	case len(prog) == 0:
		t.Errorf("no progress for %s, yet the client aborted on its first", token)
	case len(after) != 1:
		t.Errorf("%d responses to %s, the request after the cancel", len(after), next.ID)
	case prog[len(prog)-1] > after[0]:
		t.Errorf("progress for %s at wire line %d, after the cancel took effect (line %d)", token, prog[len(prog)-1]+1, after[0]+1)
	default:
		t.Logf("cancelled request %s: %d progress notification(s) on the wire, none after the cancel took effect", id, len(prog))
	}
}

// checkOthersCompleted verifies that every other request got exactly one
// response and was logged as completed, with in-order progress before it.
func checkOthersCompleted(t *testing.T, s *session) {
	cancelledID := ""
	if rec := s.records("request", map[string]string{"outcome": "cancelled"}); len(rec) == 1 {
		cancelledID = rec[0]["id"]
	}
	calls := map[string]int{}
	for _, req := range s.sent {
		id := string(req.ID)
		if !req.isRequest() || id == cancelledID {
			continue
		}
		resp := s.responses(id)
		if len(resp) != 1 {
			t.Errorf("request %s %s got %d responses, want 1", id, req.Method, len(resp))
			continue
		}
		if s.wire[resp[0]].Error != nil {
			t.Errorf("request %s %s failed: %s", id, req.Method, s.wire[resp[0]].Error)
		}
		rec := s.records("request", map[string]string{"id": id, "method": req.Method})
		if len(rec) != 1 || rec[0]["outcome"] != "completed" {
			t.Errorf("request %s %s logged as %v, want one completed record", id, req.Method, rec)
		} else if rec[0]["tool"] != "" {
			calls[rec[0]["tool"]]++
		}
		if token := req.Params.Meta["progressToken"]; token != nil {
			prog := s.progress(token)
			last := 0.0
			for _, i := range prog {
				if p := s.wire[i].Params.Progress; i > resp[0] || p <= last {
					t.Errorf("progress %v for %s at wire line %d: not increasing, or after the response (line %d)", p, token, i+1, resp[0]+1)
				} else {
					last = p
				}
			}
			// The server coalesces reports faster than its rate limit,
			// but the last one (3 of 3) always goes out before the result.
			if len(prog) < 1 || len(prog) > 3 || s.wire[prog[len(prog)-1]].Params.Progress != 3 {
				t.Errorf("%d progress notifications for %s, want 1 to 3 ending at 3", len(prog), token)
			}
		}
	}
	if want := map[string]int{"echo": 2, "slow_count": 1}; !maps.Equal(calls, want) {
		t.Errorf("completed tool calls %v, want %v", calls, want)
	}
	for _, f := range s.wire {
		if f.isResponse() {
			if _, ok := s.sentRequest(string(f.ID)); !ok {
				t.Errorf("the server answered %s, which the client never sent", f.ID)
			}
		}
	}
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
