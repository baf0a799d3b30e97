package streamhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// The tests in this file pin 2025-era stream resumption: SSE event ids, the
// bounded per-stream log, and GET with Last-Event-ID. A stepper tool
// reports progress and returns only when the test says so, and a test
// waits for the server's own log line before acting on a dropped
// connection: nothing sleeps.

const streamDropped = "legacy stream ended before its response; the call continues"

// wireEvent is one SSE event as the wire carried it.
type wireEvent struct {
	ID, Retry, Data string
	Msg             wireMsg
}

type wireMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

// isResponse reports whether the event is the response to request id.
func (e wireEvent) isResponse(id int) bool {
	return e.Msg.Method == "" && string(e.Msg.ID) == fmt.Sprint(id)
}

// progress returns the event's progress value, or -1 if it is not a
// progress notification.
func (e wireEvent) progress() float64 {
	if e.Msg.Method != mcp.NotificationProgress {
		return -1
	}
	var p struct{ Progress float64 }
	json.Unmarshal(e.Msg.Params, &p)
	return p.Progress
}

// eventReader reads an SSE response keeping each event's id: line and
// retry: field, which mcptest.SSE does not.
type eventReader struct {
	t      testing.TB
	resp   *http.Response
	events chan wireEvent
}

func readEvents(t testing.TB, resp *http.Response) *eventReader {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("want an SSE response, got %d %s: %s", resp.StatusCode, ct, b)
	}
	r := &eventReader{t: t, resp: resp, events: make(chan wireEvent, 1024)}
	go r.read()
	return r
}

func (r *eventReader) read() {
	defer close(r.events)
	sc := bufio.NewScanner(r.resp.Body)
	sc.Buffer(nil, 16<<20)
	var ev wireEvent
	fields := 0
	for sc.Scan() {
		line := sc.Text()
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if fields > 0 {
				if ev.Data != "" {
					json.Unmarshal([]byte(ev.Data), &ev.Msg)
				}
				r.events <- ev
			}
			ev, fields = wireEvent{}, 0
		case name == "": // a comment: a keepalive
		case name == "id":
			ev.ID, fields = value, fields+1
		case name == "retry":
			ev.Retry, fields = value, fields+1
		case name == "data":
			ev.Data, fields = ev.Data+value, fields+1
		}
	}
}

// next returns the next event, failing if the stream ends first.
func (r *eventReader) next() wireEvent {
	r.t.Helper()
	select {
	case ev, ok := <-r.events:
		if !ok {
			r.t.Fatal("the SSE stream ended")
		}
		return ev
	case <-time.After(mcptest.Timeout):
		r.t.Fatalf("no SSE event within %v", mcptest.Timeout)
	}
	return wireEvent{}
}

// rest returns every event until the stream ends.
func (r *eventReader) rest() []wireEvent {
	r.t.Helper()
	var out []wireEvent
	for {
		select {
		case ev, ok := <-r.events:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-time.After(mcptest.Timeout):
			r.t.Fatalf("the SSE stream did not end within %v", mcptest.Timeout)
		}
	}
}

// cut drops the connection, as a network failure would.
func (r *eventReader) cut() { r.resp.Body.Close() }

// logWaiter is a log handler that counts messages, so a test can wait for
// the server to have seen something (a dropped connection) before it acts.
type logWaiter struct {
	mu      sync.Mutex
	counts  map[string]int
	lines   []string
	changed chan struct{}
}

func newLogWaiter() *logWaiter {
	return &logWaiter{counts: map[string]int{}, changed: make(chan struct{})}
}

func (l *logWaiter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logWaiter) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logWaiter) WithGroup(string) slog.Handler            { return l }
func (l *logWaiter) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Message]++
	l.lines = append(l.lines, b.String())
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// wait waits until msg was logged n times.
func (l *logWaiter) wait(t testing.TB, msg string, n int) {
	t.Helper()
	deadline := time.After(mcptest.Timeout)
	for {
		l.mu.Lock()
		got, changed := l.counts[msg], l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%q logged %d times, want %d", msg, got, n)
		}
	}
}

func (l *logWaiter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[msg]
}

// stepper is a tool that reports the progress the test hands it and
// returns the text it is given, so the test decides what a stream carries
// and when.
type stepper struct {
	entered chan jsonrpc.ID
	steps   chan step
	acks    chan error
	results chan string
}

