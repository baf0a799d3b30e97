package tracing_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tracing"
)

// The tracer's cost per request, spans batched to an exporter that keeps
// nothing: what every call pays with tracing on, before the export.
func BenchmarkObserveRequest(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	obs := tracing.New(tp, nil)
	ctx := context.Background()
	info := server.RequestInfo{ID: jsonrpc.IntID(1), Method: mcp.MethodToolsCall, Transport: "stdio", Start: time.Now()}
	rec := server.RequestRecord{ID: info.ID, Method: info.Method, Tool: "echo", Era: mcp.Modern, Transport: "stdio",
		Outcome: server.Completed, Start: info.Start, Duration: 30 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		obs.RequestEnded(obs.RequestStarted(ctx, info), rec)
	}
}
