package gateway

import (
	"encoding/json"
	"testing"

	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
)

// A _meta key goes upstream only derived for its tenant: one that is no
// key (null, "", a number) is not passed on, for as the caller gave it it
// would reach the upstream the same for every tenant.
func TestUpstreamMetaKeyIsDerivedOrDropped(t *testing.T) {
	for raw, want := range map[string]any{
		`"order-1"`: ledger.DerivedKey("alice", "send", "order-1"),
		`42`:        nil, `null`: nil, `""`: nil, `{"k":"order-1"}`: nil,
	} {
		meta := map[string]any{mcp.MetaIdempotencyKey: json.RawMessage(raw), "mine": json.RawMessage(`1`)}
		withUpstreamKeys(nil, meta, "", "alice", "send")
		got, ok := meta[mcp.MetaIdempotencyKey]
		if want == nil && ok || want != nil && got != want {
			t.Errorf("_meta key %s goes upstream as %v (present %v); want %v", raw, got, ok, want)
		}
		if _, ok := meta["mine"]; !ok {
			t.Errorf("_meta key %s: the caller's other members were dropped", raw)
		}
	}
}
