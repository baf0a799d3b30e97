package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// A request still in the client's write queue when its deadline fires is
// withdrawn: its error says it was never sent, not that the server was
// told to cancel it.
func TestDeadlineOfARequestNeverSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := make(chan struct{})
		c, _, _ := dialWith(t, nil, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				<-stop // the server reads nothing more
			}
		})
		t.Cleanup(func() { close(stop) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The first call stops the server reading; the second is taken by
		// the client's writer, which blocks writing it; the third waits
		// in the queue behind it.
		go c.CallTool(ctx, "block", nil, &client.CallOptions{Max: time.Hour})
		synctest.Wait()
		go c.CallTool(ctx, "stuck", nil, &client.CallOptions{Max: time.Hour})
		synctest.Wait()
		_, err := c.CallTool(context.Background(), "queued", nil, &client.CallOptions{Max: 2 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Clock != client.MaxClock || de.Cancel != client.RequestNotSent {
			t.Fatalf("%v; want the max deadline of a request never sent", err)
		}
		if msg := err.Error(); strings.Contains(msg, "told to cancel") || !strings.Contains(msg, "never sent") {
			t.Fatalf("the error reads %q; want it to say the request was never sent", msg)
		}
	})
}

// A request the server received and did not answer is cancelled by a
// queued notification, and its error says that much.
func TestDeadlineOfARequestSentSaysTheCancellationQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, f, _ := dialWith(t, nil, func(*fakeServer, jsonrpc.Message) {})
		_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Max: 2 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Cancel != client.CancelQueued || !strings.Contains(err.Error(), "cancellation was queued") {
			t.Fatalf("%v; want the max deadline with a cancellation queued", err)
		}
		synctest.Wait()
		if n := len(f.sent(mcp.NotificationCancelled)); n != 1 {
			t.Fatalf("%d notifications/cancelled; want 1", n)
		}
	})
}

// A task abandoned when tasks/cancel fails says so once: its message does
// not also claim the server was told to cancel.
func TestTaskAbandonedWithCancelFailedSaysSoOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls, cancels atomic.Int64
		c, _, _ := dialWith(t, &client.Options{ProbeTimeout: time.Second}, func(f *fakeServer, m jsonrpc.Message) {
			switch m.Method {
			case mcp.MethodToolsCall:
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"task","taskId":"t1","status":"working","pollIntervalMs":1000}}`, m.ID)
			case mcp.MethodTasksGet:
				polls.Add(1)
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1","status":"working","pollIntervalMs":1000}}`, m.ID)
			case mcp.MethodTasksCancel:
				cancels.Add(1) // never answered
			}
		})
		_, err := c.CallToolTask(context.Background(), "long", nil, &client.CallOptions{Idle: time.Hour, Max: 5 * time.Second}, nil)
		var ta *client.TaskAbandonedError
		if !errors.As(err, &ta) || ta.CancelErr == nil || cancels.Load() != 1 {
			t.Fatalf("%v (%d tasks/cancel); want the task abandoned with tasks/cancel failed", err, cancels.Load())
		}
		msg := err.Error()
		if strings.Contains(msg, "told to cancel") || strings.Count(msg, "tasks/cancel failed") != 1 {
			t.Fatalf("the error reads %q; want tasks/cancel's failure said once, and no claim that the server was told to cancel", msg)
		}
	})
}
