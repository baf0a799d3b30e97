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
	// Unavailable: the server, or an HTTP intermediary in front of it,
	// answered HTTP 503. The server probably did not act on it, but a
	// proxy can answer 503 after passing the request on: whether it ran is
	// unknown, and only a call that may be sent again is.
	Unavailable
	// Unreachable: a gateway answered that its upstream could not be
	// reached (upstream_unavailable): the request never got there.
	Unreachable
	// InProgress: an operation with the call's idempotency key is still
	// running under an earlier request (in_progress); this request ran
	// nothing. The same call with the same key, later, gets its outcome.
	InProgress
	// Undetermined: the server answered that the call's outcome is unknown
	// (outcome_unknown: a gateway whose upstream's answer was lost, a
	// ledger that recorded the loss). Whether to send it again is its
	// retryable flag's word; otherwise reconcile.
	Undetermined
	// Cancelled: the caller cancelled the request. Whether it ran is
	// unknown, unless it was withdrawn before any of it was written.
	Cancelled
	// Succeeded: the call was answered with its result. No failure; a
	// verdict of every request has one, for metrics and traces.
	Succeeded
)

// Outcome is what became of a request, as far as its client can know:
// not sent, sent and answered (that it did not run, or with what it did),
// or sent with an unknown outcome.
type Outcome uint8

const (
	// OutcomeUnknown, the zero value: the request left the client, or may
	// have, and nothing says whether it ran. The only safe guess for a
	// failure the client cannot place.
	OutcomeUnknown Outcome = iota
	// OutcomeNotSent: the request provably never left the client.
	OutcomeNotSent
	// OutcomeRefused: the server (or a gateway or an HTTP intermediary
	// speaking for it) answered that it did not run the request: it
	// refused it, was overloaded, asked for input first, or knows no such
	// method. Whether that answer counts as proof for a call that nothing
	// deduplicates is the client's policy (retry.Table.TrustServer).
	OutcomeRefused
	// OutcomeAnswered: the server answered with what the request did (a
	// result, a failed result, an error the server raised while or after
	// running it).
	OutcomeAnswered
)

var outcomeNames = [...]string{
	OutcomeUnknown:  "unknown",
	OutcomeNotSent:  "not_sent",
	OutcomeRefused:  "refused",
	OutcomeAnswered: "answered",
}

// String returns a stable snake_case name, fit for a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Ran reports whether the request may have run: false only for a request
// never sent or one the server refused. A keyed call whose verdict did not
// run may free its key.
func (o Outcome) Ran() bool { return o == OutcomeUnknown || o == OutcomeAnswered }

// outcome is the kind's usual outcome; a verdict may say otherwise (a
// cancelled request that was never written was not sent).
func (k Kind) outcome() Outcome {
	switch k {
	case NotSent:
		return OutcomeNotSent
	case Overloaded, RateLimited, ShuttingDown, Unreachable, InProgress:
		return OutcomeRefused
	case ToolFailed, Rejected, Succeeded:
		return OutcomeAnswered
	}
	return OutcomeUnknown
}

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
	Unavailable:   "unavailable",
	Unreachable:   "unreachable",
	InProgress:    "in_progress",
	Undetermined:  "undetermined",
	Cancelled:     "cancelled",
	Succeeded:     "succeeded",
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
	case Unavailable:
		return "it was answered HTTP 503 (unavailable), which an HTTP proxy can answer after passing a request on"
	case Unreachable:
		return "the gateway answered that its upstream could not be reached"
	case InProgress:
		return "an earlier call with the same idempotency key is still running"
	case Undetermined:
		return "the server answered that whether it took effect is unknown"
	case Cancelled:
		return "it was cancelled"
	case Succeeded:
		return "it succeeded"
	}
	return "the connection broke after the request was sent, before its answer"
}

// Verdict says what happened to one request: whether it was sent, and
// answered (Outcome); how (Kind); and what the server said of trying
// again (Retryable, RetryAfter). The client layer gives it for any
// outcome (client.VerdictOf); the retry planner, package client's
// retries, mcprel call's exit status and the gateway all read it, and
// nothing else classifies.
type Verdict struct {
	// Outcome: not sent, refused, answered, or unknown.
	Outcome Outcome
	Kind    Kind
	// Retryable is the structured failure body's retryable flag: whether
	// the server says the same call may succeed if made again. Only
	// ToolFailed reads it; the other kinds say it themselves.
	Retryable bool
	// RetryAfter is how long the server asked the client to wait
	// (retryAfterMs, or an HTTP Retry-After read with ParseRetryAfter); 0
	// when it asked nothing. When both are present, use the longer.
	RetryAfter time.Duration
	// Status is the HTTP status the answer came with when it was no
	// JSON-RPC message (0 otherwise).
	Status int
	// Err is the underlying error: a *jsonrpc.Error, an *mcp.ToolError, a
	// transport's error. Decisions wrap it, so errors.As finds it.
	Err error
}

// notSent reports whether the request provably never left: its outcome
// says so, or its kind does (a verdict built without an outcome).
func (f Verdict) notSent() bool { return f.Outcome == OutcomeNotSent || f.Kind == NotSent }

// Of returns a verdict of kind k with its usual outcome.
func Of(k Kind, err error) Verdict { return Verdict{Outcome: k.outcome(), Kind: k, Err: err} }

