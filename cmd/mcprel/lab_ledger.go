package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
	"github.com/mcprel/mcprel/server/outbound"
)

// dialLab connects the client package to a new "mcprel serve --stdio" on
// db.
func dialLab(ctx context.Context, self, db string) (*client.Client, error) {
	return client.DialStdio(ctx, []string{self, "serve", "--stdio", "--lab", "--db", db, "--log-level", "warn"}, nil)
}

// labOutcome is what a call's result says, for a record.
type labOutcome struct {
	structured json.RawMessage
	replayed   any
	failure    string
}

func callTool(ctx context.Context, c *client.Client, tool string, args map[string]any) (labOutcome, error) {
	res, err := c.CallTool(ctx, tool, args, nil)
	if err != nil {
		return labOutcome{}, fmt.Errorf("demo: %s: %w", tool, err)
	}
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return labOutcome{}, err
	}
	o := labOutcome{structured: structured, replayed: res.Meta[mcp.MetaReplayed]}
	if res.IsError {
		f, _ := res.Meta[mcp.MetaFailure].(map[string]any)
		o.failure = fmt.Sprint(f["code"])
	}
	return o, nil
}

// field reads one member of a structured result.
func (o labOutcome) field(name string) any {
	var m map[string]any
	json.Unmarshal(o.structured, &m)
	return m[name]
}

