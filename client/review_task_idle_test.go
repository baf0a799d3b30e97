package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// REVIEW 18 reproduction: a task's idle clock ignores lastUpdatedAt, which
// mcprel's own server advances at every checkpoint (taskserver/routes.go
// timestamp(t.UpdatedAt)). A task that checkpoints every second with an
// unchanged status message (Checkpoint(ctx, "") keeps it; taskbench
// checkpoints "step") is alive, yet the client sends tasks/cancel and
// abandons it when --idle (30 s by default) passes.
func TestReviewTaskIdleIgnoresLastUpdatedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls, cancels atomic.Int64
		start := time.Now()
		c, _, _ := dialWith(t, nil, func(f *fakeServer, m jsonrpc.Message) {
			switch m.Method {
			case mcp.MethodToolsCall:
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"task","taskId":"t1","status":"working","pollIntervalMs":1000}}`, m.ID)
			case mcp.MethodTasksGet:
				polls.Add(1)
				// Checkpointed just now: lastUpdatedAt moves on every poll.
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1","status":"working","statusMessage":"step","lastUpdatedAt":%q,"pollIntervalMs":1000}}`,
					m.ID, start.Add(time.Since(start)).UTC().Format(time.RFC3339Nano))
			case mcp.MethodTasksCancel:
				cancels.Add(1)
				f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","taskId":"t1","status":"working"}}`, m.ID)
			}
		})
		_, err := c.CallToolTask(context.Background(), "long", nil, &client.CallOptions{Idle: 3 * time.Second, Max: 20 * time.Second}, nil)
		var de *client.DeadlineError
		if errors.As(err, &de) && de.Clock == client.IdleClock {
			t.Fatalf("a task checkpointing every second was abandoned by the idle clock after %v (%d polls, %d tasks/cancel): %v",
				time.Since(start), polls.Load(), cancels.Load(), err)
		}
	})
}
