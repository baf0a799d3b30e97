package everything_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/interop/everything"
	"github.com/mcprel/mcprel/internal/interop/gatewaycheck"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
)

// server-everything has no idempotency: behind the gateway, with its echo
// made a keyed tool of the gateway's policy (the key in _meta, which the
// server ignores), a call with a key is forwarded once — a retry is
// answered from the gateway's ledger and another call with the key and
// other arguments is refused — as the wire to the server shows.
func TestGatewayKeyedCallsInFrontOfServerEverything(t *testing.T) {
	everything.Require(t)
	for _, mode := range []everything.Mode{everything.Stdio, everything.StreamableHTTP} {
		t.Run(string(mode), func(t *testing.T) {
			peer, w, logger := upstream(t, mode)
			f := gatewaycheck.Start(t, peer, gateway.Options{Logger: logger,
				Ledger: ledgertest.Open(t, storetest.SQLite(t), nil, nil, ""),
				Policy: &gateway.Policy{Tools: map[string]gateway.ToolPolicy{"echo": {Keyed: &idempotency.Policy{Key: idempotency.KeyRequired, External: true, AtMostOnce: true}}}}})
			c := f.Dial(t, gatewaycheck.Downstreams[2], client.Options{})
			keyed := &client.CallOptions{Meta: map[string]any{mcp.MetaIdempotencyKey: "echo-1"}}
			first, err := c.CallTool(t.Context(), "echo", map[string]any{"message": "keyed once"}, keyed)
			if err != nil || first.IsError || !strings.Contains(textIn(first), "keyed once") {
				t.Fatalf("the first keyed echo: %+v, %v", first, err)
			}
			again, err := c.CallTool(t.Context(), "echo", map[string]any{"message": "keyed once"}, keyed)
			if err != nil || again.Meta[mcp.MetaReplayed] != true || textIn(again) != textIn(first) {
				t.Fatalf("the retry: %+v, %v; want the first answer replayed", again, err)
			}
			other, err := c.CallTool(t.Context(), "echo", map[string]any{"message": "something else"}, keyed)
			if err != nil || gatewaycheck.Failure(t, other).Code != mcp.FailureKeyConflict {
				t.Fatalf("the key with other arguments: %+v, %v", other, err)
			}
			if res, err := c.CallTool(t.Context(), "echo", map[string]any{"message": "no key"}, nil); err != nil || gatewaycheck.Failure(t, res).Code != mcp.FailureKeyRequired {
				t.Fatalf("a call without the required key: %+v, %v", res, err)
			}
			// A sentinel call of another tool: the wire is in order, so once
			// it is there, any second keyed echo would be too.
			if _, err := c.CallTool(t.Context(), "get-sum", map[string]any{"a": 2, "b": 3}, nil); err != nil {
				t.Fatal(err)
			}
			sent := w.await(t, "the sentinel get-sum", func(m jsonrpc.Message) bool {
				return m.Method == mcp.MethodToolsCall && strings.Contains(string(m.Params), `"get-sum"`)
			})
			echoes := 0
			for _, m := range sent {
				if m.Method == mcp.MethodToolsCall && strings.Contains(string(m.Params), `"echo"`) {
					echoes++
					var p struct {
						Meta map[string]json.RawMessage `json:"_meta"`
					}
					json.Unmarshal(m.Params, &p)
					// The key the upstream sees is the tenant's: derived
					// from the tenant, the tool and the caller's key.
					if want, _ := json.Marshal(ledger.DerivedKey("", "echo", "echo-1")); string(p.Meta[mcp.MetaIdempotencyKey]) != string(want) {
						t.Errorf("the forwarded echo did not carry its derived key %s upstream: %s", want, m.Params)
					}
				}
			}
			if echoes != 1 {
				t.Fatalf("the server was sent %d echo calls, want 1", echoes)
			}
		})
	}
}