type step struct {
	progress float64
	message  string
	log      string // sent as a notifications/message instead, when set
}

func newStepper(t testing.TB, srv *server.Server, name string) *stepper {
	t.Helper()
	st := &stepper{entered: make(chan jsonrpc.ID, 64), steps: make(chan step), acks: make(chan error), results: make(chan string)}
	// Deadlines far beyond any test, fake time included: only the test
	// ends a call.
	policy := server.Policy{IdleTimeout: time.Hour, MaxTimeout: time.Hour}
	err := srv.AddTool(server.Tool{Name: name, Policy: policy}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		st.entered <- req.ID
		for {
			select {
			case s := <-st.steps:
				if s.log != "" {
					st.acks <- req.Log(mcp.LoggingLevel("info"), "stepper", s.log)
				} else {
					st.acks <- req.ReportProgress(s.progress, 0, s.message)
				}
			case text := <-st.results:
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(text)}}, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (st *stepper) waitEntered(t testing.TB) {
	t.Helper()
	select {
	case <-st.entered:
	case <-time.After(mcptest.Timeout):
		t.Fatal("the stepper was not called")
	}
}

// do has a running call take one step and waits until it did.
func (st *stepper) do(t testing.TB, s step) {
	t.Helper()
	select {
	case st.steps <- s:
	case <-time.After(mcptest.Timeout):
		t.Fatal("no stepper call took the step")
	}
	if err := <-st.acks; err != nil {
		t.Fatalf("step %+v: %v", s, err)
	}
}

func (st *stepper) progress(t testing.TB, v float64) { t.Helper(); st.do(t, step{progress: v}) }

// finish has a running call return text.
func (st *stepper) finish(t testing.TB, text string) {
	t.Helper()
	select {
	case st.results <- text:
	case <-time.After(mcptest.Timeout):
		t.Fatal("no stepper call took its result")
	}
}

// resumeEnv is a server with a stepper tool, its request recorder and log,
// served over HTTP.
type resumeEnv struct {
	srv  *server.Server
	rec  *mcptest.Recorder
	logs *logWaiter
	tool *stepper
	c    *mcptest.HTTPClient
}

func newResumeEnv(t *testing.T, opts *streamhttp.HandlerOptions) *resumeEnv {
	t.Helper()
	e := &resumeEnv{rec: mcptest.NewRecorder(), logs: newLogWaiter()}
	// Progress is sent as it is reported: no rate limit decides what the
	// stream carries.
	e.srv = mcptest.NewServer(t, e.rec.Hook(&server.Options{Logger: slog.New(e.logs), ProgressInterval: time.Nanosecond}))
	e.tool = newStepper(t, e.srv, "step")
	e.c = mcptest.HTTP(t, e.srv, opts)
	return e
}

// resumeGET sends GET with Last-Event-ID in c's session.
func resumeGET(c *mcptest.HTTPClient, lastID string) *http.Response {
	h := c.LegacyHeaders()
	h["Last-Event-ID"] = lastID
	return c.Do(context.Background(), http.MethodGet, nil, h)
}

// streamOf returns the stream part of an event id, which names the stream.
func streamOf(t testing.TB, id string) string {
	t.Helper()
	key, _, ok := strings.Cut(id, "-")
	if !ok || key == "" {
		t.Fatalf("event id %q does not name its stream", id)
	}
	return key
}

// callStream opens a stepper call with a progress token in c's session and
// reads the priming event every 2025-11-25 stream opens with.
func callStream(t *testing.T, e *resumeEnv, c *mcptest.HTTPClient, id int64) (*eventReader, wireEvent) {
	t.Helper()
	ev := readEvents(t, c.Legacy(context.Background(), id, mcp.MethodToolsCall, streamed("step")))
	prime := ev.next()
	if !strings.HasSuffix(prime.ID, "-0") || prime.Retry != "1000" || prime.Data != "" {
		t.Fatalf("first event %+v, want a priming event: an id ending in -0, retry: 1000 and no data", prime)
	}
	e.tool.waitEntered(t)
	return ev, prime
}

// A POST stream cut after some progress: the call goes on, finishes, and a
// GET with the last id seen receives what was missed — the later progress
// and the response — exactly once, on the same stream's ids, and nothing
// from before that id.
func TestResumeAfterACutGetsWhatWasMissedOnce(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	ev, prime := callStream(t, e, e.c, 1)
	e.tool.progress(t, 1)
	p1 := ev.next()
	if p1.progress() != 1 || streamOf(t, p1.ID) != streamOf(t, prime.ID) || p1.Retry != "" {
		t.Fatalf("second event %+v, want progress 1 on the same stream, without retry:", p1)
	}
	ev.cut()
	e.logs.wait(t, streamDropped, 1)
	e.tool.progress(t, 2)
	e.tool.finish(t, "finished after the cut")
	if r := e.rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Completed {
		t.Fatalf("record %+v, want completed", r)
	}

	got := readEvents(t, resumeGET(e.c, p1.ID)).rest()
	key := streamOf(t, prime.ID)
	if len(got) != 2 || got[0].progress() != 2 || !got[1].isResponse(1) ||
		got[0].ID != key+"-2" || got[1].ID != key+"-3" || got[0].Retry != "1000" {
		t.Fatalf("resumed from %s:\n%s\nwant progress 2 (%s-2, with retry:) and the response (%s-3), once each", p1.ID, dump(got), key, key)
	}
	if !strings.Contains(string(got[1].Msg.Result), "finished after the cut") || strings.Contains(string(got[1].Msg.Result), mcp.MetaRefetch) {
		t.Fatalf("response %s, want the result, not flagged for refetch (nothing was lost)", got[1].Data)
	}
	if st := e.c.Handler.ResumeStats(); st.Resumed != 1 || st.Streams != 1 || st.Events != 1 {
		t.Fatalf("stats %+v, want one resume and one stream left holding just its response", st)
	}
}

// A stream cut before any message: the priming event's id is enough to
// get everything.
func TestResumeAfterACutBeforeAnyMessage(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	ev, prime := callStream(t, e, e.c, 7)
	ev.cut()
	e.logs.wait(t, streamDropped, 1)
	e.tool.progress(t, 1)
	e.tool.finish(t, "all of it")
	e.rec.WaitRequest(t, jsonrpc.IntID(7))
	got := readEvents(t, resumeGET(e.c, prime.ID)).rest()
	if len(got) != 2 || got[0].progress() != 1 || !got[1].isResponse(7) || !strings.Contains(got[1].Data, "all of it") {
		t.Fatalf("resumed from the priming event %s:\n%s\nwant progress 1 and the response", prime.ID, dump(got))
	}
}

// Resuming while the call still runs: the replay, then live events on the
// resumed connection, then the response, which ends the stream.
func TestResumeWhileRunningContinuesLive(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	ev, prime := callStream(t, e, e.c, 1)
	key := streamOf(t, prime.ID)
	e.tool.progress(t, 1)
	p1 := ev.next()
	ev.cut()
	e.logs.wait(t, streamDropped, 1)
	e.tool.progress(t, 2) // while no one reads

	resumed := readEvents(t, resumeGET(e.c, p1.ID))
	if got := resumed.next(); got.progress() != 2 || got.ID != key+"-2" {
		t.Fatalf("replayed %+v, want progress 2 as %s-2", got, key)
	}
	e.tool.progress(t, 3)
	if got := resumed.next(); got.progress() != 3 || got.ID != key+"-3" || got.Retry != "" {
		t.Fatalf("live %+v, want progress 3 as %s-3", got, key)
	}
	e.tool.finish(t, "done live")
	rest := resumed.rest()
	if len(rest) != 1 || !rest[0].isResponse(1) || rest[0].ID != key+"-4" {
		t.Fatalf("then:\n%s\nwant only the response as %s-4, and the stream's end", dump(rest), key)
	}
}

// A response written on a connection that then broke may never have
// reached the client: it stays resumable for the TTL. The last event's own
// id gets 400: the stream has ended and nothing follows it.
func TestResumeDeliveredResponseLostInFlight(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	ev, _ := callStream(t, e, e.c, 1)
	e.tool.progress(t, 1)
	p1 := ev.next()
	e.tool.finish(t, "written once")
	rest := ev.rest()
	if len(rest) != 1 || !rest[0].isResponse(1) {
		t.Fatalf("stream:\n%s\nwant the response", dump(rest))
	}
	again := readEvents(t, resumeGET(e.c, p1.ID)).rest()
	if len(again) != 1 || again[0].ID != rest[0].ID || again[0].Data != rest[0].Data {
		t.Fatalf("resumed after %s:\n%s\nwant the same response again", p1.ID, dump(again))
	}
	resp := resumeGET(e.c, rest[0].ID)
	f := mcptest.ReadJSON(t, resp)
	if resp.StatusCode != http.StatusBadRequest || f.Error == nil || !strings.Contains(f.Error.Message, "nothing follows") {
		t.Fatalf("resume after the last event: %d %s, want 400 saying the stream ended", resp.StatusCode, f.Raw)
	}
}

// Ids that do not name a stream of this session — made up, malformed, or
// another session's — get 400 with a JSON-RPC error, never 404 (which would
// tell the client its session ended), all with the same answer, and leave
// the stream they name untouched.
func TestResumeRefusesForeignAndUnknownIDs(t *testing.T) {
	e := newResumeEnv(t, nil)
	a := e.c
	b := &mcptest.HTTPClient{URL: a.URL, Handler: a.Handler, Client: a.Client}
	b.SetT(t)
	a.Initialize(nil)
	b.Initialize(nil)
	ev, prime := callStream(t, e, a, 1)
	ev.cut()
	e.logs.wait(t, streamDropped, 1)

	var messages []string
	for _, tc := range []struct {
		c  *mcptest.HTTPClient
		id string
	}{
		{b, prime.ID},                      // another session's
		{a, "0123456789abcdef-0"},          // made up
		{a, streamOf(t, prime.ID) + "-99"}, // past what the stream gave out
		{a, "not an id"},                   // malformed
		{a, strings.Repeat("x", 300)},      // long
	} {
		resp := resumeGET(tc.c, tc.id)
		f := mcptest.ReadJSON(t, resp)
		if resp.StatusCode != http.StatusBadRequest || f.Error == nil || f.Error.Code != jsonrpc.CodeInvalidRequest {
			t.Fatalf("Last-Event-ID %.40q: %d %s, want 400 with an id-less -32600 error", tc.id, resp.StatusCode, f.Raw)
		}
		messages = append(messages, strings.Replace(f.Error.Message, fmt.Sprintf("%q", tc.id), "ID", 1))
	}
	if messages[0] != messages[1] {
		t.Errorf("another session's id is told apart from a made-up one:\n%s\n%s", messages[0], messages[1])
	}

	e.tool.finish(t, "still mine")
	got := readEvents(t, resumeGET(a, prime.ID)).rest()
	if len(got) != 1 || !got[0].isResponse(1) {
		t.Fatalf("the owner's resume:\n%s\nwant the response", dump(got))
	}
}

// A stream whose request was cancelled has nothing more to give: a resume
// is told it ended, instead of a stream that would end at once (which
// clients take as a cue to reconnect again).
func TestResumeOfACancelledRequest(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	ev, _ := callStream(t, e, e.c, 1)
	e.tool.progress(t, 1)
	p1 := ev.next()
	e.c.LegacyNotify(context.Background(), mcp.NotificationCancelled, map[string]any{"requestId": 1})
	if rest := ev.rest(); len(rest) != 0 {
		t.Fatalf("the cancelled call's stream went on with:\n%s", dump(rest))
	}
	resp := resumeGET(e.c, p1.ID)
	if f := mcptest.ReadJSON(t, resp); resp.StatusCode != http.StatusBadRequest || f.Error == nil || !strings.Contains(f.Error.Message, "ended") {
		t.Fatalf("resuming a cancelled request's stream: %d %s, want 400 saying it ended", resp.StatusCode, f.Raw)
	}
}

// A resume takes over a stream whose old connection the server still
// holds (the client gave up on it first): the old connection ends, and
// the rest goes to the new one, once.
func TestResumeDisplacesTheOldConnection(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	old, prime := callStream(t, e, e.c, 1)
	resumed := readEvents(t, resumeGET(e.c, prime.ID))
	if rest := old.rest(); len(rest) != 0 {
		t.Fatalf("the displaced connection carried:\n%s", dump(rest))
	}
	e.logs.wait(t, streamDropped, 1)
	e.tool.progress(t, 1)
	e.tool.finish(t, "to the new one")
	got := resumed.rest()
	if len(got) != 2 || got[0].progress() != 1 || !got[1].isResponse(1) {
		t.Fatalf("the resumed connection:\n%s\nwant progress 1 and the response", dump(got))
	}
}

// The session's GET stream is numbered and resumable too: what is sent
// while it is cut is kept, and a fresh GET (no Last-Event-ID) replaces a
// stream no one resumed.
func TestResumeGETStream(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	get := func(hdr map[string]string) *http.Response {
		h := e.c.LegacyHeaders()
		for k, v := range hdr {
			h[k] = v
		}
		return e.c.Do(context.Background(), http.MethodGet, nil, h)
	}
	addTool := func(name string) { addNoopTool(t, e.srv, name) }

	stream := readEvents(t, get(nil))
	prime := stream.next()
	if !strings.HasSuffix(prime.ID, "-0") || prime.Retry != "1000" {
		t.Fatalf("GET stream opened with %+v, want a priming event", prime)
	}
	addTool("one")
	first := stream.next()
	if first.Msg.Method != mcp.NotificationToolsListChanged || first.ID != streamOf(t, prime.ID)+"-1" {
		t.Fatalf("GET stream: %+v, want tools/list_changed as event 1", first)
	}
	stream.cut()
	e.logs.wait(t, "stream", 1) // the GET's own debug line: it is detached
	addTool("two")              // while it is cut

	resumed := readEvents(t, get(map[string]string{"Last-Event-ID": first.ID}))
	if got := resumed.next(); got.Msg.Method != mcp.NotificationToolsListChanged || got.ID != streamOf(t, prime.ID)+"-2" {
		t.Fatalf("resumed GET stream: %+v, want the change made while it was cut", got)
	}
	if resp := get(nil); resp.StatusCode != http.StatusConflict {
		t.Fatalf("a fresh GET beside the resumed one: %d, want 409", resp.StatusCode)
	}
	resumed.cut()
	e.logs.wait(t, "resumed stream", 1)
	fresh := readEvents(t, get(nil))
	if p := fresh.next(); streamOf(t, p.ID) == streamOf(t, prime.ID) {
		t.Fatalf("a fresh GET reopened the old stream %s", p.ID)
	}
	addTool("three")
	if got := fresh.next(); got.Msg.Method != mcp.NotificationToolsListChanged {
		t.Fatalf("fresh GET stream: %+v", got)
	}
	resp := get(map[string]string{"Last-Event-ID": first.ID})
	if f := mcptest.ReadJSON(t, resp); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("resuming the replaced GET stream: %d %s, want 400", resp.StatusCode, f.Raw)
	}
	fresh.cut()
}

// Sessions of 2025-06-18 get event ids too, but no priming event (an event
// without data breaks clients of that revision): the retry: field comes
// with the first message.
func TestResumeWithoutPrimingBefore20251125(t *testing.T) {
	e := newResumeEnv(t, nil)
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": mcp.MethodInitialize, "params": map[string]any{
		"protocolVersion": mcp.Version20250618, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "old", "version": "1"},
	}})
	resp := e.c.Do(context.Background(), http.MethodPost, body, nil)
	mcptest.ReadJSON(t, resp)
	e.c.SessionID = resp.Header.Get("Mcp-Session-Id")
	hdr := map[string]string{"Mcp-Session-Id": e.c.SessionID, "Mcp-Protocol-Version": mcp.Version20250618}
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": mcp.NotificationInitialized})
	e.c.Do(context.Background(), http.MethodPost, note, hdr).Body.Close()
	call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodToolsCall, "params": streamed("step")})
	ev := readEvents(t, e.c.Do(context.Background(), http.MethodPost, call, hdr))
	e.tool.waitEntered(t)
	e.tool.progress(t, 1)
	first := ev.next()
	if first.progress() != 1 || !strings.HasSuffix(first.ID, "-1") || first.Retry != "1000" {
		t.Fatalf("first event %+v, want progress 1 with id …-1 and retry: 1000", first)
	}
	e.tool.finish(t, "ok")
	ev.rest()
}

