package ts_test

// The same SDK clients over Streamable HTTP, in the two eras they speak
// there. The test starts `mcprel serve --http` itself, runs http-client.mjs
// against it, stops the server with SIGTERM, and then judges what happened
// from the server's own JSON log: one "request" line per request at its
// terminal state, and (at debug level) one "stream" line per HTTP response
// saying what the server wrote on it and why it ended.
//
//   - v1 (@modelcontextprotocol/sdk 1.32.2) speaks 2025-11-25: initialize,
//     an Mcp-Session-Id session, and an abort POSTs notifications/cancelled,
//     which is what cancels the call; a dropped stream would not.
//   - v2 (@modelcontextprotocol/client 2.4.0) is pinned to 2026-07-28:
//     stateless, and an abort closes the request's own stream, which is the
//     cancellation.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestTypeScriptSDKOverHTTP(t *testing.T) {
	requireNode(t)
	// Bounds a hung server or client; a passing run takes about a second
	// after the build.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)

	for _, tc := range []struct{ sdk, era string }{
		{"v1", "legacy"}, // @modelcontextprotocol/sdk 1.32.2, 2025-11-25 session
		{"v2", "modern"}, // @modelcontextprotocol/client 2.4.0, pinned to 2026-07-28
	} {
		t.Run(tc.sdk+"-"+tc.era, func(t *testing.T) {
			srv := startHTTPServer(t, ctx, bin)
			sum := runHTTPClient(t, ctx, srv.url, tc.sdk)
			// The client is done, but the server may still be writing
			// the log lines of what it just served: wait for them (the
			// wait is bounded; a run whose lines never come fails below
			// with what was logged).
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			if !srv.waitFor(wctx, func(log []map[string]string) bool { return settled(log, sum) }) {
				t.Errorf("the server did not log the end of every request within 30s")
			}
			wcancel()
			srv.stop(t, ctx)

			checkHTTPLog(t, srv)
			checkHTTPEra(t, srv, sum, tc.era)
			checkHTTPCancelled(t, srv, sum, tc.era)
			checkHTTPOthersCompleted(t, srv, sum)
		})
	}
}

// httpServer is one `mcprel serve --http` process and what it logged.
type httpServer struct {
	cmd *exec.Cmd
	url string

	mu      sync.Mutex
	lines   []string            // stderr after the URL line, as written
	log     []map[string]string // the lines that are JSON log records
	changed chan struct{}       // closed (and replaced) when a line arrives
	eof     chan struct{}       // closed when stderr ends
	stopped bool
	exitErr error
}

func startHTTPServer(t *testing.T, ctx context.Context, bin string) *httpServer {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "serve", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
	cmd.Dir = t.TempDir() // where the default ledger file goes
	// nodeEnv is what the stdio client hands its server (GORACE under
	// -race); this server is the test's own child, so it gets it here.
	cmd.Env = append(os.Environ(), nodeEnv...)
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &httpServer{cmd: cmd, changed: make(chan struct{}), eof: make(chan struct{})}
	urlc := make(chan string, 1)
	go s.read(stderr, urlc)
	t.Cleanup(func() {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if !stopped { // the test ended early: don't leave the server behind
			cmd.Process.Kill()
			<-s.eof
			cmd.Wait()
		}
		if t.Failed() {
			s.mu.Lock()
			t.Logf("server stderr:\n%s", strings.Join(s.lines, "\n"))
			s.mu.Unlock()
		}
	})
	select {
	case s.url = <-urlc:
	case <-s.eof:
		t.Fatal("the server exited before printing its endpoint URL")
	case <-ctx.Done():
		t.Fatal("the server printed no endpoint URL")
	}
	if !strings.HasPrefix(s.url, "http://127.0.0.1:") || !strings.HasSuffix(s.url, "/mcp") {
		t.Fatalf("first stderr line %q is not the endpoint URL", s.url)
	}
	return s
}

// read takes the server's stderr: the endpoint URL, then log lines.
func (s *httpServer) read(r io.Reader, urlc chan<- string) {
	defer close(s.eof)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			urlc <- line
			continue
		}
		s.mu.Lock()
		s.lines = append(s.lines, line)
		if rec := parseLogLine(line); rec != nil {
			s.log = append(s.log, rec)
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
	io.Copy(io.Discard, r) // a line past the buffer: keep the pipe drained
}

// waitFor waits until cond holds for the log so far, stderr ends, or ctx
// ends; it reports whether cond held.
func (s *httpServer) waitFor(ctx context.Context, cond func([]map[string]string) bool) bool {
	for {
		s.mu.Lock()
		ok, changed := cond(s.log), s.changed
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-s.eof:
			s.mu.Lock()
			defer s.mu.Unlock()
			return cond(s.log)
		case <-ctx.Done():
			return false
		}
	}
}

