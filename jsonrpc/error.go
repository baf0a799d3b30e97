package jsonrpc

import (
	"encoding/json"
	"fmt"
)

// The error codes JSON-RPC 2.0 defines. MCP uses them for protocol failures.
const (
	CodeParseError     int64 = -32700 // the frame is not valid JSON
	CodeInvalidRequest int64 = -32600 // valid JSON, but not a valid JSON-RPC message
	CodeMethodNotFound int64 = -32601 // no such method (or not in this protocol era)
	CodeInvalidParams  int64 = -32602 // the method exists; its params do not fit
	CodeInternalError  int64 = -32603 // the receiver failed
)

// Error is a JSON-RPC error object. It is also the Go error a handler returns
// to make a request fail with a protocol error; match it with errors.As.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// NewError returns an *Error with a formatted message and no data.
func NewError(code int64, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithData returns a copy of e whose data member is v encoded as JSON. If v
// cannot be encoded the copy has no data; the code and message still hold.
func (e *Error) WithData(v any) *Error {
	c := *e
	if raw, err := json.Marshal(v); err == nil {
		c.Data = raw
	} else {
		c.Data = nil
	}
	return &c
}
