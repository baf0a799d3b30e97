package idempotency_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/transport/stdio"
)

// lookup calls lookup_operation on c and decodes what it answered.
func lookup(t *testing.T, c *mcptest.Client, id int64, tool, key string) (idempotency.Operation, *mcp.CallToolResult) {
	t.Helper()
	f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": idempotency.LookupTool,
		"arguments": map[string]any{"tool": tool, "idempotencyKey": key}}))
	var res mcp.CallToolResult
	if f.Error != nil || json.Unmarshal(f.Result, &res) != nil {
		t.Fatalf("lookup_operation %s %s: %s", tool, key, f.Raw)
	}
	var op idempotency.Operation
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &op)
	return op, &res
}

// lookup_operation answers each state of a record in one shape: a
// committed result with when and how often it ran, an unknown outcome
// with its reason and no result, a key it has no record of; a key is the
// caller's tenant's, so another tenant is told there is none. What
// Describe adds is there for a recorded operation only.
func TestLookupOperation(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyRequired, nil)
	var described atomic.Int64
	err := idempotency.AddLookup(k.srv, k.l, idempotency.Lookup{Describe: func(_ context.Context, tenant, tool, key string, op *idempotency.Operation) error {
		described.Add(1)
		op.UpstreamKey = tenant + "/" + tool + "/" + key
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	claim, _, err := k.l.ClaimOnce(ctx, ledger.Op{Tenant: "tenant-a", Tool: "send", Key: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	if err := claim.Unknown(ctx, "the upstream went away"); err != nil {
		t.Fatal(err)
	}
	a := mcptest.Stdio(t, k.srv, &stdio.Options{Tenant: "tenant-a"})
	b := mcptest.Stdio(t, k.srv, &stdio.Options{Tenant: "tenant-b"})
	if r := call(t, a, 1, map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": "k-1"}, nil); r.IsError {
		t.Fatalf("the keyed call: %+v", r)
	}

	op, res := lookup(t, a, 2, "reserve", "k-1")
	if res.IsError || !op.Found || !op.Committed() || op.Executions != 1 || op.ExecutedAt == "" || op.ExpiresAt == "" ||
		!strings.Contains(string(op.Result), `"content"`) || op.Reason != "" || op.UpstreamKey != "tenant-a/reserve/k-1" {
		t.Errorf("a committed operation: %+v", op)
	}
	op, _ = lookup(t, a, 3, "send", "lost")
	if !op.Found || op.State != "outcome_unknown" || op.Reason != "the upstream went away" || op.Result != nil ||
		!strings.Contains(op.Advice, "mcprel ledger resolve") {
		t.Errorf("an unknown outcome: %+v", op)
	}
	op, _ = lookup(t, b, 1, "reserve", "k-1")
	if op.Found || op.State != "" || op.Result != nil || op.UpstreamKey != "" || op.Advice == "" {
		t.Errorf("another tenant's key: %+v", op)
	}
	if described.Load() != 2 {
		t.Errorf("Describe ran %d times, want once per recorded operation (2)", described.Load())
	}
	if _, res := lookup(t, a, 4, "reserve", ""); !res.IsError {
		t.Errorf("an empty key was looked up: %+v", res)
	}
	var list struct{ Tools []mcp.Tool }
	json.Unmarshal(a.Call(5, mcp.MethodToolsList, mcptest.ModernParams(nil)).Result, &list)
	for _, tool := range list.Tools {
		if tool.Name == idempotency.LookupTool && tool.Meta[mcp.MetaRetryClass] != "safe" {
			t.Errorf("lookup_operation's retry class: %v", tool.Meta)
		}
	}
}