// The 2026-07-28 era has no resumption: its events carry no id: or retry:
// lines, nothing is kept, a Last-Event-ID on a POST changes nothing, and a
// GET without a session is 405 with or without one.
func TestResumeLeavesTheModernEraAlone(t *testing.T) {
	e := newResumeEnv(t, nil)
	hdr := mcptest.ModernHeaders(mcp.MethodToolsCall, "step")
	hdr["Last-Event-ID"] = "0123456789abcdef-0"
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodToolsCall, "params": mcptest.ModernParams(streamed("step"))})
	ev := readEvents(t, e.c.Do(context.Background(), http.MethodPost, body, hdr))
	e.tool.waitEntered(t)
	e.tool.progress(t, 1)
	e.tool.finish(t, "modern")
	got := ev.rest()
	if len(got) != 2 || got[0].progress() != 1 || !got[1].isResponse(1) {
		t.Fatalf("modern stream:\n%s\nwant progress and the response", dump(got))
	}
	for _, g := range got {
		if g.ID != "" || g.Retry != "" {
			t.Fatalf("a modern event carried id %q retry %q", g.ID, g.Retry)
		}
	}
	resp := e.c.Do(context.Background(), http.MethodGet, nil, map[string]string{"Last-Event-ID": "0123456789abcdef-0", "Accept": "text/event-stream"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("modern GET with Last-Event-ID: %d, want 405", resp.StatusCode)
	}
	if st := e.c.Handler.ResumeStats(); st != (streamhttp.ResumeStats{}) {
		t.Fatalf("the modern era touched the log: %+v", st)
	}
}

