package review

import (
	"fmt"
	"slices"
	"strings"
)

// Verdicts.
const (
	ProductionReady = "production-ready"
	Refused         = "refused"
)

// Code is a refusal's stable, machine-readable reason.
type Code string

// The reasons Review refuses "production ready". These, and only these,
// refuse; everything else the review finds is a warning.
const (
	// CodeMissingInput: a required input was not given (Report lists
	// each by name). A reviewer does not guess.
	CodeMissingInput Code = "missing_input"
	// CodeRetryOnTimeoutOnly: the retry policy is "retry on timeout" and
	// nothing else: it says nothing of what makes a second execution
	// harmless.
	CodeRetryOnTimeoutOnly Code = "retry_on_timeout_only"
	// CodeProcessLocalLedger: the idempotency records live in one
	// process's memory, are not durable, or are not shared by the
	// replicas that serve the operation.
	CodeProcessLocalLedger Code = "process_local_ledger"
	// CodeEffectOutsideBoundary: the effect (or a part of the ledger
	// record: key claim, fingerprint, result) is outside the transaction
	// that claims the key, and no outbox or upstream key covers it.
	CodeEffectOutsideBoundary Code = "effect_outside_boundary"
	// CodeAliasedRecords: returned records share memory with the store.
	CodeAliasedRecords Code = "aliased_records"
	// CodeQueueCapacityUnspecified: the outbound queue has no stated
	// bound (left out, or "unbounded").
	CodeQueueCapacityUnspecified Code = "queue_capacity_unspecified"
	// CodeNoMaxTimeout: there is no maximum timeout (left out, or
	// "none").
	CodeNoMaxTimeout Code = "no_max_timeout"
	// CodeProgressResetsEveryDeadline: progress resets the maximum
	// deadline too, so a progress token makes a call immortal.
	CodeProgressResetsEveryDeadline Code = "progress_resets_every_deadline"
)

// Refusal is one reason an operation is not production ready.
type Refusal struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Fields are the policy fields at fault.
	Fields []string `json:"fields,omitempty"`
}

// Report is Review's answer for a whole policy.
type Report struct {
	// Verdict is ProductionReady when every operation is, else Refused.
	Verdict    string            `json:"verdict"`
	Operations []OperationReport `json:"operations"`
}

// Retry classes.
const (
	ClassSafe        = "SAFE"
	ClassConditional = "CONDITIONAL"
	ClassUnsafe      = "UNSAFE"
)

// OperationReport is the review of one operation, one field per section
// of the checklist.
type OperationReport struct {
	Name      string `json:"name"`
	Transport string `json:"transport,omitempty"`
	Verdict   string `json:"verdict"`
	// Refusals say why the verdict is Refused (empty when ready).
	Refusals []Refusal `json:"refusals"`
	// Missing are the required inputs not given, by field path.
	Missing []string `json:"missing"`
	// Warnings are findings that do not refuse.
	Warnings     []string       `json:"warnings"`
	Cancellation []WireRule     `json:"cancellation"`
	Races        []Race         `json:"races"`
	Deadlines    DeadlineReview `json:"deadlines"`
	Retry        RetryReview    `json:"retry"`
	Boundary     BoundaryReview `json:"idempotencyBoundary"`
	FlowControl  []Check        `json:"flowControl"`
	Reconnect    []string       `json:"reconnect"`
	Tasks        TaskReview     `json:"tasks"`
	Fixtures     []Fixture      `json:"fixtures"`
}

// WireRule is how a call is cancelled on one transport in one era.
type WireRule struct {
	Wire   string   `json:"wire"` // "stdio", "Streamable HTTP 2026-07-28", ...
	Signal string   `json:"signal"`
	Rules  []string `json:"rules"`
}

// Race is one row of the race table.
type Race struct {
	Order          string `json:"order"`
	ServerTerminal string `json:"serverTerminal"`
	FinalResponse  string `json:"finalResponse"`
	Client         string `json:"client"`
}

// DeadlineReview is the deadline policy.
type DeadlineReview struct {
	Idle  string   `json:"idle"`
	Max   string   `json:"max"`
	Rules []string `json:"rules"`
}

// RetryReview is the retry class with its reasons.
type RetryReview struct {
	Class string `json:"class"`
	// WithoutKey is the class of a call made without the key, for an
	// optional key ("UNSAFE"); empty otherwise.
	WithoutKey string   `json:"withoutKey,omitempty"`
	Policy     string   `json:"policy,omitempty"`
	Reasons    []string `json:"reasons"`
}

// BoundaryReview is the idempotency boundary.
type BoundaryReview struct {
	Store string `json:"store,omitempty"`
	// Inside and Outside list what commits in the store's one
	// transaction and what does not.
	Inside  []string `json:"inside"`
	Outside []string `json:"outside"`
	Notes   []string `json:"notes"`
}

// Check statuses.
const (
	Pass    = "pass"
	Fail    = "fail"
	Missing = "missing"
	NA      = "n/a"
)