// cause is the error a decision wraps: Err, or the kind when Err is nil.
func (f Verdict) cause() error {
	if f.Err != nil {
		return f.Err
	}
	return errors.New(f.Kind.happened())
}

// Classify returns the verdict of what a server answered, as err: a
// *jsonrpc.Error by its code (mcprel's -31001…-31004 with the structured
// body in their data), an *mcp.ToolError by its failure code and flags,
// and anything else as Lost. A transport's error is Lost because the
// error alone cannot say whether the request went out; the client, which
// can prove more (a request that never left, the clock that fired, an
// HTTP status), says so in client.VerdictOf, which calls this for the
// rest.
func Classify(err error) Verdict {
	if rpc, ok := errors.AsType[*jsonrpc.Error](err); ok {
		var f Verdict
		switch rpc.Code {
		case mcp.CodeOverloaded:
			f = Of(Overloaded, err)
		case mcp.CodeRateLimited:
			f = Of(RateLimited, err)
		case mcp.CodeUnavailable:
			f = Of(ShuttingDown, err)
		case mcp.CodeTimeout:
			f = Of(ServerTimeout, err)
		case jsonrpc.CodeMethodNotFound, mcp.CodeUnsupportedVersion, mcp.CodeMissingClientCapability, mcp.CodeHeaderMismatch,
			jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
			// Refused before anything ran: no such method, a version or
			// a capability the server will not serve the request under,
			// a request it could not read.
			f = Of(Rejected, err)
			f.Outcome = OutcomeRefused
			return f
		default:
			// An mcprel gateway's failure of a request other than a
			// call says in its body what it is.
			if body, ok := decodeBody(rpc.Data); ok {
				switch body.Code {
				case mcp.FailureOutcomeUnknown:
					f = Of(Undetermined, err)
					f.Retryable, f.RetryAfter = body.Retryable, millis(body.RetryAfterMs)
					return f
				case mcp.FailureUpstreamUnavailable:
					f = Of(Unreachable, err)
					f.Retryable, f.RetryAfter = body.Retryable, millis(body.RetryAfterMs)
					return f
				case mcp.FailureUpstreamUnauthorized:
					f = Of(Rejected, err)
					f.Outcome = OutcomeRefused
					return f
				}
			}
			// Invalid params and internal errors are answers too, but
			// not proof that nothing ran: an SDK raises invalid params on
			// a tool's output after the tool ran.
			return Of(Rejected, err)
		}
		if body, ok := decodeBody(rpc.Data); ok {
			f.RetryAfter = millis(body.RetryAfterMs)
		}
		return f
	}
	if te, ok := errors.AsType[*mcp.ToolError](err); ok {
		return toolFailure(te, err)
	}
	return Of(Lost, err)
}

// FromResult returns the verdict of a failed tool result, and false when
// the result is not a failure (isError unset). The structured body is
// read from _meta[mcp.MetaFailure]; a failed result without one, as any
// server may send, is a ToolFailed that is not retryable: the tool gave
// its answer and the model should read it.
func FromResult(r *mcp.CallToolResult) (Verdict, bool) {
	if r == nil || !r.IsError {
		return Verdict{}, false
	}
	te := &mcp.ToolError{Code: mcp.FailureToolError}
	if body, ok := failureBody(r.Meta[mcp.MetaFailure]); ok {
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

// failureBody reads the structured failure of a result's _meta, decoded
// (a map) or raw (as a pass-through result keeps it).
func failureBody(v any) (mcp.Failure, bool) {
	if raw, ok := v.(json.RawMessage); ok {
		return decodeBody(raw)
	}
	if v == nil {
		return mcp.Failure{}, false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return mcp.Failure{}, false
	}
	return decodeBody(raw)
}

// toolFailure is the verdict of a failed result by its failure code
// (docs/errors.md): the codes that say the request ran nothing are
// refusals, the ones that say the outcome is unknown are not answers.
func toolFailure(te *mcp.ToolError, err error) Verdict {
	var f Verdict
	switch te.Code {
	case mcp.FailureTimeout:
		// The flag on a timeout says what the server's own class allows;
		// the client's class decides instead (see Planner).
		f = Of(ServerTimeout, err)
	case mcp.FailureOverloaded:
		f = Of(Overloaded, err)
	case mcp.FailureRateLimited:
		f = Of(RateLimited, err)
	case mcp.FailureShuttingDown:
		f = Of(ShuttingDown, err)
	case mcp.FailureUpstreamUnavailable:
		f = Of(Unreachable, err)
	case mcp.FailureUpstreamUnauthorized:
		// A gateway's upstream refused the gateway's credentials: nothing
		// ran, and the same request is refused until an operator acts.
		f = Of(Rejected, err)
		f.Outcome = OutcomeRefused
	case mcp.FailureInProgress:
		f = Of(InProgress, err)
	case mcp.FailureOutcomeUnknown:
		f = Of(Undetermined, err)
	case mcp.FailureInvalidArguments, mcp.FailureKeyRequired, mcp.FailureKeyConflict, mcp.FailureLedger, mcp.FailureStorage:
		// Refused, or rolled back, before the operation took effect.
		f = Of(ToolFailed, err)
		f.Outcome = OutcomeRefused
	default:
		f = Of(ToolFailed, err)
	}
	f.Retryable, f.RetryAfter = te.Retryable, max(0, te.RetryAfter)
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