// DELETE ends the session and drops its logs at once.
func TestResumeLogsEndWithTheirSession(t *testing.T) {
	e := newResumeEnv(t, nil)
	e.c.Initialize(nil)
	ev, prime := callStream(t, e, e.c, 1)
	e.tool.progress(t, 1)
	ev.next()
	ev.cut()
	e.logs.wait(t, streamDropped, 1)
	if st := e.c.Handler.ResumeStats(); st.Streams != 1 || st.Events != 1 {
		t.Fatalf("before DELETE: %+v, want the cut stream and its progress", st)
	}
	e.c.Do(context.Background(), http.MethodDelete, nil, e.c.LegacyHeaders()).Body.Close()
	if st := e.c.Handler.ResumeStats(); st.Streams != 0 || st.Events != 0 || st.Bytes != 0 {
		t.Fatalf("after DELETE: %+v, want nothing kept", st)
	}
	if resp := resumeGET(e.c, prime.ID); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("resume in the deleted session: %d, want 404 (the session is gone)", resp.StatusCode)
	}
}

// A stream that cannot keep all it carried (here: log messages past its
// event bound) sheds the oldest, and the resumed response carries the
// refetch flag: what the client saw is incomplete.
func TestResumeAfterSheddingFlagsRefetch(t *testing.T) {
	e := newResumeEnv(t, &streamhttp.HandlerOptions{Resume: streamhttp.ResumeOptions{MaxEventsPerStream: 4}})
	drained := make(chan struct{}, 1)
	streamhttp.OnDrained(e.c.Handler, func() { drained <- struct{}{} })
	e.c.Initialize(nil)
	if f := mcptest.ReadJSON(t, e.c.Legacy(context.Background(), 50, mcp.MethodSetLevel, map[string]any{"level": "debug"})); f.Error != nil {
		t.Fatal(f.Raw)
	}
	ev, prime := callStream(t, e, e.c, 1)
	ev.cut()
	e.logs.wait(t, streamDropped, 1)
	for i := range 6 {
		e.tool.do(t, step{log: fmt.Sprint("line ", i)})
	}
	e.tool.finish(t, "after six lines")
	e.rec.WaitRequest(t, jsonrpc.IntID(1))
	select { // everything the call sent is in the log, shed or kept
	case <-drained:
	case <-time.After(mcptest.Timeout):
		t.Fatal("the drainer did not finish")
	}
	got := readEvents(t, resumeGET(e.c, prime.ID)).rest()
	if len(got) != 4 || !got[3].isResponse(1) || !strings.Contains(got[0].Data, "line 3") {
		t.Fatalf("resumed:\n%s\nwant the last three lines and the response (4 events)", dump(got))
	}
	if !strings.Contains(string(got[3].Msg.Result), mcp.MetaRefetch) {
		t.Fatalf("response %s, want the refetch flag", got[3].Data)
	}
	if st := e.c.Handler.ResumeStats(); st.Shed != 3 {
		t.Fatalf("stats %+v, want 3 shed", st)
	}
}

