package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// records keeps the log records a handler gets: level and attributes.
type records struct {
	mu   sync.Mutex
	recs []record
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	got := record{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool { got.attrs[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	r.recs = append(r.recs, got)
	r.mu.Unlock()
	return nil
}

func (r *records) take() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

// An upstream's stderr is one record per line it wrote, however the
// writes split it: a line past maxStderrLine is cut, the rest dropped and
// counted, never logged as lines of its own; a CRLF ending is a line end.
func TestStderrLogOneRecordPerLine(t *testing.T) {
	var r records
	s := &stderrLog{log: slog.New(&r)}
	long := strings.Repeat("x", 3*maxStderrLine+10)
	for _, chunk := range []string{"first li", "ne\r\nsecond line\nthird", " line\n", long[:5000], long[5000:], "\n", "after\n"} {
		if n, err := s.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v", len(chunk), n, err)
		}
	}
	got := r.take()
	want := []string{"first line", "second line", "third line", long[:maxStderrLine], "after"}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i, rec := range got {
		if rec.msg != "upstream stderr" || rec.attrs["line"] != want[i] {
			t.Errorf("record %d: %s %.40q (%d bytes), want the line %.40q (%d bytes)", i, rec.msg, rec.attrs["line"], len(rec.attrs["line"]), want[i], len(want[i]))
		}
	}
	if cut := got[3].attrs["cut_bytes"]; cut != fmt.Sprint(len(long)-maxStderrLine) {
		t.Errorf("the long line's record says cut_bytes=%q, want %d", cut, len(long)-maxStderrLine)
	}
}

// A chatty upstream does not flood the gateway's log at info: a burst of
// stderrBurst lines is logged at info, then one record says the rest go
// to debug, and they do, until the upstream has been quiet a while — a
// process that dies after a quiet spell still has its last words at info.
func TestStderrLogDoesNotFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r records
		s := &stderrLog{log: slog.New(&r)}
		for i := range stderrBurst + 5 {
			fmt.Fprintf(s, "line %d\n", i)
		}
		got := r.take()
		var info, debug, notes int
		for _, rec := range got {
			switch {
			case rec.msg != "upstream stderr":
				notes++
				if rec.level != slog.LevelInfo || !strings.Contains(rec.msg, "debug") {
					t.Errorf("the note %q at %v; want one at info saying where the rest go", rec.msg, rec.level)
				}
			case rec.level == slog.LevelInfo:
				info++
			case rec.level == slog.LevelDebug:
				debug++
			}
		}
		if info != stderrBurst || debug != 5 || notes != 1 {
			t.Fatalf("%d lines at info, %d at debug, %d notes; want %d, 5 and 1", info, debug, notes, stderrBurst)
		}
		time.Sleep(stderrQuiet)
		fmt.Fprintf(s, "dying words\n")
		if got := r.take(); len(got) != 1 || got[0].level != slog.LevelInfo {
			t.Fatalf("after a quiet spell: %+v, want the line at info", got)
		}
	})
}
