package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// bubble is a gateway whose upstream is an mcprel server on an in-memory
// network and whose downstream client speaks raw frames over stdio, all
// inside a synctest bubble: the clocks are fake, and what the downstream
// client reads is every frame the gateway wrote, in order.
type bubble struct {
	up   *server.Server
	down *mcptest.Client
}

// reportTool reports each of its values as progress, intervalMs apart,
// then returns how many it reported.
type reportArgs struct {
	Values     []float64 `json:"values"`
	IntervalMs int       `json:"intervalMs"`
}

func newBubble(t *testing.T, upEra mcp.Era, policy map[string]gateway.ToolPolicy) *bubble {
	t.Helper()
	b := &bubble{up: mcptest.NewServer(t, &server.Options{ProgressInterval: time.Nanosecond})}
	must(t, server.AddTypedTool(b.up, server.Tool{Name: "report"}, func(ctx context.Context, call *server.CallRequest, in reportArgs) (string, error) {
		for i, v := range in.Values {
			if i > 0 {
				select {
				case <-time.After(time.Duration(in.IntervalMs) * time.Millisecond):
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
			}
			_ = call.ReportProgress(v, 0, "")
		}
		return fmt.Sprintf("reported %d", len(in.Values)), nil
	}))
	h, err := streamhttp.NewHandler(b.up, nil)
	must(t, err)
	net := mcptest.NewPipeNetwork()
	hs := &http.Server{Handler: h}
	go hs.Serve(net)
	hc := net.Client()

	front := mcptest.NewServer(t, nil) // the server's default progress interval, 50 ms
	gw, err := gateway.New(front, &gateway.Options{
		Upstreams: []gateway.Upstream{{Name: "up", URL: "http://127.0.0.1/mcp"}},
		Policy:    &gateway.Policy{Tools: policy},
		Logger:    slog.New(slog.DiscardHandler),
		Client:    client.Options{Era: upEra, HTTPClient: hc},
	})
	must(t, err)
	must(t, gw.Start(context.Background()))
	b.down = mcptest.Stdio(t, front, nil)
	t.Cleanup(func() { // inside the bubble: every goroutine must end
		b.down.CloseInput()
		gw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		h.Shutdown(ctx)
		hs.Close()
		net.Close()
		hc.CloseIdleConnections()
	})
	return b
}

// call calls report with values, intervalMs apart, as request id, with a
// progress token, and returns the frames the gateway wrote for it, the
// response last, and how long it took.
func (b *bubble) call(t *testing.T, id int64, values []float64, intervalMs int) ([]mcptest.Frame, time.Duration) {
	t.Helper()
	start := time.Now()
	b.down.Request(id, "tools/call", mcptest.ModernParams(map[string]any{
		"name": "report", "arguments": map[string]any{"values": values, "intervalMs": intervalMs},
		"_meta": map[string]any{"progressToken": "p"},
	}))
	res, before := b.down.Await(id)
	return append(before, res), time.Since(start)
}

// Upstream progress resets the gateway's idle clock only when it
// increases; the maximum clock never moves; what reaches the client is
// strictly increasing, at most one report per progress interval, and
// nothing after the final response — in both upstream eras.
func TestGatewayClocks(t *testing.T) {
	for _, up := range eras {
		t.Run("upstream-"+up.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBubble(t, up.era, map[string]gateway.ToolPolicy{"report": {Server: server.Policy{IdleTimeout: 300 * time.Millisecond, MaxTimeout: 2 * time.Second}}})

				// Increasing every 100 ms for 1.9 s: the idle clock (300 ms)
				// never fires.
				values := make([]float64, 20)
				for i := range values {
					values[i] = float64(i + 1)
				}
				frames, took := b.call(t, 1, values, 100)
				res := frames[len(frames)-1]
				if res.Error != nil || !jsonContains(res.Result, "reported 20") {
					t.Fatalf("a call whose progress kept increasing: %s after %v", res.Raw, took)
				}
				checkProgress(t, frames, 20)

				// The same value again and again: it does not reset the idle
				// clock, which fires 300 ms after the one increase.
				same := make([]float64, 20)
				for i := range same {
					same[i] = 1
				}
				frames, took = b.call(t, 2, same, 100)
				if f := frames[len(frames)-1]; !isTimeout(f) {
					t.Fatalf("a call whose progress did not increase: %s, want the gateway's timeout", f.Raw)
				}
				if took != 300*time.Millisecond {
					t.Errorf("the idle clock fired after %v, want 300ms after the last increase (at 0)", took)
				}
				checkProgress(t, frames, 1)

				// Increasing for 3 s: the maximum clock (2 s) fires all the
				// same.
				long := make([]float64, 30)
				for i := range long {
					long[i] = float64(i + 1)
				}
				frames, took = b.call(t, 3, long, 100)
				if f := frames[len(frames)-1]; !isTimeout(f) || took != 2*time.Second {
					t.Fatalf("a call past its maximum: %s after %v, want the timeout at 2s", f.Raw, took)
				}
				// The report due at the deadline itself may come before
				// the timeout or not at all.
				checkProgress(t, frames, 0)

				// A flood: 100,000 increasing reports at once reach the
				// client rate-limited, the last before the result.
				flood := make([]float64, 100_000)
				for i := range flood {
					flood[i] = float64(i + 1)
				}
				frames, _ = b.call(t, 4, flood, 0)
				if f := frames[len(frames)-1]; f.Error != nil || !jsonContains(f.Result, "reported 100000") {
					t.Fatalf("the flood's call: %s", f.Raw)
				}
				if n := checkProgress(t, frames, 100_000); n > 3 {
					t.Errorf("a flood that took no time reached the client as %d reports; want it coalesced", n)
				}

				// Nothing more is written for any of them.
				if after := b.down.Sync(5, mcp.Modern); len(after) != 0 {
					t.Fatalf("after the calls ended the gateway wrote %s", mcptest.Raws(after))
				}
			})
		})
	}
}

// checkProgress checks the progress frames before frames' last (the
// response) and returns how many there are: strictly increasing, and the
// last of them last (when it is not 0).
func checkProgress(t *testing.T, frames []mcptest.Frame, last float64) int {
	t.Helper()
	prev, n := 0.0, 0
	for _, f := range frames[:len(frames)-1] {
		if f.Method != mcp.NotificationProgress {
			t.Fatalf("the gateway wrote %s before the response", f.Raw)
		}
		var p struct{ Progress float64 }
		json.Unmarshal(f.Params, &p)
		if p.Progress <= prev {
			t.Fatalf("progress %v after %v: not increasing", p.Progress, prev)
		}
		prev = p.Progress
		n++
	}
	if n > 0 && last != 0 && prev != last {
		t.Errorf("the last progress the client saw was %v, want %v", prev, last)
	}
	return n
}

func isTimeout(f mcptest.Frame) bool {
	var res struct {
		IsError bool `json:"isError"`
		Meta    struct {
			Failure struct{ Code string } `json:"dev.mcprel/failure"`
		} `json:"_meta"`
	}
	return f.Error == nil && json.Unmarshal(f.Result, &res) == nil && res.IsError && res.Meta.Failure.Code == mcp.FailureTimeout
}

func jsonContains(raw json.RawMessage, s string) bool {
	var res mcp.CallToolResult
	return json.Unmarshal(raw, &res) == nil && len(res.Content) > 0 && text(&res) == s
}
