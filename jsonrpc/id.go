package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"unicode/utf8"
)

// ID is a JSON-RPC request id: a string or an integer. The zero ID is "no id"
// and never appears on the wire; MCP forbids null ids, so there is no null ID.
//
// IDs are comparable and may be used as map keys. The string "1" and the
// integer 1 are different ids, as JSON-RPC requires.
//
// A string id whose JSON holds invalid UTF-8 or a lone UTF-16 surrogate
// escape cannot be decoded without loss (both become U+FFFD). Such an id
// keeps its JSON text as it arrived, is echoed byte for byte, and differs
// from every other id, so that the client can match the response to its
// request.
type ID struct {
	str  string
	raw  string // the JSON text of a string id that decoding would alter; "" otherwise
	num  int64
	kind idKind
}

type idKind uint8

const (
	idNone idKind = iota
	idString
	idNumber
)

// StringID returns the id for a string value.
func StringID(s string) ID { return ID{str: s, kind: idString} }

// IntID returns the id for an integer value.
func IntID(n int64) ID { return ID{num: n, kind: idNumber} }

// IsValid reports whether the id holds a string or an integer.
func (id ID) IsValid() bool { return id.kind != idNone }

// IsString reports whether the id is a string id.
func (id ID) IsString() bool { return id.kind == idString }

// Int returns the integer value and whether the id is an integer id.
func (id ID) Int() (int64, bool) { return id.num, id.kind == idNumber }

// String renders the id for logs: integers as digits, strings quoted, so the
// two kinds stay distinguishable.
func (id ID) String() string {
	switch id.kind {
	case idString:
		return strconv.Quote(id.str)
	case idNumber:
		return strconv.FormatInt(id.num, 10)
	}
	return "<none>"
}

// LogValue logs an integer id as a number and a string id as a string, so
// that a JSON log keeps the two kinds apart the way the wire does.
func (id ID) LogValue() slog.Value {
	switch id.kind {
	case idString:
		return slog.StringValue(id.str)
	case idNumber:
		return slog.Int64Value(id.num)
	}
	return slog.StringValue("<none>")
}

// AppendJSON appends the id's JSON encoding to b: for a string id that
// could not be decoded without loss, the text it arrived as.
func (id ID) AppendJSON(b []byte) []byte {
	switch id.kind {
	case idString:
		if id.raw != "" {
			return append(b, id.raw...)
		}
		return appendString(b, id.str)
	case idNumber:
		return strconv.AppendInt(b, id.num, 10)
	}
	return append(b, "null"...)
}

// MarshalJSON implements json.Marshaler.
func (id ID) MarshalJSON() ([]byte, error) {
	if !id.IsValid() {
		return nil, errors.New("jsonrpc: marshal of an empty id")
	}
	return id.AppendJSON(nil), nil
}

// UnmarshalJSON implements json.Unmarshaler. It accepts a JSON string or a
// JSON number without fraction or exponent that fits in an int64, and refuses
// null, fractions and every other JSON type.
func (id *ID) UnmarshalJSON(data []byte) error {
	parsed, err := ParseID(data)
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// Errors returned by ParseID. They are wrapped in an *Error with code
// InvalidRequest when they come from Decode.
var (
	ErrNullID    = errors.New("id must be a string or an integer, not null")
	ErrInvalidID = errors.New("id must be a string or an integer")
)

// ParseID parses the raw JSON of an id member.
func ParseID(raw []byte) (ID, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ID{}, ErrInvalidID
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return ID{}, ErrInvalidID
		}
		id := StringID(s)
		if lossy(raw) {
			id.raw = string(raw)
		}
		return id, nil
	case c == '-' || (c >= '0' && c <= '9'):
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return ID{}, ErrInvalidID
		}
		return IntID(n), nil
	case bytes.Equal(raw, []byte("null")):
		return ID{}, ErrNullID
	}
	return ID{}, ErrInvalidID
}

// lossy reports whether decoding the JSON string raw (a valid one, quotes
// included) replaced anything with U+FFFD: invalid UTF-8, or a \u escape of
// a UTF-16 surrogate that is not half of a pair.
func lossy(raw []byte) bool {
	if !utf8.Valid(raw) {
		return true
	}
	for i := 0; i+5 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(raw[i+2 : i+6])
		i += 5
		switch {
		case !ok || r < 0xD800 || r > 0xDFFF:
		case r >= 0xDC00: // a low surrogate with no high one before it
			return true
		case i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u':
			lo, ok := hex4(raw[i+3 : i+7])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		default: // a high surrogate with no low one after it
			return true
		}
	}
	return false
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
