package tracing

import (
	"context"
	"errors"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Configured reports whether spans should be exported: an endpoint was
// given, or the standard OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variable is set — and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns it off.
func Configured(endpoint string) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// ExportOTLP returns a tracer provider that batches spans to an OTLP/HTTP
// collector: endpoint is a URL such as http://127.0.0.1:4318 (the path
// /v1/traces is added); empty means the standard OTEL_EXPORTER_OTLP_*
// variables, which also set headers, timeouts and TLS. The service is
// named "mcprel" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. shutdown flushes what is buffered; call it before exiting.
func ExportOTLP(ctx context.Context, endpoint string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	var opts []otlptracehttp.Option
	if endpoint != "" {
		if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
			return nil, nil, errors.New("the OTLP endpoint must be an http:// or https:// URL, such as http://127.0.0.1:4318")
		}
		if u := strings.TrimSuffix(endpoint, "/"); strings.HasSuffix(u, "/v1/traces") {
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		} else {
			opts = append(opts, otlptracehttp.WithEndpointURL(u+"/v1/traces"))
		}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "mcprel")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, nil, err
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
