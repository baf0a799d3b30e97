package idempotency_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/ledgertest"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// A duplicate of a keyed call still running is told to come back after
// about as long as the call has run — a 3 s call's duplicate after 3 s,
// not the lease's 5 min — and never after the call's own deadline (the
// tool's maximum, which the server holds every call to), nor after what
// its lease has left.
func TestInProgressRetryAfterFollowsTheCall(t *testing.T) {
	storetest.Each(t, func(t *testing.T, dsn string) {
		const maxRun, lease = time.Minute, 5 * time.Minute
		clk := newClock()
		l := ledgertest.Open(t, dsn, nil, &ledger.Options{Lease: lease, Now: clk.Now}, "")
		srv := mcptest.NewServer(t, nil)
		entered, finish := make(chan struct{}), make(chan struct{})
		err := srv.AddTool(server.Tool{Name: "send", Policy: server.Policy{MaxTimeout: maxRun}}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			close(entered)
			<-finish
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("sent")}}, nil
		}, idempotency.Keyed(l, idempotency.Policy{External: true, AtMostOnce: true, KeyArgument: "requestId"}))
		if err != nil {
			t.Fatal(err)
		}
		c := mcptest.Stdio(t, srv, nil)
		var once sync.Once
		release := func() { once.Do(func() { close(finish) }) }
		t.Cleanup(release) // before the client's: a failed test lets the call end
		sentAt := time.Now()
		c.Request(1, mcp.MethodToolsCall, sendParams("r-1", nil))
		<-entered
		claimedBy := time.Now() // the call's deadline is at most maxRun after this
		rec, err := l.Lookup(context.Background(), "", "send", "r-1")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Deadline.Before(sentAt.Add(maxRun).Truncate(time.Millisecond)) || rec.Deadline.After(claimedBy.Add(maxRun)) {
			t.Fatalf("the claim records its holder's deadline as %v, want the call's maximum, %v after it arrived", rec.Deadline, maxRun)
		}
		id := int64(1)
		told := func() time.Duration {
			t.Helper()
			id++
			f := result(t, c.Call(id, mcp.MethodToolsCall, sendParams("r-1", nil))).failure(t)
			if f.Code != mcp.FailureInProgress || !f.Retryable {
				t.Fatalf("a duplicate = %+v, want in_progress", f)
			}
			d := time.Duration(f.RetryAfterMs) * time.Millisecond
			if left := rec.LeaseUntil.Sub(clk.Now()); d > left {
				t.Fatalf("a duplicate was told to retry after %v, past the %v the lease has left", d, left)
			}
			return d
		}

		clk.Advance(3 * time.Second)
		if d := told(); d != 3*time.Second {
			t.Fatalf("a duplicate 3 s into the call was told to retry after %v, want 3s (the lease has %v left)", d, rec.LeaseUntil.Sub(clk.Now()))
		}
		clk.Advance(maxRun - 3*time.Second - 500*time.Millisecond)
		if d, left := told(), rec.Deadline.Sub(clk.Now()); d != left || d > time.Second {
			t.Fatalf("a duplicate near the call's deadline was told to retry after %v, want what the call has left, %v", d, left)
		}
		release()
		if f, _ := c.Await(1); f.Error != nil {
			t.Fatalf("the call: %s", f.Raw)
		}
	})
}
