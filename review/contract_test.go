package review_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
)

// The reviewer reads what a real mcprel server advertises, not a copy of
// it: a keyed tool registered through package idempotency, listed over
// stdio and reviewed from its tools/list alone, is read as a conditional
// mutation whose key claim, fingerprint, effect and result commit in the
// ledger's one transaction (or, with an external effect, whose key is
// passed on upstream), with defensive copies, and a safe tool as a read.
// Were the server to advertise a value the reviewer does not read (the
// mcp constants exist so that it cannot), the parts would come back false
// and the verdicts change.
func TestReviewReadsWhatTheServerAdvertises(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	l := ledgertest.Open(t, storetest.SQLite(t), nil, &ledger.Options{Lease: 2 * time.Minute}, "") // beyond an external call's maximum deadline
	ok := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	}
	if err := srv.AddTool(server.Tool{Name: "reserve"}, ok, idempotency.Keyed(l, idempotency.Policy{})); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(server.Tool{Name: "charge"}, ok, idempotency.Keyed(l, idempotency.Policy{External: true})); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(server.Tool{Name: "lookup", Policy: server.Policy{Retry: mcp.RetrySafe}},
		func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}); err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	var list mcp.ListToolsResult
	if f := c.Call(1, mcp.MethodToolsList, mcptest.Params(mcp.Modern, nil)); json.Unmarshal(f.Result, &list) != nil {
		t.Fatalf("tools/list: %s", f.Raw)
	}
	p := review.FromTools(review.Server{Transport: "stdio", Tools: list.Tools})
	ops := map[string]review.Operation{}
	for _, op := range p.Operations {
		ops[op.Name] = op
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}

	reserve := ops["reserve"]
	tx := reserve.Idempotency.Transaction
	if !isTrue(tx.KeyClaim) || !isTrue(tx.ArgumentFingerprint) || !isTrue(tx.EffectRecord) || !isTrue(tx.Result) ||
		!isFalse(reserve.Semantics.ExternalEffect) || str(reserve.Results.ReturnedRecords) != mcp.ReturnedRecordsDefensiveCopy ||
		str(reserve.Idempotency.Key) != mcp.KeyModeRequired || str(reserve.Semantics.Kind) != "mutation" {
		t.Errorf("reserve read as %s", asJSON(reserve))
	}
	charge := ops["charge"]
	tx = charge.Idempotency.Transaction
	if !isTrue(tx.KeyClaim) || !isTrue(tx.ArgumentFingerprint) || !isFalse(tx.EffectRecord) || !isTrue(tx.Result) ||
		!isTrue(charge.Semantics.ExternalEffect) || str(charge.Idempotency.ExternalGuard) != "upstream_key" {
		t.Errorf("charge read as %s", asJSON(charge))
	}
	if lookup := ops["lookup"]; str(lookup.Semantics.Kind) != "read-only" {
		t.Errorf("lookup read as %s", asJSON(lookup))
	}

	r := review.Review(p)
	for _, op := range r.Operations {
		want := map[string]string{"reserve": review.ClassConditional, "charge": review.ClassConditional, "lookup": review.ClassSafe}[op.Name]
		if op.Retry.Class != want {
			t.Errorf("%s: retry class %s, want %s", op.Name, op.Retry.Class, want)
		}
		if op.Name == "reserve" && op.Verdict != review.ProductionReady {
			t.Errorf("reserve: %s %v missing %v", op.Verdict, op.Codes(), op.Missing)
		}
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
