package tracing_test

import (
	"context"
	"io"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/tracing"
	"github.com/mcprel/mcprel/transport/stdio"
)

// The client interceptor gives each request a client span, and the
// server's span for it continues the trace under that span: the trace
// context went in the request's _meta, not in the caller's map. A
// request the server refused is a failed span; a result is not.
func TestClientSpanPerRequest(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	obs := tracing.New(tp, nil)
	srv := mcptest.NewServer(t, &server.Options{Observers: []server.Observer{obs}})
	obs.Attach(srv)
	if err := srv.AddTool(server.Tool{Name: "echo", Policy: server.Policy{Retry: mcp.RetrySafe}}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(string(req.Arguments))}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go stdio.NewConn(srv, toServer, fromServer, nil).Serve(ctx)
	c, err := client.Connect(ctx, toClient, fromClient, &client.Options{Interceptors: []client.Interceptor{obs.Client("up")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	meta := map[string]any{"mine": 1}
	if _, err := c.CallTool(ctx, "echo", map[string]any{"text": "hi"}, &client.CallOptions{Meta: meta}); err != nil {
		t.Fatal(err)
	}
	if len(meta) != 1 {
		t.Errorf("the caller's _meta was changed: %v", meta)
	}
	c.Request(ctx, "no/such/method", "", nil, nil)
	c.Close()

	var clientCall, serverCall, clientRefused sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		switch {
		case s.Name() == "tools/call echo" && s.SpanKind() == trace.SpanKindClient:
			clientCall = s
		case s.Name() == "tools/call echo" && s.SpanKind() == trace.SpanKindServer:
			serverCall = s
		case s.Name() == "no/such/method" && s.SpanKind() == trace.SpanKindClient:
			clientRefused = s
		}
	}
	if clientCall == nil || serverCall == nil || clientRefused == nil {
		t.Fatalf("spans %v; want the call's client and server spans and the refused request's client span", spans.GetSpans())
	}
	if serverCall.Parent().SpanID() != clientCall.SpanContext().SpanID() || serverCall.SpanContext().TraceID() != clientCall.SpanContext().TraceID() {
		t.Errorf("the server's span is not the client span's child: parent %v, client span %v", serverCall.Parent().SpanID(), clientCall.SpanContext().SpanID())
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[string]string {
		m := map[string]string{}
		for _, a := range s.Attributes() {
			m[string(a.Key)] = a.Value.Emit()
		}
		return m
	}
	if a := attrs(clientCall); a["mcprel.request.outcome"] != "answered" || a["mcprel.gateway.upstream"] != "up" || a["gen_ai.tool.name"] != "echo" || clientCall.Status().Code.String() == "Error" {
		t.Errorf("the call's client span: %v, status %v", a, clientCall.Status())
	}
	if a := attrs(clientRefused); a["mcprel.request.outcome"] != "refused" || clientRefused.Status().Code.String() != "Error" {
		t.Errorf("the refused request's client span: %v, status %v", a, clientRefused.Status())
	}
}
