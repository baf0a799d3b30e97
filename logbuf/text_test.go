package logbuf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// sameAsSlog handles r with NewTextHandler and with slog's text handler
// and fails unless they wrote the same bytes.
func sameAsSlog(t *testing.T, h slog.Handler, r slog.Record, opts *slog.HandlerOptions) {
	t.Helper()
	var got, want bytes.Buffer
	if h == nil {
		h = NewTextHandler(&got, opts)
	} else {
		h.(*textHandler).w.w = &got
	}
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if err := slog.NewTextHandler(&want, opts).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("the line differs from slog's\n got: %q\nwant: %q", got.String(), want.String())
	}
}

func record(at time.Time, level slog.Level, msg string, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(at, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

type valuer string

func (v valuer) LogValue() slog.Value { return slog.StringValue(string(v)) }

func TestTextHandlerWritesWhatSlogWrites(t *testing.T) {
	kolkata := time.FixedZone("IST", 5*3600+1800)
	at := time.Date(2026, 12, 4, 7, 16, 58, 297_654_321, time.UTC)
	strs := []string{"", "plain", "two words", "a=b", `say "hi"`, `quote"only`, `back\slash`, "tab\there", "new\nline",
		"nbsp\u00a0x", "zero\u200bwidth", "é", "emoji🙂", "bad\xffutf8", "del\x7f", "ctl\x01",
		`back\slash and space`, `q"and\both`, `\`, `"`, "=", " ", `text="a \"b\\"`, "~}|{", "a b\x7f"}
	var cases []slog.Record
	for _, s := range strs {
		cases = append(cases,
			record(at, slog.LevelInfo, s, slog.String("k", s)),
			record(at, slog.LevelInfo, "m", slog.String(s+"key", "v")))
	}
	cases = append(cases,
		// A request line as the server writes it.
		record(at, slog.LevelInfo, "request", slog.Int64("id", 2), slog.String("method", "tools/call"),
			slog.String("era", "legacy"), slog.String("transport", "stdio"), slog.String("tool", "echo"),
			slog.String("args", `text="hi"`), slog.String("outcome", "completed"), slog.Duration("duration", 121800*time.Nanosecond),
			slog.Duration("queued", 0), slog.Uint64("progress_refused", math.MaxUint64), slog.Bool("is_error", true)),
		record(at, slog.LevelDebug, "d", slog.Int64("n", math.MinInt64), slog.Float64("f", 1e21), slog.Float64("g", -0.5), slog.Float64("pi", math.Pi)),
		record(at, slog.LevelWarn+2, "w", slog.Float64("nan", math.NaN()), slog.Float64("inf", math.Inf(-1)), slog.Duration("long", 1234*time.Hour)),
		record(at, slog.Level(-8), "custom level"),
		record(time.Time{}, slog.LevelError, "no time"),
		record(at.In(kolkata), slog.LevelInfo, "another zone"),
		record(at.Local(), slog.LevelInfo, "local"),
		record(time.Date(2026, 1, 1, 0, 0, 0, 999_999_999, time.UTC), slog.LevelInfo, "last nanosecond"),
		record(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "on the second"),
		record(time.Date(12026, 1, 1, 0, 0, 0, 5_000_000, time.UTC), slog.LevelInfo, "five-digit year"),
		record(time.Date(-1, 1, 1, 0, 0, 0, 5_000_000, time.UTC), slog.LevelInfo, "negative year"),
		record(time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC), slog.LevelInfo, "before 1970"),
		// Left to slog: a group, a time, a LogValuer, any other value,
		// an empty key, an empty attribute.
		record(at, slog.LevelInfo, "group", slog.Group("g", slog.String("a", "b")), slog.String("after", "x")),
		record(at, slog.LevelInfo, "empty group", slog.Group("g")),
		record(at, slog.LevelInfo, "time", slog.Time("t", at)),
		record(at, slog.LevelInfo, "valuer", slog.Any("v", valuer("resolved value"))),
		record(at, slog.LevelInfo, "any", slog.Any("err", errors.New("boom x")), slog.Any("b", []byte("raw"))),
		record(at, slog.LevelInfo, "empty key", slog.String("", "v")),
		record(at, slog.LevelInfo, "empty attr", slog.Attr{}, slog.String("k", "v")),
	)
	for _, r := range cases {
		sameAsSlog(t, nil, r, nil)
	}
	// Lines of one second reuse its formatting: each gets its own
	// milliseconds, and a line in another zone in that second its zone.
	h := NewTextHandler(nil, nil)
	for _, ms := range []int{0, 5, 999, 42} {
		sameAsSlog(t, h, record(at.Truncate(time.Second).Add(time.Duration(ms)*time.Millisecond+300*time.Microsecond), slog.LevelInfo, "same second"), nil)
	}
	sameAsSlog(t, h, record(at.Add(time.Second), slog.LevelInfo, "next second"), nil)
	sameAsSlog(t, h, record(at.Add(time.Second).In(kolkata), slog.LevelInfo, "same second, other zone"), nil)
	sameAsSlog(t, h, record(at.Add(2*time.Second).In(kolkata), slog.LevelInfo, "next second, that zone"), nil)
}

func TestTextHandlerKeepsSlogsOptions(t *testing.T) {
	at := time.Date(2026, 12, 4, 7, 16, 58, 297_000_000, time.UTC)
	r := record(at, slog.LevelInfo, "m", slog.String("k", "v"))
	sameAsSlog(t, nil, r, &slog.HandlerOptions{AddSource: true})
	upper := func(_ []string, a slog.Attr) slog.Attr { a.Key = strings.ToUpper(a.Key); return a }
	sameAsSlog(t, nil, r, &slog.HandlerOptions{ReplaceAttr: upper})

	h := NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn})
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelWarn) {
		t.Error("Enabled does not follow the options' level")
	}

	// Derived handlers write what slog's derived handlers write.
	var got, want bytes.Buffer
	NewTextHandler(&got, nil).WithAttrs([]slog.Attr{slog.String("a", "1")}).WithGroup("g").Handle(context.Background(), r)
	slog.NewTextHandler(&want, nil).WithAttrs([]slog.Attr{slog.String("a", "1")}).WithGroup("g").Handle(context.Background(), r)
	if got.String() != want.String() {
		t.Errorf("a derived handler's line differs from slog's\n got: %q\nwant: %q", got.String(), want.String())
	}
}

func FuzzTextHandler(f *testing.F) {
	f.Add("request", "method", "tools/call", int64(7), 1.5, int64(121800), int64(1796368618297654321), 0)
	f.Add("", "a b", "x=\"y\"", int64(-1), math.Inf(1), int64(-5), int64(0), -3600)
	f.Add("é\u2028", "\xff", "\u00a0", int64(0), -0.0, int64(1<<62), int64(-62135596800000000), 19800)
	f.Fuzz(func(t *testing.T, msg, key, val string, n int64, x float64, d, unixNano int64, offset int) {
		zone := time.FixedZone("", offset%(24*3600))
		r := record(time.Unix(0, unixNano).In(zone), slog.Level(n%16), msg,
			slog.String(key, val), slog.Int64(val, n), slog.Float64("x", x), slog.Duration("d", time.Duration(d)),
			slog.Bool(key+"b", n%2 == 0), slog.Uint64("u", uint64(n)))
		sameAsSlog(t, nil, r, nil)
		var attrs []slog.Attr
		r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a); return true })
		sameAttrsAsSlog(t, r.Time, r.Level, msg, attrs)
		// A flat attribute after one left to slog: the record goes to
		// slog whole, that one included.
		sameAttrsAsSlog(t, r.Time, r.Level, msg, append([]slog.Attr{slog.Any("err", errors.New(val))}, attrs...))
	})
}

// sameAttrsAsSlog handles the parts of a record with HandleAttrs, directly
// and through Handler, and fails unless both wrote what slog's text
// handler writes for the record they make.
func sameAttrsAsSlog(t *testing.T, at time.Time, level slog.Level, msg string, attrs []slog.Attr) {
	t.Helper()
	var want bytes.Buffer
	if err := slog.NewTextHandler(&want, nil).Handle(context.Background(), record(at, level, msg, attrs...)); err != nil {
		t.Fatal(err)
	}
	var direct, flushed bytes.Buffer
	if err := NewTextHandler(&direct, nil).(attrsHandler).HandleAttrs(context.Background(), at, level, msg, attrs); err != nil {
		t.Fatal(err)
	}
	w := New(&flushed, nil)
	if err := Handler(NewTextHandler(w, nil), w).(attrsHandler).HandleAttrs(context.Background(), at, level, msg, attrs); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if direct.String() != want.String() || flushed.String() != want.String() {
		t.Errorf("attrs %v:\n direct: %q\nflushed: %q\n   want: %q", attrs, direct.String(), flushed.String(), want.String())
	}
}

// TestTextHandlerLinesStayWhole writes from both paths at once to a writer
// that is not safe for concurrent use: the race detector and the line
// count say they take turns.
func TestTextHandlerLinesStayWhole(t *testing.T) {
	var out bytes.Buffer
	h := NewTextHandler(&out, nil)
	const goroutines, lines = 4, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range lines {
				r := record(time.Now(), slog.LevelInfo, "flat", slog.Int("g", g), slog.Int("i", i))
				if i%2 == 1 {
					r = record(time.Now(), slog.LevelInfo, "grouped", slog.Group("p", slog.Int("g", g), slog.Int("i", i)))
				}
				if err := h.Handle(context.Background(), r); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for line := range strings.Lines(out.String()) {
		var g, i int
		_, err := fmt.Sscanf(line[strings.Index(line, " msg=")+1:], "msg=flat g=%d i=%d\n", &g, &i)
		if err != nil {
			_, err = fmt.Sscanf(line[strings.Index(line, " msg=")+1:], "msg=grouped p.g=%d p.i=%d\n", &g, &i)
		}
		if err != nil {
			t.Fatalf("a line is not whole: %q", line)
		}
		seen[fmt.Sprint(g, i)] = true
	}
	if len(seen) != goroutines*lines {
		t.Errorf("%d distinct lines, want %d", len(seen), goroutines*lines)
	}
}

func BenchmarkRequestLine(b *testing.B) {
	r := record(time.Now(), slog.LevelInfo, "request", slog.Int64("id", 2), slog.String("method", "tools/call"),
		slog.String("era", "legacy"), slog.String("transport", "stdio"), slog.String("tool", "echo"),
		slog.String("args", `text="hi"`), slog.String("outcome", "completed"), slog.Duration("duration", 121800*time.Nanosecond))
	for _, bc := range []struct {
		name string
		h    slog.Handler
	}{{"slog", slog.NewTextHandler(discard{}, nil)}, {"logbuf", NewTextHandler(discard{}, nil)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.h.Handle(context.Background(), r)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// HandleAttrs writes what Handle writes for the record of the same parts,
// directly and through Handler: a flat record formatted here, and any
// other left to slog whole, even when a flat attribute came first.
func TestHandleAttrsWritesWhatSlogWrites(t *testing.T) {
	at := time.Date(2026, 12, 4, 7, 16, 58, 297_654_321, time.UTC)
	for _, attrs := range [][]slog.Attr{
		nil,
		{slog.Int64("id", 2), slog.String("args", `text="hi"`), slog.Duration("duration", time.Millisecond), slog.Bool("is_error", true)},
		{slog.String("first", "flat"), slog.Any("err", errors.New("boom x"))},
		{slog.String("first", "flat"), slog.Group("g", slog.String("a", "b"))},
		{slog.String("first", "flat"), slog.String("", "empty key")},
		{slog.Attr{}, slog.String("k", "v")},
		{slog.Any("err", errors.New("boom")), slog.String("k", "v")},
	} {
		sameAttrsAsSlog(t, at, slog.LevelInfo, "m", attrs)
	}
	// A warning is written at once, as Handle writes it.
	var out bytes.Buffer
	w := New(&out, nil)
	defer w.Close()
	Handler(NewTextHandler(w, nil), w).(attrsHandler).HandleAttrs(context.Background(), at, slog.LevelWarn, "w", nil)
	if !strings.Contains(out.String(), "msg=w") {
		t.Errorf("a warning waits for its batch: %q written", out.String())
	}
}

// Handler's HandleAttrs hands the parts to a handler that takes them,
// never building the record itself: that is what spares the request line
// a slog.Record.
func TestHandlerPassesAttrsOn(t *testing.T) {
	var inner partsHandler
	w := New(&bytes.Buffer{}, nil)
	defer w.Close()
	Handler(&inner, w).(attrsHandler).HandleAttrs(context.Background(), time.Now(), slog.LevelInfo, "m", []slog.Attr{slog.String("k", "v")})
	if inner.parts != 1 || inner.records != 0 {
		t.Errorf("the inner handler got %d lines as parts and %d as records, want 1 and 0", inner.parts, inner.records)
	}
}

// partsHandler counts what it is handed, and how.
type partsHandler struct {
	slog.Handler
	parts, records int
}

func (h *partsHandler) Handle(context.Context, slog.Record) error { h.records++; return nil }

func (h *partsHandler) HandleAttrs(context.Context, time.Time, slog.Level, string, []slog.Attr) error {
	h.parts++
	return nil
}
