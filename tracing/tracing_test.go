package tracing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcprel/mcprel/idempotency"
	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/internal/storetest"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/ledger"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/store"
	"github.com/mcprel/mcprel/tasks"
	"github.com/mcprel/mcprel/taskserver"
	"github.com/mcprel/mcprel/tracing"
)

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	secretValue = "4111-1111-1111-1111"
)

// traced is a server whose requests are traced into an in-memory
// exporter, with a keyed tool whose "card" argument is secret.
type traced struct {
	spans *tracetest.InMemoryExporter
	rec   *mcptest.Recorder
	srv   *server.Server
}

func newTraced(t *testing.T, opts *tracing.Options) *traced {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	obs := tracing.New(tp, opts)
	// The recorder comes after the tracer: once it has a request's
	// record, the request's span has ended.
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{Observers: []server.Observer{obs}}))
	obs.Attach(srv)
	ctx := context.Background()
	db, err := store.Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := ledger.Open(ctx, db, &ledger.Options{Observers: []ledger.Observer{obs}})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.AddTool(server.Tool{Name: "pay", Policy: server.Policy{Secret: []string{"card"}}}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("paid")}}, nil
	}, idempotency.Keyed(l, idempotency.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	srv.AddTool(server.Tool{Name: "fails"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return nil, &mcp.ToolError{Code: "nope", Message: "it fails"}
	})
	return &traced{spans: spans, rec: rec, srv: srv}
}

func (tr *traced) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range tr.spans.GetSpans().Snapshots() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q among %v", name, tr.names())
	return nil
}

func (tr *traced) names() []string {
	var names []string
	for _, s := range tr.spans.GetSpans().Snapshots() {
		names = append(names, s.Name())
	}
	return names
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes() {
		m[string(a.Key)] = a.Value.Emit()
	}
	return m
}

