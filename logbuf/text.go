package logbuf

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// NewTextHandler returns a handler that writes exactly what
// slog.NewTextHandler(w, opts) writes, in less time for the lines a server
// writes for every request: a record whose attributes are flat strings,
// numbers, booleans and durations is formatted here, with the second of
// its time formatted once per second; any other record, and any handler
// derived with WithAttrs or WithGroup, is slog's own. With AddSource or
// ReplaceAttr set, it is slog's handler outright.
func NewTextHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	if opts != nil && (opts.AddSource || opts.ReplaceAttr != nil) {
		return slog.NewTextHandler(w, opts)
	}
	lw := &lockedWriter{w: w}
	return &textHandler{slow: slog.NewTextHandler(lw, opts), w: lw}
}

// lockedWriter serialises the writes of the fast path and of slog's
// handler, which locks only its own.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type textHandler struct {
	slow  slog.Handler
	w     *lockedWriter
	stamp atomic.Pointer[stamp]
}

// stamp is a second formatted as slog formats a record's time, with its
// milliseconds left as zeros: lines of the same second differ only there.
type stamp struct {
	sec  int64
	loc  *time.Location
	text []byte
}

// millisAt is where the milliseconds of a stamp's text begin
// ("2006-01-02T15:04:05." is 20 bytes), for four-digit years.
const millisAt = len("2006-01-02T15:04:05.")

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledLine keeps one huge line's buffer out of the pool.
const maxPooledLine = 16 << 10

func (h *textHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.slow.Enabled(ctx, level)
}

func (h *textHandler) WithAttrs(attrs []slog.Attr) slog.Handler { return h.slow.WithAttrs(attrs) }

func (h *textHandler) WithGroup(name string) slog.Handler { return h.slow.WithGroup(name) }

func (h *textHandler) Handle(ctx context.Context, r slog.Record) error {
	bp := linePool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledLine {
			linePool.Put(bp)
		}
	}()
	line, ok := h.appendRecord((*bp)[:0], r)
	*bp = line
	if !ok {
		return h.slow.Handle(ctx, r)
	}
	_, err := h.w.Write(line)
	return err
}

// appendRecord appends r as slog's text handler would, and reports false
// for a record it leaves to slog: one with an attribute whose key is empty
// or whose value is a group, a time, a LogValuer or any other kind.
func (h *textHandler) appendRecord(b []byte, r slog.Record) ([]byte, bool) {
	flat := true
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Kind() {
		case slog.KindString, slog.KindInt64, slog.KindUint64, slog.KindFloat64, slog.KindBool, slog.KindDuration:
			flat = a.Key != ""
		default:
			flat = false
		}
		return flat
	})
	if !flat {
		return b, false
	}
	if !r.Time.IsZero() {
		b = append(b, "time="...)
		b = h.appendTime(b, r.Time)
		b = append(b, ' ')
	}
	b = append(b, "level="...)
	b = appendString(b, r.Level.String())
	b = append(b, " msg="...)
	b = appendString(b, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b = append(b, ' ')
		b = appendString(b, a.Key)
		b = append(b, '=')
		switch v := a.Value; v.Kind() {
		case slog.KindString:
			b = appendString(b, v.String())
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindUint64:
			b = strconv.AppendUint(b, v.Uint64(), 10)
		case slog.KindFloat64:
			b = strconv.AppendFloat(b, v.Float64(), 'g', -1, 64)
		case slog.KindBool:
			b = strconv.AppendBool(b, v.Bool())
		case slog.KindDuration:
			b = append(b, v.Duration().String()...)
		}
		return true
	})
	return append(b, '\n'), true
}

// appendTime appends t as slog's text handler does (RFC 3339 with
// milliseconds), formatting each second once.
func (h *textHandler) appendTime(b []byte, t time.Time) []byte {
	t = t.Truncate(time.Millisecond)
	sec, loc := t.Unix(), t.Location()
	s := h.stamp.Load()
	if s == nil || s.sec != sec || s.loc != loc {
		text := appendRFC3339Millis(nil, t.Add(-time.Duration(t.Nanosecond())))
		if len(text) <= millisAt+3 || text[millisAt-1] != '.' {
			return appendRFC3339Millis(b, t) // a year of other than four digits
		}
		s = &stamp{sec: sec, loc: loc, text: text}
		h.stamp.Store(s)
	}
	n := len(b)
	b = append(b, s.text...)
	ms := t.Nanosecond() / int(time.Millisecond)
	b[n+millisAt] = byte('0' + ms/100)
	b[n+millisAt+1] = byte('0' + ms/10%10)
	b[n+millisAt+2] = byte('0' + ms%10)
	return b
}

// appendRFC3339Millis is slog's format for a record's time.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...) // drop the fourth digit
}

// appendString appends s, quoted when slog's text handler quotes it.
func appendString(b []byte, s string) []byte {
	if needsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// needsQuoting is slog's rule: empty, a space, '=', '"', a control
// character, or a rune that is invalid, a space or not printable.
func needsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if quotedASCII[c] {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

// quotedASCII marks the ASCII bytes that make slog quote a string.
var quotedASCII = func() (q [utf8.RuneSelf]bool) {
	for c := range q {
		q[c] = c <= ' ' || c == '=' || c == '"'
	}
	return q
}()
