package retry

import "github.com/mcprel/mcprel/mcp"

// Rule is the client's policy for one tool.
type Rule struct {
	// Class is how calls of the tool may be retried.
	Class mcp.RetryClass
	// Lookup, when not empty, names the tool that finds out whether an
	// earlier call took effect (such as mcprel's demo lookup_operation).
	// A *ReconcileError names it, so that a person or a model knows what
	// to run before calling again.
	Lookup string
}

// Table is the client's retry policy for one server: a rule per tool name
// and a default for the rest. The zero Table treats every tool as Unsafe
// and trusts no server, so nothing that may have reached a server is ever
// made twice unless the client says so.
type Table struct {
	// Default applies to tools that Tools does not list.
	Default Rule
	// Tools holds the rules for tools the client knows, by name.
	Tools map[string]Rule
	// TrustServer lets what the server says of its tools count: the class
	// an mcprel server advertises (mcp.MetaRetryClass) or, failing that,
	// the readOnlyHint and idempotentHint annotations; and, for Unsafe
	// tools, the server's word that a refused or failed call did not run
	// (see Planner). Leave it false for a server you do not operate:
	// annotations are hints from its author, never proof.
	TrustServer bool
}

// Rule returns the rule for the named tool. advertised is the tool as the
// server listed it (tools/list), or nil when unknown; it is ignored unless
// TrustServer is set and its name matches.
//
// For a trusted server, the server's class decides a tool the table does
// not list. For a tool the table lists, the server may narrow the class
// (the server knows its tool has effects the client did not expect) but
// never widen it: the client's explicit rule is its own decision.
func (t Table) Rule(tool string, advertised *mcp.Tool) Rule {
	r, listed := t.Tools[tool]
	if !listed {
		r = t.Default
	}
	if !t.TrustServer || advertised == nil || advertised.Name != tool {
		return r
	}
	hint, ok := ServerClass(advertised)
	if !ok {
		return r
	}
	if listed {
		r.Class = min(r.Class, hint)
	} else {
		r.Class = hint
	}
	return r
}

// ServerClass returns the class a server claims for its tool: the class
// an mcprel server advertises in the tool's _meta, or else Safe when the
// annotations say readOnlyHint or idempotentHint (by the specification,
// repeating such a call with the same arguments has no further effect,
// which is all a retry with a new id needs). It reports false when the
// server claims nothing. The claim is the server's word; Table.Rule
// decides whether it counts.
func ServerClass(tool *mcp.Tool) (mcp.RetryClass, bool) {
	if s, ok := tool.Meta[mcp.MetaRetryClass].(string); ok {
		if c, ok := mcp.ParseRetryClass(s); ok {
			return c, true
		}
	}
	if a := tool.Annotations; a != nil {
		if (a.ReadOnlyHint != nil && *a.ReadOnlyHint) || (a.IdempotentHint != nil && *a.IdempotentHint) {
			return mcp.RetrySafe, true
		}
	}
	return mcp.RetryUnsafe, false
}
