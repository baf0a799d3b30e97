package conn

import (
	"encoding/json"
	"testing"
)

// Value renders an argument as the text a client puts in its
// Mcp-Param-{Name} header, so that the server can compare the two.
func TestHeaderParamValue(t *testing.T) {
	args := json.RawMessage(`{"region":"eu","order":{"id":42,"rush":true,"weight":1.5,"note":null}}`)
	for _, c := range []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"region"}, "eu", true},
		{[]string{"order", "id"}, "42", true},
		{[]string{"order", "rush"}, "true", true},
		{[]string{"order", "weight"}, "1.5", true},
		{[]string{"order", "note"}, "", false},    // null is no value
		{[]string{"order", "missing"}, "", false}, // absent
		{[]string{"region", "deeper"}, "", false}, // through a non-object
		{[]string{"order"}, "", false},            // an object has no header text
	} {
		got, ok := HeaderParam{Name: "X", Path: c.path}.Value(args)
		if got != c.want || ok != c.ok {
			t.Errorf("Value at %v = %q, %v; want %q, %v", c.path, got, ok, c.want, c.ok)
		}
	}
	if _, ok := (HeaderParam{Path: []string{"a"}}).Value(json.RawMessage(`{`)); ok {
		t.Error("Value of arguments that do not parse reported a value")
	}
}
