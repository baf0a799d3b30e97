package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/taskserver"
)

// Deadlines a forwarded tool runs under when the policy names none. A read
// cut short costs a retry; a mutation cut short leaves its outcome
// unknown, so mutations — and every tool the policy does not name, which
// is unsafe — get the longer clocks.
var (
	DefaultSafeDeadlines   = server.Deadlines{Idle: 30 * time.Second, Max: 2 * time.Minute}
	DefaultUnsafeDeadlines = server.Deadlines{Idle: 60 * time.Second, Max: 5 * time.Minute}
)

// ToolPolicy is what the gateway knows of one tool, from its operator:
// never from the upstream, whose annotations are hints that do not widen
// a retry class. It is made of the policies of the packages that enforce
// it — the server's, the ledger's and the task runner's — which the
// gateway stacks on the forwarding tool as they are given, so that what
// the gateway advertises and enforces is what the operator wrote.
type ToolPolicy struct {
	// Server is how the gateway's server runs the tool's calls (see
	// server.Policy). Its Retry is the tool's class: RetrySafe for a tool
	// the operator declares read-only; RetryConditional for a mutation
	// the gateway's ledger runs once per key (Keyed, which a keyed tool
	// must give; Keyed makes an unsafe class conditional, as
	// idempotency.Keyed does); RetryUnsafe otherwise. IdleTimeout and
	// MaxTimeout are the tool's clocks, zero meaning the class's default
	// (DefaultSafeDeadlines or DefaultUnsafeDeadlines); its Timeout class
	// must be left standard, and its Group unset: the gateway's clocks
	// are its own, and its share of the server is its upstream's
	// (Upstream.Limits). The rest (MaxConcurrent, Rate, Secret, …) is
	// the server's to enforce as for any tool.
	Server server.Policy

	// Keyed, for a conditional tool, is the ledger's policy (see
	// idempotency.Policy), which the gateway's ledger (Options.Ledger)
	// wraps the tool with as given; nil: the tool is not keyed. Behind
	// the gateway every effect is the upstream's, so External must be
	// set. Key: KeyRequired refuses a call without a key before it is
	// forwarded ("idempotency_key_required"); KeyOptional forwards one
	// without, once, unprotected, its result saying retrySafe: false.
	// KeyArgument names the argument that carries the key (the key may
	// also come in _meta["dev.mcprel/idempotencyKey"], which is passed
	// upstream). AtMostOnce says the upstream does not deduplicate by
	// the key: a keyed call is forwarded at most once, and a lost answer
	// leaves its outcome unknown. Without it the upstream honours the
	// key (it receives it, in the argument or in _meta): a forward whose
	// answer was lost may be sent again with the same key. ReconcileWith
	// names the read tool that finds out what a call whose outcome is
	// unknown did, for the advice its retries are given.
	//
	// A keyed tool that is a task (Task) is wrapped with a copy whose
	// External and AtMostOnce are cleared: its key claims the task's
	// creation, in the ledger's transaction, and the task runs the
	// forward once — again after its gateway died only if AtMostOnce is
	// not set.
	Keyed *idempotency.Policy

	// Task makes the tool a durable task of the gateway's (Options.Tasks,
	// see taskserver.Policy); nil: it is not one, unless the upstream's
	// own task support makes it one (see mirroredTask). Required runs a
	// call only as a task; otherwise one runs as a task when the client
	// can take one. The client gets a task id at once and polls; the
	// gateway holds the upstream call. The gateway decides Resumable (a
	// task whose gateway died while it held the call ends failed — its
	// outcome unknown — and is never run again, unless the tool is safe
	// or its upstream honours the key) and sets ReadsCancel (a task's
	// cancellation is passed upstream, and the task ends by what it
	// left); a policy that sets Resumable is refused. A keyed tool's task
	// must be required: its creation is what the key makes idempotent.
	Task *taskserver.Policy

	// MaxAttempts caps the gateway's own attempts of one call upstream,
	// the first included (0: retry.DefaultMaxAttempts). The gateway makes
	// a call again only when that cannot run it twice: a safe tool; a
	// conditional one whose upstream honours the key, with the same key;
	// or, at most once, a request that provably never left the gateway.
	// An unsafe tool is never retried.
	MaxAttempts int
}