// stop sends SIGTERM and waits for the server to exit, which it must do by
// itself and with status 0.
func (s *httpServer) stop(t *testing.T, ctx context.Context) {
	t.Helper()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	// Nothing runs long at this point; the grace period (10s) bounds a
	// call that would not stop.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-s.eof:
	case <-sctx.Done():
		t.Errorf("the server did not exit within 30s of SIGTERM")
		s.cmd.Process.Kill()
		<-s.eof
	}
	s.exitErr = s.cmd.Wait()
	if s.exitErr != nil {
		t.Errorf("the server exited with %v after SIGTERM, want status 0", s.exitErr)
	}
}

func (s *httpServer) records(msg string, want map[string]string) []map[string]string {
	return findRecords(s.log, msg, want)
}

// httpSummary is what http-client.mjs prints.
type httpSummary struct {
	SDK                string          `json:"sdk"`
	Failures           []string        `json:"failures"`
	ErrorsWhileClosing []string        `json:"errorsWhileClosing"`
	ResumeAfterAbort   []string        `json:"resumeAfterAbort"`
	SessionID          *string         `json:"sessionId"`
	ProtocolVersion    string          `json:"protocolVersion"`
	Progress           []float64       `json:"progress"`
	LateProgress       []lateProgress  `json:"lateProgress"`
	AbortedProgress    []float64       `json:"abortedProgress"`
	AbortedID          json.RawMessage `json:"abortedId"`
	HTTP               []exchange      `json:"http"`
}

type lateProgress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total"`
}

// exchange is one HTTP request the client's transport made, as its fetch
// saw it.
type exchange struct {
	Method              string            `json:"method"` // POST, GET or DELETE
	Headers             map[string]string `json:"headers"`
	ID                  json.RawMessage   `json:"id"`  // the JSON-RPC request's id
	RPC                 string            `json:"rpc"` // the JSON-RPC method
	Name                string            `json:"name"`
	RequestID           json.RawMessage   `json:"requestId"` // notifications/cancelled
	ProgressToken       json.RawMessage   `json:"progressToken"`
	MetaProtocolVersion string            `json:"metaProtocolVersion"`
	Batch               int               `json:"batch"`
	Response            bool              `json:"response"`
	Status              int               `json:"status"`
	ContentType         *string           `json:"contentType"`
	SessionIDSet        string            `json:"sessionIdSet"`
	FetchError          string            `json:"fetchError"`
}

func (e exchange) isRequest() bool { return e.Method == "POST" && e.ID != nil && e.RPC != "" }

func (e exchange) String() string {
	ct := "-"
	if e.ContentType != nil {
		ct = *e.ContentType
	}
	what := e.RPC
	if e.ID != nil {
		what += " id=" + string(e.ID)
	}
	if e.Name != "" {
		what += " " + e.Name
	}
	return fmt.Sprintf("%s %s → %d %s", e.Method, what, e.Status, ct)
}

// requests returns the JSON-RPC requests the client POSTed.
func (s *httpSummary) requests() []exchange {
	var out []exchange
	for _, e := range s.HTTP {
		if e.isRequest() {
			out = append(out, e)
		}
	}
	return out
}

func runHTTPClient(t *testing.T, ctx context.Context, url, sdk string) *httpSummary {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", "http-client.mjs", url, sdk)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	var sum httpSummary
	if jerr := json.Unmarshal([]byte(stdout.String()), &sum); jerr != nil || sum.SDK != sdk {
		t.Fatalf("node http-client.mjs %s: %v %v\nstdout:\n%s\nstderr:\n%s", sdk, err, jerr, &stdout, &stderr)
	}
	t.Logf("client summary: %s", compactJSON([]byte(stdout.String())))
	for _, e := range sum.HTTP {
		t.Logf("  %s", e)
	}
	// A failed expectation on the client's side fails the test, but the
	// server's side is judged all the same.
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("node http-client.mjs %s: %v\nstderr:\n%s", sdk, err, &stderr)
		}
		t.Errorf("node http-client.mjs %s: %v: %q", sdk, err, sum.Failures)
	}
	if stderr.Len() > 0 {
		t.Logf("client stderr:\n%s", &stderr)
	}
	if len(sum.ResumeAfterAbort) > 0 {
		t.Logf("the SDK reconnected the stream it aborted, refused (not failures): %q", sum.ResumeAfterAbort)
	}
	if len(sum.ErrorsWhileClosing) > 0 {
		t.Logf("client errors while closing (not failures): %q", sum.ErrorsWhileClosing)
	}
	return &sum
}

