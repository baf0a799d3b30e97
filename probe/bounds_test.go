package probe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/probe"
)

// stdioFake is the fake server (fake_test.go) with bugs, as a target.
func stdioFake(bugs string) probe.Target {
	return probe.Target{Command: []string{os.Args[0], "-test.run=^$"}, Env: []string{fakeBugs + "=" + bugs}}
}

// floodServer is a Streamable HTTP endpoint that answers every request
// and then never stops sending:
//
//	events         SSE events as fast as it can write them, each with an id and a comment before it
//	endless-event  one SSE event whose data lines never end
//	endless-body   a JSON body that never ends
func floodServer(t *testing.T, kind string) string {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
		if kind == "endless-body" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"pad":"`)
			io.Copy(w, endless('x'))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n\n", req.ID)
		line := "data: " + strings.Repeat("x", 1<<10) + "\n"
		for i := 0; r.Context().Err() == nil; i++ {
			var err error
			if kind == "endless-event" {
				_, err = io.WriteString(w, line)
			} else {
				_, err = fmt.Fprintf(w, ": keepalive\nid: %d\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"event %d\"}}\n\n", i, i)
			}
			if err != nil {
				return
			}
			if i%64 == 0 {
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL
}

// A server that floods the probe — log notifications, random bytes on
// stdio, an SSE stream that never ends — leaves it holding no more than
// its bounds: the messages a connection keeps, in count and bytes, and
// the frames a fixture keeps for its report, each clipped. The response
// the probe waits for is kept through the flood.
func TestAFloodStaysWithinTheProbesBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		target   probe.Target
		answered bool
	}{
		{"stdio log notifications", stdioFake("floods-log"), true},
		{"stdio random bytes", stdioFake("random-bytes"), false},
		{"SSE events", probe.Target{URL: floodServer(t, "events")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 4 * probe.MaxKept
			h, err := probe.Flood(context.Background(), tc.target, mcp.Modern, "tools/list", n, time.Minute)
			must(t, err)
			if h.Ended != nil || h.Received < n {
				t.Fatalf("%d messages came, then the stream ended: %v", h.Received, h.Ended)
			}
			if h.Kept > probe.MaxKept || h.KeptBytes > probe.MaxKeptBytes {
				t.Errorf("of %d messages the connection keeps %d (%d bytes), past its bounds (%d, %d bytes)",
					h.Received, h.Kept, h.KeptBytes, probe.MaxKept, probe.MaxKeptBytes)
			}
			if h.Frames > probe.MaxFrames || h.LongestFrame > probe.MaxFrameText+32 {
				t.Errorf("the recorder keeps %d frames (%d bytes, the longest %d), past its bounds (%d frames of %d bytes)",
					h.Frames, h.FrameBytes, h.LongestFrame, probe.MaxFrames, probe.MaxFrameText)
			}
			if tc.answered && !h.Answered {
				t.Errorf("the response to tools/list was not kept through the flood")
			}
		})
	}
}

// A line, an SSE event or a response body longer than the probe reads
// ends that connection with an error naming the limit, having held no
// more than the limit.
func TestAMessagePastTheLimitEndsTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target probe.Target
		what   string
	}{
		{"stdio line", stdioFake("endless-line"), "a line"},
		{"SSE event", probe.Target{URL: floodServer(t, "endless-event")}, "an event"},
		{"JSON body", probe.Target{URL: floodServer(t, "endless-body")}, "a response body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := probe.Flood(context.Background(), tc.target, mcp.Modern, "tools/list", 1<<30, 10*time.Second)
			must(t, err)
			limit := fmt.Sprintf("%s longer than %d MiB", tc.what, probe.MaxMessage>>20)
			if h.Ended == nil || !strings.Contains(h.Ended.Error(), limit) {
				t.Fatalf("the stream ended with %v, want an error saying %q", h.Ended, limit)
			}
			if h.KeptBytes > probe.MaxKeptBytes || h.LongestFrame > probe.MaxFrameText+32 {
				t.Errorf("it kept %d bytes and a frame of %d", h.KeptBytes, h.LongestFrame)
			}
		})
	}
}

// A fixture run against a server that floods log notifications still
// finds the server's bug, and the frames its failure shows are bounded.
func TestAFailureAmidAFloodShowsBoundedFrames(t *testing.T) {
	rep := probeFakeOnly(t, "floods-log,decreasing-progress", 5)
	for _, r := range rep.Results {
		if r.Status != probe.Failed || !strings.Contains(r.Detail, "not strictly increasing") {
			t.Errorf("fixture %d (%s): %s: %s, want the decreasing progress failed", r.Fixture, r.Era, r.Status, r.Detail)
		}
		longest := 0
		for _, f := range r.Frames {
			longest = max(longest, len(f.Text))
		}
		if len(r.Frames) > probe.MaxFrames || longest > probe.MaxFrameText+32 {
			t.Errorf("fixture %d (%s) shows %d frames, the longest %d bytes: past %d of %d", r.Fixture, r.Era, len(r.Frames), longest, probe.MaxFrames, probe.MaxFrameText)
		}
	}
}

// A notification answered with a stream that never ends — the late
// cancellation of fixture 2, the malformed ones of fixture 3 — fails
// those fixtures within the answer wait, instead of holding the run for
// as long as the server sends.
func TestAnEndlessAnswerToANotificationFailsInTime(t *testing.T) {
	rep, err := probe.Run(context.Background(), &probe.Options{Target: probe.Target{URL: floodServer(t, "events")}, Timing: fastTiming, Only: []int{2, 3}})
	must(t, err)
	for _, r := range rep.Results {
		t.Logf("%2d %s %s (%v): %s", r.Fixture, r.Era, r.Status, r.Took, r.Detail)
		if r.Status != probe.Failed || !strings.Contains(r.Detail, "did not end within 5s") {
			t.Errorf("fixture %d (%s) does not fail for the answer that does not end", r.Fixture, r.Era)
		}
	}
}