// Many streams with large events against small bounds: every bound holds
// at the end (the log's bytes are counted), every response is either kept
// or replaced by an error that says so — never silently missing — and each
// replacement or loss is logged. A session past its stream cap serves the
// extra stream without ids.
func TestResumeBoundsHold(t *testing.T) {
	const (
		perStream  = 8 << 10
		perSession = 20 << 10
		total      = 32 << 10
	)
	e := newResumeEnv(t, &streamhttp.HandlerOptions{Resume: streamhttp.ResumeOptions{
		MaxEventsPerStream: 8, MaxBytesPerStream: perStream, MaxStreamsPerSession: 4,
		MaxBytesPerSession: perSession, MaxBytes: total,
	}})
	var clients []*mcptest.HTTPClient
	type call struct {
		c     *mcptest.HTTPClient
		id    int64
		prime wireEvent
	}
	var calls []call
	for range 3 {
		c := &mcptest.HTTPClient{URL: e.c.URL, Handler: e.c.Handler, Client: e.c.Client}
		c.SetT(t)
		c.Initialize(nil)
		clients = append(clients, c)
		for id := int64(1); id <= 4; id++ {
			ev, prime := callStream(t, e, c, id)
			ev.cut()
			calls = append(calls, call{c, id, prime})
		}
	}
	e.logs.wait(t, streamDropped, len(calls))
	// A fifth stream in a session holding four open ones has no log.
	addNoopTool(t, e.srv, "noop")
	extra := readEvents(t, clients[0].Legacy(context.Background(), 5, mcp.MethodToolsCall, streamed("noop"))).rest()
	if len(extra) != 1 || !extra[0].isResponse(5) || extra[0].ID != "" {
		t.Fatalf("the session's fifth stream:\n%s\nwant its response, without an id", dump(extra))
	}

	// The cut calls report large progress (each step goes to whichever
	// call takes it, so the values rise across all of them), then return
	// results of 5 or 10 KiB (the latter past MaxBytesPerStream).
	big := strings.Repeat("p", 1500)
	for v := 1; v <= 5*len(calls); v++ {
		e.tool.do(t, step{progress: float64(v), message: big})
	}
	for i := range calls {
		size := 5 << 10
		if i%4 == 3 {
			size = 10 << 10
		}
		e.tool.finish(t, strings.Repeat("r", size))
	}
	for _, cl := range calls {
		e.rec.WaitRecord(t, "the cut calls' records", func(r server.RequestRecord) bool { return r.ID == jsonrpc.IntID(cl.id) })
	}
	st := e.c.Handler.ResumeStats()
	if st.Bytes > total || st.Events > len(calls)*8 || st.Streams > 3*4 {
		t.Fatalf("stats %+v past the bounds (%d bytes)", st, total)
	}

	var kept, replaced, lost int
	for _, cl := range calls {
		resp := resumeGET(cl.c, cl.prime.ID)
		if resp.StatusCode == http.StatusBadRequest {
			mcptest.ReadJSON(t, resp)
			lost++
			continue
		}
		got := readEvents(t, resp).rest()
		if len(got) == 0 || !got[len(got)-1].isResponse(int(cl.id)) {
			t.Fatalf("call %d resumed:\n%s\nwant it to end with its response", cl.id, dump(got))
		}
		switch final := got[len(got)-1]; {
		case final.Msg.Error != nil && strings.Contains(final.Msg.Error.Message, "too large for the resumption log"):
			replaced++
		case final.Msg.Error == nil && len(final.Msg.Result) > 5<<10:
			kept++
		default:
			t.Fatalf("call %d's response: %.200s", cl.id, final.Data)
		}
	}
	st = e.c.Handler.ResumeStats()
	if int64(replaced) != st.Replaced || int64(lost) != st.Lost || kept+replaced+lost != len(calls) {
		t.Fatalf("kept %d, replaced %d, lost %d of %d; stats %+v", kept, replaced, lost, len(calls), st)
	}
	if replaced < 3 { // at least the three 10 KiB results
		t.Fatalf("only %d responses replaced; stats %+v", replaced, st)
	}
	warned := e.logs.count("a response did not fit the resumption log; a client that resumes its stream gets an error in its place") +
		e.logs.count("a response did not fit the resumption log, nor an error in its place; a client that resumes its stream gets 400")
	if warned != replaced+lost {
		t.Fatalf("%d warnings for %d responses not kept", warned, replaced+lost)
	}
	if st.Bytes > total {
		t.Fatalf("after the resumes: %+v", st)
	}
}

