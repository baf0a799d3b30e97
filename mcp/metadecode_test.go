package mcp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The same _meta decoded again and again comes back equal each time, as
// a copy of its own: what one caller does to its copy, nested objects and
// arrays included, no later decode sees.
func TestMetaDecodedAgainIsACopy(t *testing.T) {
	raw := `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"mcprel","version":"0.1.0"},"tags":["a",{"b":1}],"n":1.5,"ok":true,"none":null},"resultType":"complete","content":[]}`
	want := Meta{
		"io.modelcontextprotocol/serverInfo": map[string]any{"name": "mcprel", "version": "0.1.0"},
		"tags":                               []any{"a", map[string]any{"b": 1.0}},
		"n":                                  1.5, "ok": true, "none": nil,
	}
	for i := range 4 {
		var r CallToolResult
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.Meta, want) {
			t.Fatalf("decode %d: _meta %#v, want %#v", i, r.Meta, want)
		}
		if last := lastMeta.Load(); i > 0 && (last == nil || !strings.Contains(raw, last.raw)) {
			t.Fatalf("decode %d: the _meta that came again is not remembered", i)
		}
		// Scribble over everything this caller got.
		r.Meta["n"] = "changed"
		r.Meta["io.modelcontextprotocol/serverInfo"].(map[string]any)["name"] = "changed"
		tags := r.Meta["tags"].([]any)
		tags[0] = "changed"
		tags[1].(map[string]any)["b"] = "changed"
	}
}

// Meta decodes as encoding/json decodes an object into a map: null is
// nil, members are added to a map that is not nil, and JSON that is not
// an object is an error.
func TestMetaDecodesAsAMap(t *testing.T) {
	m := Meta{"kept": "yes"}
	if err := json.Unmarshal([]byte(`{"added":2}`), &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, Meta{"kept": "yes", "added": 2.0}) {
		t.Fatalf("decoded into a map that was not nil: %#v", m)
	}
	if err := json.Unmarshal([]byte(`null`), &m); err != nil || m != nil {
		t.Fatalf("null: %#v, %v; want nil", m, err)
	}
	for _, bad := range []string{`[1]`, `"text"`, `{"a":}`} {
		var m Meta
		if err := m.UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("%s decoded as %#v, want an error", bad, m)
		}
	}
}
