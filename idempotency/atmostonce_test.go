package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// forwardOnce is a tool in front of a receiver that does not honour keys:
// each call says how its attempt ends.
func forwardOnce(t *testing.T, l *ledger.Ledger, p idempotency.Policy, attempt func(n int64, ctx context.Context) (*mcp.CallToolResult, error)) (*mcptest.Client, *atomic.Int64) {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	var n atomic.Int64
	p.External, p.AtMostOnce = true, true
	err := srv.AddTool(server.Tool{Name: "send", Policy: server.Policy{MaxTimeout: time.Hour}}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return attempt(n.Add(1), ctx)
	}, idempotency.Keyed(l, p))
	if err != nil {
		t.Fatal(err)
	}
	return mcptest.Stdio(t, srv, nil), &n
}

func sendParams(key string, args map[string]any) map[string]any {
	a := map[string]any{"to": "ops"}
	for k, v := range args {
		a[k] = v
	}
	if key != "" {
		a["requestId"] = key
	}
	return mcptest.ModernParams(map[string]any{"name": "send", "arguments": a})
}

func result(t *testing.T, f mcptest.Frame) callResult {
	t.Helper()
	var r callResult
	if err := json.Unmarshal(f.Result, &r); err != nil || f.Error != nil {
		t.Fatalf("tools/call: %s", f.Raw)
	}
	return r
}

// An answer lost after the request may have reached the receiver leaves
// the outcome unknown: the retry with the key is not run, and is told so
// with the read to check with; an operator's resolution answers later
// retries.
func TestAtMostOnceLostAnswerIsNeverRunAgain(t *testing.T) {
	_, l := ledgerServer(t, nil)
	c, n := forwardOnce(t, l, idempotency.Policy{Key: idempotency.KeyOptional, KeyArgument: "requestId", ReconcileWith: "list_messages"}, func(n int64, _ context.Context) (*mcp.CallToolResult, error) {
		return nil, &mcp.ToolError{Code: mcp.FailureOutcomeUnknown, Message: "the connection to the receiver ended with the call in flight"}
	})
	first := result(t, c.Call(1, mcp.MethodToolsCall, sendParams("m-1", nil))).failure(t)
	if first.Code != mcp.FailureOutcomeUnknown || first.Retryable {
		t.Fatalf("the lost call = %+v", first)
	}
	retry := result(t, c.Call(2, mcp.MethodToolsCall, sendParams("m-1", nil))).failure(t)
	if retry.Code != mcp.FailureOutcomeUnknown || retry.Retryable || !strings.Contains(retry.Message, "list_messages") || n.Load() != 1 {
		t.Fatalf("the retry = %+v after %d attempts; want outcome_unknown naming list_messages, not run", retry, n.Load())
	}
	if retry.Details["reason"] != "the connection to the receiver ended with the call in flight" || retry.Details["idempotencyKey"] != "m-1" {
		t.Fatalf("the retry's details = %v", retry.Details)
	}
	rec, err := l.Lookup(context.Background(), "", "send", "m-1")
	if err != nil || rec.State != ledger.OutcomeUnknown {
		t.Fatalf("record = %+v, %v", rec, err)
	}
	// Other arguments with the key are still a conflict, not unknown.
	if f := result(t, c.Call(3, mcp.MethodToolsCall, sendParams("m-1", map[string]any{"to": "dev"}))).failure(t); f.Code != mcp.FailureKeyConflict {
		t.Fatalf("other arguments = %+v", f)
	}
	if err := l.Resolve(context.Background(), "", "send", "m-1", json.RawMessage(`{"content":[{"type":"text","text":"delivered, found by hand"}]}`)); err != nil {
		t.Fatal(err)
	}
	after := result(t, c.Call(4, mcp.MethodToolsCall, sendParams("m-1", nil)))
	if after.IsError || after.Meta[mcp.MetaReplayed] != true || !strings.Contains(string(after.raw), "found by hand") || n.Load() != 1 {
		t.Fatalf("after Resolve = %s, %d attempts", after.raw, n.Load())
	}
}

// A failure the handler marks NotRun frees the key: the retry runs. A
// result — an isError one included — and a decision the handler made are
// stored and replayed.
func TestAtMostOnceNotRunFreesTheKey(t *testing.T) {
	_, l := ledgerServer(t, nil)
	c, n := forwardOnce(t, l, idempotency.Policy{Key: idempotency.KeyOptional, KeyArgument: "requestId"}, func(n int64, _ context.Context) (*mcp.CallToolResult, error) {
		switch n {
		case 1:
			return nil, idempotency.NotRun(&mcp.ToolError{Code: mcp.FailureUpstreamUnavailable, Message: "the receiver is down", Retryable: true})
		case 2:
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("mailbox full")}, IsError: true}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent")}}, nil
	})
	if f := result(t, c.Call(1, mcp.MethodToolsCall, sendParams("m-2", nil))).failure(t); f.Code != mcp.FailureUpstreamUnavailable || !f.Retryable {
		t.Fatalf("not run = %+v", f)
	}
	second := result(t, c.Call(2, mcp.MethodToolsCall, sendParams("m-2", nil)))
	third := result(t, c.Call(3, mcp.MethodToolsCall, sendParams("m-2", nil)))
	if !second.IsError || !third.IsError || third.Meta[mcp.MetaReplayed] != true || n.Load() != 2 {
		t.Fatalf("after NotRun: %s, then %s, %d attempts; want the second run stored and replayed", second.raw, third.raw, n.Load())
	}
	// A call without the key is forwarded every time, and says so.
	unkeyed := result(t, c.Call(4, mcp.MethodToolsCall, sendParams("", nil)))
	if unkeyed.Meta[mcp.MetaRetrySafe] != false || n.Load() != 3 {
		t.Fatalf("unkeyed = %s after %d attempts", unkeyed.raw, n.Load())
	}
}

