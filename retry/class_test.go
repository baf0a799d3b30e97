package retry_test

import (
	"testing"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

func TestParseRetryClassRoundTrips(t *testing.T) {
	for _, c := range []mcp.RetryClass{mcp.RetryUnsafe, mcp.RetryConditional, mcp.RetrySafe} {
		got, ok := mcp.ParseRetryClass(c.String())
		if !ok || got != c {
			t.Errorf("ParseRetryClass(%q) = %v, %v; want %v, true", c.String(), got, ok, c)
		}
	}
	for _, s := range []string{"", "SAFE", "Safe", "idempotent", "safe "} {
		if c, ok := mcp.ParseRetryClass(s); ok {
			t.Errorf("ParseRetryClass(%q) = %v, true; want false", s, c)
		}
	}
	if mcp.RetryClass(0) != mcp.RetryUnsafe {
		t.Error("the zero RetryClass must be RetryUnsafe")
	}
}

func rule(c mcp.RetryClass, lookup string) retry.Rule {
	return retry.Rule{Class: c, Lookup: lookup}
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// advertised returns a tool as a server lists it: an mcprel retry class in
// its _meta (when class is not empty) and annotations.
func advertised(name, class string, ann *mcp.ToolAnnotations) *mcp.Tool {
	tool := &mcp.Tool{Name: name, Annotations: ann}
	if class != "" {
		tool.Meta = mcp.Meta{mcp.MetaRetryClass: class}
	}
	return tool
}

// The client's table decides; a server's claims count only when the table
// trusts the server, and then fill in unlisted tools and may narrow, never
// widen, listed ones.
func TestTableRuleTrustsServerOnlyWhenTold(t *testing.T) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: yes()}
	idempotent := &mcp.ToolAnnotations{IdempotentHint: yes()}
	neither := &mcp.ToolAnnotations{ReadOnlyHint: no(), IdempotentHint: no()}
	table := retry.Table{
		Default: retry.Rule{Class: mcp.RetryUnsafe, Lookup: "lookup_operation"},
		Tools: map[string]retry.Rule{
			"search":  {Class: mcp.RetrySafe},
			"reserve": {Class: mcp.RetryConditional, Lookup: "lookup_operation"},
			"charge":  {Class: mcp.RetryUnsafe, Lookup: "find_charge"},
		},
	}
	tests := []struct {
		name  string
		tool  string
		adv   *mcp.Tool
		trust bool
		want  retry.Rule
	}{
		{"unlisted, nothing advertised", "x", nil, false, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"unlisted, untrusted safe class", "x", advertised("x", "safe", nil), false, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"unlisted, untrusted readOnlyHint", "x", advertised("x", "", readOnly), false, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"unlisted, untrusted idempotentHint", "x", advertised("x", "", idempotent), false, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"unlisted, trusted safe class", "x", advertised("x", "safe", nil), true, rule(mcp.RetrySafe, "lookup_operation")},
		{"unlisted, trusted conditional class", "x", advertised("x", "conditional", nil), true, rule(mcp.RetryConditional, "lookup_operation")},
		{"unlisted, trusted readOnlyHint", "x", advertised("x", "", readOnly), true, rule(mcp.RetrySafe, "lookup_operation")},
		{"unlisted, trusted idempotentHint", "x", advertised("x", "", idempotent), true, rule(mcp.RetrySafe, "lookup_operation")},
		{"unlisted, trusted hints false", "x", advertised("x", "", neither), true, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"unlisted, trusted class beats annotations", "x", advertised("x", "unsafe", readOnly), true, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"unlisted, trusted unknown class falls to annotations", "x", advertised("x", "maybe", readOnly), true, rule(mcp.RetrySafe, "lookup_operation")},
		{"unlisted, trusted, another tool's listing", "x", advertised("y", "safe", nil), true, rule(mcp.RetryUnsafe, "lookup_operation")},
		{"listed safe, untrusted unsafe class", "search", advertised("search", "unsafe", nil), false, rule(mcp.RetrySafe, "")},
		{"listed safe, trusted unsafe class narrows", "search", advertised("search", "unsafe", nil), true, rule(mcp.RetryUnsafe, "")},
		{"listed safe, trusted conditional narrows", "search", advertised("search", "conditional", nil), true, rule(mcp.RetryConditional, "")},
		{"listed conditional, trusted safe cannot widen", "reserve", advertised("reserve", "safe", nil), true, rule(mcp.RetryConditional, "lookup_operation")},
		{"listed unsafe, trusted readOnlyHint cannot widen", "charge", advertised("charge", "", readOnly), true, rule(mcp.RetryUnsafe, "find_charge")},
		{"listed unsafe, trusted safe class cannot widen", "charge", advertised("charge", "safe", nil), true, rule(mcp.RetryUnsafe, "find_charge")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := table
			tab.TrustServer = tt.trust
			if got := tab.Rule(tt.tool, tt.adv); got != tt.want {
				t.Errorf("Rule(%q) = %+v, want %+v", tt.tool, got, tt.want)
			}
		})
	}
}

func TestZeroTableIsUnsafeAndTrustsNoOne(t *testing.T) {
	var tab retry.Table
	if got := tab.Rule("anything", advertised("anything", "safe", &mcp.ToolAnnotations{ReadOnlyHint: yes()})); got.Class != mcp.RetryUnsafe {
		t.Errorf("zero Table: class %v, want unsafe", got.Class)
	}
}

func TestServerClass(t *testing.T) {
	tests := []struct {
		tool   *mcp.Tool
		want   mcp.RetryClass
		wantOK bool
	}{
		{advertised("t", "", nil), mcp.RetryUnsafe, false},
		{advertised("t", "conditional", nil), mcp.RetryConditional, true},
		{advertised("t", "", &mcp.ToolAnnotations{DestructiveHint: no()}), mcp.RetryUnsafe, false},
		{advertised("t", "", &mcp.ToolAnnotations{ReadOnlyHint: yes()}), mcp.RetrySafe, true},
		{&mcp.Tool{Name: "t", Meta: mcp.Meta{mcp.MetaRetryClass: 3}}, mcp.RetryUnsafe, false},
	}
	for i, tt := range tests {
		got, ok := retry.ServerClass(tt.tool)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%d: ServerClass = %v, %v; want %v, %v", i, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestServerAndPlannerShareOneClass: the class a server declares for its
// tool is the one the planner plans by, advertised and read back by
// name. Before one type served both, the server's Safe converted to the
// planner's Conditional.
func TestServerAndPlannerShareOneClass(t *testing.T) {
	for _, c := range []mcp.RetryClass{mcp.RetryUnsafe, mcp.RetryConditional, mcp.RetrySafe} {
		tool := &mcp.Tool{Name: "op", Meta: mcp.Meta{mcp.MetaRetryClass: c.String()}}
		got, ok := retry.ServerClass(tool)
		if !ok || got != c {
			t.Errorf("a tool declared %v is read back as %v (ok %v)", c, got, ok)
		}
		if r := (retry.Table{TrustServer: true}).Rule("op", tool); r.Class != c {
			t.Errorf("a trusted server's %v tool is planned as %v", c, r.Class)
		}
	}
}
