package observe

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// HTTP wraps the API handler api (a chi router) with a server span per
// request (otelhttp, named "<METHOD> <route template>" once routed, with the
// W3C traceparent of the request as its parent) and the HTTP metrics of m.
// Either may be off: m nil counts nothing, tp nil traces nothing. With the
// no-op provider (tracing not configured) no span is made: the request's
// traceparent is only extracted (W3C Trace Context §3.2), so it still
// reaches the provider and the log lines, at a fraction of otelhttp's cost.
func HTTP(api http.Handler, m *Metrics, tp trace.TracerProvider) http.Handler {
	_, noopTracing := tp.(noop.TracerProvider)
	h := api
	if m != nil {
		h = m.instrument(h, tp != nil && !noopTracing)
	}
	switch {
	case noopTracing:
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Traceparent") != "" {
				r = r.WithContext(Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			next.ServeHTTP(w, r)
		})
	case tp != nil:
		h = otelhttp.NewHandler(h, "orderd",
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(Propagator),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	return h
}

// instrument counts requests by route template, method and status class,
// observes their latency by route, and keeps the in-flight gauge. The
// route template is read from chi's routing context, which it provides so
// the router fills it in; a request no route matched is "unmatched". When
// named, it renames the request's span after the route template.
func (m *Metrics) instrument(next http.Handler, named bool) http.Handler {
	routes, _ := next.(chi.Routes) // nil when next is no chi router
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		if rctx == nil {
			// The router serves a context it finds as its own and skips
			// its own setup, so this one must be what chi's Mux.ServeHTTP
			// would make: Routes is the router (chi's GetHead and
			// route-matching middleware dereference it).
			rctx = chi.NewRouteContext()
			rctx.Routes = routes
			r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		}
		m.httpInFlight.Inc()
		defer m.httpInFlight.Dec()
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := rctx.RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		m.httpRequests.WithLabelValues(route, methodLabel(r.Method), statusClass(status)).Inc()
		m.httpDuration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		if named {
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + route)
			span.SetAttributes(attrRoute.String(route))
		}
	})
}

// methodLabel bounds the method label to the standard methods (RFC 9110
// §9.3) and "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// statusClass is "1xx" to "5xx" (RFC 9110 §15), or "other".
func statusClass(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code/100) + "xx"
}

// ProviderClient returns the HTTP client for calls to a provider: each
// request gets a client span (otelhttp) and carries the W3C traceparent of
// its context (W3C Trace Context §3), so the provider can log it;
// redirects are answers, never followed. tp nil traces nothing but still
// propagates the context's trace.
func ProviderClient(tp trace.TracerProvider) *http.Client {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &http.Client{
		Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(Propagator),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider())),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