// ledgerRecords runs the ledger's scenarios against servers on db, over
// stdio through the client package: a mutation without a key runs twice,
// with a key once; a key reused for another quantity is refused; two
// connections racing one key run it once; a mutated result leaves the
// replay unchanged; and after the server closed the file, a new one
// reconciles the reservation by key.
func ledgerRecords(ctx context.Context, self, db string) ([]Record, error) {
	c, err := dialLab(ctx, self, db)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var records []Record

	r := Record{Section: "ledger", Name: "a mutation without a key, sent twice under two JSON-RPC ids"}
	first, err := callTool(ctx, c, "charge_account", map[string]any{"account": "lab-alice", "cents": 500})
	if err != nil {
		return nil, err
	}
	second, err := callTool(ctx, c, "charge_account", map[string]any{"account": "lab-alice", "cents": 500})
	if err != nil {
		return nil, err
	}
	r.add("receipts", []any{first.field("receiptId"), second.field("receiptId")})
	r.add("executions", countDistinct(first.field("receiptId"), second.field("receiptId")))
	r.add("why", "a new JSON-RPC id is not business idempotency: without a key the charge runs every time")
	records = append(records, r)

	r = Record{Section: "ledger", Name: "the same mutation with an idempotency key, sent twice"}
	args := map[string]any{"account": "lab-bob", "cents": 700, "idempotencyKey": "lab-invoice-1"}
	if first, err = callTool(ctx, c, "charge_account", args); err != nil {
		return nil, err
	}
	if second, err = callTool(ctx, c, "charge_account", args); err != nil {
		return nil, err
	}
	r.add("receipts", []any{first.field("receiptId"), second.field("receiptId")})
	r.add("executions", countDistinct(first.field("receiptId"), second.field("receiptId")))
	r.add("second replayed", second.replayed)
	records = append(records, r)

	if _, err := callTool(ctx, c, "set_stock", map[string]any{"sku": "lab-widget", "quantity": 10, "expectedVersion": 0}); err != nil {
		return nil, err
	}
	r = Record{Section: "ledger", Name: "a key reused with a changed quantity"}
	reserved, err := callTool(ctx, c, "reserve_inventory", map[string]any{"sku": "lab-widget", "quantity": 3, "idempotencyKey": "lab-order-1"})
	if err != nil {
		return nil, err
	}
	changed, err := callTool(ctx, c, "reserve_inventory", map[string]any{"sku": "lab-widget", "quantity": 4, "idempotencyKey": "lab-order-1"})
	if err != nil {
		return nil, err
	}
	stock, err := callTool(ctx, c, "get_inventory", map[string]any{"sku": "lab-widget"})
	if err != nil {
		return nil, err
	}
	r.add("first (quantity 3)", fmt.Sprintf("reserved, %v left", reserved.field("remaining")))
	r.add("reuse (quantity 4)", "refused: "+changed.failure)
	r.add("stock after both", stock.field("available"))
	records = append(records, r)

	// Two connections, two server processes on the same database file,
	// released together at a barrier with one key.
	r = Record{Section: "ledger", Name: "two connections racing one key at a barrier"}
	other, err := dialLab(ctx, self, db)
	if err != nil {
		return nil, err
	}
	defer other.Close()
	var wg sync.WaitGroup
	barrier := make(chan struct{})
	outcomes := make([]labOutcome, 2)
	errs := make([]error, 2)
	for i, conn := range []*client.Client{c, other} {
		wg.Go(func() {
			<-barrier
			outcomes[i], errs[i] = callTool(ctx, conn, "reserve_inventory", map[string]any{"sku": "lab-widget", "quantity": 2, "idempotencyKey": "lab-order-2"})
		})
	}
	close(barrier)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	lookup, err := callTool(ctx, c, "lookup_operation", map[string]any{"tool": "reserve_inventory", "idempotencyKey": "lab-order-2"})
	if err != nil {
		return nil, err
	}
	if stock, err = callTool(ctx, c, "get_inventory", map[string]any{"sku": "lab-widget"}); err != nil {
		return nil, err
	}
	r.add("replayed", []any{outcomes[0].replayed, outcomes[1].replayed})
	r.add("same reservation", bytes.Equal(outcomes[0].structured, outcomes[1].structured))
	r.add("executions (ledger)", lookup.field("executions"))
	r.add("stock after", stock.field("available"))
	records = append(records, r)

	r = Record{Section: "ledger", Name: "a returned result mutated by its caller, then replayed"}
	var mine map[string]any
	json.Unmarshal(reserved.structured, &mine)
	mine["quantity"], mine["reservationId"] = 999, "tampered"
	replay, err := callTool(ctx, c, "reserve_inventory", map[string]any{"sku": "lab-widget", "quantity": 3, "idempotencyKey": "lab-order-1"})
	if err != nil {
		return nil, err
	}
	r.add("caller's copy after mutation", fmt.Sprintf("quantity %v, reservationId %v", mine["quantity"], mine["reservationId"]))
	r.add("replay", fmt.Sprintf("quantity %v, reservationId %v", replay.field("quantity"), replay.field("reservationId")))
	r.add("replay equals the first result", bytes.Equal(replay.structured, reserved.structured))
	records = append(records, r)

	// The servers exit and close the file; a new one opens it.
	c.Close()
	other.Close()
	r = Record{Section: "ledger", Name: "the file closed, reopened by a new server, reconciled by key"}
	again, err := dialLab(ctx, self, db)
	if err != nil {
		return nil, err
	}
	defer again.Close()
	found, err := callTool(ctx, again, "lookup_operation", map[string]any{"tool": "reserve_inventory", "idempotencyKey": "lab-order-1"})
	if err != nil {
		return nil, err
	}
	var stored struct {
		State      string `json:"state"`
		Executions int    `json:"executions"`
		Result     struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	json.Unmarshal(found.structured, &stored)
	r.add("state", stored.State)
	r.add("executions", stored.Executions)
	r.add("stored result equals the first", jsonEqual(stored.Result.StructuredContent, reserved.structured))
	records = append(records, r)
	return records, nil
}

func countDistinct(values ...any) int {
	seen := map[string]bool{}
	for _, v := range values {
		seen[fmt.Sprint(v)] = true
	}
	return len(seen)
}

// jsonEqual compares two JSON values semantically.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// overloadRecord floods a client that is not reading: the server's
// outbox for the connection is bounded, progress is coalesced and
// dropped, and the final response is kept and carries the refetch flag.
func overloadRecord(p *labProcess, reports int) (Record, error) {
	r := Record{Section: "overload", Name: "a bounded buffer under a client that stops reading"}
	// Large reports, one every 2 ms: the pipe to the client fills after a
	// few, and the rest wait in the connection's outbox, where each newer
	// report replaces the unsent one.
	if err := p.call("F1", "lab_flood", fmt.Sprintf(`{"reports":%d,"everyMs":2,"padBytes":16384}`, reports), "F"); err != nil {
		return r, err
	}
	// The server recorded the call's end (its response is queued) while
	// the client read nothing: only now does it start reading.
	line, err := p.logs.requestLine("F1")
	if err != nil {
		return r, err
	}
	p.read()
	frames, err := p.until("F1")
	if err != nil {
		return r, err
	}
	response, delivered := framesFor(frames, "F1", "F")
	r.add("capacity", fmt.Sprintf("%d messages per connection (and bytes bounded by the server's budget)", outbound.DefaultCapacity))
	r.add("reports produced", reports)
	r.add("reports delivered", delivered)
	r.add("terminal state", outcomeOf(line))
	r.add("final response present", response != nil)
	if response != nil {
		var res struct {
			Meta map[string]any `json:"_meta"`
		}
		json.Unmarshal(response.Result, &res)
		r.add("refetch flag", res.Meta[mcp.MetaRefetch] == true)
	}
	r.add("client must", "treat the progress it saw as a sample, and refetch the state from its authoritative read when the flag is set")
	return r, nil
}

// taskRecord shows a durable task's cancellation as an acknowledged
// intent: acknowledged at once, the task still working, observed by the
// worker at its next checkpoint, then cancelled.
func taskRecord(p *labProcess) (Record, error) {
	r := Record{Section: "task", Name: "a durable task cancelled: intent acknowledged, observed at a checkpoint"}
	meta := modernMeta(`,"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`)
	meta = strings.Replace(meta, fmt.Sprintf(`%q:{},`, mcp.MetaClientCapabilities), "", 1)
	send := func(id, method, params string) (labFrame, error) {
		if err := p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":{%s,%s}}`, id, method, params, meta)); err != nil {
			return labFrame{}, err
		}
		frames, err := p.until(id)
		if err != nil {
			return labFrame{}, err
		}
		f := frames[len(frames)-1]
		if f.Error != nil {
			return f, fmt.Errorf("demo: %s: %s", method, f.Error)
		}
		return f, nil
	}
	var task struct {
		TaskID        string `json:"taskId"`
		Status        string `json:"status"`
		StatusMessage string `json:"statusMessage"`
	}
	created, err := send("T1", "tools/call", `"name":"lab_task","arguments":{"gate":"T"}`)
	if err != nil {
		return r, err
	}
	json.Unmarshal(created.Result, &task)
	id, createdStatus := task.TaskID, task.Status
	get := func(reqID string) (string, error) {
		f, err := send(reqID, mcp.MethodTasksGet, fmt.Sprintf(`"taskId":%q`, id))
		if err != nil {
			return "", err
		}
		json.Unmarshal(f.Result, &task)
		return task.Status, nil
	}
	// The worker reached its first checkpoint and waits at the gate.
	if _, err := send("T-wait", "tools/call", `"name":"lab_wait","arguments":{"gate":"T"}`); err != nil {
		return r, err
	}
	ack, err := send("T2", mcp.MethodTasksCancel, fmt.Sprintf(`"taskId":%q`, id))
	if err != nil {
		return r, err
	}
	afterAck, err := get("T3")
	if err != nil {
		return r, err
	}
	// Let the worker go on to its next checkpoint.
	if _, err := send("T4", "tools/call", `"name":"lab_release","arguments":{"gate":"T"}`); err != nil {
		return r, err
	}
	final, err := get("T5")
	if err != nil {
		return r, err
	}
	r.add("created", fmt.Sprintf("status %s, task %s", createdStatus, id))
	r.add("tasks/cancel", "acknowledged: "+strings.TrimSpace(string(ack.Result)))
	r.add("tasks/get after the acknowledgement", afterAck)
	r.add("worker", "reached its next checkpoint and observed the intent")
	r.add("tasks/get after the checkpoint", final)
	r.add("client must", "poll (or listen) until a terminal status: an acknowledgement is not cancellation")
	return r, nil
}