// keyArgument is the argument that carries a conditional tool's key.
func (tp ToolPolicy) keyArgument() string {
	if tp.Keyed == nil {
		return mcp.ArgIdempotencyKey
	}
	return cmp.Or(tp.Keyed.KeyArgument, mcp.ArgIdempotencyKey)
}

// upstreamHonoursKey reports whether the tool is keyed and its upstream
// deduplicates by the key.
func (tp ToolPolicy) upstreamHonoursKey() bool { return tp.Keyed != nil && !tp.Keyed.AtMostOnce }

// retryClass is the class the gateway's own retries of the tool are
// planned by: a keyed tool forwarded at most once may be sent again only
// when its request never left (mcp.RetryUnsafe).
func (tp ToolPolicy) retryClass() mcp.RetryClass {
	switch {
	case tp.Server.Retry == mcp.RetrySafe:
		return mcp.RetrySafe
	case tp.Server.Retry == mcp.RetryConditional && tp.upstreamHonoursKey():
		return mcp.RetryConditional
	}
	return mcp.RetryUnsafe
}

// resendable reports whether a call of the tool may be sent upstream
// again after a failure that may have reached the upstream: a read, or a
// keyed call whose upstream honours the key. A downstream client is told
// such a failure is retryable; any other tool's is an unknown outcome.
func (tp ToolPolicy) resendable() bool { return tp.retryClass() != mcp.RetryUnsafe }

// Policy is what the gateway knows of the tools it forwards, by the name
// downstream clients call them.
type Policy struct {
	Tools map[string]ToolPolicy
}

// forTool returns the policy of a tool as the gateway serves it: its
// clocks filled in, and a keyed tool's class conditional.
func (p *Policy) forTool(name string) ToolPolicy {
	tp := p.Tools[name] // a tool the policy does not name is unsafe
	if tp.Keyed != nil && tp.Server.Retry == mcp.RetryUnsafe {
		tp.Server.Retry = mcp.RetryConditional // as idempotency.Keyed makes it
	}
	def := DefaultUnsafeDeadlines
	if tp.Server.Retry == mcp.RetrySafe {
		def = DefaultSafeDeadlines
	}
	if tp.Server.IdleTimeout == 0 {
		tp.Server.IdleTimeout = def.Idle
	}
	if tp.Server.MaxTimeout == 0 {
		tp.Server.MaxTimeout = def.Max
	}
	tp.Server.IdleTimeout = min(tp.Server.IdleTimeout, tp.Server.MaxTimeout)
	return tp
}

func (p *Policy) check(keeps, runsTasks bool) error {
	for name, tp := range p.Tools {
		sp := tp.Server
		switch {
		case tp.Task != nil && !runsTasks:
			return fmt.Errorf("gateway: policy of tool %q: a task needs the gateway's task server (Options.Tasks), and this gateway has none", name)
		case tp.Task != nil && tp.Task.Resumable:
			return fmt.Errorf("gateway: policy of tool %q: Task.Resumable is the gateway's to decide: a task is run again after its gateway died only where that cannot forward the call twice", name)
		case tp.Task != nil && !tp.Task.Required && tp.Keyed != nil:
			return fmt.Errorf("gateway: policy of tool %q: a keyed tool that runs as a task must require it (tasks.support: required): run inline, its forward would hold the ledger's transaction", name)
		case sp.IdleTimeout < 0 || sp.MaxTimeout < 0:
			return fmt.Errorf("gateway: policy of tool %q: negative deadlines", name)
		case sp.Timeout != server.TimeoutStandard:
			return fmt.Errorf("gateway: policy of tool %q: the gateway's clocks are Server.IdleTimeout and Server.MaxTimeout, or its defaults by retry class; leave Server.Timeout standard", name)
		case sp.Group != nil:
			return fmt.Errorf("gateway: policy of tool %q: a forwarded tool draws on its upstream's share of the server (Upstream.Limits); leave Server.Group unset", name)
		case sp.Retry == mcp.RetryConditional && tp.Keyed == nil:
			return fmt.Errorf("gateway: policy of tool %q: a conditional tool is keyed: give its ledger policy (Keyed)", name)
		case tp.Keyed != nil && sp.Retry == mcp.RetrySafe:
			return fmt.Errorf("gateway: policy of tool %q: an idempotency key is given for a tool that is not conditional", name)
		case tp.Keyed != nil && !keeps:
			return fmt.Errorf("gateway: policy of tool %q: a conditional tool needs the gateway's idempotency ledger (Options.Ledger), and this gateway has none", name)
		case tp.Keyed != nil && !tp.Keyed.External:
			return fmt.Errorf("gateway: policy of tool %q: behind the gateway a keyed tool's effect is the upstream's, outside the ledger's database: set Keyed.External (and Keyed.AtMostOnce unless the upstream deduplicates by the key)", name)
		}
	}
	return nil
}

