package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
)

// ID is a JSON-RPC request id: a string or an integer. The zero ID is "no id"
// and never appears on the wire; MCP forbids null ids, so there is no null ID.
//
// IDs are comparable and may be used as map keys. The string "1" and the
// integer 1 are different ids, as JSON-RPC requires.
type ID struct {
	str  string
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

// AppendJSON appends the id's JSON encoding to b.
func (id ID) AppendJSON(b []byte) []byte {
	switch id.kind {
	case idString:
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
		return StringID(s), nil
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
