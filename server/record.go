package server

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// Outcome is the terminal state of a request. Every request records exactly
// one, and the first one recorded wins: after a request is Cancelled nothing
// more is written for it, even if its handler returns a result a moment
// later; a cancellation that arrives after Completed changes nothing.
//
// A request is running until it reaches one of the outcomes below; none of
// them leads anywhere else.
type Outcome uint8

const (
	// Completed: a result was sent. A tool failure (isError) is Completed
	// too; RequestRecord.IsError says so.
	Completed Outcome = iota + 1
	// Failed: a JSON-RPC error was sent (invalid params, unknown method,
	// overload, …); RequestRecord.ErrorCode says which.
	Failed
	// Cancelled: the client cancelled (notifications/cancelled, or the
	// request's stream closed in the modern HTTP era), the connection
	// closed, or the server shut down. Nothing was sent.
	Cancelled
	// TimedOut: a deadline fired before the handler finished.
	TimedOut
)

// String returns the stable name used in logs and metrics: "completed",
// "error", "cancelled" or "timed_out".
func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Failed:
		return "error"
	case Cancelled:
		return "cancelled"
	case TimedOut:
		return "timed_out"
	}
	return "running"
}

// RequestRecord describes a request that reached its terminal state. It is
// passed to the Observers and logged as one line per request.
type RequestRecord struct {
	ID     jsonrpc.ID
	Method string
	Tool   string  // tools/call only
	Era    mcp.Era // 0 when the request ended before its era was known
	// Transport, Session and Tenant say where the request came from, as
	// in its RequestInfo.
	Transport string
	Session   string
	Tenant    string
	Outcome   Outcome
	Cause     error // Cancelled and TimedOut: why
	ErrorCode int64 // Failed: the JSON-RPC error code
	IsError   bool  // Completed: the tool reported a failure
	// ProgressRefused counts progress reports dropped because they did not
	// increase: a tool bug worth seeing.
	ProgressRefused uint64
	// ProgressRateLimited counts progress reports the rate limit
	// (Options.ProgressInterval) held back and a newer report replaced
	// before they could be sent: a fast tool's reports, thinned.
	ProgressRateLimited uint64
	// ProgressCoalesced and ProgressDropped count, as of the request's
	// end, the progress and log messages of this request that a newer one
	// replaced before the client read it, and that were dropped because
	// the client read too slowly (its stream then carries the refetch
	// flag, mcp.MetaRefetch).
	ProgressCoalesced uint64
	ProgressDropped   uint64
	Start             time.Time
	Duration          time.Duration
	// Queued is how long the call waited for admission before its handler
	// ran (0 when it ran at once or never ran).
	Queued time.Duration
	// Annotations are the facts interceptors attached (Request.Annotate),
	// such as "idempotency": "replayed". Nil when there are none.
	Annotations map[string]string

	args   json.RawMessage // tools/call: the arguments, for ArgumentSummary
	secret []string        // and the tool's Policy.Secret
}

// HandlerRecord describes a tool handler that returned. A handler may return
// after its request already ended (cancelled, timed out); its result is then
// discarded and Overrun says how long it kept running after the end, which is
// how long the tool took to honour cancellation.
type HandlerRecord struct {
	ID        jsonrpc.ID
	Tool      string
	Ran       time.Duration
	Discarded bool
	Overrun   time.Duration
	// Outcome is, for a discarded return, the terminal state that had won
	// (Cancelled or TimedOut, usually): the response it suppressed. Zero
	// when the return was not discarded.
	Outcome Outcome
}

// ArgumentSummary describes a call's arguments for a log line or a span:
// each top-level argument with its value cut to 32 characters, in name
// order, and the arguments the tool's Policy.Secret lists as [secret]. It
// is computed when asked for, from arguments that may share memory with
// the request's frame: call it during RequestEnded, not after. It is ""
// for a request that is not a call.
func (rec RequestRecord) ArgumentSummary() string {
	if len(rec.args) == 0 {
		return ""
	}
	// Split the arguments in place, without decoding them: this runs for
	// every logged call.
	type member struct{ name, value []byte }
	var buf [8]member
	members := buf[:0]
	if jsonrpc.Members(rec.args, func(k, v []byte) bool {
		members = append(members, member{k, v})
		return true
	}) != nil {
		return "(not a JSON object)"
	}
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	// One allocation, sized for what the summary holds: the string it
	// returns keeps its buffer, so never the size of the arguments.
	size := 0
	for _, m := range members {
		size += len(m.name) + 2 + min(len(m.value), maxSummaryBytes)
	}
	var b strings.Builder
	b.Grow(size)
	for i, m := range members {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.Write(m.name)
		b.WriteByte('=')
		if slices.Contains(rec.secret, string(m.name)) {
			b.WriteString("[secret]")
			continue
		}
		if cut := runeOffset(m.value, 31); cut < len(m.value) && runeOffset(m.value[cut:], 1) < len(m.value)-cut {
			b.Write(m.value[:cut]) // more than 32 characters: 31 of them and an ellipsis
			b.WriteString("…")
		} else {
			b.Write(m.value)
		}
	}
	return b.String()
}

// maxSummaryBytes is the most one value takes in an argument summary: 32
// characters of up to four bytes each.
const maxSummaryBytes = 32 * utf8.UTFMax

// runeOffset returns the byte offset of b's nth character, or len(b) when
// b has no more than n: where a cut after n characters falls.
func runeOffset(b []byte, n int) int {
	i := 0
	for ; n > 0 && i < len(b); n-- {
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return i
}