// settled reports whether the log shows the end of everything the client
// sent: a terminal "request" line for every request, a "stream" line for
// every one served on its own response stream (all but initialize), and,
// for a cancelled call, the line saying its handler returned.
func settled(log []map[string]string, sum *httpSummary) bool {
	for _, e := range sum.requests() {
		id := string(e.ID)
		recs := findRecords(log, "request", map[string]string{"id": id})
		if len(recs) == 0 {
			return false
		}
		if e.RPC != "initialize" && len(findRecords(log, "stream", map[string]string{"id": id})) == 0 {
			return false
		}
		if recs[0]["outcome"] == "cancelled" && recs[0]["tool"] != "" &&
			len(findRecords(log, "handler returned after the request ended; result discarded", map[string]string{"id": id})) == 0 {
			return false
		}
	}
	return true
}

// checkHTTPLog verifies that everything after the URL line is a log record
// at debug or info level: no race report, no warning, no error.
func checkHTTPLog(t *testing.T, s *httpServer) {
	for _, line := range s.lines {
		rec := parseLogLine(line)
		switch {
		case strings.Contains(line, "DATA RACE"):
			t.Error("the server reported a data race")
		case rec["time"] == "" || rec["level"] == "" || rec["msg"] == "":
			t.Errorf("stderr line is not a log record: %q", line)
		case rec["level"] != "INFO" && rec["level"] != "DEBUG":
			t.Errorf("unexpected %s log line: %q", rec["level"], line)
		}
	}
	if len(s.records("shutting down", nil)) != 1 {
		t.Error(`no "shutting down" line: the server did not see the SIGTERM`)
	}
}

// checkHTTPEra verifies which era was spoken, from the server's log and
// from the headers on the wire.
func checkHTTPEra(t *testing.T, s *httpServer, sum *httpSummary, era string) {
	reqs := sum.requests()
	if len(reqs) == 0 {
		t.Fatal("the client sent no requests")
	}
	for _, e := range sum.HTTP {
		if e.Batch != 0 {
			t.Errorf("the client POSTed a batch of %d messages", e.Batch)
		}
		if e.FetchError != "" && !(era == "modern" && string(e.ID) == string(sum.AbortedID)) {
			t.Errorf("%s failed in fetch: %s", e, e.FetchError)
		}
	}
	switch era {
	case "legacy":
		inits := s.records("request", map[string]string{"method": "initialize"})
		if len(inits) != 1 || inits[0]["outcome"] != "completed" {
			t.Fatalf("initialize logged as %v, want one completed record", inits)
		}
		if first := reqs[0]; first.RPC != "initialize" || string(first.ID) != inits[0]["id"] {
			t.Errorf("the first request was %s, want the logged initialize %s", first, inits[0]["id"])
		}
		if sum.ProtocolVersion != "2025-11-25" {
			t.Errorf("negotiated %q, want 2025-11-25", sum.ProtocolVersion)
		}
		if sum.SessionID == nil || *sum.SessionID == "" {
			t.Fatal("the client has no session id")
		}
		sid := *sum.SessionID
		if sum.HTTP[0].SessionIDSet != sid || sum.HTTP[0].Headers["mcp-session-id"] != "" {
			t.Errorf("initialize: sent session id %q, got %q; want none sent and %q set", sum.HTTP[0].Headers["mcp-session-id"], sum.HTTP[0].SessionIDSet, sid)
		}
		for _, e := range sum.HTTP[1:] {
			if e.Headers["mcp-session-id"] != sid || e.Headers["mcp-protocol-version"] != "2025-11-25" {
				t.Errorf("%s carried Mcp-Session-Id %q and MCP-Protocol-Version %q, want %q and 2025-11-25",
					e, e.Headers["mcp-session-id"], e.Headers["mcp-protocol-version"], sid)
			}
			if e.Method == "POST" && e.RPC != "" && e.ID == nil && e.Status != 202 {
				t.Errorf("notification %s: status %d, want 202", e, e.Status)
			}
		}
		// The SDK opens the session's GET stream after initialized.
		if i := slices.IndexFunc(sum.HTTP, func(e exchange) bool { return e.Method == "GET" }); i >= 0 {
			if e := sum.HTTP[i]; e.Status != 200 || e.ContentType == nil || *e.ContentType != "text/event-stream" {
				t.Errorf("the session's GET stream: %s, want 200 text/event-stream", e)
			}
		}
		if i := slices.IndexFunc(sum.HTTP, func(e exchange) bool { return e.Method == "DELETE" }); i < 0 {
			t.Error("the client did not end its session with DELETE")
		} else if sum.HTTP[i].Status != 200 {
			t.Errorf("DELETE of the session: status %d, want 200", sum.HTTP[i].Status)
		}
	case "modern":
		for _, rec := range s.log {
			if rec["method"] == "initialize" {
				t.Errorf("a 2026-07-28 run logged an initialize: %v", rec)
			}
		}
		if sum.ProtocolVersion != "2026-07-28" {
			t.Errorf("negotiated %q, want 2026-07-28", sum.ProtocolVersion)
		}
		if sum.SessionID != nil {
			t.Errorf("a 2026-07-28 client has session id %q", *sum.SessionID)
		}
		for _, e := range sum.HTTP {
			if e.Method != "POST" {
				t.Errorf("a 2026-07-28 client sent %s", e)
				continue
			}
			if !e.isRequest() {
				// Closing the stream is the cancellation in this era.
				t.Errorf("a 2026-07-28 client POSTed the notification %s", e)
				continue
			}
			h := e.Headers
			if h["mcp-session-id"] != "" || e.SessionIDSet != "" {
				t.Errorf("%s: a session id crossed the wire", e)
			}
			if e.MetaProtocolVersion != "2026-07-28" || h["mcp-protocol-version"] != "2026-07-28" {
				t.Errorf("%s: _meta protocolVersion %q, MCP-Protocol-Version %q, want 2026-07-28 for both", e, e.MetaProtocolVersion, h["mcp-protocol-version"])
			}
			if h["mcp-method"] != e.RPC {
				t.Errorf("%s: Mcp-Method %q", e, h["mcp-method"])
			}
			if e.RPC == "tools/call" && h["mcp-name"] != e.Name {
				t.Errorf("%s: Mcp-Name %q", e, h["mcp-name"])
			}
		}
		if recs := s.records("request", map[string]string{"method": "server/discover"}); len(recs) != 1 || recs[0]["outcome"] != "completed" {
			t.Errorf("server/discover logged as %v, want the version probe completed once", recs)
		}
	}
}

