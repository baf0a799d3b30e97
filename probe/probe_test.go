package probe_test

import (
	"bytes"
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/probe"
	"github.com/mcprel/mcprel/review"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

func TestMain(m *testing.M) {
	if bugs, ok := os.LookupEnv(fakeBugs); ok {
		os.Exit(fakeServer(bugs))
	}
	os.Exit(m.Run())
}

// fakePolicy lets the probe call the fake server's tools.
const fakePolicy = `
operations:
  - name: slow
    semantics: {kind: read-only}
    progress: {emits: true}
    probe:
      call: true
      arguments: {steps: 40, intervalMs: 50}
      flood_arguments: {steps: 3000, intervalMs: 0}
  - name: stall
    semantics: {kind: read-only}
    probe: {call: true, stall_arguments: {}}
  - name: bump
    semantics: {kind: mutation}
    idempotency: {key: optional}
    probe:
      call: true
      arguments: {by: 1}
      count: {tool: count, field: n}
`

// fastTiming keeps a run of the fake server's fixtures short.
var fastTiming = probe.Timing{Answer: 5 * time.Second, Quiet: 500 * time.Millisecond, Pause: 500 * time.Millisecond, Deadline: 5 * time.Second}

func probeFake(t *testing.T, bugs string) *probe.Report {
	t.Helper()
	return probeFakeOnly(t, bugs)
}

// probeFakeOnly probes the fake server with bugs, running only the
// fixtures given (every one for none).
func probeFakeOnly(t *testing.T, bugs string, only ...int) *probe.Report {
	t.Helper()
	pol, err := review.Parse("fake.yaml", []byte(fakePolicy))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := probe.Run(context.Background(), &probe.Options{
		Target: stdioFake(bugs), Policy: pol, Timing: fastTiming, Only: only,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// failed is the fixtures that failed, in either era.
func failed(rep *probe.Report) []int {
	var out []int
	for _, r := range rep.Results {
		if r.Status == probe.Failed && !slices.Contains(out, r.Fixture) {
			out = append(out, r.Fixture)
		}
	}
	return out
}

// A server written from the spec alone, with nothing of mcprel's, passes
// every fixture that applies to it over stdio, in both eras; broken in
// one way, it fails exactly the fixtures that break shows, and no other,
// each with the frames that prove it. A server without a deadline of its
// own breaks no rule (none requires one): fixture 6 says it has none.
func TestBrokenServersFailWhatTheyBreak(t *testing.T) {
	for _, tc := range []struct {
		bugs string
		want []int
	}{
		{"", nil},
		{"answers-after-cancel", []int{1}},
		{"decreasing-progress", []int{5}},
		{"ignores-key", []int{7, 8}},
		{"no-deadline", nil},
	} {
		t.Run("bugs="+tc.bugs, func(t *testing.T) {
			rep := probeFake(t, tc.bugs)
			if len(rep.Eras) != 2 {
				t.Fatalf("the fake speaks both eras; the probe found %v", rep.Eras)
			}
			if got := failed(rep); !slices.Equal(got, tc.want) {
				for _, r := range rep.Results {
					t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
				}
				t.Fatalf("failed fixtures %v, want %v", got, tc.want)
			}
			for _, r := range rep.Results {
				if r.Status == probe.Failed && len(r.Frames) == 0 {
					t.Errorf("fixture %d failed with no frames to show", r.Fixture)
				}
				if r.Fixture == 5 && r.Status == probe.Passed && r.Measured["reports_per_second"] == nil {
					t.Errorf("fixture 5 measured no rate: %v", r.Measured)
				}
				if own := tc.bugs != "no-deadline"; r.Fixture == 6 && r.Measured["server_deadline"] != own {
					t.Errorf("fixture 6 (%s) measured server_deadline %v, want %v: %s", r.Era, r.Measured["server_deadline"], own, r.Detail)
				}
				if r.Fixture == 7 && r.Status == probe.Passed && r.Measured["class"] != "CONDITIONAL" {
					t.Errorf("a keyed mutation that runs once per key was classed %v", r.Measured["class"])
				}
			}
		})
	}
}

// heldHeaders is a proxy's response writer that holds an SSE response
// back — its headers and whatever precedes its first event — until that
// event: a stream that reaches the client only with its first event, as
// behind a buffering proxy.
type heldHeaders struct {
	http.ResponseWriter
	status int
	held   []byte
	sent   bool
}

func (h *heldHeaders) WriteHeader(status int) { h.status = status }

func (h *heldHeaders) Write(b []byte) (int, error) {
	if h.sent {
		return h.ResponseWriter.Write(b)
	}
	h.held = append(h.held, b...)
	sse := strings.HasPrefix(h.Header().Get("Content-Type"), "text/event-stream")
	if sse && !bytes.Contains(h.held, []byte("data:")) {
		return len(b), nil
	}
	h.sent = true
	h.ResponseWriter.WriteHeader(cmp.Or(h.status, http.StatusOK))
	_, err := h.ResponseWriter.Write(h.held)
	return len(b), err
}

func (h *heldHeaders) Flush() {
	if h.sent {
		h.ResponseWriter.(http.Flusher).Flush()
	}
}

// An mcprel server over Streamable HTTP passes the fixtures its policy
// lets apply; behind a proxy that holds an SSE response's headers until
// its first event, it fails the SSE fixture alone.
func TestHeldSSEHeadersFailTheSSEFixture(t *testing.T) {
	srv := mcptest.NewServer(t, nil)
	must(t, server.AddTypedTool(srv, server.Tool{Name: "slow", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true)}},
		func(ctx context.Context, call *server.CallRequest, in struct {
			Steps      int `json:"steps"`
			IntervalMs int `json:"intervalMs"`
		}) (string, error) {
			for i := 1; i <= in.Steps; i++ {
				select {
				case <-ctx.Done():
					return "", context.Cause(ctx)
				case <-time.After(time.Duration(in.IntervalMs) * time.Millisecond):
				}
				call.ReportProgress(float64(i), float64(in.Steps), "")
			}
			return "done", nil
		}))
	h, err := streamhttp.NewHandler(srv, &streamhttp.HandlerOptions{KeepAlive: 200 * time.Millisecond})
	must(t, err)
	pol, err := review.Parse("slow.yaml", []byte("operations:\n  - name: slow\n    semantics: {kind: read-only}\n    progress: {emits: true}\n    probe: {call: true, arguments: {steps: 12, intervalMs: 300}}\n"))
	must(t, err)
	timing := fastTiming
	timing.Keepalive = 2 * time.Second
	for _, tc := range []struct {
		name string
		hold bool
		want []int
	}{{"direct", false, nil}, {"held-headers", true, []int{10}}} {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.hold {
					w = &heldHeaders{ResponseWriter: w}
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(hs.Close)
			rep, err := probe.Run(context.Background(), &probe.Options{Target: probe.Target{URL: hs.URL}, Policy: pol, Timing: timing,
				Only: []int{4, 5, 10}})
			must(t, err)
			for _, r := range rep.Results {
				t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
			}
			if got := failed(rep); !slices.Equal(got, tc.want) {
				for _, r := range rep.Results {
					t.Logf("%2d %s %s: %s", r.Fixture, r.Era, r.Status, r.Detail)
				}
				t.Fatalf("failed fixtures %v, want %v", got, tc.want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
