package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// A cancellation queued for a server that reads is written:
// WaitCancellations returns nil once it is, and the server has it.
func TestWaitCancellationsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, f, _ := dialWith(t, nil, func(*fakeServer, jsonrpc.Message) {})
		if err := c.WaitCancellations(context.Background()); err != nil {
			t.Fatalf("with nothing queued: %v", err)
		}
		_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Max: 2 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Cancel != client.CancelQueued {
			t.Fatalf("%v; want the max deadline with a cancellation queued", err)
		}
		if err := c.WaitCancellations(context.Background()); err != nil {
			t.Fatalf("WaitCancellations: %v", err)
		}
		synctest.Wait()
		if n := len(f.sent(mcp.NotificationCancelled)); n != 1 {
			t.Fatalf("%d notifications/cancelled reached the server; want 1", n)
		}
	})
}

// A cancellation a server never reads is not waited for past the
// caller's context, and the error says it is still on its way.
func TestWaitCancellationsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := make(chan struct{})
		c, _, _ := dialWith(t, nil, func(f *fakeServer, m jsonrpc.Message) {
			if m.Method == mcp.MethodToolsCall {
				<-stop // the server reads nothing more
			}
		})
		t.Cleanup(func() { close(stop) })
		_, err := c.CallTool(context.Background(), "slow", nil, &client.CallOptions{Max: 2 * time.Second})
		var de *client.DeadlineError
		if !errors.As(err, &de) || de.Cancel != client.CancelQueued {
			t.Fatalf("%v; want the max deadline with a cancellation queued", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.WaitCancellations(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitCancellations: %v; want the context's deadline, the cancellation still on its way", err)
		}
	})
}
