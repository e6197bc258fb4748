// Command paysim is a simulated payment provider and warehouse: package
// paysim's HTTP API over a durable ledger in -data-dir, on its own port.
//
// Configuration comes from flags or, for each flag, the environment variable
// PAYSIM_<FLAG> (dashes become underscores): -addr or PAYSIM_ADDR, and so on.
// The run-level faults (-latency, -error-rate, -decline-rate, -timeout-rate,
// -timeout-delay, -drop-rate, -seed) can be changed later with PUT
// /admin/faults. paysim logs JSON lines to stderr, among them
// {"msg":"listening","addr":"host:port"} once it accepts connections, so a
// test may start it with -addr 127.0.0.1:0. SIGINT or SIGTERM shuts down
// gracefully: injected delays end at once, in-flight requests finish, then
// the ledger closes.
//
// With -api stripe (PAYSIM_API=stripe) paysim speaks the PaymentIntents
// subset of Stripe's API instead of its own /v1/charges (package
// paysim/stripesim): form-encoded requests with an sk_test_ Bearer key,
// Stripe's idempotency layer, Stripe's test payment methods, and
// Stripe-signed webhooks (-stripe-webhook-secret) to -webhook-url; the
// warehouse (/v1/shipments) and the admin routes stay.
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
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/orderly/orderly/internal/flagenv"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := ParseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "paysim:", err)
		os.Exit(2)
	}
	if err := Run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "paysim:", err)
		os.Exit(1)
	}
}

// Config is paysim's configuration, parsed once by ParseConfig.
type Config struct {
	Addr            string
	DataDir         string
	Faults          paysim.Faults
	MaxBodyBytes    int64
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	// Webhooks are the signed webhooks to send (none without a URL).
	Webhooks paysim.WebhookConfig
	// API is "native" (paysim's own /v1/charges API) or "stripe" (the
	// PaymentIntents subset of Stripe's API, package paysim/stripesim).
	API string
	// Stripe configures the Stripe mode.
	Stripe stripesim.Config
	// AuthorizationWindow is how long an authorization of a native
	// manual-capture intent lasts uncaptured.
	AuthorizationWindow time.Duration
}

// settings names paysim's flags in its errors with their environment
// variables; ParseConfig records the flags.
var settings = flagenv.NewNamer("PAYSIM")

