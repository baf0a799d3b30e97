// Package tracing exports a span per MCP request with OpenTelemetry,
// through the server's observer seam, named and attributed as the
// OpenTelemetry semantic conventions for MCP say, with child spans for the
// idempotency ledger's transactions. Package server imports no tracing
// library, and a program that does not want OpenTelemetry does not link
// it: only this package (and the command that configures an exporter)
// does.
//
// A request whose params._meta carries a W3C traceparent (and tracestate)
// continues the client's trace; any other request starts a trace of its
// own. Tracing is off unless a program attaches an Observer: with no
// Observer there is nothing on the hot path at all.
package tracing

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
)

// Options configure an Observer. The zero value is valid.
type Options struct {
	// RecordArguments puts a summary of each call's arguments on its span
	// as gen_ai.tool.call.arguments (server.RequestRecord.ArgumentSummary:
	// values cut short, and the arguments a tool's Policy.Secret lists as
	// [secret]). Off by default: arguments may be personal data even
	// when no policy says so.
	RecordArguments bool
}

// Observer starts a span when a request starts and ends it when the
// request ends. It is a server.Observer; it is also a ledger.Observer
// (TxStarted, TxEnded), whose spans are children of the request's, and a
// tasks.Observer (RunStarted, Checkpointed, RunEnded): a span per run of
// a durable task with a child span per checkpoint.
type Observer struct {
	srv    *server.Server // nil until Attach: only its tools name spans
	tracer trace.Tracer
	prop   propagation.TraceContext
	opts   Options
}

// New returns an Observer whose spans come from tp.
func New(tp trace.TracerProvider, opts *Options) *Observer {
	o := &Observer{tracer: tp.Tracer("github.com/mcprel/mcprel/tracing")}
	if opts != nil {
		o.opts = *opts
	}
	return o
}

// Attach tells the observer the server it observes: a call's span is
// named after its tool only when the server registered that tool, so that
// names a client made up never multiply span names.
func (o *Observer) Attach(srv *server.Server) { o.srv = srv }

// The attribute keys of the OpenTelemetry semantic conventions for MCP
// (and the general ones they use), and mcprel's own.
const (
	keyMethod          = attribute.Key("mcp.method.name")
	keySession         = attribute.Key("mcp.session.id")
	keyProtocolVersion = attribute.Key("mcp.protocol.version")
	keyRequestID       = attribute.Key("jsonrpc.request.id")
	keyToolName        = attribute.Key("gen_ai.tool.name")
	keyOperation       = attribute.Key("gen_ai.operation.name")
	keyArguments       = attribute.Key("gen_ai.tool.call.arguments")
	keyErrorType       = attribute.Key("error.type")
	keyStatusCode      = attribute.Key("rpc.response.status_code")
	keyNetTransport    = attribute.Key("network.transport")
	keyNetProtocol     = attribute.Key("network.protocol.name")
	keyLedgerOp        = attribute.Key("mcprel.ledger.operation")
	keyLedgerResult    = attribute.Key("mcprel.ledger.result")
	keyTaskID          = attribute.Key("mcprel.task.id")
	keyTaskAttempt     = attribute.Key("mcprel.task.attempt")
	keyTaskStatus      = attribute.Key("mcprel.task.status")
	keyCheckpoint      = attribute.Key("mcprel.task.checkpoint")
)

// carrier is the two W3C fields a request's _meta may carry.
type carrier struct{ parent, state string }

