package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
)

// lastUpdatedServer answers a task call with a task that stays "working"
// with the message "step" and reports at each poll the lastUpdatedAt that
// updated gives (now, since the task started), until done is reached.
func lastUpdatedServer(start time.Time, updated func(now time.Duration) time.Duration, done time.Duration, polls, cancels *atomic.Int64) func(*fakeServer, jsonrpc.Message) {
	return taskServer(func(int) string {
		now := time.Since(start)
		at := start.Add(updated(now)).UTC().Format(time.RFC3339Nano)
		if now >= done {
			return fmt.Sprintf(`"status":"completed","lastUpdatedAt":%q,"result":{"content":[{"type":"text","text":"done"}]}`, at)
		}
		return fmt.Sprintf(`%s,"lastUpdatedAt":%q`, workingWith("step"), at)
	}, polls, cancels)
}

// A task's idle clock is reset when its lastUpdatedAt advances, which
// mcprel's own server does at every checkpoint (taskserver/routes.go
// timestamp(t.UpdatedAt)). A task that checkpoints every second with an
// unchanged status message (Checkpoint(ctx, "") keeps it; taskbench
// checkpoints "step") is alive: it must not be cancelled and abandoned
// when --idle (30 s by default) passes.
func TestTaskIdleResetByLastUpdatedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls, cancels atomic.Int64
		start := time.Now()
		// Checkpointed just now: lastUpdatedAt moves on every poll; the
		// task completes after 10 s, past three idle periods.
		c, _, _ := dialWith(t, nil, lastUpdatedServer(start, func(now time.Duration) time.Duration { return now }, 10*time.Second, &polls, &cancels))
		res, err := c.CallToolTask(context.Background(), "long", nil, &client.CallOptions{Idle: 3 * time.Second, Max: 20 * time.Second}, nil)
		if err != nil || res == nil || len(res.Content) != 1 || cancels.Load() != 0 {
			t.Fatalf("a task checkpointing every second ended after %v (%d polls, %d tasks/cancel): %v; want its result",
				time.Since(start), polls.Load(), cancels.Load(), err)
		}
	})
}

// A lastUpdatedAt that stops advancing (repeated, or moved back) is no
// news: the idle clock fires three seconds after the last advance.
func TestTaskIdleNotResetByStaleLastUpdatedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls, cancels atomic.Int64
		start := time.Now()
		// Advances until 4 s, then goes back a second and stays there.
		updated := func(now time.Duration) time.Duration {
			if now <= 4*time.Second {
				return now
			}
			return 3 * time.Second
		}
		c, _, _ := dialWith(t, nil, lastUpdatedServer(start, updated, time.Hour, &polls, &cancels))
		_, err := c.CallToolTask(context.Background(), "long", nil, &client.CallOptions{Idle: 3 * time.Second, Max: time.Hour}, nil)
		var de *client.DeadlineError
		var ta *client.TaskAbandonedError
		if !errors.As(err, &de) || de.Clock != client.IdleClock || !errors.As(err, &ta) || cancels.Load() != 1 {
			t.Fatalf("%v (%d tasks/cancel); want the idle deadline, the task abandoned and cancelled", err, cancels.Load())
		}
		// The last advance is seen by the poll at about 4 s (jitter ±20 %).
		if d := time.Since(start); d < 6*time.Second || d > 9*time.Second {
			t.Fatalf("the idle deadline fired after %v; want about 3 s after the last advance (about 4 s)", d)
		}
	})
}