// checkHTTPCancelled verifies, from the server's log, what became of the
// slow_count call the client aborted.
func checkHTTPCancelled(t *testing.T, s *httpServer, sum *httpSummary, era string) {
	id := string(sum.AbortedID)
	if sum.AbortedID == nil || id == "null" {
		t.Fatal("the client did not say which request it aborted")
	}
	// The client aborted on the first progress, so the call was running.
	if len(sum.AbortedProgress) != 1 {
		t.Errorf("the aborted call saw progress %v, want exactly the one it aborted on", sum.AbortedProgress)
	}
	streams := s.records("stream", map[string]string{"id": id, "method": "tools/call"})

	// (a) Logged as cancelled, once, for the cause the era gives.
	cancelled := s.records("request", map[string]string{"method": "tools/call", "tool": "slow_count", "outcome": "cancelled"})
	if len(cancelled) != 1 || cancelled[0]["id"] != id {
		recs := s.records("request", map[string]string{"id": id})
		if len(recs) == 1 && recs[0]["outcome"] == "completed" && len(streams) == 1 && streams[0]["end"] == wantEnd(era) {
			// Seen in the modern era: the stream closed and the handler's
			// context ended with it, but the handler's return (the
			// cancellation error, as a tool error) was recorded before
			// the request's own abort ran.
			t.Fatalf("the aborted call %s was logged as %v after its stream ended %s: the server recorded the handler's return instead of the cancellation",
				id, recs[0], streams[0]["end"])
		}
		t.Fatalf("slow_count calls logged as cancelled: %v; want exactly the aborted %s, which was logged as %v with stream %v",
			cancelled, id, recs, streams)
	}
	cause := cancelled[0]["cause"]
	switch era {
	case "legacy":
		if !strings.HasPrefix(cause, "cancelled by the client: ") {
			t.Errorf("cancelled call %s has cause %q, want the client's notifications/cancelled", id, cause)
		}
		// What cancelled it: the POSTed notification, accepted.
		i := slices.IndexFunc(sum.HTTP, func(e exchange) bool {
			return e.RPC == "notifications/cancelled" && string(e.RequestID) == id
		})
		if i < 0 {
			t.Errorf("the client POSTed no notifications/cancelled for %s", id)
		} else if sum.HTTP[i].Status != 202 {
			t.Errorf("notifications/cancelled for %s: status %d, want 202", id, sum.HTTP[i].Status)
		}
	case "modern":
		if cause != "client closed the request stream" {
			t.Errorf("cancelled call %s has cause %q, want the closed stream", id, cause)
		}
	}

	// (b) Its handler stopped, and what it returned went nowhere.
	if n := len(s.records("handler returned after the request ended; result discarded", map[string]string{"id": id, "tool": "slow_count", "outcome": "cancelled"})); n != 1 {
		t.Errorf("%d 'result discarded' lines for %s, want 1: the handler did not stop", n, id)
	}

	// (c) Its response stream carried progress but no response, and ended
	// for the era's reason.
	if len(streams) != 1 {
		t.Fatalf("%d stream lines for %s, want 1: %v", len(streams), id, streams)
	}
	st := streams[0]
	if st["sse"] != "true" || st["final"] != "false" || st["end"] != wantEnd(era) {
		t.Errorf("stream of the cancelled call %s: sse=%s final=%s end=%s, want sse=true final=false end=%s", id, st["sse"], st["final"], st["end"], wantEnd(era))
	}
	if n, _ := strconv.Atoi(st["frames"]); n < 1 {
		t.Errorf("the cancelled call's stream carried %s frames, yet the client aborted on a progress notification", st["frames"])
	}
	t.Logf("cancelled request %s: cause %q; stream sse=%s frames=%s final=%s end=%s", id, cause, st["sse"], st["frames"], st["final"], st["end"])
}

