package client

import (
	"errors"
	"net/http"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// VerdictOf says what became of a request that ended with res and err, as
// a call, CallTool or Request returned them: not sent, refused, answered
// or of unknown outcome (retry.Outcome), how (retry.Kind), and what the
// server said of trying again. It is the one classification of a request
// in mcprel's client layer: CallToolWithRetries plans by it, mcprel call
// exits by it, the gateway records and answers by it, and the client's
// metrics and traces label by it. docs/errors.md lists its table.
//
// What only the client can tell comes first — a request that never left,
// which clock fired, the caller's cancel, an HTTP answer that was no
// JSON-RPC message — then what the server answered (retry.Classify and,
// for a failed tool result, retry.FromResult). res is nil for a request
// other than a tool call.
func VerdictOf(res *mcp.CallToolResult, err error) retry.Verdict {
	if err == nil {
		if f, failed := retry.FromResult(res); failed {
			return f
		}
		return retry.Of(retry.Succeeded, nil)
	}
	var (
		de *DeadlineError
		se *StatusError
		ce *CancelledError
	)
	switch {
	case errors.As(err, new(*ConnectError)), errors.As(err, new(*NotSentError)):
		// No connection could be opened, or it had ended before the
		// request was written: the request never left.
		return retry.Of(retry.NotSent, err)
	case errors.As(err, new(*ExcludedToolError)):
		// Refused by the client itself before sending.
		return retry.Of(retry.NotSent, err)
	case errors.As(err, &de):
		f := retry.Of(retry.MaxTimeout, err)
		if de.Clock == IdleClock {
			f.Kind = retry.IdleTimeout
		}
		if de.Cancel == RequestNotSent {
			f.Outcome = retry.OutcomeNotSent
		}
		return f
	case errors.As(err, &ce):
		f := retry.Of(retry.Cancelled, err)
		if ce.Cancel == RequestNotSent {
			f.Outcome = retry.OutcomeNotSent // withdrawn before a byte of it was written
		}
		return f
	case errors.As(err, new(*TaskAbandonedError)):
		return retry.Of(retry.MaxTimeout, err)
	case errors.As(err, new(*InputError)), errors.As(err, new(*InputRoundsError)):
		// The server answered that it needs input, and the client did not
		// give it: no round ran to completion, and asking again would ask
		// for the same input.
		f := retry.Of(retry.Rejected, err)
		f.Outcome = retry.OutcomeRefused
		return f
	case errors.As(err, new(*RedirectError)), errors.As(err, new(*VersionError)), errors.As(err, new(*AuthorizationError)):
		// The server answered with a redirect, which is not followed,
		// speaks no version this client does, or refused credentials the
		// client could not better, instead of running the request, and
		// would answer the same again.
		f := retry.Of(retry.Rejected, err)
		f.Outcome = retry.OutcomeRefused
		return f
	case errors.As(err, &se):
		return statusVerdict(se, err)
	case errors.As(err, new(*ResponseTooLargeError)), errors.Is(err, ErrConnectionLost), errors.Is(err, ErrTaskCancelled):
		// The request was sent; its answer was dropped unread, never came,
		// or its task ended cancelled: what it did is unknown.
		return retry.Of(retry.Lost, err)
	}
	return retry.Classify(err)
}

// statusVerdict is the verdict of an HTTP answer that carried no JSON-RPC
// message. A 429 and a 4xx refusal ran nothing; a 503 probably did not,
// but a proxy answers it after passing a request on; a 408, 409 or any
// other status may follow a request that ran.
func statusVerdict(se *StatusError, err error) retry.Verdict {
	var f retry.Verdict
	switch s := se.Status; {
	case s == http.StatusTooManyRequests:
		f = retry.Of(retry.RateLimited, err)
	case s == http.StatusServiceUnavailable:
		f = retry.Of(retry.Unavailable, err)
	case s == http.StatusRequestTimeout, s == http.StatusConflict:
		f = retry.Of(retry.Lost, err)
	case s >= 400 && s < 500:
		// A credential, a method, a media type or a size refused: the
		// server did not run it, and would refuse it again.
		f = retry.Of(retry.Rejected, err)
		f.Outcome = retry.OutcomeRefused
	default:
		// A 5xx, or a 2xx whose body was no JSON-RPC response: what it
		// did is in an answer nobody can read.
		f = retry.Of(retry.Lost, err)
	}
	f.Status = se.Status
	if d, ok := retry.ParseRetryAfter(se.RetryAfter, time.Now()); ok {
		f.RetryAfter = d
	}
	return f
}
