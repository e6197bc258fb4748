package observe

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span attributes orderd sets.
var (
	attrErrorCode = attribute.Key("orderly.error_code")
	attrOutcome   = attribute.Key("orderly.provider.outcome")
	attrRoute     = attribute.Key("http.route")
	attrDBSystem  = attribute.String("db.system.name", "postgresql")
	attrDBQuery   = attribute.Key("db.query.text")
	attrDBBatch   = attribute.Key("db.operation.batch.size")
)

// Propagator is the context propagation orderd uses: W3C Trace Context
// (traceparent, tracestate) and W3C Baggage.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// OTLPConfigured reports whether the environment asks for OTLP export: the
// standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set (OpenTelemetry specification, "OTLP Exporter Configuration").
func OTLPConfigured() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracing returns the tracer provider of service serviceName and the
// function that flushes and stops it. When OTLPConfigured, spans are
// batched and exported over OTLP/HTTP to the configured endpoint (the
// exporter reads the other standard OTEL_EXPORTER_OTLP_* variables, and
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the resource);
// otherwise the provider is a no-op: spans cost next to nothing and are
// never recorded, though an incoming traceparent still propagates to the
// provider and to the log lines.
func Tracing(ctx context.Context, serviceName string) (trace.TracerProvider, func(context.Context) error, error) {
	if !OTLPConfigured() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