func dump(evs []wireEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  id=%q retry=%q data=%.160s\n", e.ID, e.Retry, e.Data)
	}
	return b.String()
}

// A stream cut and not resumed within the TTL is dropped (on fake time):
// its resume gets 400, the call's response goes nowhere, and the loss is
// logged. A delivered response is kept for the TTL too, then dropped
// quietly.
func TestResumeLogExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &resumeEnv{rec: mcptest.NewRecorder(), logs: newLogWaiter()}
		e.srv = mcptest.NewServer(t, e.rec.Hook(&server.Options{Logger: slog.New(e.logs), ProgressInterval: time.Nanosecond}))
		e.tool = newStepper(t, e.srv, "step")
		e.c = mcptest.PipeHTTP(t, e.srv, &streamhttp.HandlerOptions{Resume: streamhttp.ResumeOptions{TTL: time.Minute}})
		e.c.Initialize(nil)

		ev, prime := callStream(t, e, e.c, 1)
		e.tool.progress(t, 1)
		ev.next()
		ev.cut()
		synctest.Wait()
		if n := e.logs.count(streamDropped); n != 1 {
			t.Fatalf("the server has not seen the cut (%d)", n)
		}
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		if st := e.c.Handler.ResumeStats(); st.Streams != 1 || st.Events != 1 {
			t.Fatalf("just before the TTL: %+v, want the stream and its progress", st)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait() // the TTL's timer has run
		if st := e.c.Handler.ResumeStats(); st.Streams != 0 || st.Events != 0 || st.Expired != 1 {
			t.Fatalf("after the TTL: %+v, want nothing kept and one expiry", st)
		}
		resp := resumeGET(e.c, prime.ID)
		if f := mcptest.ReadJSON(t, resp); resp.StatusCode != http.StatusBadRequest || f.Error == nil {
			t.Fatalf("resume after the TTL: %d %s, want 400", resp.StatusCode, f.Raw)
		}
		e.tool.finish(t, "too late")
		if r := e.rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Completed {
			t.Fatalf("record %+v, want completed: the call is not cancelled by the log's expiry", r)
		}
		if e.logs.count("a stream was not resumed within the resumption TTL; its log is dropped, and its response, when the call ends, cannot reach its client") != 1 {
			t.Fatalf("the expiry was not logged:\n%s", strings.Join(e.logs.lines, "\n"))
		}

		ev, _ = callStream(t, e, e.c, 2)
		e.tool.finish(t, "delivered")
		ev.rest()
		if st := e.c.Handler.ResumeStats(); st.Streams != 1 || st.Events != 1 {
			t.Fatalf("after a delivered response: %+v, want it kept", st)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := e.c.Handler.ResumeStats(); st.Streams != 0 || st.Expired != 1 {
			t.Fatalf("a TTL after delivery: %+v, want it dropped, and not counted as expired", st)
		}
	})
}

