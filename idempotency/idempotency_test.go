package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/transport/stdio"
)

// keyed is a server with a ledger and a "reserve" tool whose effect writes
// one row per execution.
type keyed struct {
	srv  *server.Server
	l    *ledger.Ledger
	runs atomic.Int64 // handler starts
	// hook, if set, runs inside the handler after the business row.
	hook func(ctx context.Context, call *server.CallRequest) error
}

const reserveSchema = `{"type":"object","properties":{
	"sku":{"type":"string"},"quantity":{"type":"integer","minimum":1},
	"note":{"type":"string"},"idempotencyKey":{"type":"string"}},
	"required":["sku","quantity"]}`

func newKeyed(t *testing.T, dsn string, mode idempotency.KeyMode, opts *server.Options) *keyed {
	t.Helper()
	l := ledgertest.Open(t, dsn, nil, nil, "server-test", store.Migration{Version: 1,
		SQL: `CREATE TABLE reservations (tenant TEXT NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL)`})
	k := &keyed{srv: mcptest.NewServer(t, opts), l: l}
	err := k.srv.AddTool(server.Tool{
		Name:        "reserve",
		InputSchema: json.RawMessage(reserveSchema),
	}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		k.runs.Add(1)
		var in struct {
			SKU      string `json:"sku"`
			Quantity int    `json:"quantity"`
		}
		json.Unmarshal(req.Arguments, &in)
		if in.SKU == "sold-out" {
			return nil, &mcp.ToolError{Code: "insufficient_stock", Message: "only 0 left"}
		}
		if _, err := idempotency.Tx(req).Exec(ctx, `INSERT INTO reservations (tenant, sku, quantity) VALUES (?, ?, ?)`, req.Tenant, in.SKU, in.Quantity); err != nil {
			return nil, err
		}
		if k.hook != nil {
			if err := k.hook(ctx, req); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{mcp.Text(fmt.Sprintf("reserved %d %s", in.Quantity, in.SKU))},
			StructuredContent: map[string]any{"sku": in.SKU, "quantity": in.Quantity, "run": k.runs.Load()},
		}, nil
	}, idempotency.Keyed(l,
		idempotency.Policy{Key: mode, Fields: []string{"sku", "quantity"}}))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ledgerServer is a server and a ledger on a fresh SQLite file.
func ledgerServer(t *testing.T, opts *ledger.Options) (*server.Server, *ledger.Ledger) {
	t.Helper()
	return mcptest.NewServer(t, nil), ledgertest.Open(t, storetest.SQLite(t), nil, opts, "")
}