// wireLog is an http.RoundTripper that notes each JSON-RPC request the
// client POSTs: its method, its id and whether it carried Last-Event-ID.
type wireLog struct {
	mu     sync.Mutex
	posts  []postedRequest
	listen io.Closer // the body of the latest listen stream
}

type postedRequest struct {
	Method, ID  string
	LastEventID bool
}

func (w *wireLog) RoundTrip(req *http.Request) (*http.Response, error) {
	var method string
	if req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			json.NewDecoder(body).Decode(&m)
			method = m.Method
			w.mu.Lock()
			w.posts = append(w.posts, postedRequest{m.Method, string(m.ID), req.Header.Get(mcp.HeaderLastEventID) != ""})
			w.mu.Unlock()
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && method == mcp.MethodListen {
		w.mu.Lock()
		w.listen = resp.Body
		w.mu.Unlock()
	}
	return resp, err
}

// cut breaks the latest listen stream, as a network failure would.
func (w *wireLog) cut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.listen != nil {
		w.listen.Close()
	}
}

func (w *wireLog) requests() []postedRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]postedRequest(nil), w.posts...)
}

// reconnectRecord follows the client package's reconnect plan over
// Streamable HTTP (2026-07-28): a subscriptions/listen stream is cut, as
// a network failure would cut it, and the record shows what the client
// sent to get back: a new listen request with a new id, no Last-Event-ID,
// then the refetch. It adds the backoff schedule the client draws from.
func reconnectRecord(ctx context.Context, self, db string) (Record, error) {
	r := Record{Section: "streams", Name: "the reconnect plan (Streamable HTTP, 2026-07-28)"}
	h, err := startHTTPLab(ctx, self, db, nil)
	if err != nil {
		return r, err
	}
	defer h.stop()
	wire := &wireLog{}
	c, err := client.DialHTTP(ctx, h.url, &client.Options{HTTPClient: &http.Client{Transport: wire}})
	if err != nil {
		return r, err
	}
	defer c.Close()
	refetched := make(chan int, 4)
	sub, err := c.Listen(ctx, client.ListenOptions{
		Filter: mcp.SubscriptionFilter{ToolsListChanged: true},
		Refetch: func(ctx context.Context) {
			tools, _ := c.ListTools(ctx)
			refetched <- len(tools)
		},
	})
	if err != nil {
		return r, err
	}
	defer sub.Close()
	wire.cut()
	var tools int
	select {
	case tools = <-refetched:
	case <-time.After(30 * time.Second):
		return r, errors.New("demo: the client did not reconnect within 30s")
	}
	var listens []string
	lastEventID := false
	for _, p := range wire.requests() {
		if p.Method == mcp.MethodListen {
			listens = append(listens, p.ID)
		}
		lastEventID = lastEventID || p.LastEventID
	}
	r.add("listen requests (ids)", listens)
	r.add("reconnections", sub.Reconnects())
	r.add("Last-Event-ID sent", lastEventID)
	r.add("refetched", fmt.Sprintf("tools/list after the new stream was acknowledged (%d tools): what changed meanwhile was never sent", tools))
	r.add("mutations", "never replayed automatically; an unsafe one is reconciled by key (lookup_operation) first")
	b := retry.Backoff{Steady: true}
	var schedule []string
	for n := range 6 {
		schedule = append(schedule, b.Bound(n).String())
	}
	r.add("backoff bounds of the first 6 reconnections", strings.Join(schedule, ", "))
	r.add("jitter", "each client draws once within the bound and keeps its place (steady), so a herd stays spread")
	return r, nil
}