// With resumption disabled, 2025-era streams are what they were: no event
// ids, nothing kept, and a Last-Event-ID is ignored (the GET opens the
// session's stream).
func TestResumeDisabled(t *testing.T) {
	e := newResumeEnv(t, &streamhttp.HandlerOptions{Resume: streamhttp.ResumeOptions{Disabled: true}})
	e.c.Initialize(nil)
	ev := readEvents(t, e.c.Legacy(context.Background(), 1, mcp.MethodToolsCall, streamed("step")))
	e.tool.waitEntered(t)
	e.tool.progress(t, 1)
	e.tool.finish(t, "plain")
	got := ev.rest()
	if len(got) != 2 || got[0].ID != "" || got[0].Retry != "" || got[1].ID != "" || !got[1].isResponse(1) {
		t.Fatalf("stream:\n%s\nwant progress and the response, without ids", dump(got))
	}
	get := readEvents(t, resumeGET(e.c, "0123456789abcdef-1"))
	addNoopTool(t, e.srv, "late")
	if f := get.next(); f.Msg.Method != mcp.NotificationToolsListChanged || f.ID != "" {
		t.Fatalf("GET stream: %+v, want the list change without an id", f)
	}
	get.cut()
	if st := e.c.Handler.ResumeStats(); st != (streamhttp.ResumeStats{}) {
		t.Fatalf("stats %+v, want none", st)
	}
}
