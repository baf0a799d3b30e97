package tracing

import (
	"context"
	"encoding/json"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/retry"
)

// keyOutcome and keyKind are what became of a request a client sent
// (client.VerdictOf): answered, refused, not sent or unknown, and how.
const (
	keyOutcome = attribute.Key("mcprel.request.outcome")
	keyKind    = attribute.Key("mcprel.request.kind")
)

// Client returns the interceptor that traces each request a client sends
// to the server it names (a gateway's upstream): a client span per
// attempt, child of the span of ctx, named as a server names its spans
// ("tools/call NAME"), with the request's verdict. A span whose request
// was not answered with its result (or a tool's own failure, which is an
// answer) is marked failed. The request carries the span's W3C trace
// context in its _meta (traceparent, tracestate), so that the server's
// spans continue the trace; the caller's options are not changed, a copy
// carries it.
func (o *Observer) Client(upstream string) client.Interceptor {
	return func(next client.CallFunc) client.CallFunc {
		return func(ctx context.Context, req *client.Request) (json.RawMessage, error) {
			name := req.Method
			attrs := []attribute.KeyValue{keyMethod.String(req.Method), keyUpstream.String(upstream)}
			if req.Name != "" && req.Method != mcp.MethodResourcesRead {
				name += " " + req.Name
			}
			if req.Method == mcp.MethodToolsCall {
				attrs = append(attrs, keyToolName.String(req.Name))
			}
			ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			defer span.End()
			carrier := propagation.MapCarrier{}
			o.prop.Inject(ctx, carrier)
			opts := *req.Options
			opts.Meta = make(map[string]any, len(req.Options.Meta)+len(carrier))
			maps.Copy(opts.Meta, req.Options.Meta)
			for k, v := range carrier {
				opts.Meta[k] = v
			}
			traced := *req
			traced.Options = &opts
			raw, err := next(ctx, &traced)
			v := client.VerdictOfRaw(req, raw, err)
			span.SetAttributes(keyOutcome.String(v.Outcome.String()), keyKind.String(v.Kind.String()))
			if v.Kind != retry.Succeeded && v.Kind != retry.ToolFailed {
				span.SetStatus(codes.Error, v.Kind.String())
			}
			return raw, err
		}
	}
}
