package server_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

func progressValues(t *testing.T, frames []mcptest.Frame) []float64 {
	t.Helper()
	var out []float64
	for _, f := range frames {
		var p mcp.ProgressParams
		if f.Method != mcp.NotificationProgress || json.Unmarshal(f.Params, &p) != nil {
			t.Fatalf("unexpected frame %s", f.Raw)
		}
		out = append(out, p.Progress)
	}
	return out
}

// TestProgressBurstIsCoalesced: 10,000 reports in one instant become at
// most two notifications, the first and the last — or the last alone when
// the writer had not yet taken the first off the queue, which the newer
// value then replaced; the last value always arrives before the result.
func TestProgressBurstIsCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, nil)
		addTool(t, srv, "burst", func(req *server.CallRequest, _ func()) {
			for v := 1; v <= 10_000; v++ {
				req.ReportProgress(float64(v), 10_000, "")
			}
		})
		c := mcptest.Stdio(t, srv, nil)
		c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "burst", "_meta": map[string]any{"progressToken": 1}}))
		_, before := c.Await(1)
		got := progressValues(t, before)
		if fmt.Sprint(got) != "[1 10000]" && fmt.Sprint(got) != "[10000]" {
			t.Fatalf("notifications = %v, want [1 10000] or [10000]", got)
		}
		c.CloseInput()
		c.ServeResult()
	})
}

// TestProgressRateLimit: reports every millisecond for a second become at
// most one notification per interval, strictly increasing, ending with
// the final value.
func TestProgressRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, &server.Options{ProgressInterval: 50 * time.Millisecond})
		addTool(t, srv, "steady", func(req *server.CallRequest, _ func()) {
			for v := 1; v <= 1000; v++ {
				time.Sleep(time.Millisecond)
				req.ReportProgress(float64(v), 1000, "")
			}
		})
		c := mcptest.Stdio(t, srv, nil)
		c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "steady", "_meta": map[string]any{"progressToken": 1}}))
		_, before := c.Await(1)
		got := progressValues(t, before)
		// One per 50 ms over 1 s, plus the final flush.
		if len(got) > 22 || len(got) < 19 || got[len(got)-1] != 1000 {
			t.Fatalf("%d notifications %v, want about 20 ending at 1000", len(got), got)
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("not increasing: %v", got)
			}
		}
		c.CloseInput()
		c.ServeResult()
	})
}

// TestHeldBackProgressIsDroppedOnCancel: progress the rate limit held back
// is never sent once the request is cancelled.
func TestHeldBackProgressIsDroppedOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcptest.NewServer(t, &server.Options{ProgressInterval: time.Second})
		reported := make(chan struct{})
		addTool(t, srv, "held", func(req *server.CallRequest, wait func()) {
			req.ReportProgress(1, 0, "")
			req.ReportProgress(2, 0, "") // held back for a second
			close(reported)
			wait()
		})
		c := mcptest.Stdio(t, srv, nil)
		c.Request(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"name": "held", "_meta": map[string]any{"progressToken": 1}}))
		<-reported
		if f := c.Next(); progressValues(t, []mcptest.Frame{f})[0] != 1 {
			t.Fatalf("first frame %s", f.Raw)
		}
		c.Cancel(1, "")
		time.Sleep(2 * time.Second) // past the moment the held value was due
		if before := c.Sync(2, mcp.Modern); len(before) > 0 {
			t.Fatalf("progress after the cancellation:%s", mcptest.Raws(before))
		}
		c.CloseInput()
		c.ServeResult()
	})
}
