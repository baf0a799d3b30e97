package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
)

// Facts are what the gateway itself decides of every tool it forwards,
// which no operator is asked for: the ledger's store and what its
// transaction holds, how results come back, flow control, the SSE
// stream, the reconnect plan and the progress discipline. A policy says
// only what the gateway cannot know — what a tool is (a read or a
// mutation), where its key is, whether its upstream honours the key, its
// reconcile read, its deadlines and its task support — and Complete
// fills in the rest, so that the same file is reviewed as it runs.
type Facts struct {
	// Transport is how downstream clients reach the gateway:
	// "streamable-http" or "stdio". It fills an operation that names
	// none.
	Transport string
	// Store is the ledger's store: "sqlite" (one process per file) or
	// "postgres" (shared by the replicas on it).
	Store string
	// QueueCapacity is the messages one stream may hold queued for a slow
	// reader (0: the server's default).
	QueueCapacity int
	// ProgressInterval is the shortest interval between two progress
	// notifications of one request (0: the server's default).
	ProgressInterval time.Duration
	// KeepAlive is the SSE comment cadence on quiet streams (0: 15 s).
	KeepAlive time.Duration
}

// DefaultFacts are the gateway's facts with its defaults: Streamable
// HTTP, an SQLite ledger.
var DefaultFacts = Facts{Transport: "streamable-http", Store: "sqlite"}

// Complete fills in each operation of rp what the gateway decides of it
// (see Facts), in place. A part of an operation that the gateway decides
// and the policy states otherwise — a store the gateway does not run, a
// transaction that does not hold what the gateway's does — is refused,
// naming the tool and the field: what the operator wrote would not be
// what runs.
func (f Facts) Complete(rp *review.Policy) error {
	for i := range rp.Operations {
		if err := f.complete(&rp.Operations[i]); err != nil {
			return err
		}
	}
	return nil
}

// Gateway defaults for the facts a zero Facts leaves out.
const (
	defaultQueueCapacity = 1024
	defaultKeepAlive     = 15 * time.Second
)