// Check is one flow-control check.
type Check struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// TaskReview is the durable Task behaviour.
type TaskReview struct {
	Support string   `json:"support,omitempty"`
	Steps   []string `json:"steps"`
}

// Review reviews every operation of p. It never guesses a missing input:
// the input is listed, and the operation is refused.
func Review(p *Policy) Report {
	r := Report{Verdict: ProductionReady}
	for i := range p.Operations {
		or := reviewOperation(&p.Operations[i])
		if or.Verdict != ProductionReady {
			r.Verdict = Refused
		}
		r.Operations = append(r.Operations, or)
	}
	if len(r.Operations) == 0 {
		r.Verdict = Refused
	}
	return r
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func is(p *bool) bool    { return p != nil && *p }
func isNot(p *bool) bool { return p != nil && !*p }

// isMutation: a mutation, or anything with an external effect.
func isMutation(op *Operation) bool {
	return str(op.Semantics.Kind) == "mutation" || is(op.Semantics.ExternalEffect)
}

func storeKind(op *Operation) string { return str(op.Idempotency.Store.Kind) }

// missingInputs lists the required inputs op lacks, by field path.
func missingInputs(op *Operation) []string {
	var m []string
	need := func(present bool, path string) {
		if !present {
			m = append(m, path)
		}
	}
	http := str(op.Transport) == "streamable-http"
	need(op.Transport != nil, "transport")
	need(op.Semantics.Kind != nil, "semantics.kind")
	need(op.Semantics.ExternalEffect != nil, "semantics.external_effect")
	need(op.Deadlines.Idle != nil, "deadlines.idle_timeout")
	need(op.Deadlines.Max != nil, "deadlines.max_timeout")
	need(op.Progress.Emits != nil, "progress.emits")
	if is(op.Progress.Emits) {
		need(op.Progress.StrictlyIncreasing != nil, "progress.strictly_increasing")
		need(op.Progress.RateLimit != nil, "progress.rate_limit")
		need(op.Progress.ResetsIdle != nil, "progress.resets_idle_deadline")
	}
	need(op.Progress.ResetsMax != nil, "progress.resets_max_deadline")
	need(op.Retry.Policy != nil, "retry.policy")
	need(op.Results.ReturnedRecords != nil, "results.returned_records")
	if isMutation(op) || op.Semantics.Kind == nil {
		key := op.Idempotency.Key
		need(key != nil, "idempotency.key")
		if key == nil || *key != "none" {
			need(op.Idempotency.Store.Kind != nil, "idempotency.store.kind")
		}
		kind := storeKind(op)
		if kind != "" && kind != "none" {
			need(op.Idempotency.Store.Durable != nil, "idempotency.store.durable")
			need(op.Idempotency.Store.SharedByReplicas != nil, "idempotency.store.shared_by_replicas")
		}
		if kind != "" && kind != "none" && kind != "upstream" {
			tx := op.Idempotency.Transaction
			if str(key) != "version" {
				need(tx.KeyClaim != nil, "idempotency.transaction.key_claim")
				need(tx.ArgumentFingerprint != nil, "idempotency.transaction.argument_fingerprint")
				need(tx.Result != nil, "idempotency.transaction.result")
			}
			need(tx.EffectRecord != nil, "idempotency.transaction.effect_record")
		}
		if is(op.Semantics.ExternalEffect) && kind != "upstream" && str(key) != "none" {
			need(op.Idempotency.ExternalGuard != nil, "idempotency.external_effect_guard")
		}
	}
	fc := op.FlowControl
	need(fc.QueueCapacity != nil, "flow_control.queue_capacity")
	need(fc.QueueScope != nil, "flow_control.queue_scope")
	need(fc.ProgressOverflow != nil, "flow_control.progress_overflow")
	if o := str(fc.ProgressOverflow); o == "drop-oldest" || o == "drop-newest" || o == "coalesce" {
		need(fc.RefetchFlag != nil, "flow_control.refetch_flag")
	}
	need(fc.FinalResponsePreserved != nil, "flow_control.final_response_preserved")
	if http {
		need(len(op.SSE.Headers) > 0, "sse.headers")
		need(op.SSE.ProxyBuffering != nil, "sse.proxy_buffering")
		need(op.SSE.KeepaliveInterval != nil, "sse.keepalive_interval")
		need(op.SSE.KeepaliveResetsIdle != nil, "sse.keepalive_resets_idle")
		need(op.Reconnect.LastEventID != nil, "reconnect.last_event_id")
	}
	rc := op.Reconnect
	need(rc.BackoffInitial != nil, "reconnect.backoff_initial")
	need(rc.BackoffCap != nil, "reconnect.backoff_cap")
	need(rc.Jitter != nil, "reconnect.jitter")
	need(rc.Refetch != nil, "reconnect.refetch")
	need(rc.ReplaysUnsafeMutations != nil, "reconnect.replays_unsafe_mutations")
	need(op.Tasks.Support != nil, "tasks.support")
	if s := str(op.Tasks.Support); s == "optional" || s == "required" {
		need(op.Tasks.Cancel != nil, "tasks.cancel")
		need(op.Tasks.Durable != nil, "tasks.durable")
		need(op.Tasks.PollUntilTerminal != nil, "tasks.poll_until_terminal")
	}
	return m
}

// dedicated are missing inputs that have a refusal of their own.
var dedicated = map[string]Code{
	"deadlines.max_timeout":       CodeNoMaxTimeout,
	"flow_control.queue_capacity": CodeQueueCapacityUnspecified,
}

// refusals finds every reason to refuse op.
func refusals(op *Operation, missing []string) []Refusal {
	var out []Refusal
	var generic []string
	for _, f := range missing {
		if _, ok := dedicated[f]; !ok {
			generic = append(generic, f)
		}
	}
	if len(generic) > 0 {
		out = append(out, Refusal{CodeMissingInput,
			"required inputs are missing; the review does not guess them: " + strings.Join(generic, ", "), generic})
	}
	if str(op.Retry.Policy) == "retry_on_timeout" {
		out = append(out, Refusal{CodeRetryOnTimeoutOnly,
			"the retry policy is only \"retry on timeout\": a timed-out call may have committed, and nothing says a second execution is harmless (state the class: never, safe_only, same_key_same_args or same_version)",
			[]string{"retry.policy"}})
	}
	if isMutation(op) {
		st := op.Idempotency.Store
		var why []string
		switch {
		case storeKind(op) == "process-memory":
			why = append(why, "the records live in one process's memory: a restart forgets them and replicas cannot see each other's")
		case storeKind(op) != "none" && storeKind(op) != "" && isNot(st.Durable):
			why = append(why, "the store is not durable: a crash forgets which keys ran")
		}
		if st.Replicas != nil && *st.Replicas > 1 && isNot(st.SharedByReplicas) {
			why = append(why, fmt.Sprintf("%d replicas serve the operation but do not share the store: each dedupes only its own calls", *st.Replicas))
		}
		if len(why) > 0 {
			out = append(out, Refusal{CodeProcessLocalLedger, "the ledger is process-local: " + strings.Join(why, "; ") +
				" (use a shared database transaction, a transactional outbox, or an upstream that enforces the key)",
				[]string{"idempotency.store"}})
		}
		if outside := outsideBoundary(op); len(outside) > 0 {
			out = append(out, Refusal{CodeEffectOutsideBoundary,
				"outside the claimed atomic boundary, with no outbox and no upstream key: " + strings.Join(outside, "; "),
				[]string{"idempotency.transaction", "idempotency.external_effect_guard"}})
		}
	}
	if str(op.Results.ReturnedRecords) == "aliased" {
		out = append(out, Refusal{CodeAliasedRecords,
			"returned records alias mutable storage: a caller that changes its result changes what the next replay returns (return a defensive copy, or rebuild from the stored bytes)",
			[]string{"results.returned_records"}})
	}
	if c := op.FlowControl.QueueCapacity; c == nil || c.Unbounded {
		why := "no queue capacity is given"
		if c != nil {
			why = "the queue is unbounded"
		}
		out = append(out, Refusal{CodeQueueCapacityUnspecified,
			why + ": a slow reader makes the server's memory grow without limit (state a per-stream or per-client capacity)",
			[]string{"flow_control.queue_capacity"}})
	}
	if d := op.Deadlines.Max; d == nil || d.None {
		why := "no maximum timeout is given"
		if d != nil {
			why = "the maximum timeout is \"none\""
		}
		out = append(out, Refusal{CodeNoMaxTimeout,
			why + ": a peer that keeps reporting progress (or a stuck one with keepalives) holds the call forever",
			[]string{"deadlines.max_timeout"}})
	}
	if is(op.Progress.ResetsMax) {
		out = append(out, Refusal{CodeProgressResetsEveryDeadline,
			"progress resets the maximum deadline too: a progress token makes the call immortal (progress may reset only the idle clock)",
			[]string{"progress.resets_max_deadline"}})
	}
	return out
}

// outsideBoundary says what of a deduplicated mutation lies outside the
// transaction that claims its key with nothing to cover it. An operation
// that claims no deduplication (key "none") claims no boundary.
func outsideBoundary(op *Operation) []string {
	key, kind := str(op.Idempotency.Key), storeKind(op)
	if key == "" || key == "none" || kind == "" || kind == "none" || kind == "upstream" {
		return nil
	}
	guard := str(op.Idempotency.ExternalGuard)
	covered := guard == "outbox" || guard == "upstream_key"
	tx := op.Idempotency.Transaction
	var out []string
	switch {
	case is(op.Semantics.ExternalEffect) && guard == "at_most_once":
		out = append(out, atMostOnceOutside)
	case is(op.Semantics.ExternalEffect) && !covered && op.Idempotency.ExternalGuard != nil:
		out = append(out, "the external effect (it cannot commit with the key; a crash between them runs it again or loses the record)")
	}
	if isNot(tx.EffectRecord) && !covered && !is(op.Semantics.ExternalEffect) {
		out = append(out, "the effect record (written outside the transaction that claims the key)")
	}
	if key != "version" {
		for _, part := range []struct {
			v    *bool
			name string
		}{{tx.KeyClaim, "the key claim"}, {tx.ArgumentFingerprint, "the argument fingerprint"}, {tx.Result, "the committed result"}} {
			if isNot(part.v) {
				out = append(out, part.name+" (not in the ledger's transaction)")
			}
		}
	}
	return out
}

// atMostOnceOutside is what an effect claimed at most once leaves outside
// the boundary: it never runs twice, but it is not exactly once.
const atMostOnceOutside = "the external effect, claimed at most once (never sent twice, but the provider does not enforce the key: an answer lost after it acted leaves the outcome unknown until someone reconciles)"

func reviewOperation(op *Operation) OperationReport {
	missing := missingInputs(op)
	r := OperationReport{
		Name:      op.Name,
		Transport: str(op.Transport),
		Missing:   missing,
		Refusals:  refusals(op, missing),
	}
	if r.Missing == nil {
		r.Missing = []string{}
	}
	if r.Refusals == nil {
		r.Refusals = []Refusal{}
	}
	r.Verdict = ProductionReady
	if len(r.Refusals) > 0 {
		r.Verdict = Refused
	}
	r.Retry = retryReview(op, &r)
	r.Cancellation = cancellation(op)
	r.Races = races(op, r.Retry)
	r.Deadlines = deadlines(op, &r)
	r.Boundary = boundary(op)
	r.FlowControl = flowControl(op, &r)
	r.Reconnect = reconnect(op, r.Retry, &r)
	r.Tasks = taskReview(op, &r)
	r.Fixtures = fixturesFor(op)
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	return r
}

// Codes returns the distinct refusal codes of an operation's report.
func (r *OperationReport) Codes() []Code {
	var out []Code
	for _, f := range r.Refusals {
		if !slices.Contains(out, f.Code) {
			out = append(out, f.Code)
		}
	}
	return out
}

func (r *OperationReport) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

const neverIdempotency = "a new JSON-RPC id, tool annotations (readOnlyHint, idempotentHint) and a transport reconnect are never taken as business idempotency"

func retryReview(op *Operation, r *OperationReport) RetryReview {
	rv := RetryReview{Policy: str(op.Retry.Policy)}
	key, kind := str(op.Idempotency.Key), storeKind(op)
	st := op.Idempotency.Store
	durable := is(st.Durable) && kind != "process-memory" && kind != "none" && kind != ""
	shared := !(st.Replicas != nil && *st.Replicas > 1 && isNot(st.SharedByReplicas))
	switch {
	case op.Semantics.Kind == nil || op.Semantics.ExternalEffect == nil:
		rv.Class = ClassUnsafe
		rv.Reasons = append(rv.Reasons, "the operation's semantics are not given: until they are, it is treated as UNSAFE")
	case !isMutation(op):
		rv.Class = ClassSafe
		rv.Reasons = append(rv.Reasons, "the application's contract says read-only with no external effect: a retry is a new request with a new JSON-RPC id")
	case (key == "required" || key == "optional") && durable && shared && len(slices.DeleteFunc(outsideBoundary(op), func(s string) bool { return s == atMostOnceOutside })) == 0 && missingBoundary(op) == "":
		rv.Class = ClassConditional
		rv.Reasons = append(rv.Reasons,
			fmt.Sprintf("a durable idempotency key (%s store) deduplicates the mutation: retry only with the same key and the same arguments", kind),
			"the argument fingerprint and the committed result are stored with the key: a reused key with changed arguments is refused, a retry gets the committed result")
		if is(op.Semantics.ExternalEffect) && str(op.Idempotency.ExternalGuard) == "at_most_once" {
			rv.Reasons = append(rv.Reasons, "at most once, not exactly once: a retry with the key is never sent to the provider again; after an answer was lost it is told outcome_unknown (not retryable), and the operation is reconciled by a read, then resolved by an operator")
			if op.Retry.ReconcileWith == "" {
				r.warn("idempotency.external_effect_guard is at_most_once but retry.reconcile_with names no read: a caller told outcome_unknown has nothing to check with")
			}
		}
		if key == "optional" {
			rv.WithoutKey = ClassUnsafe
			rv.Reasons = append(rv.Reasons, "the key is optional: a call made without one is UNSAFE (it runs every time); clients must send a key to retry")
		}
	case key == "version" && durable && shared && !isNot(op.Idempotency.Transaction.EffectRecord) && op.Idempotency.Transaction.EffectRecord != nil:
		rv.Class = ClassConditional
		rv.Reasons = append(rv.Reasons,
			"a versioned write: the expected version is checked and the write made in one transaction, so a retry of a committed write is refused with a version conflict, never applied twice",
			"after a conflict the client reconciles by reading the authoritative state; it does not get the first call's result replayed")
	default:
		rv.Class = ClassUnsafe
		switch {
		case key == "none":
			rv.Reasons = append(rv.Reasons, "a mutation with no idempotency key: nothing authoritative deduplicates it")
		case key == "":
			rv.Reasons = append(rv.Reasons, "the idempotency key mode is not given")
		default:
			rv.Reasons = append(rv.Reasons, "the deduplication is not authoritative: its store is not durable and shared, or its record is not atomic with the effect")
		}
		rv.Reasons = append(rv.Reasons, "after a timeout or a lost response: reconcile (look the operation up) before any retry; never retry automatically")
	}
	rv.Reasons = append(rv.Reasons, neverIdempotency)
	if rc := op.Retry.ReconcileWith; rc != "" && rv.Class != ClassSafe {
		rv.Reasons = append(rv.Reasons, "reconcile with "+rc+" before an unsafe retry")
	}
	switch p := str(op.Retry.Policy); {
	case p == "same_key_same_args" && rv.Class == ClassUnsafe:
		r.warn("retry.policy is same_key_same_args but the operation is UNSAFE: there is no authoritative key to retry with")
	case p == "same_version" && key != "version":
		r.warn("retry.policy is same_version but idempotency.key is %q, not version", key)
	case p == "same_key_same_args" && rv.Class == ClassSafe:
		r.warn("retry.policy is same_key_same_args for a SAFE operation: a key is not needed to retry it")
	}
	return rv
}

// missingBoundary names a ledger part that is not given, for the class.
func missingBoundary(op *Operation) string {
	kind := storeKind(op)
	if kind == "upstream" {
		return ""
	}
	tx := op.Idempotency.Transaction
	for _, p := range []struct {
		v    *bool
		name string
	}{{tx.KeyClaim, "key_claim"}, {tx.ArgumentFingerprint, "argument_fingerprint"}, {tx.Result, "result"}, {tx.EffectRecord, "effect_record"}} {
		if p.v == nil {
			return p.name
		}
	}
	return ""
}

// wires are the (transport, era) combinations the report describes.
func cancellation(op *Operation) []WireRule {
	var out []WireRule
	modern, legacy := eras(op)
	common := []string{
		"the server sends no JSON-RPC response to a cancellation notification, and nothing more for the cancelled request (no result, no progress)",
		"a cancel for an unknown id, an already finished request or a malformed one is ignored (mcprel logs and counts a late cancel); the notification stays fire-and-forget",
		"a cancel that cannot be honoured (the result already written) changes nothing: the completion stands and the client ignores its own late cancel",
	}
	t := str(op.Transport)
	if t == "stdio" || t == "" {
		rules := append([]string{
			"the client sends notifications/cancelled with params.requestId = the in-flight request's id (and an optional reason)",
			"on 2026-07-28 the server sends notifications/cancelled only to tear down a subscriptions/listen stream it ends, referencing the listen request's id",
		}, common...)
		if legacy {
			rules = append(rules, "2025: initialize is never cancelled")
		}
		out = append(out, WireRule{Wire: "stdio", Signal: "notifications/cancelled", Rules: rules})
	}
	if t == "streamable-http" || t == "" {
		if modern {
			out = append(out, WireRule{Wire: "Streamable HTTP 2026-07-28", Signal: "close the request's SSE response stream (abort the POST)", Rules: []string{
				"closing the response stream is the cancellation: the server treats the disconnect as cancelling that request",
				"the client never POSTs notifications/cancelled: 2026-07-28 has no client-to-server notification over HTTP; a plain cancellation POST is refused",
				"after the close the server stops the work and sends nothing more for that request",
				"there is no Last-Event-ID: a broken stream loses the request, and the client re-issues it with a new id only if its retry class allows",
			}})
		}
		if legacy {
			out = append(out, WireRule{Wire: "Streamable HTTP 2025 (2025-11-25, 2025-06-18, 2025-03-26)", Signal: "POST notifications/cancelled (202 Accepted, no body)", Rules: append([]string{
				"a dropped stream is NOT a cancellation: the call keeps running and its stream may be resumed with Last-Event-ID",
			}, common...)})
		}
	}
	if s := str(op.Tasks.Support); s == "optional" || s == "required" {
		out = append(out, WireRule{Wire: "Tasks (io.modelcontextprotocol/tasks)", Signal: "tasks/cancel", Rules: []string{
			"a task is cancelled with tasks/cancel, never notifications/cancelled; the acknowledgement records intent only",
		}})
	}
	return out
}

// eras says whether the report covers the 2026-07-28 era and the 2025 one.
func eras(op *Operation) (modern, legacy bool) {
	if len(op.Eras) == 0 {
		return true, true
	}
	for _, e := range op.Eras {
		if e == "2026-07-28" {
			modern = true
		} else {
			legacy = true
		}
	}
	return modern, legacy
}

func races(op *Operation, rv RetryReview) []Race {
	t := str(op.Transport)
	signal := "the transport's cancellation (stdio: notifications/cancelled; HTTP 2026-07-28: the stream closed; HTTP 2025: a POSTed notifications/cancelled)"
	switch t {
	case "stdio":
		signal = "the notifications/cancelled the client sends when its deadline fires"
	case "streamable-http":
		signal = "the cancellation the client sends when its deadline fires: it closes the request's stream (2026-07-28) or POSTs notifications/cancelled (2025)"
	}
	after := map[string]string{
		ClassSafe:        "retry with a new JSON-RPC id if still wanted",
		ClassConditional: "retry with the same idempotency key and the same arguments (the ledger replays a committed result)",
		ClassUnsafe:      "reconcile (look the operation up) before any retry; never retry automatically",
	}[rv.Class]
	disconnect := Race{"disconnect during progress", "the in-flight request is cancelled", "none: there is no resumable stream", "reconnect, issue a new request with a new id, refetch from the authoritative source"}
	if t != "stdio" {
		if _, legacy := eras(op); legacy {
			disconnect.ServerTerminal += " (2026-07-28 HTTP and stdio); on 2025 HTTP a disconnect is not a cancellation: the call runs on"
			disconnect.FinalResponse += " in 2026-07-28; on 2025 HTTP the stream may be resumed with Last-Event-ID"
		}
	}
	return []Race{
		{"cancel, then complete", "Cancelled (the first terminal state wins)", "suppressed: never written", "continue recovery: " + after},
		{"complete, then cancel", "Completed", "kept: already written", "ignore its own late cancel"},
		{"late response after the client's timeout", "whichever the server saw first: its result, or " + signal, "ignored by the client if it arrives after the cancel, or suppressed by the server if the cancel arrived first: whichever was observed first", after},
		disconnect,
	}
}

func deadlines(op *Operation, r *OperationReport) DeadlineReview {
	d := DeadlineReview{Idle: "missing", Max: "missing"}
	if op.Deadlines.Idle != nil {
		d.Idle = op.Deadlines.Idle.String()
	}
	if op.Deadlines.Max != nil {
		d.Max = op.Deadlines.Max.String()
	}
	d.Rules = []string{
		"two real timers per call: an idle timeout and an absolute maximum",
		"only valid, strictly increasing, rate-limited progress resets the idle timer",
		"keepalive comments are transport traffic, not progress: they reset nothing",
		"the maximum timeout is never reset",
	}
	if i, m := op.Deadlines.Idle, op.Deadlines.Max; i != nil && m != nil && !i.None && !m.None && i.D > m.D {
		r.warn("the idle timeout (%v) is longer than the maximum (%v): the maximum always fires first", i.D, m.D)
	}
	if i := op.Deadlines.Idle; i != nil && i.None {
		r.warn("no idle timeout: a stalled call is only ended by the maximum timeout")
	}
	if is(op.Progress.Emits) {
		if isNot(op.Progress.StrictlyIncreasing) {
			r.warn("progress values do not strictly increase: a repeated or decreasing value must be dropped and must not reset the idle timer")
		}
		if rl := op.Progress.RateLimit; rl != nil && rl.None {
			r.warn("progress is not rate limited: a chatty tool floods the stream and the client's idle timer")
		}
		if isNot(op.Progress.ResetsIdle) {
			r.warn("progress does not reset the idle timer: a long call that reports progress still ends at the idle timeout")
		}
	}
	if is(op.SSE.KeepaliveResetsIdle) {
		r.warn("keepalives reset the idle timer: a stuck call behind a live connection never times out on idle")
	}
	return d
}

func boundary(op *Operation) BoundaryReview {
	b := BoundaryReview{Inside: []string{}, Outside: []string{}, Notes: []string{}}
	if !isMutation(op) {
		if op.Semantics.Kind != nil {
			b.Notes = append(b.Notes, "read-only: no effect to deduplicate, so no idempotency boundary is needed")
		}
		if rr := str(op.Results.ReturnedRecords); rr != "" {
			b.Notes = append(b.Notes, "returned records: "+rr)
		}
		return b
	}
	st := op.Idempotency.Store
	kind := storeKind(op)
	if kind != "" {
		desc := kind
		if st.Durable != nil {
			desc += map[bool]string{true: ", durable", false: ", not durable"}[*st.Durable]
		}
		if st.SharedByReplicas != nil {
			desc += map[bool]string{true: ", shared by replicas", false: ", not shared by replicas"}[*st.SharedByReplicas]
		}
		b.Store = desc
	}
	key := str(op.Idempotency.Key)
	switch {
	case key == "none":
		b.Notes = append(b.Notes, "no key: no boundary is claimed; every call runs the effect (UNSAFE)")
	case kind == "upstream":
		b.Inside = append(b.Inside, "the upstream provider's own deduplication by the key this operation forwards")
		b.Notes = append(b.Notes, "the provider enforces the same key: the boundary is the provider's")
	case kind != "" && kind != "none":
		tx := op.Idempotency.Transaction
		for _, p := range []struct {
			v    *bool
			name string
		}{{tx.KeyClaim, "key claim"}, {tx.ArgumentFingerprint, "argument fingerprint"}, {tx.EffectRecord, "business effect record"}, {tx.Result, "committed result"}} {
			switch {
			case p.v == nil:
				b.Outside = append(b.Outside, p.name+" (not stated)")
			case *p.v:
				b.Inside = append(b.Inside, p.name)
			default:
				b.Outside = append(b.Outside, p.name)
			}
		}
	}
	if is(op.Semantics.ExternalEffect) {
		switch str(op.Idempotency.ExternalGuard) {
		case "outbox":
			b.Inside = append(b.Inside, "a transactional outbox row for the external effect (delivered after commit, at least once, with the key)")
		case "upstream_key":
			b.Outside = append(b.Outside, "the external effect, covered by the upstream key: the provider enforces the same key")
		case "at_most_once":
			b.Outside = append(b.Outside, atMostOnceOutside)
		case "none":
			b.Outside = append(b.Outside, "the external effect, uncovered")
		default:
			b.Outside = append(b.Outside, "the external effect (its guard is not stated)")
		}
	} else if op.Semantics.ExternalEffect != nil && kind != "" && kind != "none" {
		b.Notes = append(b.Notes, "the effect is a write to the same database: it commits or rolls back with the key")
	}
	if rr := str(op.Results.ReturnedRecords); rr != "" {
		b.Notes = append(b.Notes, "returned records: "+rr)
	}
	return b
}

func flowControl(op *Operation, r *OperationReport) []Check {
	fc := op.FlowControl
	var out []Check
	add := func(check, status, detail string) { out = append(out, Check{check, status, detail}) }
	switch c := fc.QueueCapacity; {
	case c == nil:
		add("explicit per-stream or per-client capacity", Missing, "flow_control.queue_capacity")
	case c.Unbounded:
		add("explicit per-stream or per-client capacity", Fail, "unbounded")
	default:
		add("explicit per-stream or per-client capacity", Pass, fmt.Sprintf("%d messages %s", c.N, str(fc.QueueScope)))
	}
	switch o := str(fc.ProgressOverflow); o {
	case "":
		add("replaceable progress coalesced", Missing, "flow_control.progress_overflow")
	case "coalesce", "drop-oldest":
		add("replaceable progress coalesced", Pass, o)
	case "drop-newest":
		add("replaceable progress coalesced", Pass, "drop-newest (the newest value is lost: prefer coalescing)")
		r.warn("progress overflow drops the newest value: the client sees stale progress; coalesce instead")
	case "block":
		add("replaceable progress coalesced", Fail, "block: a slow reader stalls the tool")
		r.warn("progress overflow blocks the tool behind a slow reader; coalesce or drop the oldest instead")
	}
	switch {
	case fc.RefetchFlag == nil:
		add("dropped progress flagged for refetch from the authoritative source", Missing, "flow_control.refetch_flag")
	case *fc.RefetchFlag:
		add("dropped progress flagged for refetch from the authoritative source", Pass, "")
	default:
		add("dropped progress flagged for refetch from the authoritative source", Fail, "")
		r.warn("dropped progress is not flagged: the client cannot tell it missed updates")
	}
	switch {
	case fc.FinalResponsePreserved == nil:
		add("final JSON-RPC response preserved", Missing, "flow_control.final_response_preserved")
	case *fc.FinalResponsePreserved:
		add("final JSON-RPC response preserved", Pass, "")
	default:
		add("final JSON-RPC response preserved", Fail, "")
		r.warn("the final response may be dropped: a call would end with no outcome")
	}
	if str(op.Transport) == "streamable-http" {
		for _, h := range []struct{ name, value string }{
			{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"},
		} {
			check := "SSE header " + h.name + ": " + h.value
			switch {
			case len(op.SSE.Headers) == 0:
				add(check, Missing, "sse.headers")
			case hasHeader(op.SSE.Headers, h.name, h.value):
				add(check, Pass, "")
			default:
				add(check, Fail, "")
				r.warn("the SSE responses lack %s: %s", h.name, h.value)
			}
		}
		switch pb := str(op.SSE.ProxyBuffering); pb {
		case "":
			add("proxy buffering off", Missing, "sse.proxy_buffering")
		case "off":
			add("proxy buffering off", Pass, "")
		default:
			add("proxy buffering off", Fail, pb)
			r.warn("proxy buffering is %q: progress and the final response may be held back by a proxy", pb)
		}
		switch k := op.SSE.KeepaliveInterval; {
		case k == nil:
			add("keepalive cadence defined apart from progress", Missing, "sse.keepalive_interval")
		case k.None:
			add("keepalive cadence defined apart from progress", Fail, "none")
			r.warn("no SSE keepalive: idle proxies may cut a quiet stream")
		case is(op.SSE.KeepaliveResetsIdle):
			add("keepalive cadence defined apart from progress", Fail, "keepalives reset the idle timer")
		default:
			add("keepalive cadence defined apart from progress", Pass, "every "+k.D.String())
		}
	} else {
		add("SSE headers, proxy buffering, keepalive", NA, "stdio has no SSE stream")
	}
	switch c := fc.QueueCapacity; {
	case c == nil:
		add("no unbounded queue", Missing, "flow_control.queue_capacity")
	case c.Unbounded:
		add("no unbounded queue", Fail, "")
	default:
		add("no unbounded queue", Pass, "")
	}
	return out
}

func hasHeader(headers []string, name, value string) bool {
	for _, h := range headers {
		n, v, ok := strings.Cut(h, ":")
		if ok && strings.EqualFold(strings.TrimSpace(n), name) && strings.Contains(strings.ToLower(v), strings.ToLower(value)) {
			return true
		}
	}
	return false
}

func reconnect(op *Operation, rv RetryReview, r *OperationReport) []string {
	rc := op.Reconnect
	var out []string
	out = append(out, "open a new request with a new JSON-RPC id; the old id is never reused")
	out = append(out, "restore subscription filters with a new subscriptions/listen (2026-07-28)")
	modern, legacy := eras(op)
	if str(op.Transport) != "stdio" {
		switch l := str(rc.LastEventID); {
		case l == "always" && modern:
			out = append(out, "Last-Event-ID: sent on 2026-07-28 streams, where it does not exist (the server ignores it)")
			r.warn("reconnect.last_event_id is always: 2026-07-28 has no Last-Event-ID; re-issue the request with a new id instead")
		case l == "never":
			out = append(out, "never send Last-Event-ID (2026-07-28 has none; 2025 streams are re-issued rather than resumed)")
		case l == "legacy-only" || (l == "always" && !modern):
			out = append(out, "Last-Event-ID only on 2025 streams (after the server's retry: delay); never on 2026-07-28")
		default:
			out = append(out, "Last-Event-ID use: not stated (reconnect.last_event_id)")
		}
	} else {
		out = append(out, "stdio: a dead server process is started again; nothing is resumed")
	}
	_ = legacy
	switch {
	case rc.Refetch == nil:
		out = append(out, "refetch of affected resources, lists, prompts or Tasks: not stated (reconnect.refetch)")
	case *rc.Refetch:
		out = append(out, "refetch the affected resources, lists, prompts or Tasks from the authoritative source")
	default:
		out = append(out, "no refetch after reconnecting")
		r.warn("the client does not refetch after reconnecting: it may act on state it missed")
	}
	switch {
	case is(rc.ReplaysUnsafeMutations):
		out = append(out, "UNSAFE mutations are replayed automatically")
		r.warn("the client replays UNSAFE mutations after reconnecting: a call that committed runs again")
	default:
		out = append(out, fmt.Sprintf("never replay an UNSAFE mutation automatically (this operation is %s)", rv.Class))
	}
	backoff := "capped exponential backoff with jitter"
	if b, c := rc.BackoffInitial, rc.BackoffCap; b != nil && c != nil {
		backoff = fmt.Sprintf("exponential backoff from %v, capped at %v", b, c)
		if c.None {
			r.warn("the reconnect backoff has no cap")
		}
	}
	if j := str(rc.Jitter); j != "" {
		backoff += ", " + j + " jitter"
		if j == "none" {
			r.warn("reconnect backoff without jitter: clients that lost one server reconnect in lockstep")
		}
	}
	out = append(out, backoff)
	return out
}

func taskReview(op *Operation, r *OperationReport) TaskReview {
	s := str(op.Tasks.Support)
	t := TaskReview{Support: s}
	switch s {
	case "":
		t.Steps = []string{"task support not stated (tasks.support)"}
	case "none":
		t.Steps = []string{"no Tasks: request cancellation (above) is the only cancellation"}
	default:
		t.Steps = []string{
			"tasks/cancel is separate from request cancellation: cancelling the creating request does not cancel the task",
			"a complete acknowledgement of tasks/cancel proves only that the intent was accepted; the task stays working",
			"poll tasks/get (or listen) until the durable task is terminal: completed, failed or cancelled",
			"task state is durable before the create response and outlives the connection and the process",
		}
		if str(op.Tasks.Cancel) == "immediate" {
			r.warn("tasks.cancel is immediate: a worker in the middle of an effect is cut off; cancel cooperatively at checkpoints")
		}
		if isNot(op.Tasks.Durable) {
			r.warn("tasks are not durable: a task is lost with its process")
		}
		if isNot(op.Tasks.PollUntilTerminal) {
			r.warn("the client stops at the cancel acknowledgement: it must poll until the task is terminal")
		}
	}
	return t
}
