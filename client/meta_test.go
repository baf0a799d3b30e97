package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// rawMeta returns the _meta member of a request's params, as sent.
func rawMeta(t *testing.T, m jsonrpc.Message) []byte {
	t.Helper()
	var meta []byte
	jsonrpc.Members(m.Params, func(k, v []byte) bool {
		if string(k) == "_meta" {
			meta = v
		}
		return true
	})
	if meta == nil {
		t.Fatalf("no _meta in %s", m.Params)
	}
	return meta
}

// Every 2026-07-28 request carries the same _meta bytes when it adds
// nothing of its own, so a server can recognise them; one with a
// progress token or the caller's members carries them in a fixed order.
func TestModernMetaIsTheSameBytesEachTime(t *testing.T) {
	c, f := dial(t, false, func(f *fakeServer, m jsonrpc.Message) { result(f, m, "ok") })
	if c.Era() != mcp.Modern {
		t.Fatalf("era %v", c.Era())
	}
	ctx := context.Background()
	for range 8 {
		if _, err := c.CallTool(ctx, "echo", map[string]any{"text": "hi"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	calls := f.sent(mcp.MethodToolsCall)
	first := rawMeta(t, calls[0])
	for _, m := range calls[1:] {
		if got := rawMeta(t, m); !bytes.Equal(got, first) {
			t.Fatalf("the _meta changed between calls:\n%s\n%s", first, got)
		}
	}
	for _, key := range []string{mcp.MetaProtocolVersion, mcp.MetaClientCapabilities, mcp.MetaClientInfo} {
		if !containsKey(calls[0].Params, key) {
			t.Fatalf("_meta %s lacks %s", first, key)
		}
	}
	// With a progress token and members of the caller's own, the order
	// is still fixed: sorted.
	var metas [][]byte
	for range 6 {
		o := &client.CallOptions{Meta: map[string]any{"b": 1, "a": 2, "c": 3}, OnProgress: func(client.Progress) {}}
		if _, err := c.CallTool(ctx, "echo", nil, o); err != nil {
			t.Fatal(err)
		}
		calls = f.sent(mcp.MethodToolsCall)
		metas = append(metas, rawMeta(t, calls[len(calls)-1]))
	}
	for _, m := range metas {
		a, b, cc := bytes.Index(m, []byte(`"a":`)), bytes.Index(m, []byte(`"b":`)), bytes.Index(m, []byte(`"c":`))
		if a < 0 || !(a < b && b < cc) || !bytes.Contains(m, []byte(`"progressToken"`)) {
			t.Fatalf("_meta %s: want a, b, c in order and a progress token", m)
		}
	}
}

// A request with a progress token and nothing else of the caller's
// carries the fixed _meta with the token after it, in either era: valid
// JSON, members in sorted order, the token the call's own.
func TestProgressTokenJoinsTheFixedMeta(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		c, f := dial(t, legacy, func(f *fakeServer, m jsonrpc.Message) { result(f, m, "ok") })
		ctx := context.Background()
		if _, err := c.CallTool(ctx, "echo", nil, nil); err != nil {
			t.Fatal(err)
		}
		plain := rawMeta(t, f.sent(mcp.MethodToolsCall)[0])
		for range 3 {
			if _, err := c.CallTool(ctx, "echo", nil, &client.CallOptions{OnProgress: func(client.Progress) {}}); err != nil {
				t.Fatal(err)
			}
		}
		calls := f.sent(mcp.MethodToolsCall)
		tokens := map[string]bool{}
		for _, m := range calls[1:] {
			meta := rawMeta(t, m)
			var members map[string]json.RawMessage
			if err := json.Unmarshal(meta, &members); err != nil {
				t.Fatalf("legacy %v: _meta %s is not JSON: %v", legacy, meta, err)
			}
			var token string
			if err := json.Unmarshal(members[mcp.MetaProgressToken], &token); err != nil || token == "" || tokens[token] {
				t.Fatalf("legacy %v: _meta %s: want a progress token of this call's own", legacy, meta)
			}
			tokens[token] = true
			delete(members, mcp.MetaProgressToken)
			var want map[string]json.RawMessage
			json.Unmarshal(plain, &want)
			if len(members) != len(want) {
				t.Fatalf("legacy %v: _meta %s, without its token, differs from %s", legacy, meta, plain)
			}
			keys := []string{}
			jsonrpc.Members(meta, func(k, _ []byte) bool { keys = append(keys, string(k)); return true })
			if !slices.IsSorted(keys) {
				t.Fatalf("legacy %v: _meta members %v not in order", legacy, keys)
			}
		}
	}
}
