package gateway

import (
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// Observer is told what happens to upstreams and forwarded requests:
// metrics attach here. Its methods must be quick and must not block.
type Observer interface {
	Forwarded(ForwardRecord)
	UpstreamEvent(UpstreamEvent)
}

// Outcome is how a forwarded request ended, as the gateway saw it.
type Outcome string

const (
	OutcomeOK            Outcome = "ok"             // a result (isError or not) came back
	OutcomeToolError     Outcome = "tool_error"     // the upstream's result had isError set
	OutcomeProtocolError Outcome = "protocol_error" // the upstream answered with a JSON-RPC error
	OutcomeUnavailable   Outcome = "unavailable"    // never reached the upstream (circuit open, not connected, unreachable)
	OutcomeLost          Outcome = "lost"           // no answer reached the client: the connection ended with the request in flight (outcome unknown), or a held call's upstream answered after its client stopped waiting
	OutcomeCancelled     Outcome = "cancelled"      // the downstream cancelled, or a clock fired; the upstream was told
	OutcomeInput         Outcome = "input_required" // the upstream asked a 2026-07-28 downstream for input
	OutcomeFailed        Outcome = "failed"         // anything else the gateway could not forward
)

// ForwardRecord is one forwarded request.
type ForwardRecord struct {
	Upstream string
	Method   string // tools/call, resources/read, prompts/get
	Name     string // the downstream's name of the tool or prompt, or the resource URI
	Outcome  Outcome
	// InUpstream is the time from sending the request upstream to its
	// answer; Total includes waiting for a connection. Reached reports
	// whether the request was sent upstream at all.
	InUpstream, Total time.Duration
	Reached           bool
	// CancelPropagated: the downstream cancelled (or a clock fired) and
	// the upstream was sent its own cancellation.
	CancelPropagated bool
	// Retries counts the attempts the gateway made again upstream, its
	// retry policy allowing (ToolPolicy.MaxAttempts).
	Retries int
}

// EventKind names an UpstreamEvent.
type EventKind string

const (
	EventConnectFailed EventKind = "connect_failed" // a (re)connection attempt failed
	EventDied          EventKind = "died"           // a connection (a stdio process, an HTTP+SSE stream) ended
	EventReconnected   EventKind = "reconnected"    // connected again after a failure or a death
	EventListed        EventKind = "listed"         // its tools, prompts and resources were listed (again) and are served
	EventCircuit       EventKind = "circuit"        // the circuit's state, see Circuit
	EventStopped       EventKind = "stopped"        // a Reload removed or changed it: drained of its calls (or its grace passed), then closed
)

// UpstreamEvent is something that happened to an upstream.
type UpstreamEvent struct {
	Upstream string
	Kind     EventKind
	Circuit  CircuitState // for EventCircuit
	// For EventConnectFailed and EventDied: the consecutive failures so
	// far, this one included, and the pause before the next attempt.
	Failures int
	Next     time.Duration
	// Err is why, for EventConnectFailed and EventDied (nil when a
	// process or stream just ended). It may hold what the upstream was
	// given (a URL with its query, a header): redact it before showing
	// it to anyone but the operator's log.
	Err error
}

// UpstreamState is an upstream's state now.
type UpstreamState struct {
	Name      string
	Transport Transport
	Connected bool
	Era       mcp.Era
	Circuit   CircuitState
	InFlight  int
	Restarts  int
	Sessions  int // tenant sessions (or processes) open
	// LateResponses are responses that arrived after the gateway had
	// given up on their request (the downstream cancelled, a clock
	// fired): discarded.
	LateResponses uint64
}

type nopObserver struct{}

func (nopObserver) Forwarded(ForwardRecord)     {}
func (nopObserver) UpstreamEvent(UpstreamEvent) {}