// ledgerPolicy is the ledger's policy the tool is wrapped with: Keyed as
// given, or for a task, Keyed with its key claiming the task's creation,
// in the ledger's transaction; the task runs the forward once.
func (tp ToolPolicy) ledgerPolicy() idempotency.Policy {
	p := *tp.Keyed
	if tp.Task != nil {
		p.External, p.AtMostOnce = false, false
	}
	return p
}

// PolicyFromReview reads the gateway's policy from a policy in the
// vocabulary of package review, so that what "mcprel review --gateway
// FILE" judges is what the gateway enforces. Each operation names a tool
// as downstream clients call it and says what only its operator knows:
// what it is (semantics.kind: read-only or mutation), for a mutation
// whether it is keyed (idempotency.key: required, optional or none),
// where the key is (key_argument), whether the upstream honours it
// (idempotency.external_effect_guard: upstream_key, or at_most_once: it
// does not, and the call is forwarded at most once), the read its
// unknown outcomes are checked with (retry.reconcile_with), its deadlines
// ("none" for max is refused: a forwarded call always ends), and whether
// it runs as a task. The rest is the gateway's (facts: see Facts).
//
// A tool is forwarded as what the review of the completed policy classes
// it: SAFE, CONDITIONAL (keyed, on the gateway's ledger) or UNSAFE. A
// tool the policy names is never forwarded as less than the policy says
// of it: one it calls read-only that the review does not class SAFE, or
// one it gives a key or a guard that the review does not class
// CONDITIONAL, is refused with the inputs missing or at odds, as is a
// mutation that does not say whether it is keyed.
func PolicyFromReview(rp *review.Policy, facts Facts) (*Policy, error) {
	completed := *rp
	completed.Operations = slices.Clone(rp.Operations)
	if err := facts.Complete(&completed); err != nil {
		return nil, err
	}
	p := &Policy{Tools: map[string]ToolPolicy{}}
	report := review.Review(&completed)
	for i, op := range completed.Operations {
		if op.Name == "" {
			return nil, fmt.Errorf("gateway: policy operation %d has no name", i+1)
		}
		if _, dup := p.Tools[op.Name]; dup {
			return nil, fmt.Errorf("gateway: policy names tool %q twice", op.Name)
		}
		var tp ToolPolicy
		if d := op.Deadlines.Idle; d != nil {
			if d.None {
				return nil, fmt.Errorf("gateway: policy of tool %q: idle_timeout \"none\": a forwarded call needs an idle clock", op.Name)
			}
			tp.Server.IdleTimeout = d.D
		}
		if d := op.Deadlines.Max; d != nil {
			if d.None {
				return nil, fmt.Errorf("gateway: policy of tool %q: max_timeout \"none\": a forwarded call always ends; give a duration", op.Name)
			}
			tp.Server.MaxTimeout = d.D
		}
		rep := &report.Operations[i]
		if err := claimsHold(&op, rep); err != nil {
			return nil, err
		}
		switch rep.Retry.Class {
		case review.ClassSafe:
			tp.Server.Retry = mcp.RetrySafe
		case review.ClassConditional:
			tp.Server.Retry = mcp.RetryConditional
			tp.Keyed = &idempotency.Policy{Key: idempotency.KeyOptional, External: true,
				AtMostOnce:  deref(op.Idempotency.ExternalGuard) != "upstream_key",
				KeyArgument: op.Idempotency.KeyArgument, ReconcileWith: op.Retry.ReconcileWith}
			if deref(op.Idempotency.Key) == "required" {
				tp.Keyed.Key = idempotency.KeyRequired
			}
		}
		switch deref(op.Tasks.Support) {
		case "optional":
			tp.Task = &taskserver.Policy{}
		case "required":
			tp.Task = &taskserver.Policy{Required: true}
		}
		if tp.Server.Retry != mcp.RetryUnsafe && op.Retry.MaxAttempts != nil {
			tp.MaxAttempts = max(*op.Retry.MaxAttempts, 1)
		}
		p.Tools[op.Name] = tp
	}
	return p, nil
}

