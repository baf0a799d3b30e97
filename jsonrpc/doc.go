// Package jsonrpc implements the JSON-RPC 2.0 messages that MCP is framed in:
// requests, notifications, responses and error objects, with the rules MCP
// adds on top of JSON-RPC (ids are strings or integers and never null, one
// message per frame, no batches) and a per-message size limit.
//
// The package knows nothing about MCP methods and does no I/O. Decode turns
// one frame into a Message or into an *Error that says exactly why the frame
// was refused; the Append functions encode outbound messages into a caller's
// buffer so a transport can frame them without copying.
package jsonrpc
