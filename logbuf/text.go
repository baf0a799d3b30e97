package logbuf

import (
	"context"
	"io"
	"log/slog"
	"slices"
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
//
// Its HandleAttrs method, which Handler's handler has too, takes a
// record's parts without the slog.Record: a server that asserts an
// interface with that method on its handler can write its request
// lines without building a record for each.
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
	defer putLine(bp)
	b := h.appendHead((*bp)[:0], r.Time, r.Level, r.Message)
	flat := true
	r.Attrs(func(a slog.Attr) bool {
		b, flat = appendAttr(b, a)
		return flat
	})
	b = append(b, '\n')
	*bp = b // with its newline: the pooled buffer grows to the lines it holds
	if !flat {
		return h.slow.Handle(ctx, r)
	}
	_, err := h.w.Write(b)
	return err
}

// HandleAttrs handles the record slog.NewRecord(t, level, msg, 0) with
// attrs added, without building it: a Record copies attributes in and
// out again, and allocates past its fifth, for a line a server writes
// for every request. attrs is neither kept nor changed. A server finds
// the method by asserting an interface of its own on its handler.
func (h *textHandler) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	bp := linePool.Get().(*[]byte)
	defer putLine(bp)
	b := h.appendHead((*bp)[:0], t, level, msg)
	flat := true
	for _, a := range attrs {
		if b, flat = appendAttr(b, a); !flat {
			break
		}
	}
	b = append(b, '\n')
	*bp = b
	if !flat {
		return h.slow.Handle(ctx, recordOf(t, level, msg, attrs))
	}
	_, err := h.w.Write(b)
	return err
}

// recordOf is the record a line's parts make, for a handler that takes
// only records.
func recordOf(t time.Time, level slog.Level, msg string, attrs []slog.Attr) slog.Record {
	r := slog.NewRecord(t, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

func putLine(bp *[]byte) {
	if cap(*bp) <= maxPooledLine {
		linePool.Put(bp)
	}
}

// appendHead appends a record's time, level and message as slog's text
// handler does.
func (h *textHandler) appendHead(b []byte, t time.Time, level slog.Level, msg string) []byte {
	if !t.IsZero() {
		b = append(b, "time="...)
		b = h.appendTime(b, t)
		b = append(b, ' ')
	}
	b = append(b, "level="...)
	b = appendString(b, level.String())
	b = append(b, " msg="...)
	return appendString(b, msg)
}

// appendAttr appends a as slog's text handler would, and reports false
// for one it leaves to slog: an empty key, or a value that is a group, a
// time, a LogValuer or any other kind. A record it leaves to slog is
// rare, and costs only the bytes appended before it was found out.
func appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	if a.Key == "" {
		return b, false
	}
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
	default:
		return b, false
	}
	return b, true
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

// appendString appends s, quoted when slog's text handler quotes it. A
// string of printable ASCII, as most are, is scanned once and quoted
// here; strconv quotes any other the same way, a rune at a time.
func appendString(b []byte, s string) []byte {
	quote, escape := len(s) == 0, 0
	for i := 0; i < len(s); i++ {
		switch asciiClass[s[i]] {
		case plain:
		case quoted:
			quote = true
		case quotedEscaped:
			quote = true
			escape++
		case escaped:
			escape++
		default:
			if needsQuoting(s) {
				return strconv.AppendQuote(b, s)
			}
			return append(b, s...)
		}
	}
	if !quote {
		return append(b, s...)
	}
	b = slices.Grow(b, len(s)+escape+2)
	b = append(b, '"')
	if escape == 0 {
		b = append(b, s...)
	} else {
		for i := 0; i < len(s); i++ {
			if c := s[i]; asciiClass[c] == quotedEscaped || asciiClass[c] == escaped {
				b = append(b, '\\', c)
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// How a byte makes appendString treat a string.
const (
	plain         = iota
	quoted        // the string is quoted: a space or '='
	quotedEscaped // quoted, and the byte escaped: '"'
	escaped       // escaped if the string is quoted: '\\'
	unquick       // a control character, DEL or not ASCII: left to strconv
)

var asciiClass = func() (t [256]uint8) {
	for i := range t {
		switch c := byte(i); {
		case c < ' ' || c >= utf8.RuneSelf-1:
			t[c] = unquick
		case c == '"':
			t[c] = quotedEscaped
		case quotesASCII(c):
			t[c] = quoted
		case c == '\\':
			t[c] = escaped
		}
	}
	return t
}()

// needsQuoting is slog's rule: empty, a space, '=', '"', a control
// character, or a rune that is invalid, a space or not printable.
func needsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if quotesASCII(c) {
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

// quotesASCII is slog's rule for an ASCII byte: a string that holds a
// space, a control character, '=' or '"' is quoted.
func quotesASCII(c byte) bool { return c <= ' ' || c == '=' || c == '"' }