// A keyed call carrying a traceparent in _meta continues the client's
// trace: its span is a server span, a child of the client's, named and
// attributed as the MCP conventions say, and the ledger's transaction is
// a child of it. In both eras, over stdio.
func TestCallSpanContinuesTheClientsTrace(t *testing.T) {
	for _, era := range []mcp.Era{mcp.Legacy, mcp.Modern} {
		t.Run(era.String(), func(t *testing.T) {
			tr := newTraced(t, nil)
			c := mcptest.Stdio(t, tr.srv, nil)
			c.Open(era)
			meta := map[string]any{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01", "tracestate": "vendor=1"}
			c.Call(7, mcp.MethodToolsCall, mcptest.Params(era, map[string]any{"_meta": meta, "name": "pay",
				"arguments": map[string]any{"idempotencyKey": "k-1", "card": secretValue, "amount": 5}}))
			tr.rec.WaitRequest(t, jsonrpc.IntID(7))

			call := tr.span(t, "tools/call pay")
			if call.SpanKind() != trace.SpanKindServer {
				t.Errorf("span kind %v, want server", call.SpanKind())
			}
			if got := call.SpanContext().TraceID().String(); got != clientTrace {
				t.Errorf("trace id %s, want the client's %s", got, clientTrace)
			}
			if got := call.Parent().SpanID().String(); got != clientSpan || !call.Parent().IsRemote() {
				t.Errorf("parent %s (remote %v), want the client's span %s", got, call.Parent().IsRemote(), clientSpan)
			}
			if got := call.Parent().TraceState().String(); got != "vendor=1" {
				t.Errorf("tracestate %q, want the client's", got)
			}
			a := attrs(call)
			want := map[string]string{
				"mcp.method.name":       "tools/call",
				"gen_ai.tool.name":      "pay",
				"gen_ai.operation.name": "execute_tool",
				"jsonrpc.request.id":    "7",
				"network.transport":     "pipe",
				"mcprel.idempotency":    "executed",
			}
			if era == mcp.Modern {
				want["mcp.protocol.version"] = mcp.Version20260728
			}
			for k, v := range want {
				if a[k] != v {
					t.Errorf("attribute %s = %q, want %q (all: %v)", k, a[k], v, a)
				}
			}
			if _, ok := a["error.type"]; ok {
				t.Errorf("a completed call has error.type %q", a["error.type"])
			}
			ledgerSpan := tr.span(t, "ledger do")
			if ledgerSpan.Parent().SpanID() != call.SpanContext().SpanID() {
				t.Errorf("the ledger span's parent is %s, want the call's span %s", ledgerSpan.Parent().SpanID(), call.SpanContext().SpanID())
			}
			if la := attrs(ledgerSpan); la["mcprel.ledger.result"] != "ok" {
				t.Errorf("ledger span attributes %v", la)
			}
		})
	}
}

// Failures are told apart on the span: a tool's isError result is
// error.type "tool_error", a JSON-RPC error its code; a request without a
// traceparent starts a trace of its own.
func TestErrorTypes(t *testing.T) {
	tr := newTraced(t, nil)
	c := mcptest.Stdio(t, tr.srv, nil)
	c.Call(1, mcp.MethodToolsCall, mcptest.Params(mcp.Modern, map[string]any{"name": "fails"}))
	c.Call(2, mcp.MethodToolsCall, mcptest.Params(mcp.Modern, map[string]any{"name": "no-such-tool"}))
	tr.rec.WaitRequest(t, jsonrpc.IntID(1))
	tr.rec.WaitRequest(t, jsonrpc.IntID(2))
	fails := tr.span(t, "tools/call fails")
	if a := attrs(fails); a["error.type"] != "tool_error" || fails.Status().Code.String() != "Error" {
		t.Errorf("tool error span: %v, status %v", a, fails.Status())
	}
	if fails.Parent().IsValid() {
		t.Errorf("a request without traceparent has parent %v", fails.Parent())
	}
	var unknown sdktrace.ReadOnlySpan
	for _, s := range tr.spans.GetSpans().Snapshots() {
		if attrs(s)["jsonrpc.request.id"] == "2" {
			unknown = s
		}
	}
	if unknown == nil {
		t.Fatalf("no span for request 2 among %v", tr.names())
	}
	a := attrs(unknown)
	if a["error.type"] != fmt.Sprint(jsonrpc.CodeInvalidParams) || a["rpc.response.status_code"] != a["error.type"] {
		t.Errorf("protocol error span: %v", a)
	}
	// A name the client made up is not the server's tool: it stays out of
	// the span's name, which must be of low cardinality.
	if unknown.Name() != "tools/call" || a["gen_ai.tool.name"] != "no-such-tool" {
		t.Errorf("span %q with tool %q, want \"tools/call\" naming the tool only in its attribute", unknown.Name(), a["gen_ai.tool.name"])
	}
}

// With RecordArguments, a call's span carries its arguments, except the
// secret one: its value appears in no attribute of any span.
func TestSecretArgumentsNeverInSpans(t *testing.T) {
	tr := newTraced(t, &tracing.Options{RecordArguments: true})
	c := mcptest.Stdio(t, tr.srv, nil)
	c.Call(1, mcp.MethodToolsCall, mcptest.Params(mcp.Modern, map[string]any{"name": "pay",
		"arguments": map[string]any{"idempotencyKey": "k-2", "card": secretValue, "amount": 5}}))
	tr.rec.WaitRequest(t, jsonrpc.IntID(1))
	args := attrs(tr.span(t, "tools/call pay"))["gen_ai.tool.call.arguments"]
	if !strings.Contains(args, "amount=5") || !strings.Contains(args, "card=[secret]") {
		t.Errorf("arguments attribute %q: want amount in the clear and card as [secret]", args)
	}
	for _, s := range tr.spans.GetSpans().Snapshots() {
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.Emit(), "4111") {
				t.Errorf("span %q attribute %s holds the secret: %q", s.Name(), a.Key, a.Value.Emit())
			}
		}
	}
}

// runEnded is a tasks.Observer that tells the test when a run ended
// (after the tracer, which comes before it, ended its span).
type runEnded chan string

func (r runEnded) RunStarted(ctx context.Context, _, _ string, _ int) context.Context { return ctx }
func (r runEnded) Checkpointed(context.Context, string, time.Duration)                {}
func (r runEnded) RunEnded(_ context.Context, status string)                          { r <- status }