func (k *keyed) reservations(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	ctx := context.Background()
	if err := k.l.DB().ReadTx(ctx, func(tx *store.Tx) error {
		return tx.QueryRow(ctx, `SELECT COUNT(*) FROM reservations WHERE tenant = ?`, tenant).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// callResult is the part of a tools/call result the tests read.
type callResult struct {
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	Meta              map[string]any  `json:"_meta"`
	raw               json.RawMessage // the whole result
}

func (r *callResult) UnmarshalJSON(data []byte) error {
	type plain callResult
	if err := json.Unmarshal(data, (*plain)(r)); err != nil {
		return err
	}
	r.raw = append(json.RawMessage(nil), data...)
	return nil
}

func (r callResult) failure(t *testing.T) mcp.Failure {
	t.Helper()
	return mcptest.Failure(t, r.raw)
}

func call(t *testing.T, c *mcptest.Client, id int64, args map[string]any, meta map[string]any) callResult {
	t.Helper()
	extra := map[string]any{"name": "reserve", "arguments": args}
	if meta != nil {
		extra["_meta"] = meta
	}
	f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(extra))
	if f.Error != nil {
		t.Fatalf("call %d: %s", id, f.Raw)
	}
	var r callResult
	if err := json.Unmarshal(f.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestIdempotentCallRunsOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		k := newKeyed(t, dsn, idempotency.KeyRequired, nil)
		c := mcptest.Stdio(t, k.srv, nil)
		args := map[string]any{"sku": "A", "quantity": 2, "idempotencyKey": "order-1"}
		first := call(t, c, 1, args, nil)
		if first.IsError || first.Meta[mcp.MetaReplayed] != false || first.Meta[mcp.MetaExecutedAt] == nil {
			t.Fatalf("first call = %+v", first)
		}
		// A retry is a new JSON-RPC request with the same key.
		args["note"] = "a field outside the fingerprint"
		second := call(t, c, 2, args, nil)
		if second.Meta[mcp.MetaReplayed] != true || string(second.StructuredContent) != string(first.StructuredContent) ||
			second.Meta[mcp.MetaExecutedAt] != first.Meta[mcp.MetaExecutedAt] {
			t.Fatalf("retry = %+v, want a replay of %s", second, first.StructuredContent)
		}
		if k.runs.Load() != 1 || k.reservations(t, "") != 1 {
			t.Fatalf("handler ran %d times, %d reservations", k.runs.Load(), k.reservations(t, ""))
		}
		rec, err := k.l.Lookup(context.Background(), "", "reserve", "order-1")
		if err != nil || rec.Executions != 1 {
			t.Fatalf("ledger record = %+v, %v", rec, err)
		}
	})
}

func TestIdempotencyRefusals(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyRequired, nil)
	c := mcptest.Stdio(t, k.srv, nil)

	// No key: refused before anything runs.
	if f := call(t, c, 1, map[string]any{"sku": "A", "quantity": 1}, nil).failure(t); f.Code != mcp.FailureKeyRequired || f.Retryable {
		t.Fatalf("missing key: %+v", f)
	}
	// An invalid key, or two different keys, is an argument error.
	if f := call(t, c, 2, map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": ""}, nil).failure(t); f.Code != mcp.FailureInvalidArguments {
		t.Fatalf("empty key: %+v", f)
	}
	if f := call(t, c, 3, map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": "k1"},
		map[string]any{mcp.MetaIdempotencyKey: "k2"}).failure(t); f.Code != mcp.FailureInvalidArguments {
		t.Fatalf("two keys: %+v", f)
	}
	// So is a key under a name that is the key's spelt another way: a
	// handler (or an upstream) that decodes as Go's encoding/json does
	// would read it, whatever the ledger keyed the call by.
	for i, spelt := range []struct{ args, meta map[string]any }{
		{map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": "k1", "IdempotencyKey": "k2"}, nil},
		{map[string]any{"sku": "A", "quantity": 1, "idempotencykey": "k1"}, nil},
		{map[string]any{"sku": "A", "quantity": 1}, map[string]any{"DEV.MCPREL/IDEMPOTENCYKEY": "k1"}},
		{map[string]any{"sku": "A", "quantity": 1}, map[string]any{mcp.MetaIdempotencyKey: "k1", "dev.mcprel/idempotencyKEY": "k2"}},
	} {
		if f := call(t, c, int64(100+i), spelt.args, spelt.meta).failure(t); f.Code != mcp.FailureInvalidArguments {
			t.Fatalf("a key spelt another way (%v, _meta %v): %+v", spelt.args, spelt.meta, f)
		}
	}
	// Arguments that fail validation store nothing: the key stays free.
	if f := call(t, c, 4, map[string]any{"sku": "A", "quantity": 0, "idempotencyKey": "k1"}, nil).failure(t); f.Code != mcp.FailureInvalidArguments {
		t.Fatalf("invalid quantity: %+v", f)
	}
	if r := call(t, c, 5, map[string]any{"sku": "A", "quantity": 3, "idempotencyKey": "k1"}, nil); r.IsError || r.Meta[mcp.MetaReplayed] != false {
		t.Fatalf("valid call after an invalid one with the same key: %+v", r)
	}
	// Same key, changed quantity: refused, nothing runs.
	f := call(t, c, 6, map[string]any{"sku": "A", "quantity": 4, "idempotencyKey": "k1"}, nil).failure(t)
	if f.Code != mcp.FailureKeyConflict || f.Retryable {
		t.Fatalf("changed quantity: %+v", f)
	}
	if k.runs.Load() != 1 || k.reservations(t, "") != 1 {
		t.Fatalf("handler ran %d times, %d reservations; want 1 and 1", k.runs.Load(), k.reservations(t, ""))
	}
	// The key may come in _meta instead.
	if r := call(t, c, 7, map[string]any{"sku": "A", "quantity": 3}, map[string]any{mcp.MetaIdempotencyKey: "k1"}); r.Meta[mcp.MetaReplayed] != true {
		t.Fatalf("key in _meta: %+v, want a replay", r)
	}
}

// Without a key, a KeyOptional tool runs for every JSON-RPC id — the
// retry-unsafe case — and says so.
func TestOptionalKeyMissingRunsEveryTime(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyOptional, nil)
	c := mcptest.Stdio(t, k.srv, nil)
	args := map[string]any{"sku": "A", "quantity": 1}
	for id := int64(1); id <= 2; id++ {
		r := call(t, c, id, args, nil)
		if r.IsError || r.Meta[mcp.MetaRetrySafe] != false || r.Meta[mcp.MetaReplayed] != nil {
			t.Fatalf("call %d = %+v", id, r)
		}
	}
	if k.runs.Load() != 2 || k.reservations(t, "") != 2 {
		t.Fatalf("two ids without a key: %d runs, %d reservations; want 2 and 2", k.runs.Load(), k.reservations(t, ""))
	}
	args["idempotencyKey"] = "k"
	call(t, c, 3, args, nil)
	if r := call(t, c, 4, args, nil); r.Meta[mcp.MetaReplayed] != true || r.Meta[mcp.MetaRetrySafe] != nil {
		t.Fatalf("keyed retry = %+v", r)
	}
}

