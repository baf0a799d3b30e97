package server

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Causes of a cancelled request. A handler reads them with context.Cause on
// its context; RequestRecord.Cause carries the same value.
var (
	// ErrPeerCancelled: the client sent notifications/cancelled. The error
	// carrying it wraps this sentinel and includes the client's reason.
	ErrPeerCancelled = errors.New("cancelled by the client")
	// ErrDisconnected: the client closed the request's response stream,
	// which is the cancellation signal of the modern HTTP era.
	ErrDisconnected = errors.New("client closed the request stream")
	// ErrConnectionClosed: the connection ended (stdin closed, or output
	// could no longer be written).
	ErrConnectionClosed = errors.New("connection closed")
	// ErrSlowConsumer: the client stopped reading, so a write waited past
	// its deadline and the server gave up the stream.
	ErrSlowConsumer = errors.New("client stopped reading: write deadline exceeded")
	// ErrShutdown: the server shut down before the request finished.
	ErrShutdown = errors.New("server shutting down")
	// ErrRequestDone is the cause of a request context that ended because
	// the request reached its terminal state normally. Progress reports and
	// other writes for a finished request also return it.
	ErrRequestDone = errors.New("request already finished")
)

var errPanicked = &mcp.ToolError{Code: mcp.FailureInternal, Message: "the handler failed unexpectedly"}

// storageFailure is a failure of the database a handler works with, as
// package store reports it (store.Error). Its text is the driver's and may
// name tables, constraints and values: it goes to the operator's log and
// never to the client.
type storageFailure interface {
	error
	StorageUnavailable() bool
}

// StorageRetryAfter is the retry advice for a database that was
// unavailable: long enough for a reconnect or a lock to clear.
const StorageRetryAfter = time.Second

// StorageAdvice is how a policy that runs the handler in a transaction of
// its own (package idempotency) words what the client is told when the
// database fails under it: Code and Message replace the retryable
// storage_unavailable answer. The server still decides, once for every
// tool, whether Err is a storage failure at all, whether it is retryable,
// and logs the driver's text, which never reaches the client.
type StorageAdvice struct {
	Err     error
	Code    string
	Message string
}

func (a *StorageAdvice) Error() string { return a.Err.Error() }
func (a *StorageAdvice) Unwrap() error { return a.Err }

// hideStorageFailure logs a storage failure in err and returns, instead,
// the tool failure the client gets; any other error passes unchanged. A
// database that was unavailable (a lost connection, a terminated backend,
// a deadlock, a busy file, a full disk) is a retryable storage_unavailable;
// a statement the database refused for good (a constraint, a syntax
// error) is an internal error. An interceptor that runs the handler in a
// transaction of its own may word the retryable answer (StorageAdvice).
func (s *Server) hideStorageFailure(r *inflight, err error) error {
	// Checked before the log's attributes are boxed: this runs for every
	// call, and almost every error (nil included) is not a storage
	// failure.
	if _, ok := errors.AsType[storageFailure](err); !ok {
		return err
	}
	return s.hideStorageFailureOf(err, "id", r.id, "method", r.method, "tool", r.toolName)
}

// hideStorageFailureOf is hideStorageFailure for an error that did not
// come from a request's handler (a task's worker), logged with attrs.
func (s *Server) hideStorageFailureOf(err error, attrs ...any) error {
	var sf storageFailure
	if !errors.As(err, &sf) {
		return err
	}
	s.log.Warn("a handler's database operation failed", append(attrs, "unavailable", sf.StorageUnavailable(), "err", err)...)
	if !sf.StorageUnavailable() {
		return &mcp.ToolError{Code: mcp.FailureInternal, Message: "the database refused an operation of this call; the server log has the details"}
	}
	if advice, ok := errors.AsType[*StorageAdvice](err); ok {
		return &mcp.ToolError{Code: advice.Code, Retryable: true, RetryAfter: StorageRetryAfter, Message: advice.Message}
	}
	return &mcp.ToolError{Code: mcp.FailureStorage, Retryable: true, RetryAfter: StorageRetryAfter,
		Message: "the database was unavailable (a lost connection, a lock or a full disk) and the operation's transaction was rolled back; retrying may succeed"}
}

func decodeParams(params json.RawMessage, v any) *jsonrpc.Error {
	if len(params) == 0 {
		return nil
	}
	if err := json.Unmarshal(params, v); err != nil {
		return invalidParams(err)
	}
	return nil
}

// invalidParams turns a decoding error into a -32602 whose message names
// the member at fault.
func invalidParams(err error) *jsonrpc.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %s must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %v", err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "float32", "float64":
		return "a number"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	}
	return "of another type"
}

func rateLimited(retryAfter time.Duration) *jsonrpc.Error {
	te := &mcp.ToolError{Code: mcp.FailureRateLimited, Message: "the call exceeds a rate limit", Retryable: true, RetryAfter: retryAfter}
	return jsonrpc.NewError(mcp.CodeRateLimited, "rate limited: retry after %d ms", max(1, retryAfter.Milliseconds())).WithData(te.Failure())
}

// OverloadedError is the server's retryable overload refusal
// (mcp.CodeOverloaded, with the structured failure "overloaded" and its
// retry advice), for a package above server that admits work of its own,
// such as task creation, and refuses it the usual way.
func OverloadedError(retryAfter time.Duration) *jsonrpc.Error { return overloaded(retryAfter) }

func overloaded(retryAfter time.Duration) *jsonrpc.Error {
	te := &mcp.ToolError{Code: mcp.FailureOverloaded, Message: "the server is at its concurrency limit and its queue is full", Retryable: true, RetryAfter: retryAfter}
	return jsonrpc.NewError(mcp.CodeOverloaded, "server overloaded: retry after %d ms", retryAfter.Milliseconds()).WithData(te.Failure())
}

func unavailable() *jsonrpc.Error {
	te := &mcp.ToolError{Code: mcp.FailureShuttingDown, Message: "the server is shutting down and takes no new requests", Retryable: true}
	return jsonrpc.NewError(mcp.CodeUnavailable, "server shutting down").WithData(te.Failure())
}