// wantEnd is how the aborted call's response stream ends in each era: the
// server ends it after the POSTed cancellation, or the client closes it.
func wantEnd(era string) string {
	return map[string]string{"legacy": "cancelled", "modern": "client_closed"}[era]
}

// checkHTTPOthersCompleted verifies that every other request completed,
// with exactly its response on a stream of the type the client received,
// and that the progress the server wrote is the progress the client got.
func checkHTTPOthersCompleted(t *testing.T, s *httpServer, sum *httpSummary) {
	aborted := string(sum.AbortedID)
	calls := map[string]int{}
	sent := map[string]bool{}
	for _, e := range sum.requests() {
		id := string(e.ID)
		if sent[id] {
			t.Errorf("the client reused id %s", id)
		}
		sent[id] = true
		if id == aborted {
			continue
		}
		recs := s.records("request", map[string]string{"id": id})
		if len(recs) != 1 || recs[0]["method"] != e.RPC || recs[0]["outcome"] != "completed" || recs[0]["is_error"] != "" {
			t.Errorf("request %s %s logged as %v, want one completed record", id, e.RPC, recs)
			continue
		}
		if tool := recs[0]["tool"]; tool != "" {
			calls[tool]++
		}
		if e.Status != 200 {
			t.Errorf("%s: status %d, want 200", e, e.Status)
		}
		if e.RPC == "initialize" {
			continue // answered outside the per-request streams, with no stream line
		}
		streams := s.records("stream", map[string]string{"id": id, "method": e.RPC})
		if len(streams) != 1 {
			t.Errorf("%d stream lines for %s %s, want 1", len(streams), id, e.RPC)
			continue
		}
		st := streams[0]
		if st["final"] != "true" || st["end"] != "complete" {
			t.Errorf("stream of %s %s: final=%s end=%s, want final=true end=complete", id, e.RPC, st["final"], st["end"])
		}
		wantType := map[string]string{"true": "text/event-stream", "false": "application/json"}[st["sse"]]
		if e.ContentType == nil || *e.ContentType != wantType {
			t.Errorf("%s: the server logged sse=%s, want content type %q", e, st["sse"], wantType)
		}
		frames, _ := strconv.Atoi(st["frames"])
		if e.ProgressToken == nil {
			if frames != 1 {
				t.Errorf("stream of %s %s without a progress token carried %d frames, want 1", id, e.RPC, frames)
			}
			continue
		}
		// The short count: its progress (the server may coalesce reports
		// that come faster than its rate limit) and then the result.
		got := len(sum.Progress)
		for _, p := range sum.LateProgress {
			if p.Total == 3 {
				got++
			}
		}
		if frames < 2 || frames > 4 {
			t.Errorf("stream of %s %s carried %d frames, want 1 to 3 progress notifications and the result", id, e.RPC, frames)
		} else if got != frames-1 {
			t.Errorf("the server wrote %d progress notifications for %s, the client received %d (%v, late %v)", frames-1, id, got, sum.Progress, sum.LateProgress)
		}
	}
	if want := map[string]int{"echo": 2, "slow_count": 1}; !maps.Equal(calls, want) {
		t.Errorf("completed tool calls %v, want %v", calls, want)
	}
	for _, rec := range s.records("request", nil) {
		if !sent[rec["id"]] {
			t.Errorf("the server logged request %s, which the client never sent", rec["id"])
		}
	}
}
