package review

import (
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// Server is what a running server told a client, for FromTools.
type Server struct {
	// Transport is "stdio" or "streamable-http": how it was reached.
	Transport string
	// Loopback is true for an HTTP endpoint on a loopback address, where
	// no proxy stands between client and server.
	Loopback bool
	// Tools are its tools/list answer.
	Tools []mcp.Tool
}

// FromTools builds the policy of every tool a server advertises, from what
// it advertises and nothing else. An mcprel server says, in each tool's
// _meta, its retry class, deadlines, key mode, ledger, flow control and
// task support (mcp.MetaRetryClass and the keys beside it); its presence
// (mcp.MetaQueueCapacity) vouches for the lifecycle's invariants — progress
// strictly increasing and resetting only the idle clock, coalesced and
// flagged when dropped, final responses kept, keepalives that reset
// nothing, cooperative and durable tasks — each proved by a fixture's test.
// Of any other server only the protocol's facts are known (a tool without
// execution.taskSupport runs no task); the rest stays missing, to be
// asked for. Tool annotations are never read: they are hints, not a
// contract. The reconnect settings are those of mcprel's client (package
// retry's backoff), which is what "mcprel review" reviews the calls with.
func FromTools(s Server) *Policy {
	p := &Policy{}
	for _, t := range s.Tools {
		p.Operations = append(p.Operations, fromTool(s, t))
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func metaString(m mcp.Meta, key string) (string, bool) {
	s, ok := m[key].(string)
	return s, ok && s != ""
}

func metaMs(m mcp.Meta, key string) (time.Duration, bool) {
	switch v := m[key].(type) {
	case float64:
		return time.Duration(v) * time.Millisecond, true
	case int64:
		return time.Duration(v) * time.Millisecond, true
	case int:
		return time.Duration(v) * time.Millisecond, true
	}
	return 0, false
}

func metaBool(m mcp.Meta, key string) (bool, bool) {
	b, ok := m[key].(bool)
	return b, ok
}

func metaList(m mcp.Meta, key string) ([]string, bool) {
	switch v := m[key].(type) {
	case []string:
		return v, true
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func durationOf(d time.Duration) *Duration {
	if d <= 0 {
		return &Duration{None: true}
	}
	return &Duration{D: d}
}

func fromTool(s Server, t mcp.Tool) Operation {
	m := t.Meta
	op := Operation{Name: t.Name, Transport: ptr(s.Transport)}
	op.Semantics.Description = t.Description
	// The reconnect plan is mcprel's client's, whatever the server.
	op.Reconnect = Reconnect{
		BackoffInitial: &Duration{D: retry.DefaultBase}, BackoffCap: &Duration{D: retry.DefaultCap},
		Jitter: ptr("full"), Refetch: ptr(true), ReplaysUnsafeMutations: ptr(false),
	}
	if s.Transport == "streamable-http" {
		op.Reconnect.LastEventID = ptr("legacy-only")
		if s.Loopback {
			op.SSE.ProxyBuffering = ptr("off")
		}
	}
	// Task support: mcprel says it in _meta in both eras; the 2025-11-25
	// era has execution.taskSupport, whose absence means no task.
	switch ts, ok := metaString(m, mcp.MetaTaskSupport); {
	case ok:
		op.Tasks.Support = ptr(ts)
	case t.Execution != nil && t.Execution.TaskSupport != "":
		op.Tasks.Support = ptr(map[string]string{"forbidden": "none"}[t.Execution.TaskSupport])
		if *op.Tasks.Support == "" {
			op.Tasks.Support = ptr(t.Execution.TaskSupport)
		}
	default:
		op.Tasks.Support = ptr("none")
	}
	if idle, ok := metaMs(m, mcp.MetaIdleTimeoutMs); ok {
		op.Deadlines.Idle = durationOf(idle)
	}
	if maxT, ok := metaMs(m, mcp.MetaMaxTimeoutMs); ok {
		op.Deadlines.Max = durationOf(maxT)
	}
	capacity, isMcprel := metaMs(m, mcp.MetaQueueCapacity)
	if !isMcprel {
		return op
	}
	// An mcprel server: its lifecycle's invariants hold for every tool.
	op.Progress = Progress{Emits: ptr(true), StrictlyIncreasing: ptr(true), ResetsIdle: ptr(true), ResetsMax: ptr(false)}
	if every, ok := metaMs(m, mcp.MetaProgressIntervalMs); ok {
		op.Progress.RateLimit = durationOf(every)
	}
	op.FlowControl = FlowControl{
		QueueCapacity: &Capacity{N: int(capacity / time.Millisecond)}, QueueScope: ptr("per-stream"),
		ProgressOverflow: ptr("coalesce"), RefetchFlag: ptr(true), FinalResponsePreserved: ptr(true),
	}
	if s.Transport == "streamable-http" {
		op.SSE.Headers = []string{"Content-Type: text/event-stream", "Cache-Control: no-cache, no-transform", "X-Accel-Buffering: no"}
		op.SSE.KeepaliveResetsIdle = ptr(false)
		if every, ok := metaMs(m, mcp.MetaKeepAliveMs); ok {
			op.SSE.KeepaliveInterval = durationOf(every)
		}
	}
	if ts := str(op.Tasks.Support); ts == "optional" || ts == "required" {
		op.Tasks.Cancel, op.Tasks.Durable, op.Tasks.PollUntilTerminal = ptr("cooperative"), ptr(true), ptr(true)
	}
	// Results go out encoded once per response; a keyed replay is rebuilt
	// from the stored JSON (and says so in its own _meta).
	op.Results.ReturnedRecords = ptr(mcp.ReturnedRecordsDefensiveCopy)
	if rr, ok := metaString(m, mcp.MetaReturnedRecords); ok {
		op.Results.ReturnedRecords = ptr(rr)
	}
	class, _ := metaString(m, mcp.MetaRetryClass)
	mode, _ := metaString(m, mcp.MetaKeyMode)
	switch class {
	case mcp.RetryClassSafe:
		// The server's own contract (its retry class), not an annotation.
		op.Semantics.Kind, op.Semantics.ExternalEffect = ptr("read-only"), ptr(false)
		op.Retry.Policy = ptr("safe_only")
		return op
	case mcp.RetryClassConditional, mcp.RetryClassUnsafe:
		op.Semantics.Kind = ptr("mutation")
	default:
		return op
	}
	switch mode {
	case mcp.KeyModeRequired, mcp.KeyModeOptional:
		op.Retry.Policy = ptr("same_key_same_args")
		op.Idempotency.Key = ptr(mode)
		op.Retry.ReconcileWith = "lookup_operation"
	case mcp.KeyModeVersion:
		op.Retry.Policy = ptr("same_version")
		op.Idempotency.Key = ptr(mode)
	case "":
		if class == mcp.RetryClassUnsafe {
			op.Idempotency.Key, op.Retry.Policy = ptr("none"), ptr("never")
			op.Idempotency.Store.Kind = ptr("none")
		}
	}
	switch eff, _ := metaString(m, mcp.MetaEffect); eff {
	case mcp.EffectInTransaction:
		op.Semantics.ExternalEffect = ptr(false)
	case mcp.EffectUpstreamKey:
		op.Semantics.ExternalEffect = ptr(true)
		op.Idempotency.ExternalGuard = ptr("upstream_key")
	case mcp.EffectAtMostOnce:
		op.Semantics.ExternalEffect = ptr(true)
		op.Idempotency.ExternalGuard = ptr("at_most_once")
	case mcp.EffectOutbox:
		// The effect is another service's, its intent a row in the
		// ledger's transaction: inside the atomic boundary.
		op.Semantics.ExternalEffect = ptr(true)
		op.Idempotency.ExternalGuard = ptr("outbox")
	}
	if st, ok := metaString(m, mcp.MetaLedgerStore); ok {
		op.Idempotency.Store.Kind = ptr(st)
		op.Idempotency.Store.Durable = ptr(st == "sqlite" || st == "postgres")
	}
	if shared, ok := metaBool(m, mcp.MetaLedgerShared); ok {
		op.Idempotency.Store.SharedByReplicas = ptr(shared)
	}
	if parts, ok := metaList(m, mcp.MetaLedgerTransaction); ok {
		tx := Transaction{KeyClaim: ptr(false), ArgumentFingerprint: ptr(false), EffectRecord: ptr(false), Result: ptr(false)}
		for _, part := range parts {
			switch part {
			case mcp.LedgerKeyClaim:
				tx.KeyClaim = ptr(true)
			case mcp.LedgerArgumentFingerprint:
				tx.ArgumentFingerprint = ptr(true)
			case mcp.LedgerEffectRecord:
				tx.EffectRecord = ptr(true)
			case mcp.LedgerResult:
				tx.Result = ptr(true)
			}
		}
		if mode == mcp.KeyModeVersion {
			tx.KeyClaim, tx.ArgumentFingerprint, tx.Result = nil, nil, nil
		}
		op.Idempotency.Transaction = tx
	}
	return op
}
