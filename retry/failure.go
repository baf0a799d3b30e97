package retry

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Kind says what happened to a failed attempt, as far as the client can
// tell. It decides, with the tool's Class, whether the attempt may be made
// again (see Planner).
type Kind uint8

const (
	// Lost, the zero value: the request left the client, or may have, and
	// no answer came that says whether it ran (the connection or stream
	// broke). A failure the client cannot place is Lost: assuming that
	// the call may have run is the only safe guess.
	Lost Kind = iota
	// NotSent: the request provably never left the client (the connection
	// could not be opened, the write failed before any byte went out).
	// It may be resent whatever its class.
	NotSent
	// IdleTimeout: the client's idle clock fired (no increasing progress
	// for too long) and the client cancelled. The call may have run.
	IdleTimeout
	// MaxTimeout: the call's absolute deadline passed. It may have run,
	// and no time is left for another attempt.
	MaxTimeout
	// ServerTimeout: the server's deadline fired (a tool result with
	// failure code "timeout", or JSON-RPC -31003). The handler was
	// cancelled; its effect may or may not have happened.
	ServerTimeout
	// Overloaded: the server refused the request before running it
	// (JSON-RPC -31001), usually with a retry-after.
	Overloaded
	// RateLimited: a rate limit refused the request before it ran
	// (JSON-RPC -31004), with a retry-after.
	RateLimited
	// ShuttingDown: the server is shutting down and took no new work
	// (JSON-RPC -31002). Another replica, or the restarted server, may
	// take it.
	ShuttingDown
	// ToolFailed: the tool answered with a failed result (isError). The
	// structured body's retryable flag, copied into Failure.Retryable,
	// says whether the same call may succeed if made again.
	ToolFailed
	// Rejected: any other JSON-RPC error — invalid params, unknown method,
	// unsupported version and the like — or an HTTP redirect, which the
	// client does not follow (the server sent it instead of running the
	// request). Making the same request again gets the same answer, so it
	// is never retried.
	Rejected
)

var kindNames = [...]string{
	Lost:          "lost",
	NotSent:       "not_sent",
	IdleTimeout:   "idle_timeout",
	MaxTimeout:    "max_timeout",
	ServerTimeout: "server_timeout",
	Overloaded:    "overloaded",
	RateLimited:   "rate_limited",
	ShuttingDown:  "shutting_down",
	ToolFailed:    "tool_failed",
	Rejected:      "rejected",
}

// String returns a stable snake_case name, fit for a metric label.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// happened says, for a person or a model, what the kind means for the call.
func (k Kind) happened() string {
	switch k {
	case NotSent:
		return "the request never left the client"
	case IdleTimeout:
		return "no progress arrived within its idle timeout and the client cancelled it"
	case MaxTimeout:
		return "it reached its maximum deadline and the client cancelled it"
	case ServerTimeout:
		return "the server's deadline for it fired while it ran"
	case Overloaded:
		return "the server answered that it was overloaded"
	case RateLimited:
		return "the server answered that a rate limit refused it"
	case ShuttingDown:
		return "the server answered that it was shutting down"
	case ToolFailed:
		return "the tool reported a failure"
	case Rejected:
		return "the server rejected the request"
	}
	return "the connection broke after the request was sent, before its answer"
}

// Failure describes one failed attempt.
type Failure struct {
	Kind Kind
	// Retryable is the structured failure body's retryable flag: whether
	// the server says the same call may succeed if made again. Only
	// ToolFailed reads it; the other kinds say it themselves.
	Retryable bool
	// RetryAfter is how long the server asked the client to wait
	// (retryAfterMs, or an HTTP Retry-After read with ParseRetryAfter); 0
	// when it asked nothing. When both are present, use the longer.
	RetryAfter time.Duration
	// Err is the underlying error: a *jsonrpc.Error, an *mcp.ToolError, a
	// transport's error. Decisions wrap it, so errors.As finds it.
	Err error
}

// cause is the error a decision wraps: Err, or the kind when Err is nil.
func (f Failure) cause() error {
	if f.Err != nil {
		return f.Err
	}
	return errors.New(f.Kind.happened())
}

// Classify returns the failure that err describes: a *jsonrpc.Error by its
// code (mcprel's -31001…-31004 with the structured body in their data),
// an *mcp.ToolError by its failure code and flags, and anything else as
// Lost. A transport error is Lost because the client cannot know from the
// error alone whether the request went out; a client that can prove it
// did not (or knows which clock fired) says so with NotSent, IdleTimeout
// or MaxTimeout instead.
func Classify(err error) Failure {
	if rpc, ok := errors.AsType[*jsonrpc.Error](err); ok {
		f := Failure{Kind: Rejected, Err: err}
		switch rpc.Code {
		case mcp.CodeOverloaded:
			f.Kind = Overloaded
		case mcp.CodeRateLimited:
			f.Kind = RateLimited
		case mcp.CodeUnavailable:
			f.Kind = ShuttingDown
		case mcp.CodeTimeout:
			f.Kind = ServerTimeout
		default:
			return f
		}
		if body, ok := decodeBody(rpc.Data); ok {
			f.RetryAfter = millis(body.RetryAfterMs)
		}
		return f
	}
	if te, ok := errors.AsType[*mcp.ToolError](err); ok {
		return toolFailure(te, err)
	}
	return Failure{Kind: Lost, Err: err}
}

// FromResult returns the failure a tool result reports, and false when
// the result is not a failure (isError unset). The structured body is
// read from _meta[mcp.MetaFailure]; a failed result without one, as any
// server may send, is a ToolFailed that is not retryable: the tool gave
// its answer and the model should read it.
func FromResult(r *mcp.CallToolResult) (Failure, bool) {
	if r == nil || !r.IsError {
		return Failure{}, false
	}
	te := &mcp.ToolError{Code: mcp.FailureToolError}
	raw, err := json.Marshal(r.Meta[mcp.MetaFailure])
	if body, ok := decodeBody(raw); err == nil && ok {
		te.Code, te.Message, te.Retryable = body.Code, body.Message, body.Retryable
		te.RetryAfter = millis(body.RetryAfterMs)
	} else {
		for _, c := range r.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				te.Message = t.Text
				break
			}
		}
	}
	return toolFailure(te, te), true
}

func toolFailure(te *mcp.ToolError, err error) Failure {
	f := Failure{Kind: ToolFailed, Retryable: te.Retryable, RetryAfter: max(0, te.RetryAfter), Err: err}
	if te.Code == mcp.FailureTimeout {
		// The flag on a timeout says what the server's own class allows;
		// the client's class decides instead (see Planner).
		f.Kind = ServerTimeout
	}
	return f
}

// decodeBody reads a structured failure body, reporting false for
// anything that is not one (absent, null, not an object, no code).
func decodeBody(raw []byte) (mcp.Failure, bool) {
	var body mcp.Failure
	if len(raw) == 0 || json.Unmarshal(raw, &body) != nil || body.Code == "" {
		return mcp.Failure{}, false
	}
	return body, true
}

// millis converts a retryAfterMs; a value that is not positive asks for
// no wait, and one too large for a Duration saturates (Backoff caps it).
func millis(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	if ms > int64(maxDuration/time.Millisecond) {
		return maxDuration
	}
	return time.Duration(ms) * time.Millisecond
}
