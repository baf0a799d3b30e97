package retry_test

import (
	"testing"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

func TestParseClassRoundTrips(t *testing.T) {
	for _, c := range []retry.Class{retry.Unsafe, retry.Conditional, retry.Safe} {
		got, ok := retry.ParseClass(c.String())
		if !ok || got != c {
			t.Errorf("ParseClass(%q) = %v, %v; want %v, true", c.String(), got, ok, c)
		}
	}
	for _, s := range []string{"", "SAFE", "Safe", "idempotent", "safe "} {
		if c, ok := retry.ParseClass(s); ok {
			t.Errorf("ParseClass(%q) = %v, true; want false", s, c)
		}
	}
	if retry.Class(0) != retry.Unsafe {
		t.Error("the zero Class must be Unsafe")
	}
}

func rule(c retry.Class, lookup string) retry.Rule {
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
		Default: retry.Rule{Class: retry.Unsafe, Lookup: "lookup_operation"},
		Tools: map[string]retry.Rule{
			"search":  {Class: retry.Safe},
			"reserve": {Class: retry.Conditional, Lookup: "lookup_operation"},
			"charge":  {Class: retry.Unsafe, Lookup: "find_charge"},
		},
	}
	tests := []struct {
		name  string
		tool  string
		adv   *mcp.Tool
		trust bool
		want  retry.Rule
	}{
		{"unlisted, nothing advertised", "x", nil, false, rule(retry.Unsafe, "lookup_operation")},
		{"unlisted, untrusted safe class", "x", advertised("x", "safe", nil), false, rule(retry.Unsafe, "lookup_operation")},
		{"unlisted, untrusted readOnlyHint", "x", advertised("x", "", readOnly), false, rule(retry.Unsafe, "lookup_operation")},
		{"unlisted, untrusted idempotentHint", "x", advertised("x", "", idempotent), false, rule(retry.Unsafe, "lookup_operation")},
		{"unlisted, trusted safe class", "x", advertised("x", "safe", nil), true, rule(retry.Safe, "lookup_operation")},
		{"unlisted, trusted conditional class", "x", advertised("x", "conditional", nil), true, rule(retry.Conditional, "lookup_operation")},
		{"unlisted, trusted readOnlyHint", "x", advertised("x", "", readOnly), true, rule(retry.Safe, "lookup_operation")},
		{"unlisted, trusted idempotentHint", "x", advertised("x", "", idempotent), true, rule(retry.Safe, "lookup_operation")},
		{"unlisted, trusted hints false", "x", advertised("x", "", neither), true, rule(retry.Unsafe, "lookup_operation")},
		{"unlisted, trusted class beats annotations", "x", advertised("x", "unsafe", readOnly), true, rule(retry.Unsafe, "lookup_operation")},
		{"unlisted, trusted unknown class falls to annotations", "x", advertised("x", "maybe", readOnly), true, rule(retry.Safe, "lookup_operation")},
		{"unlisted, trusted, another tool's listing", "x", advertised("y", "safe", nil), true, rule(retry.Unsafe, "lookup_operation")},
		{"listed safe, untrusted unsafe class", "search", advertised("search", "unsafe", nil), false, rule(retry.Safe, "")},
		{"listed safe, trusted unsafe class narrows", "search", advertised("search", "unsafe", nil), true, rule(retry.Unsafe, "")},
		{"listed safe, trusted conditional narrows", "search", advertised("search", "conditional", nil), true, rule(retry.Conditional, "")},
		{"listed conditional, trusted safe cannot widen", "reserve", advertised("reserve", "safe", nil), true, rule(retry.Conditional, "lookup_operation")},
		{"listed unsafe, trusted readOnlyHint cannot widen", "charge", advertised("charge", "", readOnly), true, rule(retry.Unsafe, "find_charge")},
		{"listed unsafe, trusted safe class cannot widen", "charge", advertised("charge", "safe", nil), true, rule(retry.Unsafe, "find_charge")},
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
	if got := tab.Rule("anything", advertised("anything", "safe", &mcp.ToolAnnotations{ReadOnlyHint: yes()})); got.Class != retry.Unsafe {
		t.Errorf("zero Table: class %v, want unsafe", got.Class)
	}
}

func TestServerClass(t *testing.T) {
	tests := []struct {
		tool   *mcp.Tool
		want   retry.Class
		wantOK bool
	}{
		{advertised("t", "", nil), retry.Unsafe, false},
		{advertised("t", "conditional", nil), retry.Conditional, true},
		{advertised("t", "", &mcp.ToolAnnotations{DestructiveHint: no()}), retry.Unsafe, false},
		{advertised("t", "", &mcp.ToolAnnotations{ReadOnlyHint: yes()}), retry.Safe, true},
		{&mcp.Tool{Name: "t", Meta: mcp.Meta{mcp.MetaRetryClass: 3}}, retry.Unsafe, false},
	}
	for i, tt := range tests {
		got, ok := retry.ServerClass(tt.tool)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%d: ServerClass = %v, %v; want %v, %v", i, got, ok, tt.want, tt.wantOK)
		}
	}
}
