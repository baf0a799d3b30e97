package jsonrpc

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// The Append functions encode one outbound message into b and return the
// extended buffer. They never add framing: a transport appends its own
// newline (stdio) or SSE "data:" lines (HTTP).
//
// Params and results are passed already encoded so that a message is
// marshalled exactly once on its way out.

// AppendResult appends a success response.
func AppendResult(b []byte, id ID, result json.RawMessage) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = id.AppendJSON(b)
	b = append(b, `,"result":`...)
	if len(result) == 0 {
		result = []byte("{}")
	}
	b = append(b, result...)
	return append(b, '}')
}

// AppendError appends an error response. A zero id is left out of the
// message, which is how MCP answers a frame whose id could not be read.
func AppendError(b []byte, id ID, e *Error) []byte {
	b = append(b, `{"jsonrpc":"2.0",`...)
	if id.IsValid() {
		b = append(b, `"id":`...)
		b = id.AppendJSON(b)
		b = append(b, ',')
	}
	b = append(b, `"error":{"code":`...)
	b = appendInt(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendString(b, e.Message)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	return append(b, "}}"...)
}

// AppendNotification appends a notification. params may be nil.
func AppendNotification(b []byte, method string, params json.RawMessage) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = appendString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// AppendRequest appends a request. params may be nil.
func AppendRequest(b []byte, id ID, method string, params json.RawMessage) []byte {
	// Grown once for the whole message rather than by each append.
	b = slices.Grow(b, len(`{"jsonrpc":"2.0","id":,"method":"","params":}`)+maxIDLen+len(method)+len(params))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = id.AppendJSON(b)
	b = append(b, `,"method":`...)
	b = appendString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// maxIDLen is room for an integer id; a long string id grows b again.
const maxIDLen = 20

func appendInt(b []byte, n int64) []byte {
	return IntID(n).AppendJSON(b)
}

// appendString appends s as a JSON string. Plain printable ASCII, which is
// what ids, methods and most messages are, is copied directly; anything else
// goes through encoding/json so escaping stays exactly standard.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			enc, err := json.Marshal(s)
			if err != nil { // unreachable for a string; keep the output valid anyway
				return append(b, `""`...)
			}
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