func TestBusinessFailureIsStored(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyRequired, nil)
	c := mcptest.Stdio(t, k.srv, nil)
	args := map[string]any{"sku": "sold-out", "quantity": 1, "idempotencyKey": "k"}
	first := call(t, c, 1, args, nil)
	if f := first.failure(t); f.Code != "insufficient_stock" || first.Meta[mcp.MetaReplayed] != false {
		t.Fatalf("first = %+v", first)
	}
	again := call(t, c, 2, args, nil)
	if again.failure(t).Code != "insufficient_stock" || again.Meta[mcp.MetaReplayed] != true || k.runs.Load() != 1 {
		t.Fatalf("retry = %+v after %d runs; want the stored failure replayed", again, k.runs.Load())
	}
}

// A retryable failure, a plain error, an argument refusal and a panic roll back: nothing is
// stored and the retry runs.
func TestTransientFailuresStoreNothing(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyRequired, nil)
	c := mcptest.Stdio(t, k.srv, nil)
	failures := []func() error{
		func() error { return &mcp.ToolError{Code: "provider_busy", Message: "try later", Retryable: true} },
		func() error { return fmt.Errorf("disk on fire") },
		func() error { return &mcp.ToolError{Code: mcp.FailureInvalidArguments, Message: "not your tenant"} },
		func() error { panic("handler bug") },
	}
	args := map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": "k"}
	for i, fail := range failures {
		k.hook = func(context.Context, *server.CallRequest) error { return fail() }
		if r := call(t, c, int64(i+1), args, nil); !r.IsError {
			t.Fatalf("failure %d: %+v", i, r)
		}
		if n := k.reservations(t, ""); n != 0 {
			t.Fatalf("failure %d left %d reservations", i, n)
		}
	}
	k.hook = nil
	if r := call(t, c, 9, args, nil); r.IsError || r.Meta[mcp.MetaReplayed] != false {
		t.Fatalf("retry after transient failures = %+v", r)
	}
	if k.reservations(t, "") != 1 {
		t.Fatal("want exactly one reservation")
	}
}

// A call cancelled inside its effect rolls back; the retry runs once.
func TestCancelledCallRollsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		rec := mcptest.NewRecorder()
		k := newKeyed(t, dsn, idempotency.KeyRequired, rec.Hook(nil))
		entered := make(chan struct{})
		k.hook = func(ctx context.Context, req *server.CallRequest) error {
			if req.ID == jsonrpc.IntID(1) {
				close(entered)
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		}
		c := mcptest.Stdio(t, k.srv, nil)
		args := map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": "k"}
		c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "reserve", "arguments": args}))
		<-entered
		c.Cancel(1, "user gave up")
		rec.WaitHandler(t, jsonrpc.IntID(1))
		if n := k.reservations(t, ""); n != 0 {
			t.Fatalf("the cancelled call left %d reservations", n)
		}
		if r := call(t, c, 2, args, nil); r.IsError || r.Meta[mcp.MetaReplayed] != false {
			t.Fatalf("retry after cancel = %+v", r)
		}
		if k.reservations(t, "") != 1 || k.runs.Load() != 2 {
			t.Fatalf("%d reservations after %d runs", k.reservations(t, ""), k.runs.Load())
		}
	})
}

func TestIdempotencyScopedToTenant(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyRequired, nil)
	a := mcptest.Stdio(t, k.srv, &stdio.Options{Tenant: "tenant-a"})
	b := mcptest.Stdio(t, k.srv, &stdio.Options{Tenant: "tenant-b"})
	args := map[string]any{"sku": "A", "quantity": 1, "idempotencyKey": "same"}
	ra := call(t, a, 1, args, nil)
	args["quantity"] = 5 // would conflict within one tenant
	rb := call(t, b, 1, args, nil)
	if ra.IsError || rb.IsError || rb.Meta[mcp.MetaReplayed] != false {
		t.Fatalf("tenant-a %+v, tenant-b %+v: want two executions", ra, rb)
	}
	if k.reservations(t, "tenant-a") != 1 || k.reservations(t, "tenant-b") != 1 {
		t.Fatal("want one reservation per tenant")
	}
	if _, err := k.l.Lookup(context.Background(), "tenant-b", "reserve", "same"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.l.Lookup(context.Background(), "", "reserve", "same"); err == nil {
		t.Fatal("the single-tenant scope saw a tenant's record")
	}
}

