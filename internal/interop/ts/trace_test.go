package ts_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/otlptest"
)

// An official TypeScript SDK client that puts a traceparent in a call's
// _meta, in each era over stdio, gets mcprel's span for the call into its
// trace: the OTLP collector receives "tools/call echo" with the client's
// trace id and the client's span as its parent.
func TestTraceContextFromTypeScriptClient(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := buildServer(t, ctx)
	for i, sdk := range []string{"v1", "v2"} {
		t.Run(sdk, func(t *testing.T) {
			col := otlptest.Start(t)
			traceID := []string{"4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"}[i]
			parent := "00f067aa0ba902b7"
			out, err := exec.CommandContext(ctx, "node", "trace-client.mjs", bin, filepath.Join(t.TempDir(), "trace.db"),
				col.URL, sdk, "00-"+traceID+"-"+parent+"-01").Output()
			if err != nil {
				t.Fatalf("trace-client.mjs: %v\n%s", err, exitStderr(err))
			}
			var res struct{ Text string }
			if json.Unmarshal(out, &res) != nil || res.Text != "traced" {
				t.Fatalf("the client printed %q", out)
			}
			// The client's close waits for the server to exit, after its
			// flush: the spans are in.
			spans := col.Named("tools/call echo")
			if len(spans) != 1 {
				t.Fatalf("%d spans for the call; the collector got %+v", len(spans), col.Spans())
			}
			s := spans[0]
			if s.TraceID != traceID || s.ParentSpanID != parent {
				t.Errorf("span in trace %s under %s, want the client's %s under %s", s.TraceID, s.ParentSpanID, traceID, parent)
			}
			if s.Attributes["mcp.method.name"] != "tools/call" || s.Attributes["gen_ai.tool.name"] != "echo" || s.Attributes["network.transport"] != "pipe" {
				t.Errorf("span attributes %v", s.Attributes)
			}
		})
	}
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
