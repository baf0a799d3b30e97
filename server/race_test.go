package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

var eras = []mcp.Era{mcp.Legacy, mcp.Modern}

// gated returns a recorded server with a gate tool and a client opened in
// era: the setup of every race test.
func gated(t *testing.T, era mcp.Era) (*mcptest.Recorder, *mcptest.Gate, *mcptest.Client) {
	t.Helper()
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(nil))
	gate := mcptest.NewGate(t, srv, "gate")
	c := mcptest.Stdio(t, srv, nil)
	c.Open(era)
	return rec, gate, c
}

// TestCancelThenComplete forces the cancellation to win: the call is in
// its handler, the client cancels, and only then does the handler return a
// result. No response may ever be written for that id.
func TestCancelThenComplete(t *testing.T) {
	for _, era := range eras {
		t.Run(era.String(), func(t *testing.T) {
			rec, gate, c := gated(t, era)

			c.Request(1, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "gate"}))
			gate.WaitEntered(t)
			c.Cancel(1, "user closed the dialog")

			r := rec.WaitRequest(t, jsonrpc.IntID(1))
			if r.Outcome != server.Cancelled || !errors.Is(r.Cause, server.ErrPeerCancelled) || !strings.Contains(r.Cause.Error(), "user closed the dialog") {
				t.Fatalf("terminal record = %+v, want cancelled by the peer with its reason", r)
			}
			if cause := gate.WaitExited(t); !errors.Is(cause, server.ErrPeerCancelled) {
				t.Fatalf("handler saw cause %v, want ErrPeerCancelled", cause)
			}
			gate.Release() // the handler now returns a result...
			h := rec.WaitHandler(t, jsonrpc.IntID(1))
			if !h.Discarded {
				t.Fatalf("handler record = %+v, want its result discarded", h)
			}
			// ...which must never reach the wire. The handler has fully
			// returned, so anything it wrote is already queued ahead of
			// the sync response.
			if before := c.Sync(2, era); len(before) > 0 {
				t.Fatalf("frames written after a winning cancellation:%s", mcptest.Raws(before))
			}
			if n := len(rec.Requests(jsonrpc.IntID(1))); n != 1 {
				t.Fatalf("request 1 has %d terminal records, want exactly 1", n)
			}
		})
	}
}

// TestCompleteThenCancel forces completion to win: the response is sent,
// then a late cancellation arrives and must change nothing.
func TestCompleteThenCancel(t *testing.T) {
	for _, era := range eras {
		t.Run(era.String(), func(t *testing.T) {
			rec, gate, c := gated(t, era)

			c.Request(1, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "gate"}))
			gate.WaitEntered(t)
			gate.Release()
			resp, before := c.Await(1)
			if len(before) > 0 || resp.Error != nil || !strings.Contains(string(resp.Result), "released 1") {
				t.Fatalf("response = %s (after %s), want the gate's result", resp.Raw, mcptest.Raws(before))
			}
			if r := rec.WaitRequest(t, jsonrpc.IntID(1)); r.Outcome != server.Completed {
				t.Fatalf("terminal record = %+v, want completed", r)
			}

			c.Cancel(1, "too late")
			if before := c.Sync(2, era); len(before) > 0 {
				t.Fatalf("a late cancellation produced frames:%s", mcptest.Raws(before))
			}
			if recs := rec.Requests(jsonrpc.IntID(1)); len(recs) != 1 || recs[0].Outcome != server.Completed {
				t.Fatalf("records for request 1 = %+v, want one, completed", recs)
			}
			if h := rec.WaitHandler(t, jsonrpc.IntID(1)); h.Discarded {
				t.Fatalf("handler record = %+v, want its result sent", h)
			}
		})
	}
}

// TestProgressStopsAtCancellation checks that once a cancellation wins, a
// tool's progress reports fail with ErrRequestDone and none reaches the wire.
func TestProgressStopsAtCancellation(t *testing.T) {
	for _, era := range eras {
		t.Run(era.String(), func(t *testing.T) {
			rec := mcptest.NewRecorder()
			srv := mcptest.NewServer(t, rec.Hook(nil))
			reported := make(chan error, 1)
			cancelled := make(chan struct{})
			addTool(t, srv, "reporter", func(req *server.CallRequest, wait func()) {
				req.ReportProgress(1, 0, "first")
				<-cancelled
				reported <- req.ReportProgress(2, 0, "after the end")
			})
			c := mcptest.Stdio(t, srv, nil)
			c.Open(era)
			c.Request(1, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "reporter", "_meta": map[string]any{"progressToken": "p1"}}))
			first := c.Next()
			if first.Method != mcp.NotificationProgress {
				t.Fatalf("first frame = %s, want progress", first.Raw)
			}
			c.Cancel(1, "")
			rec.WaitRequest(t, jsonrpc.IntID(1))
			close(cancelled)
			if err := <-reported; !errors.Is(err, server.ErrRequestDone) {
				t.Fatalf("ReportProgress after cancellation = %v, want ErrRequestDone", err)
			}
			rec.WaitHandler(t, jsonrpc.IntID(1))
			if before := c.Sync(2, era); len(before) > 0 {
				t.Fatalf("frames after cancellation:%s", mcptest.Raws(before))
			}
		})
	}
}
