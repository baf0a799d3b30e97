package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// A request's params carry the _meta that encoding the map of its
// members would give, byte for byte — members sorted by name, the
// client's own winning over the caller's of the same name — whatever
// mix of the client's members, a progress token, declared capabilities
// and the caller's members it has, in either era.
func TestParamsMetaIsTheSortedObjectOfItsMembers(t *testing.T) {
	extras := []map[string]any{
		nil,
		{},
		{"a": 1},
		{"zz": json.RawMessage(` { "id" : "x" } `)},
		{mcp.MetaProtocolVersion: "1999-01-01", mcp.MetaClientInfo: "me"},
		{mcp.MetaProgressToken: "mine"},
		{"io.a": "x", "io.modelcontextprotocol/clientInfo2": true, "q": []int{1, 2}, "progressTokenZ": nil, "p": "é\"\n"},
		{"k0": 0, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5, "k6": 6, "k7": 7, "k8": 8, "k9": 9, "progress": 10, "x": 11},
	}
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		c := &Client{era: era, version: "2026-07-28", capsJSON: json.RawMessage(`{"roots":{}}`),
			taskCapsJSON: json.RawMessage(`{"extensions":{"io.modelcontextprotocol/tasks":{}},"roots":{}}`), infoJSON: json.RawMessage(`{"name":"t","version":"1"}`)}
		if era == mcp.Legacy {
			c.version = "2025-11-25"
		}
		for _, token := range []string{"", "p7", "p123456"} {
			for _, declare := range []encoded{nil, encoded(`{"elicitation":{"form":{}}}`)} {
				for _, asksTask := range []bool{false, true} {
					for i, extra := range extras {
						for _, params := range []map[string]any{nil, {"name": "echo"}, {"name": "echo", "arguments": json.RawMessage(`{"text":"hi"}`)}} {
							name := fmt.Sprintf("%v/token=%q/declare=%s/task=%v/extra%d/params%d", era, token, declare, asksTask, i, len(params))
							var d encoded
							if era == mcp.Modern {
								d = declare
							}
							got, err := c.params(params, token, extra, asksTask, d)
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							want, err := json.Marshal(c.meta(nil, token, extra, asksTask, d))
							if err != nil {
								t.Fatal(err)
							}
							var meta []byte
							rest := map[string]json.RawMessage{}
							jsonrpc.Members(got, func(k, v []byte) bool {
								if string(k) == "_meta" {
									meta = v
								} else {
									rest[string(k)] = v
								}
								return true
							})
							if !bytes.Equal(meta, want) {
								t.Fatalf("%s: _meta\n%s\nwant\n%s", name, meta, want)
							}
							if !json.Valid(got) {
								t.Fatalf("%s: params %s are not JSON", name, got)
							}
							wantRest := map[string]json.RawMessage{}
							for k, v := range params {
								b, _ := json.Marshal(v)
								wantRest[k] = b
							}
							if !reflect.DeepEqual(rest, wantRest) {
								t.Fatalf("%s: params %s, want the members %v", name, got, wantRest)
							}
						}
					}
				}
			}
		}
	}
}

// Capabilities declared per call are encoded as encoding/json encodes
// them, asking for a task or not, however many distinct values come and
// in whatever order, from many calls at once, and a caller's reuse of its
// bytes after the call never changes what a later call declares.
func TestDeclaredCapabilitiesEncodeAsTheyAre(t *testing.T) {
	c := &Client{era: mcp.Modern}
	values := []mcp.ClientCapabilities{
		{},
		{Roots: json.RawMessage(`{}`)},
		{Roots: json.RawMessage{}},
		{Sampling: json.RawMessage(`{}`), Elicitation: json.RawMessage(`{"form":{}}`)},
		{Sampling: json.RawMessage(`{ }`), Elicitation: json.RawMessage(`{"form":{}}`)},
		{Elicitation: json.RawMessage(`{"form":{},"url":{}}`)},
		{Tasks: json.RawMessage(`{"list":{}}`)},
		{Extensions: map[string]json.RawMessage{"x": json.RawMessage(`{}`)}},
		{Experimental: map[string]json.RawMessage{"y": json.RawMessage(`1`)}, Roots: json.RawMessage(`{}`)},
		{Extensions: map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{"a":1}`)}},
	}
	want := func(caps mcp.ClientCapabilities, asksTask bool) string {
		if asksTask && caps.Extensions[mcp.ExtensionTasks] == nil {
			ext := map[string]json.RawMessage{mcp.ExtensionTasks: json.RawMessage(`{}`)}
			for k, v := range caps.Extensions {
				ext[k] = v
			}
			caps.Extensions = ext
		}
		b, err := json.Marshal(caps)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for round := range 50 {
				for i := range values {
					caps := values[(i+g+round)%len(values)]
					asksTask := (i+round)%3 == 0
					o := &CallOptions{Capabilities: &caps, asksTask: asksTask}
					got, err := c.declared(o)
					if err != nil {
						t.Error(err)
						return
					}
					if w := want(caps, asksTask); string(got) != w {
						t.Errorf("declared %s, want %s", got, w)
						return
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	// A caller's buffer, changed after the call, is not what the client
	// remembers.
	buf := []byte(`{"form":{}}`)
	caps := mcp.ClientCapabilities{Elicitation: buf}
	if got, _ := c.declared(&CallOptions{Capabilities: &caps}); string(got) != `{"elicitation":{"form":{}}}` {
		t.Fatalf("declared %s", got)
	}
	copy(buf, `{"url":{}} `)
	caps2 := mcp.ClientCapabilities{Elicitation: json.RawMessage(`{"form":{}}`)}
	if got, _ := c.declared(&CallOptions{Capabilities: &caps2}); string(got) != `{"elicitation":{"form":{}}}` {
		t.Fatalf("declared %s after the caller reused its buffer", got)
	}
	// Invalid capabilities are refused every time, never remembered.
	bad := mcp.ClientCapabilities{Roots: json.RawMessage(`{`)}
	for range 2 {
		if _, err := c.declared(&CallOptions{Capabilities: &bad}); err == nil {
			t.Fatal("invalid capabilities were encoded")
		}
	}
	// In the 2025 era nothing is declared per call.
	if got, err := (&Client{era: mcp.Legacy}).declared(&CallOptions{Capabilities: &caps2}); got != nil || err != nil {
		t.Fatalf("2025: declared %s, %v", got, err)
	}
}

// Raw JSON in params goes out as json.Compact writes it, or is refused
// where json.Compact refuses it: compact JSON appended as it is, anything
// else compacted.
func FuzzRawValueIsCompacted(f *testing.F) {
	for _, s := range []string{`{"text":"call 1"}`, `{ "a" : [1, 2] }`, "{\"a\":\n1}", `"a\"b c"`, `"\\"`, `"\\" `, `{"a":"\\\" x"}`,
		"\"a\nb\"", `{`, ``, `nul`, `null`, ` 1 `, `[1,2,]`, `{"a":1}x`, "\"\xff\"", `"\u2028"`, `1e5`, `{"<":"&>"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want bytes.Buffer
		werr := json.Compact(&want, raw)
		got := []byte("x")
		gerr := appendValue(&got, json.RawMessage(raw))
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%q: error %v, json.Compact's %v", raw, gerr, werr)
		}
		if werr == nil && string(got[1:]) != want.String() {
			t.Fatalf("%q: appended %q, json.Compact %q", raw, got[1:], want.String())
		}
	})
}