// An External effect holds its key while it runs: a duplicate is told to
// come back, and after completion it gets the stored result.
func TestExternalEffectInProgress(t *testing.T) {
	srv, l := ledgerServer(t, &ledger.Options{Lease: time.Minute})
	entered, release := make(chan string, 4), make(chan struct{})
	var charges atomic.Int64
	charge := server.Tool{Name: "charge", Policy: server.Policy{MaxTimeout: 30 * time.Second}}
	err := srv.AddTool(charge, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		if idempotency.Tx(req) != nil {
			t.Error("an External handler got a transaction")
		}
		entered <- idempotency.Key(req)
		<-release
		charges.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("charged")}}, nil
	}, idempotency.Keyed(l, idempotency.Policy{External: true}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	params := mcptest.ModernParams(map[string]any{"name": "charge", "arguments": map[string]any{"cents": 100, "idempotencyKey": "pay-1"}})
	c.Request(1, mcp.MethodToolsCall, params)
	if key := <-entered; key != "pay-1" {
		t.Fatalf("the handler saw key %q", key)
	}
	dup := c.Call(2, mcp.MethodToolsCall, params)
	var r callResult
	json.Unmarshal(dup.Result, &r)
	if f := r.failure(t); f.Code != mcp.FailureInProgress || !f.Retryable || f.RetryAfterMs <= 0 {
		t.Fatalf("duplicate while running = %+v", f)
	}
	close(release)
	if first, _ := c.Await(1); !strings.Contains(string(first.Result), `"dev.mcprel/replayed":false`) {
		t.Fatalf("first = %s", first.Raw)
	}
	again := c.Call(3, mcp.MethodToolsCall, params)
	if !strings.Contains(string(again.Result), `"dev.mcprel/replayed":true`) || charges.Load() != 1 {
		t.Fatalf("after completion = %s, %d charges", again.Raw, charges.Load())
	}
}

func TestIdempotencyPolicyNeedsALedger(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "pay"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }, idempotency.Keyed(nil, idempotency.Policy{}))
	if err == nil || !strings.Contains(err.Error(), "no ledger") {
		t.Fatalf("AddTool without a ledger = %v", err)
	}
}

// An External call may run longer than the ledger's lease: its claim is
// renewed while it runs, so a duplicate is still told it is in progress,
// never handed the key.
func TestExternalCallOutlivesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, l := ledgerServer(t, &ledger.Options{Lease: 3 * time.Second})
		entered, finish := make(chan struct{}, 2), make(chan struct{})
		var charges atomic.Int64
		err := srv.AddTool(server.Tool{Name: "slow-pay", Policy: server.Policy{MaxTimeout: time.Minute}}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
			charges.Add(1)
			entered <- struct{}{}
			<-finish
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("paid")}}, nil
		}, idempotency.Keyed(l, idempotency.Policy{External: true}))
		if err != nil {
			t.Fatal(err)
		}
		c := mcptest.Stdio(t, srv, nil)
		params := mcptest.ModernParams(map[string]any{"name": "slow-pay", "arguments": map[string]any{"idempotencyKey": "pay-9"}})
		c.Request(1, mcp.MethodToolsCall, params)
		<-entered
		time.Sleep(10 * time.Second) // three leases
		synctest.Wait()
		var dup callResult
		json.Unmarshal(c.Call(2, mcp.MethodToolsCall, params).Result, &dup)
		if f := dup.failure(t); f.Code != mcp.FailureInProgress || charges.Load() != 1 {
			t.Fatalf("a duplicate after three leases = %+v, %d charges; want in_progress, one charge", f, charges.Load())
		}
		close(finish)
		c.Await(1)
	})
}

// A stored result comes back exactly, numbers beyond float64 included,
// and the handler's own result value is never written to.
func TestKeyedResultsAreExactAndTheHandlersOwn(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	shared := &mcp.CallToolResult{StructuredContent: map[string]any{"orderId": int64(9007199254740993)}}
	shared.Meta = mcp.Meta{"own": 1}
	err := srv.AddTool(server.Tool{Name: "order"}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return shared, nil }, idempotency.Keyed(l, idempotency.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	params := mcptest.ModernParams(map[string]any{"name": "order", "arguments": map[string]any{"idempotencyKey": "k"}})
	for id := int64(1); id <= 2; id++ {
		f := c.Call(id, mcp.MethodToolsCall, params)
		if !strings.Contains(string(f.Result), `"structuredContent":{"orderId":9007199254740993}`) {
			t.Fatalf("call %d: %s, want the exact orderId", id, f.Result)
		}
	}
	if shared.Content != nil || len(shared.Meta) != 1 {
		t.Fatalf("the handler's result was written to: %+v", shared)
	}
}

// A panicking External handler gives its key back: the retry runs rather
// than waiting out the lease.
func TestExternalPanicReleasesTheKey(t *testing.T) {
	srv, l := ledgerServer(t, &ledger.Options{Lease: time.Minute})
	var calls atomic.Int64
	err := srv.AddTool(server.Tool{Name: "charge", Policy: server.Policy{MaxTimeout: 30 * time.Second}}, func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		if calls.Add(1) == 1 {
			panic("provider client bug")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("charged")}}, nil
	}, idempotency.Keyed(l,
		idempotency.Policy{External: true}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	params := mcptest.ModernParams(map[string]any{"name": "charge", "arguments": map[string]any{"idempotencyKey": "pay-1"}})
	var first callResult
	json.Unmarshal(c.Call(1, mcp.MethodToolsCall, params).Result, &first)
	if first.failure(t).Code != mcp.FailureInternal {
		t.Fatalf("panicking call = %+v", first)
	}
	var second callResult
	json.Unmarshal(c.Call(2, mcp.MethodToolsCall, params).Result, &second)
	if second.IsError || second.Meta[mcp.MetaReplayed] != false || calls.Load() != 2 {
		t.Fatalf("retry after a panic = %+v after %d calls; want it to run", second, calls.Load())
	}
}

func TestNonStringKeyIsRefused(t *testing.T) {
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyOptional, nil)
	c := mcptest.Stdio(t, k.srv, nil)
	if f := call(t, c, 1, map[string]any{"sku": "A", "quantity": 1}, map[string]any{mcp.MetaIdempotencyKey: 42}).failure(t); f.Code != mcp.FailureInvalidArguments {
		t.Fatalf("numeric key in _meta: %+v", f)
	}
	if k.runs.Load() != 0 {
		t.Fatal("a call with a malformed key ran")
	}
}