// claimsHold refuses an operation the gateway would forward as less than
// its policy says: a read the review does not class SAFE, or one given a
// key or a guard (a read is never keyed), a keyed
// mutation it does not class CONDITIONAL (or one the gateway cannot key:
// a versioned write, an effect in the gateway's database), a mutation
// that does not say whether it is keyed. The error names what is missing
// or at odds, so the operator can mend the file.
func claimsHold(op *review.Operation, rep *review.OperationReport) error {
	kind, key, guard := deref(op.Semantics.Kind), deref(op.Idempotency.Key), deref(op.Idempotency.ExternalGuard)
	why := func(claim, want string) error {
		msg := fmt.Sprintf("gateway: policy of tool %q %s, but the review classes it %s, not %s: the gateway would forward it as %s",
			op.Name, claim, rep.Retry.Class, want, strings.ToLower(rep.Retry.Class))
		if len(rep.Missing) > 0 {
			msg += "; missing inputs: " + strings.Join(rep.Missing, ", ")
		}
		if len(rep.Retry.Reasons) > 0 {
			msg += "; the review says: " + rep.Retry.Reasons[0]
		}
		return errors.New(msg)
	}
	switch {
	case kind == "":
		return fmt.Errorf("gateway: policy of tool %q does not say what the tool is (semantics.kind: read-only or mutation); a tool the policy names is never guessed to be unsafe", op.Name)
	case kind == "read-only" && rep.Retry.Class != review.ClassSafe:
		return why("calls it read-only", review.ClassSafe)
	case kind == "read-only" && ((key != "" && key != "none") || op.Idempotency.KeyArgument != "" || (guard != "" && guard != "none")):
		// A read is forwarded SAFE, retried freely and never keyed: the
		// key, its guard and the ledger would be dropped without a word.
		return fmt.Errorf("gateway: policy of tool %q calls it read-only, but gives it an idempotency key (key, key_argument or external_effect_guard): a read is forwarded as SAFE, never keyed; say which it is (semantics.kind: mutation to key it)", op.Name)
	case kind != "mutation":
		return nil
	case !deref(op.Semantics.ExternalEffect):
		return fmt.Errorf("gateway: policy of tool %q: semantics.external_effect is false, but behind the gateway a mutation's effect is the upstream's, outside the gateway's database: say true", op.Name)
	case op.Idempotency.Key == nil:
		return fmt.Errorf("gateway: policy of tool %q: a mutation must say whether it is keyed (idempotency.key: required, optional or none)", op.Name)
	case key == "version":
		return fmt.Errorf("gateway: policy of tool %q: idempotency.key \"version\" is a versioned write in the server's own database, which the gateway has not; key it (required or optional) or say none", op.Name)
	case key == "none" && (op.Idempotency.KeyArgument != "" || (guard != "" && guard != "none")):
		return fmt.Errorf("gateway: policy of tool %q: idempotency.key is none, but a key_argument or an external_effect_guard is given: say which it is", op.Name)
	case key == "none":
		return nil
	case guard != "upstream_key" && guard != "at_most_once":
		return fmt.Errorf("gateway: policy of tool %q: a keyed tool behind the gateway needs idempotency.external_effect_guard: upstream_key (the upstream deduplicates by the key) or at_most_once (it does not: forwarded at most once)", op.Name)
	case rep.Retry.Class != review.ClassConditional:
		return why("gives it an idempotency key", review.ClassConditional)
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