func (f Facts) complete(op *review.Operation) error {
	c := &completion{}
	if op.Transport == nil && f.Transport != "" {
		op.Transport = ptrTo(f.Transport)
	}
	kind, key := deref(op.Semantics.Kind), deref(op.Idempotency.Key)
	keyed := key == "required" || key == "optional"
	// Behind the gateway a mutation's effect is the upstream's, never in
	// the gateway's database; a read has none.
	if kind != "" && op.Semantics.ExternalEffect == nil {
		op.Semantics.ExternalEffect = ptrTo(kind == "mutation")
	}
	if op.Deadlines.Idle == nil || op.Deadlines.Max == nil {
		def := DefaultUnsafeDeadlines
		if kind == "read-only" {
			def = DefaultSafeDeadlines
		}
		if op.Deadlines.Idle == nil {
			op.Deadlines.Idle = &review.Duration{D: def.Idle}
		}
		if op.Deadlines.Max == nil {
			op.Deadlines.Max = &review.Duration{D: def.Max}
		}
	}
	// The upstream's progress reaches the client under the gateway's
	// discipline, whenever the upstream sends any.
	p := &op.Progress
	if p.Emits == nil {
		p.Emits = ptrTo(true)
	}
	set(c, "progress.strictly_increasing", &p.StrictlyIncreasing, true)
	setDuration(c, "progress.rate_limit", &p.RateLimit, cmp.Or(f.ProgressInterval, server.DefaultProgressInterval))
	set(c, "progress.resets_idle_deadline", &p.ResetsIdle, true)
	set(c, "progress.resets_max_deadline", &p.ResetsMax, false)
	if op.Retry.Policy == nil {
		switch {
		case kind == "read-only":
			op.Retry.Policy = ptrTo("safe_only")
		case keyed:
			op.Retry.Policy = ptrTo("same_key_same_args")
		case kind != "":
			op.Retry.Policy = ptrTo("never")
		}
	}
	if keyed {
		st := &op.Idempotency.Store
		set(c, "idempotency.store.kind", &st.Kind, f.Store)
		set(c, "idempotency.store.durable", &st.Durable, true)
		set(c, "idempotency.store.shared_by_replicas", &st.SharedByReplicas, f.Store == "postgres")
		tx := &op.Idempotency.Transaction
		set(c, "idempotency.transaction.key_claim", &tx.KeyClaim, true)
		set(c, "idempotency.transaction.argument_fingerprint", &tx.ArgumentFingerprint, true)
		set(c, "idempotency.transaction.result", &tx.Result, true)
		set(c, "idempotency.transaction.effect_record", &tx.EffectRecord, false) // the effect is the upstream's
	}
	// Results pass through once, or are rebuilt from the ledger's stored
	// bytes: no caller shares another's.
	set(c, "results.returned_records", &op.Results.ReturnedRecords, "defensive-copy")
	fc := &op.FlowControl
	capacity := cmp.Or(f.QueueCapacity, defaultQueueCapacity)
	switch {
	case fc.QueueCapacity == nil:
		fc.QueueCapacity = &review.Capacity{N: capacity}
	case *fc.QueueCapacity != review.Capacity{N: capacity}:
		c.contradicts("flow_control.queue_capacity", fc.QueueCapacity.String(), fmt.Sprint(capacity))
	}
	set(c, "flow_control.queue_scope", &fc.QueueScope, "per-stream")
	set(c, "flow_control.progress_overflow", &fc.ProgressOverflow, "coalesce")
	set(c, "flow_control.refetch_flag", &fc.RefetchFlag, true)
	set(c, "flow_control.final_response_preserved", &fc.FinalResponsePreserved, true)
	if deref(op.Transport) == "streamable-http" {
		s := &op.SSE
		headers := []string{"Content-Type: text/event-stream", "Cache-Control: no-cache, no-transform", "X-Accel-Buffering: no"}
		switch {
		case len(s.Headers) == 0:
			s.Headers = headers
		case !slices.Equal(s.Headers, headers):
			c.contradicts("sse.headers", strings.Join(s.Headers, "; "), strings.Join(headers, "; "))
		}
		set(c, "sse.proxy_buffering", &s.ProxyBuffering, "off") // X-Accel-Buffering: no
		setDuration(c, "sse.keepalive_interval", &s.KeepaliveInterval, cmp.Or(f.KeepAlive, defaultKeepAlive))
		set(c, "sse.keepalive_resets_idle", &s.KeepaliveResetsIdle, false)
		set(c, "reconnect.last_event_id", &op.Reconnect.LastEventID, "legacy-only")
	}
	rc := &op.Reconnect
	setDuration(c, "reconnect.backoff_initial", &rc.BackoffInitial, 250*time.Millisecond)
	setDuration(c, "reconnect.backoff_cap", &rc.BackoffCap, 8*time.Second)
	set(c, "reconnect.jitter", &rc.Jitter, "full")
	set(c, "reconnect.refetch", &rc.Refetch, true)
	set(c, "reconnect.replays_unsafe_mutations", &rc.ReplaysUnsafeMutations, false)
	if op.Tasks.Support == nil {
		op.Tasks.Support = ptrTo("none")
	}
	if s := *op.Tasks.Support; s == "optional" || s == "required" {
		set(c, "tasks.cancel", &op.Tasks.Cancel, "cooperative")
		set(c, "tasks.durable", &op.Tasks.Durable, true)
		set(c, "tasks.poll_until_terminal", &op.Tasks.PollUntilTerminal, true)
	}
	if len(c.wrong) > 0 {
		return fmt.Errorf("gateway: policy of tool %q says what the gateway does otherwise (leave these out: the gateway fills them in): %s",
			op.Name, strings.Join(c.wrong, "; "))
	}
	return nil
}

// completion gathers the fields a policy states otherwise than the
// gateway does.
type completion struct{ wrong []string }

func (c *completion) contradicts(path, given, is string) {
	c.wrong = append(c.wrong, fmt.Sprintf("%s is %s, where the gateway's is %s", path, given, is))
}

// set fills *field with the gateway's value v when the policy left it
// out, and notes a value the policy gives otherwise.
func set[T comparable](c *completion, path string, field **T, v T) {
	switch {
	case *field == nil:
		*field = &v
	case **field != v:
		c.contradicts(path, fmt.Sprint(**field), fmt.Sprint(v))
	}
}

// setDuration is set for a duration.
func setDuration(c *completion, path string, field **review.Duration, d time.Duration) {
	set(c, path, field, review.Duration{D: d})
}

func ptrTo[T any](v T) *T { return &v }
