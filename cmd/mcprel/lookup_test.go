package main

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// "mcprel serve" and "mcprel gateway" answer lookup_operation about the
// same record with the same answer, member for member: a committed
// result, a stored failure, an unknown outcome and a key with no record.
func TestServeAndGatewayLookUpInOneShape(t *testing.T) {
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	demo, err := newDemoServer(l, payoutDispatcher(t, l), &server.Options{Logger: mcptest.NewServer(t, nil).Logger()})
	if err != nil {
		t.Fatal(err)
	}
	front := mcptest.NewServer(t, nil)
	if _, err := gateway.New(front, &gateway.Options{Ledger: l,
		Upstreams: []gateway.Upstream{{Name: "never-started", Command: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
	serve, gw := mcptest.Stdio(t, demo, nil), mcptest.Stdio(t, front, nil)

	id := int64(0)
	call := func(c *mcptest.Client, tool string, args map[string]any) map[string]any {
		t.Helper()
		id++
		f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": tool, "arguments": args}))
		var res struct {
			IsError           bool           `json:"isError"`
			StructuredContent map[string]any `json:"structuredContent"`
		}
		if f.Error != nil || json.Unmarshal(f.Result, &res) != nil {
			t.Fatalf("%s: %s", tool, f.Raw)
		}
		return res.StructuredContent
	}
	call(serve, "set_stock", map[string]any{"sku": "w1", "quantity": 5, "expectedVersion": 0})
	call(serve, "reserve_inventory", map[string]any{"sku": "w1", "quantity": 2, "idempotencyKey": "k-1"})
	call(serve, "reserve_inventory", map[string]any{"sku": "w1", "quantity": 50, "idempotencyKey": "k-2"})
	ctx := context.Background()
	claim, _, err := l.ClaimOnce(ctx, ledger.Op{Tool: "charge_account", Key: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	if err := claim.Unknown(ctx, "the answer was lost"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		tool, key, state string
		members          []string
	}{
		{"reserve_inventory", "k-1", "committed", []string{"found", "state", "result", "executedAt", "executions", "expiresAt", "advice"}},
		{"reserve_inventory", "k-2", "committed", []string{"found", "state", "result", "executedAt", "executions", "expiresAt", "advice"}},
		{"charge_account", "lost", "outcome_unknown", []string{"found", "state", "reason", "executedAt", "executions", "expiresAt", "advice"}},
		{"charge_account", "never", "", []string{"found", "advice"}},
	} {
		args := map[string]any{"tool": tc.tool, "idempotencyKey": tc.key}
		fromServe, fromGateway := call(serve, idempotency.LookupTool, args), call(gw, idempotency.LookupTool, args)
		if !reflect.DeepEqual(fromServe, fromGateway) {
			t.Errorf("%s %s: serve answered\n%v\nthe gateway\n%v", tc.tool, tc.key, fromServe, fromGateway)
		}
		if fromServe["state"] != nil && fromServe["state"] != tc.state || tc.state == "" && fromServe["found"] != false {
			t.Errorf("%s %s: %v, want state %q", tc.tool, tc.key, fromServe, tc.state)
		}
		for _, m := range tc.members {
			if _, ok := fromServe[m]; !ok {
				t.Errorf("%s %s: no %q in %v", tc.tool, tc.key, m, fromServe)
			}
		}
		if len(fromServe) != len(tc.members) {
			t.Errorf("%s %s: members %v, want %v", tc.tool, tc.key, fromServe, tc.members)
		}
	}
}