// ParseConfig parses args and PAYSIM_* environment variables. Errors name
// the bad setting, as a flag and as an environment variable.
func ParseConfig(args []string, stderr io.Writer) (_ Config, err error) {
	fs := flag.NewFlagSet("paysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c     Config
		level = fs.String("log-level", "info", "debug, info, warn or error")
	)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8090", "listen address (env PAYSIM_ADDR)")
	fs.StringVar(&c.DataDir, "data-dir", "paysim-data", "directory of the ledger's file (env PAYSIM_DATA_DIR)")
	fs.DurationVar(&c.Faults.Latency, "latency", 0, "delay added to every /v1/ request")
	fs.Float64Var(&c.Faults.ErrorRate, "error-rate", 0, "fraction of new requests answered 503, committing nothing")
	fs.Float64Var(&c.Faults.DeclineRate, "decline-rate", 0, "fraction of new charges declined (card_declined)")
	fs.Float64Var(&c.Faults.TimeoutRate, "timeout-rate", 0, "fraction of new requests held for -timeout-delay, committing nothing")
	fs.DurationVar(&c.Faults.TimeoutDelay, "timeout-delay", paysim.DefaultTimeoutDelay, "how long a timeout fault holds the request")
	fs.Float64Var(&c.Faults.DropRate, "drop-rate", 0, "fraction of new requests committed whose reply is dropped")
	fs.Uint64Var(&c.Faults.Seed, "seed", 0, "seed of the fault draws")
	webhookSecret := fs.String("webhook-secret", "", "shared secret that signs webhooks (Paysim-Signature); required with -webhook-url")
	fs.StringVar(&c.Webhooks.URL, "webhook-url", "", "URL that receives signed webhooks (orderd: http://127.0.0.1:8080/provider/webhooks); empty sends none")
	fs.Float64Var(&c.Webhooks.Faults.DuplicateRate, "webhook-duplicate-rate", 0, "fraction of webhook events delivered twice")
	fs.Float64Var(&c.Webhooks.Faults.DropRate, "webhook-drop-rate", 0, "fraction of webhook events never delivered")
	fs.DurationVar(&c.Webhooks.Faults.Delay, "webhook-delay", 0, "delay before each webhook delivery (late webhooks)")
	fs.DurationVar(&c.Webhooks.Faults.ReorderWindow, "webhook-reorder-window", 0, "random extra delay in [0, window) per delivery, so webhooks overtake each other")
	fs.StringVar(&c.API, "api", "native", "payment API to serve: native (paysim's /v1/charges) or stripe (Stripe's PaymentIntents subset, Stripe-signed webhooks)")
	fs.StringVar(&c.Stripe.SecretKey, "stripe-secret-key", "", "with -api stripe: the only sk_test_ key accepted (empty accepts any sk_test_ key)")
	stripeSecrets := fs.String("stripe-webhook-secret", "", "with -api stripe: webhook signing secrets (Stripe-Signature), comma-separated to sign with several while one rotates; required with -webhook-url")
	fs.DurationVar(&c.Stripe.SearchLag, "stripe-search-lag", stripesim.DefaultSearchLag, "with -api stripe: how long a new PaymentIntent is invisible to /v1/payment_intents/search (negative: none)")
	fs.DurationVar(&c.Stripe.IdempotencyRetention, "stripe-idempotency-retention", stripesim.DefaultIdempotencyRetention, "with -api stripe: how long an idempotency key's saved answer is kept before the key starts a new request")
	fs.Float64Var(&c.Stripe.Commit500Rate, "commit-500-rate", 0, "with -api stripe: fraction of new requests that commit, then save and answer a 500")
	fs.Float64Var(&c.Stripe.LockTimeoutRate, "lock-timeout-rate", 0, "with -api stripe: fraction of new requests answered 429 lock_timeout (nothing saved)")
	fs.DurationVar(&c.AuthorizationWindow, "authorization-window", paysim.DefaultAuthorizationWindow, "how long the authorization of a manual-capture intent lasts before it expires uncaptured (the intent reads canceled)")
	fs.DurationVar(&c.Stripe.AuthorizationWindow, "stripe-authorization-window", stripesim.DefaultAuthorizationWindow, "with -api stripe: how long an uncaptured authorization lasts (the charge's capture_before) before the PaymentIntent is canceled (cancellation_reason automatic)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", paysim.DefaultMaxBodyBytes, "request body limit in bytes")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take at shutdown")
	fs.VisitAll(func(f *flag.Flag) {
		env := flagenv.Env("PAYSIM", f.Name)
		if !strings.Contains(f.Usage, env) {
			f.Usage += " (env " + env + ")"
		}
	})
	settings.Record(fs)
	defer func() { err = settings.Name(err) }()
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("PAYSIM")); err != nil {
		return c, err
	}
	if err := c.Faults.Validate(); err != nil {
		return c, fmt.Errorf("faults: %w", err)
	}
	c.Webhooks.Secret, c.Webhooks.Faults.Seed = []byte(*webhookSecret), c.Faults.Seed
	if err := c.Webhooks.Faults.Validate(); err != nil {
		return c, fmt.Errorf("webhook faults: %w", err)
	}
	switch c.API {
	case "native":
	case "stripe":
		var secrets []string
		for sec := range strings.SplitSeq(*stripeSecrets, ",") {
			if sec = strings.TrimSpace(sec); sec != "" {
				secrets = append(secrets, sec)
			}
		}
		if c.Webhooks.URL != "" && len(secrets) == 0 {
			return c, errors.New("-stripe-webhook-secret (PAYSIM_STRIPE_WEBHOOK_SECRET) is required with -api stripe and -webhook-url")
		}
		if c.Stripe.SecretKey != "" && !strings.HasPrefix(c.Stripe.SecretKey, "sk_test_") {
			return c, errors.New("-stripe-secret-key (PAYSIM_STRIPE_SECRET_KEY) must be an sk_test_ key")
		}
		c.Stripe.Webhooks = stripesim.WebhookConfig{URL: c.Webhooks.URL, Secrets: secrets, Faults: c.Webhooks.Faults}
		c.Stripe.Faults = c.Faults
		c.Webhooks = paysim.WebhookConfig{}
		if c.Stripe.SearchLag == 0 {
			c.Stripe.SearchLag = -1
		}
	default:
		return c, fmt.Errorf("-api (PAYSIM_API) must be native or stripe, not %q", c.API)
	}
	if c.API == "native" && c.Webhooks.URL != "" && len(c.Webhooks.Secret) < 16 {
		return c, errors.New("-webhook-secret (PAYSIM_WEBHOOK_SECRET) of at least 16 bytes is required with -webhook-url")
	}
	if c.DataDir == "" {
		return c, errors.New("-data-dir (PAYSIM_DATA_DIR) must not be empty")
	}
	if c.MaxBodyBytes <= 0 || c.ShutdownTimeout <= 0 {
		return c, errors.New("-max-body-bytes and -shutdown-timeout must be positive")
	}
	if err := c.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("-log-level: %w", err)
	}
	return c, nil
}

// Run serves until ctx is done, then shuts down gracefully. An error at
// start names the setting to change where one is at fault.
func Run(ctx context.Context, c Config, logOut io.Writer) (err error) {
	defer func() { err = settings.Name(err) }()
	log := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: c.LogLevel}))
	ledger, err := paysim.OpenLedger(ctx, c.DataDir)
	if err != nil {
		return fmt.Errorf("-data-dir: %w", err)
	}
	defer ledger.Close()
	native, err := paysim.NewServer(ledger, paysim.Config{Faults: c.Faults, Logger: log, MaxBodyBytes: c.MaxBodyBytes, Webhooks: c.Webhooks,
		AuthorizationWindow: c.AuthorizationWindow})
	if err != nil {
		return err
	}
	var sim interface {
		http.Handler
		StopDelays()
	} = native
	if c.API == "stripe" {
		sc := c.Stripe
		sc.Logger, sc.MaxBodyBytes = log, c.MaxBodyBytes
		if sim, err = stripesim.New(ctx, ledger, native, sc); err != nil {
			return err
		}
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	srv := &http.Server{
		Handler:           sim,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		// No WriteTimeout: injected delays may legitimately exceed any
		// fixed bound (up to paysim.MaxDelay).
		IdleTimeout: 120 * time.Second,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(sim.StopDelays)
	log.Info("listening", "addr", ln.Addr().String(), "data_dir", c.DataDir, "api", c.API, "faults", c.Faults)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", c.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
