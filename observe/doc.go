// Package observe makes orderd watchable: Prometheus metrics
// (prometheus/client_golang) and OpenTelemetry traces for the HTTP API, the
// service's use cases and provider calls, and the PostgreSQL statements.
//
// # Metrics
//
// Metrics holds a registry of every orderly_ metric; its Handler serves
// them in the Prometheus exposition format. Names follow the Prometheus
// conventions: the orderly_ prefix, base units (seconds), _total for
// counters. Labels take values from small closed sets — route templates,
// methods, status classes, operations, outcomes, states, error kinds —
// never order ids, keys or tenants, so cardinality stays bounded.
//
// # Traces
//
// Tracing returns the tracer provider: one exporting over OTLP when the
// standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, a no-op one otherwise. The
// spans are the HTTP request (otelhttp), the service operation
// ("service.<operation>"), each provider call ("provider.<operation>", its
// W3C traceparent sent to the provider), and each database statement
// ("db.query", and "db.batch" with one "db.batch.query" child per statement
// of a pgx batch).
//
// # Wiring
//
// The service stays free of both libraries: Observer implements
// service.Observer, the small interface the service reports through. HTTP
// wraps the API handler, PgxTracer is the pool's pgx tracer, PoolCollector
// exports pgxpool statistics, and LogHandler adds trace_id, span_id and
// request_id to every log record that carries a request's context.
package observe
