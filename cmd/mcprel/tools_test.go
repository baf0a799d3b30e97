package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/payouts"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/outbox"
	"github.com/mcprel/mcprel/server"
)

// demoCall is one call of a demo tool and the outcome it must have: a
// success (want "") or the failure code want.
type demoCall struct {
	tool string
	args string
	meta map[string]any
	want string
}

// demoCalls drives every demo tool to a success and to every business
// failure it can report, in an order whose state makes each outcome happen.
var demoCalls = []demoCall{
	{"echo", `{"text":"hi"}`, nil, ""},
	{"slow_count", `{"steps":2,"intervalMs":0}`, nil, ""},
	{"slow_count", `{"steps":"two"}`, nil, mcp.FailureInvalidArguments},
	{"set_stock", `{"sku":"w1","quantity":10,"expectedVersion":0}`, nil, ""},
	{"set_stock", `{"sku":"w1","quantity":10,"expectedVersion":0}`, nil, "version_conflict"},
	{"set_stock", `{"sku":"nope","quantity":1,"expectedVersion":3}`, nil, "unknown_sku"},
	{"get_inventory", `{"sku":"w1"}`, nil, ""},
	{"get_inventory", `{"sku":"nope"}`, nil, "unknown_sku"},
	{"reserve_inventory", `{"sku":"w1","quantity":3,"idempotencyKey":"k-1"}`, nil, ""},
	{"reserve_inventory", `{"sku":"w1","quantity":3,"idempotencyKey":"k-1"}`, nil, ""}, // replayed
	{"reserve_inventory", `{"sku":"w1","quantity":2}`, map[string]any{mcp.MetaIdempotencyKey: "k-meta"}, ""},
	{"reserve_inventory", `{"sku":"w1","quantity":4,"idempotencyKey":"k-1"}`, nil, mcp.FailureKeyConflict},
	{"reserve_inventory", `{"sku":"w1","quantity":50,"idempotencyKey":"k-2"}`, nil, "insufficient_stock"},
	{"reserve_inventory", `{"sku":"nope","quantity":1,"idempotencyKey":"k-3"}`, nil, "unknown_sku"},
	// unknown_sku is a precondition, not stored: once the SKU exists the
	// same key runs.
	{"set_stock", `{"sku":"nope","quantity":1,"expectedVersion":0}`, nil, ""},
	{"reserve_inventory", `{"sku":"nope","quantity":1,"idempotencyKey":"k-3"}`, nil, ""},
	{"reserve_inventory", `{"sku":"w1","quantity":1}`, nil, mcp.FailureKeyRequired},
	{"reserve_inventory", `{"sku":"w1","quantity":0,"idempotencyKey":"k-4"}`, nil, mcp.FailureInvalidArguments},
	{"charge_account", `{"account":"alice","cents":500}`, nil, ""},
	{"charge_account", `{"account":"bob","cents":700,"idempotencyKey":"inv-7"}`, nil, ""},
	{"charge_account", `{"account":"bob","cents":800,"idempotencyKey":"inv-7"}`, nil, mcp.FailureKeyConflict},
	{"lookup_operation", `{"tool":"reserve_inventory","idempotencyKey":"k-1"}`, nil, ""}, // found
	{"lookup_operation", `{"tool":"reserve_inventory","idempotencyKey":"k-2"}`, nil, ""}, // found: a stored failure
	{"lookup_operation", `{"tool":"charge_account","idempotencyKey":"never"}`, nil, ""},  // not found
	{"send_payout", `{"account":"carol","cents":900,"idempotencyKey":"po-1"}`, nil, ""},
	{"send_payout", `{"account":"carol","cents":900,"idempotencyKey":"po-1"}`, nil, ""}, // replayed
	{"send_payout", `{"account":"carol","cents":901,"idempotencyKey":"po-1"}`, nil, mcp.FailureKeyConflict},
	{"send_payout", `{"account":"carol","cents":900}`, nil, mcp.FailureKeyRequired},
	{"lookup_operation", `{"tool":"send_payout","idempotencyKey":"po-1"}`, nil, ""}, // found, delivered
}

// Every result a demo tool returns must validate against the output schema
// the tool declares (clients check it, even on failures), and every failure
// must have the one shape mcprel gives failures.
func TestDemoToolResultsMatchTheirSchemas(t *testing.T) {
	l := ledgertest.Open(t, storetest.SQLite(t), nil, nil, "")
	srv, err := newDemoServer(l, payoutDispatcher(t, l), &server.Options{Logger: mcptest.NewServer(t, nil).Logger()})
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)

	list := c.Call(1, mcp.MethodToolsList, mcptest.ModernParams(nil))
	var tools struct{ Tools []mcp.Tool }
	if err := json.Unmarshal(list.Result, &tools); err != nil {
		t.Fatalf("tools/list: %s", list.Raw)
	}
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range tools.Tools {
		schemas[tool.Name] = nil
		if len(tool.OutputSchema) == 0 {
			continue
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(tool.OutputSchema, &s); err != nil {
			t.Fatalf("%s: output schema: %v", tool.Name, err)
		}
		if schemas[tool.Name], err = s.Resolve(nil); err != nil {
			t.Fatalf("%s: output schema: %v", tool.Name, err)
		}
	}

	succeeded := map[string]bool{}
	for i, dc := range demoCalls {
		params := map[string]any{"name": dc.tool, "arguments": json.RawMessage(dc.args)}
		if dc.meta != nil {
			params["_meta"] = dc.meta
		}
		f := c.Call(int64(100+i), mcp.MethodToolsCall, mcptest.ModernParams(params))
		what := fmt.Sprintf("%s %s", dc.tool, dc.args)
		if f.Error != nil {
			t.Errorf("%s: protocol error %s", what, f.Raw)
			continue
		}
		if dc.want != "" {
			if got, problem := mcptest.ParseFailure(f.Result); problem != "" || got.Code != dc.want {
				t.Errorf("%s: %s (code %q, want %q): %s", what, problem, got.Code, dc.want, f.Result)
			}
			continue
		}
		var res struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		}
		json.Unmarshal(f.Result, &res)
		if res.IsError {
			t.Errorf("%s: failed: %s", what, f.Result)
			continue
		}
		succeeded[dc.tool] = true
		schema, known := schemas[dc.tool]
		switch {
		case !known:
			t.Errorf("%s: the tool is not listed", what)
		case schema == nil:
			continue
		case res.StructuredContent == nil:
			t.Errorf("%s: a tool with an output schema returned no structuredContent", what)
		default:
			var v any
			json.Unmarshal(res.StructuredContent, &v)
			if err := schema.Validate(v); err != nil {
				t.Errorf("%s: structuredContent %s does not match the output schema: %v", what, res.StructuredContent, err)
			}
		}
	}
	if missing := slices.DeleteFunc(slices.Sorted(maps.Keys(schemas)), func(n string) bool { return succeeded[n] }); len(missing) > 0 {
		t.Errorf("no successful call of %v: add one to demoCalls", missing)
	}
}

// payoutDispatcher is an outbox in l's store delivering send_payout's
// payouts to the demo provider, in this process, running until the test
// ends.
func payoutDispatcher(t *testing.T, l *ledger.Ledger) *outbox.Dispatcher {
	t.Helper()
	ctx := context.Background()
	ob, err := outbox.Open(ctx, l.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := payouts.Open(ctx, l.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := outbox.NewDispatcher(ob, &outbox.DispatcherOptions{Receivers: map[string]outbox.Receiver{
		payoutTarget: &outbox.HTTPReceiver{URL: "http://payouts.in-process/payouts", Client: p.Client()}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}