// A call cancelled after it may have reached the receiver leaves the key
// unknown; one whose handler runs past the lease keeps it, renewing.
func TestAtMostOnceCancelledAndLongCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l := ledgerServer(t, &ledger.Options{Lease: 3 * time.Second})
		entered := make(chan struct{}, 4)
		finish := make(chan struct{})
		c, n := forwardOnce(t, l, idempotency.Policy{Key: idempotency.KeyOptional, KeyArgument: "requestId"}, func(n int64, ctx context.Context) (*mcp.CallToolResult, error) {
			entered <- struct{}{}
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-finish:
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent")}}, nil
			}
		})
		c.Request(1, mcp.MethodToolsCall, sendParams("m-3", nil))
		<-entered
		c.Notify(mcp.NotificationCancelled, map[string]any{"requestId": 1})
		synctest.Wait()
		busyOrUnknown := result(t, c.Call(2, mcp.MethodToolsCall, sendParams("m-3", nil))).failure(t)
		if busyOrUnknown.Code != mcp.FailureOutcomeUnknown || !strings.Contains(busyOrUnknown.Details["reason"].(string), "cancelled") || n.Load() != 1 {
			t.Fatalf("retry after a cancelled call = %+v, %d attempts", busyOrUnknown, n.Load())
		}

		c.Request(3, mcp.MethodToolsCall, sendParams("m-4", nil))
		<-entered
		time.Sleep(10 * time.Second) // three leases: the handler's renewals keep the key
		synctest.Wait()
		dup := result(t, c.Call(4, mcp.MethodToolsCall, sendParams("m-4", nil))).failure(t)
		if dup.Code != mcp.FailureInProgress || !dup.Retryable {
			t.Fatalf("a duplicate of a long call = %+v, want in_progress", dup)
		}
		close(finish)
		if f, _ := c.Await(3); !strings.Contains(string(f.Result), "sent") {
			t.Fatalf("the long call = %s", f.Raw)
		}
		if again := result(t, c.Call(5, mcp.MethodToolsCall, sendParams("m-4", nil))); again.Meta[mcp.MetaReplayed] != true || n.Load() != 2 {
			t.Fatalf("after the long call = %s, %d attempts", again.raw, n.Load())
		}
	})
}

// What no decision was is never stored as the key's outcome: a NotRun
// failure, even one that is a ToolError, frees the key; a failed result
// the receiver marks retryable is not replayed. A panic's text, or an
// error's, is logged, never shown to later callers.
func TestAtMostOnceStoresOnlyDecisions(t *testing.T) {
	_, l := ledgerServer(t, nil)
	c, n := forwardOnce(t, l, idempotency.Policy{Key: idempotency.KeyOptional, KeyArgument: "requestId"}, func(n int64, _ context.Context) (*mcp.CallToolResult, error) {
		switch n {
		case 1:
			return nil, idempotency.NotRun(&mcp.ToolError{Code: mcp.FailureUpstream, Message: "the receiver answered HTTP 401"})
		case 2:
			return (&mcp.ToolError{Code: mcp.FailureOverloaded, Message: "busy", Retryable: true, RetryAfter: time.Second}).Result(), nil
		case 3:
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent")}}, nil
		case 4:
			panic("db password=hunter2")
		}
		return nil, errors.New("dial 10.0.0.5: secret internals")
	})
	if f := result(t, c.Call(1, mcp.MethodToolsCall, sendParams("s-1", nil))).failure(t); f.Code != mcp.FailureUpstream {
		t.Fatalf("NotRun = %+v", f)
	}
	if f := result(t, c.Call(2, mcp.MethodToolsCall, sendParams("s-1", nil))).failure(t); f.Code != mcp.FailureOverloaded || !f.Retryable || n.Load() != 2 {
		t.Fatalf("after NotRun = %+v, %d attempts; want the retry run", f, n.Load())
	}
	if ok := result(t, c.Call(3, mcp.MethodToolsCall, sendParams("s-1", nil))); ok.IsError || n.Load() != 3 {
		t.Fatalf("after a retryable result = %s, %d attempts; want the retry run", ok.raw, n.Load())
	}
	c.Call(4, mcp.MethodToolsCall, sendParams("s-2", nil))
	c.Call(5, mcp.MethodToolsCall, sendParams("s-3", nil))
	for id, key := range map[int64]string{6: "s-2", 7: "s-3"} {
		f := result(t, c.Call(id, mcp.MethodToolsCall, sendParams(key, nil))).failure(t)
		b, _ := json.Marshal(f)
		if f.Code != mcp.FailureOutcomeUnknown || strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "10.0.0.5") {
			t.Fatalf("a retry of %s = %s; want outcome_unknown without the handler's internals", key, b)
		}
	}
}