// A durable task's run is a span of its own, with a child span per
// checkpoint, the one that observed the cancellation intent saying so; the
// request that created the task names it with the same attribute.
func TestTaskRunSpans(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	obs := tracing.New(tp, nil)
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{Observers: []server.Observer{obs}}))
	obs.Attach(srv)
	ctx := context.Background()
	db, err := store.Open(ctx, storetest.SQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := tasks.Open(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(runEnded, 1)
	ts, err := taskserver.New(srv, st, &taskserver.Options{Runner: tasks.RunnerOptions{Observers: []tasks.Observer{obs, ended}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Shutdown(ctx)
	firstDone, cancelled := make(chan struct{}), make(chan struct{})
	err = ts.Server().AddTool(server.Tool{Name: "job", Policy: server.Policy{Timeout: server.TimeoutLong}}, func(ctx context.Context, call *server.CallRequest) (*mcp.CallToolResult, error) {
		if err := taskserver.Checkpoint(ctx, call, "step 1"); err != nil {
			return nil, err
		}
		close(firstDone)
		<-cancelled
		return nil, taskserver.Checkpoint(ctx, call, "step 2")
	}, taskserver.AsTask(ts, taskserver.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Stdio(t, srv, nil)
	meta := map[string]any{mcp.MetaClientCapabilities: map[string]any{"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}}}
	f := c.Call(1, mcp.MethodToolsCall, mcptest.ModernParams(map[string]any{"_meta": meta, "name": "job"}))
	var created mcp.Task
	if err := json.Unmarshal(f.Result, &created); err != nil || created.TaskID == "" {
		t.Fatalf("create: %s", f.Raw)
	}
	<-firstDone
	if f := c.Call(2, mcp.MethodTasksCancel, mcptest.ModernParams(map[string]any{"_meta": meta, "taskId": created.TaskID})); f.Error != nil {
		t.Fatalf("cancel: %s", f.Raw)
	}
	close(cancelled)
	if status := <-ended; status != "cancelled" {
		t.Fatalf("the run ended %q, want cancelled", status)
	}
	tr := &traced{spans: spans}
	run := tr.span(t, "task job")
	if a := attrs(run); a["mcprel.task.id"] != created.TaskID || a["mcprel.task.status"] != "cancelled" || a["mcprel.task.attempt"] != "1" {
		t.Errorf("run span attributes %v", a)
	}
	var checkpoints []string
	for _, s := range spans.GetSpans().Snapshots() {
		if s.Name() == "task checkpoint" {
			if s.Parent().SpanID() != run.SpanContext().SpanID() {
				t.Errorf("a checkpoint span is not under the run's")
			}
			checkpoints = append(checkpoints, attrs(s)["mcprel.task.checkpoint"])
		}
	}
	if fmt.Sprint(checkpoints) != "[ok cancelled]" {
		t.Errorf("checkpoints %v, want [ok cancelled]", checkpoints)
	}
	rec.WaitRequest(t, jsonrpc.IntID(1))
	if a := attrs(tr.span(t, "tools/call job")); a["mcprel.task.id"] != created.TaskID || a["mcprel.task"] != "created" {
		t.Errorf("the creating request's span: %v", a)
	}
}

// With LogHandler, a request's log line names its trace and span: the
// same ids the exported span has.
func TestLogLinesNameTheirTrace(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	obs := tracing.New(tp, nil)
	var logs mcptest.LogBuffer
	rec := mcptest.NewRecorder()
	srv := mcptest.NewServer(t, rec.Hook(&server.Options{
		Logger:    slog.New(tracing.LogHandler(slog.NewJSONHandler(&logs, nil))),
		Observers: []server.Observer{obs},
	}))
	obs.Attach(srv)
	srv.AddTool(server.Tool{Name: "echo"}, func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	c := mcptest.Stdio(t, srv, nil)
	c.Call(1, mcp.MethodToolsCall, mcptest.Params(mcp.Modern, map[string]any{"name": "echo",
		"_meta": map[string]any{"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01"}}))
	rec.WaitRequest(t, jsonrpc.IntID(1))
	span := (&traced{spans: spans}).span(t, "tools/call echo")
	for _, line := range logs.Records(t) {
		if line["msg"] == "request" {
			if line["trace_id"] != clientTrace || line["span_id"] != span.SpanContext().SpanID().String() {
				t.Fatalf("the request line names trace %v span %v; want %s and the call's span %s", line["trace_id"], line["span_id"], clientTrace, span.SpanContext().SpanID())
			}
			return
		}
	}
	t.Fatalf("no request line in %s", logs.String())
}
