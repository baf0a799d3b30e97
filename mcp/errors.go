package mcp

import (
	"encoding/json"
	"time"
)

// JSON-RPC error codes the MCP specification defines beyond the standard
// five (see package jsonrpc for those).
const (
	// CodeResourceNotFoundLegacy is the 2025-era "resource not found". The
	// modern era uses -32602 instead and must not emit this code.
	CodeResourceNotFoundLegacy int64 = -32002
	// CodeHeaderMismatch: HTTP headers disagree with the body, or a required
	// header is missing or malformed (HTTP 400).
	CodeHeaderMismatch int64 = -32020
	// CodeMissingClientCapability: the request needs a client capability it
	// did not declare; data.requiredCapabilities names it (HTTP 400).
	CodeMissingClientCapability int64 = -32021
	// CodeUnsupportedVersion: the request's protocol version is not served;
	// data.supported and data.requested say which are (HTTP 400).
	CodeUnsupportedVersion int64 = -32022
)

// JSON-RPC error codes mcprel defines. They sit outside -32768…-32000, the
// range JSON-RPC and MCP reserve, as the specification asks of application
// codes. Each error's data member carries the same structured body as a
// ToolError (code, message, retryable, retryAfterMs).
const (
	// CodeOverloaded: the server is at its concurrency and queue limits and
	// refused the request before running anything. Retry after retryAfterMs.
	CodeOverloaded int64 = -31001
	// CodeUnavailable: the server is shutting down and takes no new work.
	// Retry against another replica or after a restart.
	CodeUnavailable int64 = -31002
	// CodeTimeout: a request other than a tool call exceeded a deadline
	// (a timed-out tool call is an isError result with code "timeout").
	CodeTimeout int64 = -31003
	// CodeRateLimited: the request exceeded a rate limit and was refused
	// before running. Retry after retryAfterMs.
	CodeRateLimited int64 = -31004
)

// UnsupportedVersionData is the data member of a CodeUnsupportedVersion error.
type UnsupportedVersionData struct {
	Supported []string `json:"supported"`
	Requested string   `json:"requested"`
}

// Failure codes carried in the structured body of a failed tool call (and in
// the data of mcprel's own JSON-RPC errors). docs/errors.md lists them all
// with their meaning and retry advice.
const (
	FailureInvalidArguments = "invalid_arguments"
	FailureToolError        = "tool_error"
	FailureInternal         = "internal_error"
	FailureOverloaded       = "overloaded"
	FailureShuttingDown     = "shutting_down"
	FailureTimeout          = "timeout"
	FailureRateLimited      = "rate_limited"
	// The idempotency failures: a key the tool requires is missing; the
	// key was already used for a different operation; the operation with
	// this key has not finished yet; the ledger could not be reached.
	FailureKeyRequired = "idempotency_key_required"
	FailureKeyConflict = "idempotency_conflict"
	FailureInProgress  = "in_progress"
	FailureLedger      = "ledger_unavailable"
	// FailureStorage: the database a tool works with was unavailable (a
	// lost connection, a lock, a full disk) outside the idempotency
	// ledger; the operation's transaction rolled back.
	FailureStorage = "storage_unavailable"
	// The gateway's failures: the upstream server could not be reached
	// (retryable: the request never reached it); the connection to it
	// ended with the request in flight, so whether it acted is unknown;
	// the upstream answered in a way the gateway could not forward.
	FailureUpstreamUnavailable = "upstream_unavailable"
	FailureOutcomeUnknown      = "outcome_unknown"
	FailureUpstream            = "upstream_error"
	// FailureUpstreamUnauthorized: the upstream refused the gateway's own
	// credentials and no better ones could be had; nothing ran upstream,
	// and no retry helps until the operator acts (its details say how).
	FailureUpstreamUnauthorized = "upstream_unauthorized"
	// FailureOperationFailed is an operation whose outcome was unknown
	// and that an operator found had failed ("mcprel ledger resolve
	// --failed"): retries with its key get this, with the operator's
	// message.
	FailureOperationFailed = "operation_failed"
)

// ToolError is a tool failure meant for the model: a handler returns it (or
// wraps it) and the call ends with a result whose isError is true and which
// carries the fields below (see Result), so the model can decide whether to
// retry, change its arguments or try something else.
type ToolError struct {
	// Code is a stable, machine-readable name such as "invalid_arguments".
	Code string
	// Message says what went wrong, for the model and for people.
	Message string
	// Retryable says whether the same call may succeed if made again.
	Retryable bool
	// RetryAfter, when positive, is how long to wait before retrying.
	RetryAfter time.Duration
	// Alternatives suggests other tools or approaches, if any.
	Alternatives []string
	// Details holds further structured facts, such as the offending field.
	Details map[string]any
}

// Error implements the error interface.
func (e *ToolError) Error() string { return e.Code + ": " + e.Message }

// Failure is the structured body of a failed call, as it appears in a
// failed result (its text content and _meta[MetaFailure]) or in the data of
// an mcprel JSON-RPC error.
type Failure struct {
	Code         string         `json:"code"`
	Message      string         `json:"message"`
	Retryable    bool           `json:"retryable"`
	RetryAfterMs int64          `json:"retryAfterMs,omitempty"`
	Alternatives []string       `json:"alternatives,omitempty"`
	Details      map[string]any `json:"details,omitempty"`
}

// Failure returns the structured body of the error.
func (e *ToolError) Failure() Failure {
	f := Failure{
		Code:         e.Code,
		Message:      e.Message,
		Retryable:    e.Retryable,
		Alternatives: e.Alternatives,
		Details:      e.Details,
	}
	if e.RetryAfter > 0 {
		f.RetryAfterMs = max(1, e.RetryAfter.Milliseconds())
	}
	return f
}

// Result returns the call result that reports the error: isError set, the
// structured body as JSON text (what the model reads) and the same body,
// decoded, under _meta[MetaFailure] (what programs read).
//
// The body is never put in structuredContent. That member is described by
// the tool's outputSchema, which describes the tool's successful output,
// and clients validate structuredContent against it even when isError is
// set: a failure body there would turn every tool failure into a
// client-side schema error.
func (e *ToolError) Result() *CallToolResult {
	f := e.Failure()
	text, err := json.Marshal(f)
	if err != nil { // Details held something unencodable; keep the essentials.
		f.Details = nil
		text, _ = json.Marshal(f)
	}
	return &CallToolResult{
		ResultBase: ResultBase{Meta: Meta{MetaFailure: json.RawMessage(text)}},
		Content:    []Content{&TextContent{Text: string(text)}},
		IsError:    true,
	}
}
