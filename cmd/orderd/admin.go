package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly/orderly/observe"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/operator/console"
	"github.com/orderly/orderly/service"
)

// DefaultAdminAddr is the default address of the admin listener: none.
// The listener serves /metrics and /debug/pprof/ without authentication,
// so it runs only when asked for (-admin-addr), and two orderd on one
// machine start with their defaults apart from -addr, with no admin port
// to share.
const DefaultAdminAddr = ""

// checkAdminAddr refuses an admin address that is not host:port, and one
// whose host is not loopback (127.0.0.0/8, ::1, localhost; an empty host
// is every interface) unless c.AdminAllowRemote opts in: exposing the
// operators' surface must be a decision, never a side effect of ":9090".
func (c *Config) checkAdminAddr() error {
	if c.AdminAddr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
		return fmt.Errorf("-admin-addr (ORDERD_ADMIN_ADDR) must be host:port, not %q", c.AdminAddr)
	}
	if !loopback(c.AdminAddr) && !c.AdminAllowRemote {
		return fmt.Errorf("-admin-addr (ORDERD_ADMIN_ADDR) %q is not a loopback address, and the admin listener serves /metrics and "+
			"/debug/pprof/ without authentication: bind it to 127.0.0.1, or set -admin-allow-remote (ORDERD_ADMIN_ALLOW_REMOTE=true) "+
			"to serve it there on purpose, on a network only operators and Prometheus reach", c.AdminAddr)
	}
	return nil
}

// emptyAdminAddr applies ORDERD_ADMIN_ADDR set but empty, which ff skips
// as unset: it disables the admin listener unless -admin-addr was given.
func emptyAdminAddr(fs *flag.FlagSet, c *Config) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "admin-addr" })
	if v, set := os.LookupEnv("ORDERD_ADMIN_ADDR"); set && v == "" && !given {
		c.AdminAddr = ""
	}
}

// telemetry is what orderd observes itself with: the metrics, the tracer
// provider, and the logger whose records carry trace and request ids.
type telemetry struct {
	metrics  *observe.Metrics
	tp       trace.TracerProvider
	log      *slog.Logger
	shutdown func(context.Context) error
}

// startTelemetry sets up the metrics, the tracer provider (OTLP export
// when OTEL_EXPORTER_OTLP_ENDPOINT is set, a no-op otherwise; it also
// becomes the global one, with the W3C propagators) and the logger.
func startTelemetry(ctx context.Context, c Config, logOut io.Writer) (*telemetry, error) {
	tp, shutdown, err := observe.Tracing(ctx, "orderd")
	if err != nil {
		return nil, err
	}
	if c.tracerProvider != nil {
		tp = c.tracerProvider
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(observe.Propagator)
	h := slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: c.LogLevel})
	return &telemetry{
		metrics:  observe.NewMetrics(),
		tp:       tp,
		log:      slog.New(observe.LogHandler(h)),
		shutdown: shutdown,
	}, nil
}

// adminHandler serves the operators' endpoints: /metrics (Prometheus),
// /debug/pprof/ (net/http/pprof, without cmdline), /healthz (the process
// is up), /readyz (the store answers), under operator.Prefix the
// operator API (ops, with its own credentials; nil serves none) and under
// console.Prefix, beside it, the operator console (con; nil serves none).
func adminHandler(m *observe.Metrics, svc *service.Service, ops, con http.Handler) http.Handler {
	mux := http.NewServeMux()
	if ops != nil {
		mux.Handle(operator.Prefix, ops)
	}
	if con != nil {
		mux.Handle(console.Prefix, con)
	}
	mux.Handle("GET /metrics", m.Handler())
	handlePprof(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := svc.Ping(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"unavailable"}`+"\n")
			return
		}
		_, _ = io.WriteString(w, `{"status":"ready"}`+"\n")
	})
	return mux
}

// handlePprof serves net/http/pprof's handlers on mux under /debug/pprof/,
// except /debug/pprof/cmdline (a 404): the command line holds whatever was
// passed as flags, API keys, webhook secrets and database URLs included.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.Handle("/debug/pprof/cmdline", http.NotFoundHandler())
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// startAdmin serves adminHandler on c.AdminAddr (nothing when it is empty)
// and returns the function that stops it. It logs
// {"msg":"admin listening","addr":…}.
func startAdmin(c Config, m *observe.Metrics, svc *service.Service, ops, con http.Handler, log *slog.Logger) (stop func(context.Context), err error) {
	if c.AdminAddr == "" {
		return func(context.Context) {}, nil
	}
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", c.AdminAddr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           adminHandler(m, svc, ops, con),
		ReadHeaderTimeout: 5 * time.Second,
		// No WriteTimeout: /debug/pprof/profile and /trace stream for as
		// long as asked (?seconds=).
		IdleTimeout: 120 * time.Second,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("admin listening", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener failed", "err", err)
		}
	}()
	return func(ctx context.Context) { _ = srv.Shutdown(ctx) }, nil
}
