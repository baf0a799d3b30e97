package client_test

import (
	"bytes"
	"context"
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
