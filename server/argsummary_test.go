package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/logbuf"
	"github.com/mcprel/mcprel/mcp"
)

// An argument summary keeps each value's first 32 characters (of its
// JSON), cuts a longer one to 31 and an ellipsis, counts characters
// rather than bytes, sorts by name and hides secrets.
func TestArgumentSummary(t *testing.T) {
	thirty := strings.Repeat("a", 30) // with its quotes, a value of 32 characters
	for _, c := range []struct{ args, want string }{
		{`{"b":1,"a":"x"}`, `a="x" b=1`},
		{`{"s":"` + thirty + `"}`, `s="` + thirty + `"`},
		{`{"s":"` + thirty + `b"}`, `s="` + thirty + `…`},
		{`{"s":"` + strings.Repeat("é", 30) + `"}`, `s="` + strings.Repeat("é", 30) + `"`},
		{`{"s":"` + strings.Repeat("🙂", 31) + `"}`, `s="` + strings.Repeat("🙂", 30) + `…`},
		{`{"n":[1,2,3],"password":"hunter2"}`, `n=[1,2,3] password=[secret]`},
		{`[1]`, `(not a JSON object)`},
	} {
		rec := RequestRecord{args: []byte(c.args), secret: []string{"password"}}
		if got := rec.ArgumentSummary(); got != c.want {
			t.Errorf("%s: summary %q, want %q", c.args, got, c.want)
		}
	}
}

// The summary is a string that outlives the request (a span holds it
// until it is exported): it must not keep a buffer the size of the
// arguments, nor copy a long value whole to cut it.
func TestArgumentSummaryOfALargeArgument(t *testing.T) {
	rec := RequestRecord{args: []byte(`{"blob":"` + strings.Repeat("A", 1<<20) + `","n":1}`)}
	rec.ArgumentSummary()
	const calls = 10
	var before, after runtime.MemStats
	var summary string
	runtime.ReadMemStats(&before)
	for range calls {
		summary = rec.ArgumentSummary()
	}
	runtime.ReadMemStats(&after)
	// What else the process allocates meanwhile is counted too: the
	// bound is far above a summary's few bytes and far below the
	// argument's megabyte.
	if n := (after.TotalAlloc - before.TotalAlloc) / calls; n > 16<<10 {
		t.Errorf("a summary of %d bytes allocated %d bytes for a 1 MiB argument", len(summary), n)
	}
	if want := `blob="` + strings.Repeat("A", 30) + `… n=1`; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
}

// Through logbuf's handlers the request line never becomes a
// slog.Record (attrsHandler); what they write must be what slog's text
// handler writes for the record requestLine builds: every attribute, a
// line with more than an array's worth, one that slog must format (a
// derived handler), and after a line that grew, one that did not.
func TestRequestLineWithoutARecord(t *testing.T) {
	at := time.Date(2026, 12, 4, 18, 30, 1, 234_567_890, time.UTC)
	many := map[string]string{}
	for i := range maxLineAttrs {
		many[fmt.Sprintf("note%02d", i)] = fmt.Sprint("value ", i)
	}
	recs := []RequestRecord{
		{ID: jsonrpc.IntID(7), Method: "tools/call", Tool: "echo", Era: mcp.Legacy, Transport: "stdio",
			Outcome: Completed, Start: at, Duration: 23 * time.Microsecond, args: []byte(`{"text":"a \"quoted\\\\ word","password":"x"}`), secret: []string{"password"}},
		{ID: jsonrpc.StringID("s 1"), Method: "tools/call", Tool: "slow", Era: mcp.Modern, Transport: "http", Session: "sess=1", args: []byte(`{"n":1}`),
			Outcome: Cancelled, Cause: errors.New("cancelled by the client: stop\n"), Start: at, Duration: time.Second, Queued: time.Millisecond,
			Annotations: map[string]string{"tenant": "t1", "é": "naïve"}, ErrorCode: -32001, IsError: true,
			ProgressRefused: 1, ProgressDropped: 2, ProgressRateLimited: 3},
		{ID: jsonrpc.IntID(8), Method: "tools/list", Outcome: Completed, Start: at, Duration: time.Millisecond, Annotations: many},
		{ID: jsonrpc.IntID(9), Method: "ping", Outcome: Completed, Start: at, Duration: time.Microsecond},
	}
	levels := []slog.Level{slog.LevelInfo, slog.LevelInfo, slog.LevelInfo, slog.LevelDebug}
	debug := &slog.HandlerOptions{Level: slog.LevelDebug}
	for _, derived := range []bool{false, true} {
		var got, want bytes.Buffer
		logs := logbuf.New(&got, nil)
		var h slog.Handler = logbuf.Handler(logbuf.NewTextHandler(logs, debug), logs)
		var wh slog.Handler = slog.NewTextHandler(&want, debug)
		if derived {
			h, wh = h.WithAttrs([]slog.Attr{slog.String("replica", "r1")}), wh.WithAttrs([]slog.Attr{slog.String("replica", "r1")})
		}
		ch, ok := h.(attrsHandler)
		if !ok {
			t.Fatalf("logbuf's handler (derived %v) takes no attributes without a record", derived)
		}
		counted := &countingAttrs{Handler: h, attrs: ch}
		s := &Server{log: slog.New(counted)}
		for i, rec := range recs {
			s.logRequest(context.Background(), levels[i], rec)
			wh.Handle(context.Background(), requestLine(levels[i], rec, true)) // a debug logger's line
		}
		logs.Close()
		if got.String() != want.String() {
			t.Errorf("derived %v: the lines differ from slog's\n got: %s\nwant: %s", derived, got.String(), want.String())
		}
		if n := strings.Count(got.String(), "\n"); n != len(recs) {
			t.Errorf("derived %v: %d lines, want %d", derived, n, len(recs))
		}
		if counted.n != len(recs) {
			t.Errorf("derived %v: %d of %d lines went through HandleAttrs", derived, counted.n, len(recs))
		}
		// Every attribute a request line can have, as an operator reads
		// it (requestLine shares requestAttrs, so this is what holds it).
		if lines := strings.Split(got.String(), "\n"); !derived && lines[1] != wantFullLine {
			t.Errorf("a line with every attribute:\n got: %s\nwant: %s", lines[1], wantFullLine)
		}
	}
}

const wantFullLine = `time=2026-12-04T18:30:02.234Z level=INFO msg=request id="s 1" method=tools/call era=modern transport=http session="sess=1" tool=slow args="n=1" outcome=cancelled duration=1s queued=1ms tenant=t1 é=naïve cause="cancelled by the client: stop\n" code=-32001 is_error=true progress_refused=1 progress_dropped=2 progress_rate_limited=3`

// countingAttrs counts the lines handed to a handler without a record.
type countingAttrs struct {
	slog.Handler
	attrs attrsHandler
	n     int
}

func (c *countingAttrs) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	c.n++
	return c.attrs.HandleAttrs(ctx, t, level, msg, attrs)
}