// A tool whose input schema lists the key as a required argument (so that
// models see it must be given) still takes it in _meta, and a call with no
// key at all is told it needs one, not that an argument is missing.
func TestKeyRequiredBySchema(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	var runs atomic.Int64
	err := srv.AddTool(server.Tool{
		Name: "reserve",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"sku":{"type":"string"},
			"idempotencyKey":{"type":"string","minLength":1}},"required":["sku","idempotencyKey"],"additionalProperties":false}`),
	}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("reserved under " + idempotency.Key(req))}}, nil
	}, idempotency.Keyed(l,
		idempotency.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	if f := call(t, c, 1, map[string]any{"sku": "A"}, nil).failure(t); f.Code != mcp.FailureKeyRequired {
		t.Fatalf("no key: %+v, want %s", f, mcp.FailureKeyRequired)
	}
	if f := call(t, c, 2, map[string]any{}, nil).failure(t); f.Code != mcp.FailureKeyRequired {
		t.Fatalf("no key and a missing argument: %+v, want %s first", f, mcp.FailureKeyRequired)
	}
	r := call(t, c, 3, map[string]any{"sku": "A"}, map[string]any{mcp.MetaIdempotencyKey: "k1"})
	if r.IsError || r.Meta[mcp.MetaReplayed] != false || !strings.Contains(string(r.raw), "reserved under k1") {
		t.Fatalf("key in _meta only: %s, want it to run", r.raw)
	}
	if r := call(t, c, 4, map[string]any{"sku": "A", "idempotencyKey": "k1"}, nil); r.Meta[mcp.MetaReplayed] != true {
		t.Fatalf("the same key in the arguments: %s, want a replay", r.raw)
	}
	// The key in _meta does not excuse other invalid arguments.
	f := call(t, c, 5, map[string]any{"sku": "A", "extra": 1}, map[string]any{mcp.MetaIdempotencyKey: "k2"}).failure(t)
	if f.Code != mcp.FailureInvalidArguments || f.Details["field"] != "extra" {
		t.Fatalf("unexpected argument with the key in _meta: %+v", f)
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", runs.Load())
	}
}

// A failure listed in Policy.Preconditions is not the operation's
// answer: it is not stored, and a retry with the same key runs again once
// the precondition holds.
func TestPreconditionFailureIsNotStored(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	var exists atomic.Bool
	var runs atomic.Int64
	err := srv.AddTool(server.Tool{Name: "reserve"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		if !exists.Load() {
			return nil, &mcp.ToolError{Code: "unknown_sku", Message: "no such SKU yet"}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("reserved")}}, nil
	}, idempotency.Keyed(l, idempotency.Policy{Preconditions: []string{"unknown_sku"}}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	args := map[string]any{"idempotencyKey": "k"}
	if f := call(t, c, 1, args, nil).failure(t); f.Code != "unknown_sku" {
		t.Fatalf("first = %+v", f)
	}
	exists.Store(true)
	r := call(t, c, 2, args, nil)
	if r.IsError || r.Meta[mcp.MetaReplayed] != false || runs.Load() != 2 {
		t.Fatalf("retry once the SKU exists = %s after %d runs; want it to run", r.raw, runs.Load())
	}
	if r := call(t, c, 3, args, nil); r.Meta[mcp.MetaReplayed] != true || runs.Load() != 2 {
		t.Fatalf("retry after the success = %s; want a replay", r.raw)
	}
}

// A keyed tool is conditional unless it says otherwise, and advertises its
// key mode; its timeout is retryable only for a call that carried its key:
// without one the effect may have happened and nothing dedupes it.
func TestRetryClassOfKeyedTools(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	block := func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	quick := server.Policy{MaxTimeout: 20 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		policy server.Policy
		key    idempotency.KeyMode
	}{
		{"required", quick, idempotency.KeyRequired},
		{"optional", quick, idempotency.KeyOptional},
		{"optional-but-safe", server.Policy{MaxTimeout: 20 * time.Millisecond, Retry: mcp.RetrySafe}, idempotency.KeyOptional},
	} {
		if err := srv.AddTool(server.Tool{Name: tc.name, Policy: tc.policy}, block, idempotency.Keyed(l, idempotency.Policy{Key: tc.key})); err != nil {
			t.Fatal(err)
		}
	}
	c := mcptest.Stdio(t, srv, nil)
	for i, tc := range []struct {
		tool  string
		keyed bool
		want  bool
	}{
		{"required", true, true},
		{"optional", true, true},
		{"optional", false, false},
		{"optional-but-safe", false, true},
	} {
		args := map[string]any{}
		if tc.keyed {
			args["idempotencyKey"] = fmt.Sprintf("k-%d", i)
		}
		f := c.Call(int64(i+1), mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": tc.tool, "arguments": args}))
		if got := mcptest.Failure(t, f.Result); got.Code != mcp.FailureTimeout || got.Retryable != tc.want {
			t.Errorf("%s keyed=%v: %+v, want a timeout retryable %v", tc.tool, tc.keyed, got, tc.want)
		}
	}
	var list struct{ Tools []mcp.Tool }
	json.Unmarshal(c.Call(10, mcp.MethodToolsList, mcptest.ModernParams(nil)).Result, &list)
	want := map[string][2]string{"required": {"conditional", "required"}, "optional": {"conditional", "optional"}, "optional-but-safe": {"safe", "optional"}}
	for _, tool := range list.Tools {
		if w := want[tool.Name]; tool.Meta[mcp.MetaRetryClass] != w[0] || tool.Meta[mcp.MetaKeyMode] != w[1] {
			t.Errorf("%s advertises %v, want class %s and key mode %s", tool.Name, tool.Meta, w[0], w[1])
		}
	}
}

// Each keyed call's record says what the ledger did with it, for
// observers: executed, replayed, conflict, key_missing, unkeyed,
// rolled_back.
func TestRecordsSayWhatTheLedgerDid(t *testing.T) {
	rec := mcptest.NewRecorder()
	k := newKeyed(t, storetest.SQLite(t), idempotency.KeyOptional, rec.Hook(nil))
	c := mcptest.Stdio(t, k.srv, nil)
	args := func(sku string, qty int, key string) map[string]any {
		a := map[string]any{"sku": sku, "quantity": qty}
		if key != "" {
			a["idempotencyKey"] = key
		}
		return a
	}
	steps := []struct {
		args map[string]any
		meta map[string]any
		want string
	}{
		{args("A", 1, "k1"), nil, idempotency.Executed},
		{args("A", 1, "k1"), nil, idempotency.Replayed},
		{args("A", 2, "k1"), nil, idempotency.Conflict},
		{args("A", 1, ""), map[string]any{mcp.MetaIdempotencyKey: 7}, idempotency.KeyMissing},
		{args("A", 1, ""), nil, idempotency.Unkeyed},
		{args("A", 1, "k2"), nil, idempotency.RolledBack},
	}
	for i, s := range steps {
		if s.want == idempotency.RolledBack {
			k.hook = func(context.Context, *server.CallRequest) error { return errors.New("boom") }
		}
		id := int64(i + 1)
		call(t, c, id, s.args, s.meta)
		r := rec.WaitRequest(t, jsonrpc.IntID(id))
		if got := r.Annotations[idempotency.AnnotationKey]; got != s.want {
			t.Errorf("step %d: annotation %q, want %q (record %+v)", id, got, s.want, r)
		}
	}
}

// settleRecorder is a policy inside Keyed that asks to be told how the
// call's transaction ended, and checks from outside it, when told, that
// the key's record is already there to read.
func settleRecorder(t *testing.T, l *ledger.Ledger, told chan<- string) server.ToolInterceptor {
	return func(_ *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			if idempotency.Tx(call) == nil {
				t.Error("a policy inside Keyed found no transaction")
			}
			key := idempotency.Key(call)
			idempotency.AfterTx(call, func(committed bool) {
				_, err := l.Lookup(context.Background(), call.Tenant, call.Name, key)
				told <- fmt.Sprintf("committed=%v visible=%v", committed, err == nil)
			})
			return next(ctx, call)
		}, nil
	}
}

// AfterTx runs after the key's transaction has ended, never inside it: a
// policy that starts work the transaction records (a task's worker) sees
// it committed, and is told when it rolled back instead.
func TestAfterTxRunsOnceTheTransactionEnded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		srv, l := mcptest.NewServer(t, nil), ledgertest.Open(t, dsn, nil, nil, "")
		told := make(chan string, 4)
		var fail atomic.Bool
		err := srv.AddTool(server.Tool{Name: "op"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			if fail.Load() {
				return nil, &mcp.ToolError{Code: "busy", Message: "try again", Retryable: true}
			}
			return &mcp.CallToolResult{}, nil
		}, idempotency.Keyed(l, idempotency.Policy{}), settleRecorder(t, l, told))
		if err != nil {
			t.Fatal(err)
		}
		c := mcptest.Stdio(t, srv, nil)
		c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "op", "arguments": map[string]any{"idempotencyKey": "k-1"}}))
		if got := <-told; got != "committed=true visible=true" {
			t.Fatalf("after a commit the policy was told %q", got)
		}
		fail.Store(true)
		c.Call(2, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "op", "arguments": map[string]any{"idempotencyKey": "k-2"}}))
		if got := <-told; got != "committed=false visible=false" {
			t.Fatalf("after a rollback the policy was told %q", got)
		}
		if len(told) != 0 {
			t.Fatalf("told more than once per call: %q", <-told)
		}
	})
}

// A policy inside Keyed may answer with something that is not a tool
// result if it says what to store (Keep) and marked the tool as one that
// keeps records (KeepsRecords); a retry with the same key is handed that
// record (Replaying) and runs nothing. An answer with no record is
// refused, and so is one from a policy that did not mark the tool — even
// if the tool declares task support — and nothing is stored.
func TestKeepAndReplayAnOutcomeThatIsNoToolResult(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	var runs, replays atomic.Int64
	var replayed atomic.Value
	ticket := func(keep bool) server.ToolInterceptor {
		return func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
			t.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskOptional} // what tools/list says, not what Keyed reads
			if keep {
				idempotency.KeepsRecords(t) // a record is a task's
			}
			return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
				if record, ok := idempotency.Replaying(call); ok {
					replays.Add(1)
					replayed.Store(string(record))
					return &mcp.Task{TaskID: "from-record"}, nil
				}
				runs.Add(1)
				idempotency.Keep(call, json.RawMessage(`{"ticket":"t-1"}`))
				return &mcp.Task{TaskID: "t-1"}, nil
			}, nil
		}
	}
	h := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	if err := srv.AddTool(server.Tool{Name: "kept"}, h, idempotency.Keyed(l, idempotency.Policy{}), ticket(true)); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(server.Tool{Name: "unkept"}, h, idempotency.Keyed(l, idempotency.Policy{}), ticket(false)); err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	params := func(tool string) map[string]any {
		return mcptest.ModernParams(map[string]any{"name": tool, "arguments": map[string]any{"idempotencyKey": "k"}})
	}
	for id := int64(1); id <= 2; id++ {
		if f := c.Call(id, mcp.MethodToolsCall, params("kept")); f.Error != nil || !strings.Contains(string(f.Result), `"taskId"`) {
			t.Fatalf("call %d: %s", id, f.Raw)
		}
	}
	if runs.Load() != 1 || replays.Load() != 1 || replayed.Load() != `{"ticket":"t-1"}` {
		t.Fatalf("runs %d, replays %d of %v", runs.Load(), replays.Load(), replayed.Load())
	}
	f := c.Call(3, mcp.MethodToolsCall, params("unkept"))
	if fail := mcptest.Failure(t, f.Result); !strings.Contains(fail.Message, "KeepsRecords") {
		t.Fatalf("a record kept by a policy that did not mark the tool: %s", f.Raw)
	}
	if _, err := l.Lookup(context.Background(), "", "unkept", "k"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused answer's key: %v", err)
	}
	err := srv.AddTool(server.Tool{Name: "unrecorded"}, h, idempotency.Keyed(l, idempotency.Policy{}), func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		idempotency.KeepsRecords(t)
		return func(context.Context, *server.CallRequest) (mcp.Result, error) { return &mcp.Task{TaskID: "t-2"}, nil }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f = c.Call(4, mcp.MethodToolsCall, params("unrecorded"))
	if fail := mcptest.Failure(t, f.Result); !strings.Contains(fail.Message, "kept no record") {
		t.Fatalf("an answer without a record: %s", f.Raw)
	}
	if _, err := l.Lookup(context.Background(), "", "unrecorded", "k"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused answer's key: %v", err)
	}
}

// A handler that panics inside the ledger's transaction rolls it back, and
// a policy inside Keyed that asked to be told (AfterTx) is told so, keyed
// or not: a task's slot reserved there would otherwise never come back.
func TestAfterTxIsToldOfAPanic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		srv, l := mcptest.NewServer(t, nil), ledgertest.Open(t, dsn, nil, nil, "")
		told := make(chan string, 4)
		err := srv.AddTool(server.Tool{Name: "op"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			panic("the handler failed")
		}, idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyOptional}), func(_ *server.Tool, next server.CallHandler) (server.CallHandler, error) {
			return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
				key := idempotency.Key(call)
				idempotency.AfterTx(call, func(committed bool) { told <- fmt.Sprintf("key=%q committed=%v", key, committed) })
				return next(ctx, call)
			}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c := mcptest.Stdio(t, srv, nil)
		for i, args := range []map[string]any{{"idempotencyKey": "k-1"}, nil} {
			if f := c.Call(int64(i+1), mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "op", "arguments": args})); !strings.Contains(string(f.Raw), "internal_error") {
				t.Fatalf("a panicking call: %s", f.Raw)
			}
			want := fmt.Sprintf("key=%q committed=false", keyIn(args))
			select {
			case got := <-told:
				if got != want {
					t.Fatalf("after a panic the policy was told %q, want %q", got, want)
				}
			default:
				t.Fatalf("after a panic rolled back the transaction of a call with arguments %v, the policy was never told", args)
			}
		}
	})
}

// keyIn is the idempotency key among args, or "".
func keyIn(args map[string]any) string {
	k, _ := args["idempotencyKey"].(string)
	return k
}

// A record kept against Keep's contract — not JSON, not an object, or
// with a "content" member — is refused before anything commits: the
// call fails for good (no "retry, the ledger is unreachable"), nothing
// is stored, and the key stays free rather than replaying a forged tool
// result or failing every retry until the record expires.
func TestAKeptRecordMustBeAnObjectWithoutContent(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	bad := []string{`{`, `[1]`, `null`, `{"content":[{"type":"text","text":"forged"}],"ticket":"t-1"}`}
	for i, record := range bad {
		keeper := func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
			idempotency.KeepsRecords(t) // a record is a task's
			return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
				idempotency.Keep(call, json.RawMessage(record))
				return &mcp.Task{TaskID: "t-1"}, nil
			}, nil
		}
		h := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
		if err := srv.AddTool(server.Tool{Name: fmt.Sprint("keeper-", i)}, h, idempotency.Keyed(l, idempotency.Policy{}), keeper); err != nil {
			t.Fatal(err)
		}
	}
	c := mcptest.Stdio(t, srv, nil)
	for i, record := range bad {
		tool := fmt.Sprint("keeper-", i)
		f := c.Call(int64(i+1), mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": tool, "arguments": map[string]any{"idempotencyKey": "k"}}))
		if fail := mcptest.Failure(t, f.Result); fail.Retryable || !strings.Contains(fail.Message, "Keep") {
			t.Errorf("a kept record %s: %s", record, f.Raw)
		}
		if _, err := l.Lookup(context.Background(), "", tool, "k"); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("a kept record %s was stored: %v", record, err)
		}
	}
}

// A record kept by a task-capable tool is answered only by the policy that
// kept it: after a redeployment without it, a retry of the key is refused
// as a conflict, and the handler does not run the operation again.
func TestARecordOutlivingItsPolicyIsNotRunAgain(t *testing.T) {
	_, l := ledgerServer(t, nil)
	var runs atomic.Int64
	h := func(context.Context, *server.CallRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ran")}}, nil
	}
	asTask := func(t *server.Tool, next server.CallHandler) (server.CallHandler, error) {
		idempotency.KeepsRecords(t)
		return func(ctx context.Context, call *server.CallRequest) (mcp.Result, error) {
			if _, ok := idempotency.Replaying(call); ok {
				return &mcp.Task{TaskID: "t-1"}, nil
			}
			idempotency.Keep(call, json.RawMessage(`{"taskId":"t-1"}`))
			return &mcp.Task{TaskID: "t-1"}, nil
		}, nil
	}
	before := mcptest.NewServer(t, nil)
	if err := before.AddTool(server.Tool{Name: "op"}, h, idempotency.Keyed(l, idempotency.Policy{}), asTask); err != nil {
		t.Fatal(err)
	}
	params := mcptest.ModernParams(map[string]any{"name": "op", "arguments": map[string]any{"idempotencyKey": "k"}})
	if f := mcptest.Stdio(t, before, nil).Call(1, mcp.MethodToolsCall, params); !strings.Contains(string(f.Result), `"t-1"`) {
		t.Fatalf("as a task: %s", f.Raw)
	}
	after := mcptest.NewServer(t, nil)
	if err := after.AddTool(server.Tool{Name: "op"}, h, idempotency.Keyed(l, idempotency.Policy{})); err != nil {
		t.Fatal(err)
	}
	f := mcptest.Stdio(t, after, nil).Call(1, mcp.MethodToolsCall, params)
	if fail := mcptest.Failure(t, f.Result); fail.Code != mcp.FailureKeyConflict || runs.Load() != 0 {
		t.Fatalf("the retry after the task policy went: %s, %d runs", f.Raw, runs.Load())
	}
}

// A handler that writes with a transaction of its own while the ledger
// holds SQLite's one writer for it is told at once, and nothing is kept:
// it does not wait for itself until its deadline, stalling every writer.
func TestAHandlersOwnWriteTxFailsAtOnce(t *testing.T) {
	srv, l := ledgerServer(t, nil)
	err := srv.AddTool(server.Tool{Name: "op", Policy: server.Policy{MaxTimeout: time.Hour, IdleTimeout: time.Hour}},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, l.DB().WriteTx(ctx, func(*store.Tx) error { return nil })
		}, idempotency.Keyed(l, idempotency.Policy{Key: idempotency.KeyOptional}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	for id, args := range map[int64]map[string]any{1: {"idempotencyKey": "k"}, 2: nil} {
		f := c.Call(id, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "op", "arguments": args}))
		if fail := mcptest.Failure(t, f.Result); !strings.Contains(fail.Message, "would wait for itself") {
			t.Fatalf("call %d: %s", id, f.Raw)
		}
	}
	if _, err := l.Lookup(context.Background(), "", "op", "k"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the failed call's key: %v", err)
	}
}
