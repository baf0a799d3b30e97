package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/metrics"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
)

// A scripted scenario, in each era over stdio, then a scrape: every
// counter has exactly the value the scenario makes — completions, a tool
// error, a protocol error, a cancel that wins, an idle timeout, an
// idempotent replay and a key conflict — and a client's made-up tool name
// never becomes a label.
func TestScenarioCounters(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		t.Run(era.String(), func(t *testing.T) {
			obs, err := metrics.New(nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			// A recorder after the metrics: once it has a request's
			// record, the metrics observer has had it too (observers are
			// told in order), whatever the response raced.
			rec := mcptest.NewRecorder()
			srv := mcptest.NewServer(t, rec.Hook(&server.Options{Observers: []server.Observer{obs}}))
			obs.Attach(srv)
			ctx := context.Background()
			db, err := store.Open(ctx, storetest.SQLite(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			l, err := ledger.Open(ctx, db, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("ok")}}, nil
			})
			srv.AddTool(server.Tool{Name: "fails"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
				return nil, &mcp.ToolError{Code: "nope", Message: "it fails"}
			})
			srv.AddTool(server.Tool{Name: "stalls", Policy: server.Policy{IdleTimeout: 50 * time.Millisecond, MaxTimeout: time.Minute}},
				func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
					<-ctx.Done()
					return nil, context.Cause(ctx)
				})
			gate := mcptest.NewGate(t, srv, "gate")
			err = idempotency.AddTool(srv, l, server.Tool{Name: "reserve"}, idempotency.Policy{},
				func(ctx context.Context, call *idempotency.Call) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("reserved")}}, nil
				})
			if err != nil {
				t.Fatal(err)
			}
			c := mcptest.Stdio(t, srv, nil)
			c.Open(era)
			call := func(id int64, name string, args map[string]any) mcptest.Frame {
				return c.Call(id, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": name, "arguments": args}))
			}
			call(1, "echo", nil)
			call(2, "echo", nil)
			call(3, "fails", nil)
			call(4, "made-up-by-the-client", nil)
			call(5, "stalls", nil)
			call(6, "reserve", map[string]any{"idempotencyKey": "k1", "n": 1})
			call(7, "reserve", map[string]any{"idempotencyKey": "k1", "n": 1})
			call(8, "reserve", map[string]any{"idempotencyKey": "k1", "n": 2})
			c.Request(9, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"name": "gate"}))
			gate.WaitEntered(t)
			c.Cancel(9, "the user gave up")
			gate.WaitExited(t)
			gate.Release()
			call(10, "echo", nil) // after the cancel: the connection serves on
			for id := int64(1); id <= 10; id++ {
				rec.WaitRequest(t, jsonrpc.IntID(id))
			}

			hs := httptest.NewServer(obs.Handler())
			defer hs.Close()
			resp, err := hs.Client().Get(hs.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e := "2025"
			if era == mcp.Modern {
				e = "2026-07-28"
			}
			for _, want := range []string{
				`mcprel_requests_total{era="` + e + `",method="tools/call",outcome="completed",tool="echo",transport="stdio"} 3`,
				`mcprel_requests_total{era="` + e + `",method="tools/call",outcome="tool_error",tool="fails",transport="stdio"} 1`,
				`mcprel_requests_total{era="` + e + `",method="tools/call",outcome="protocol_error_client",tool="unknown",transport="stdio"} 1`,
				`mcprel_requests_total{era="` + e + `",method="tools/call",outcome="timed_out_idle",tool="stalls",transport="stdio"} 1`,
				`mcprel_requests_total{era="` + e + `",method="tools/call",outcome="cancelled",tool="gate",transport="stdio"} 1`,
				`mcprel_cancellations_total{source="idle_deadline"} 1`,
				`mcprel_cancellations_total{source="notification"} 1`,
				`mcprel_call_annotations_total{kind="idempotency",tool="reserve",value="executed"} 1`,
				`mcprel_call_annotations_total{kind="idempotency",tool="reserve",value="replayed"} 1`,
				`mcprel_call_annotations_total{kind="idempotency",tool="reserve",value="conflict"} 1`,
				`mcprel_requests_in_flight{method="tools/call"} 0`,
			} {
				if !strings.Contains(string(body), want+"\n") {
					t.Errorf("the scrape lacks %s", want)
				}
			}
			if strings.Contains(string(body), "made-up-by-the-client") {
				t.Error("a client's made-up tool name became a label")
			}
			if t.Failed() {
				t.Log(string(body))
			}
		})
	}
}
