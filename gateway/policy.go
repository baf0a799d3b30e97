package gateway

import (
	"fmt"
	"time"

	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
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
// a retry class.
type ToolPolicy struct {
	// Retry is the tool's class: RetrySafe for a tool the operator
	// declares read-only, RetryUnsafe otherwise.
	Retry server.RetryClass
	// Idle and Max are the tool's clocks; zero means the class's default.
	Idle, Max time.Duration
}

// Policy is what the gateway knows of the tools it forwards, by the name
// downstream clients call them.
type Policy struct {
	Tools map[string]ToolPolicy
}

// forTool returns the policy of a tool, with its clocks filled in.
func (p *Policy) forTool(name string) ToolPolicy {
	tp := p.Tools[name] // a tool the policy does not name is unsafe
	def := DefaultUnsafeDeadlines
	if tp.Retry == server.RetrySafe {
		def = DefaultSafeDeadlines
	}
	if tp.Idle == 0 {
		tp.Idle = def.Idle
	}
	if tp.Max == 0 {
		tp.Max = def.Max
	}
	tp.Idle = min(tp.Idle, tp.Max)
	return tp
}

func (p *Policy) check() error {
	for name, tp := range p.Tools {
		if tp.Idle < 0 || tp.Max < 0 {
			return fmt.Errorf("gateway: policy of tool %q: negative deadlines", name)
		}
		if tp.Retry == server.RetryConditional {
			return fmt.Errorf("gateway: policy of tool %q: a conditional tool needs the gateway's idempotency ledger, which this gateway does not keep", name)
		}
	}
	return nil
}

// PolicyFromReview reads the gateway's policy from a policy in the
// vocabulary of package review, so that "mcprel review FILE" judges the
// same file the gateway enforces. Each operation names a tool as
// downstream clients call it. Its deadlines are the tool's clocks
// ("none" for max is refused: a forwarded call always ends). A tool is
// safe only when the reviewer classes it SAFE (semantics.kind
// "read-only"); everything else is forwarded as unsafe.
func PolicyFromReview(rp *review.Policy) (*Policy, error) {
	p := &Policy{Tools: map[string]ToolPolicy{}}
	report := review.Review(rp)
	for i, op := range rp.Operations {
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
			tp.Idle = d.D
		}
		if d := op.Deadlines.Max; d != nil {
			if d.None {
				return nil, fmt.Errorf("gateway: policy of tool %q: max_timeout \"none\": a forwarded call always ends; give a duration", op.Name)
			}
			tp.Max = d.D
		}
		if report.Operations[i].Retry.Class == review.ClassSafe {
			tp.Retry = server.RetrySafe
		}
		p.Tools[op.Name] = tp
	}
	return p, p.check()
}