func (c carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}
func (c carrier) Set(string, string) {}
func (c carrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// RequestStarted starts the request's span, a child of the client's when
// the request carried a traceparent.
func (o *Observer) RequestStarted(ctx context.Context, info server.RequestInfo) context.Context {
	if info.TraceParent != "" {
		ctx = o.prop.Extract(ctx, carrier{info.TraceParent, info.TraceState})
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, keyMethod.String(info.Method))
	if info.ID.IsValid() {
		attrs = append(attrs, keyRequestID.String(idString(info.ID)))
	}
	if info.Session != "" {
		attrs = append(attrs, keySession.String(info.Session))
	}
	switch info.Transport {
	case "stdio":
		attrs = append(attrs, keyNetTransport.String("pipe"))
	case "http":
		attrs = append(attrs, keyNetTransport.String("tcp"), keyNetProtocol.String("http"))
	}
	ctx, _ = o.tracer.Start(ctx, info.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(info.Start), trace.WithAttributes(attrs...))
	return ctx
}

// RequestEnded names the span after its tool, says how the request ended
// and ends the span.
func (o *Observer) RequestEnded(ctx context.Context, rec server.RequestRecord) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if rec.Tool != "" {
		// {mcp.method.name} {target}, when the target is one of the
		// server's own tools, a low-cardinality name.
		if o.srv != nil && o.srv.HasTool(rec.Tool) {
			span.SetName(rec.Method + " " + rec.Tool)
		}
		span.SetAttributes(keyToolName.String(rec.Tool), keyOperation.String("execute_tool"))
		if o.opts.RecordArguments {
			if summary := rec.ArgumentSummary(); summary != "" {
				span.SetAttributes(keyArguments.String(summary))
			}
		}
	}
	if rec.Era == mcp.Modern {
		span.SetAttributes(keyProtocolVersion.String(mcp.Version20260728))
	}
	for k, v := range rec.Annotations {
		// "task_id" becomes mcprel.task.id, as on the task's own spans.
		span.SetAttributes(attribute.String("mcprel."+strings.ReplaceAll(k, "_", "."), v))
	}
	switch rec.Outcome {
	case server.Completed:
		if rec.IsError {
			span.SetAttributes(keyErrorType.String("tool_error"))
			span.SetStatus(codes.Error, "the tool reported an error")
		}
	case server.Failed:
		code := strconv.FormatInt(rec.ErrorCode, 10)
		span.SetAttributes(keyErrorType.String(code), keyStatusCode.String(code))
		span.SetStatus(codes.Error, "JSON-RPC error "+code)
	case server.Cancelled:
		span.SetAttributes(keyErrorType.String("cancelled"))
		span.SetStatus(codes.Error, causeOf(rec))
	case server.TimedOut:
		span.SetAttributes(keyErrorType.String("timeout"))
		span.SetStatus(codes.Error, causeOf(rec))
	}
	span.End(trace.WithTimestamp(rec.Start.Add(rec.Duration)))
}

func causeOf(rec server.RequestRecord) string {
	if rec.Cause != nil {
		return rec.Cause.Error()
	}
	return rec.Outcome.String()
}

// TxStarted starts a span for a ledger operation, under the request's.
func (o *Observer) TxStarted(ctx context.Context, op string) context.Context {
	ctx, _ = o.tracer.Start(ctx, "ledger "+op, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(keyLedgerOp.String(op)))
	return ctx
}

// TxEnded ends a ledger operation's span with its result.
func (o *Observer) TxEnded(ctx context.Context, op, result string, _ time.Duration) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(keyLedgerResult.String(result))
	if result == "error" {
		span.SetStatus(codes.Error, "the ledger's transaction failed")
	}
	span.End()
}

// RunStarted starts a span for a run of a durable task: a trace of its
// own, since a task outlives the request that created it (the request's
// span and the task's share the mcprel.task.id attribute). It is a
// tasks.Observer method.
func (o *Observer) RunStarted(ctx context.Context, tool, id string, attempt int) context.Context {
	ctx, _ = o.tracer.Start(ctx, "task "+tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithNewRoot(),
		trace.WithAttributes(keyTaskID.String(id), keyTaskAttempt.Int(attempt), keyToolName.String(tool)))
	return ctx
}

// Checkpointed records a checkpoint the task's work reached as a child
// span of its run: the step's boundary, with what the store said.
func (o *Observer) Checkpointed(ctx context.Context, result string, d time.Duration) {
	end := time.Now()
	_, span := o.tracer.Start(ctx, "task checkpoint", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(end.Add(-d)), trace.WithAttributes(keyCheckpoint.String(result)))
	if result == "error" {
		span.SetStatus(codes.Error, "the checkpoint could not reach the store")
	}
	span.End(trace.WithTimestamp(end))
}

// RunEnded ends the run's span with the task's status ("" when the run
// stopped for a shutdown and the task was left to be taken over).
func (o *Observer) RunEnded(ctx context.Context, status string) {
	span := trace.SpanFromContext(ctx)
	if status == "" {
		status = "left"
	}
	span.SetAttributes(keyTaskStatus.String(status))
	if status == "failed" {
		span.SetStatus(codes.Error, "the task failed")
	}
	span.End()
}

// idString is a JSON-RPC id as the conventions want it: a number's
// digits, a string's own characters.
func idString(id jsonrpc.ID) string {
	s := id.String()
	if id.IsString() {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

var _ server.Observer = (*Observer)(nil)

// keyUpstream names the server a client sent a request to (a gateway's
// upstream).
const keyUpstream = attribute.Key("mcprel.gateway.upstream")
