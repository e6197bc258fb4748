// Command orderd is the Orderly order service.
//
// Configuration comes from flags or, for each flag, the environment variable
// ORDERD_<FLAG> (dashes become underscores): -addr or ORDERD_ADDR, and so on.
// Without -database-url the embedded store keeps its file in -data-dir;
// with a postgres:// URL several orderd processes share one database.
// Migrations are applied at start. SIGINT or SIGTERM shuts down gracefully:
// in-flight requests finish, then the store closes.
//
// Load is bounded, never queued: at most -max-in-flight API requests are
// served at once (one more is a 503 with Retry-After), each has a deadline
// of -request-timeout, and on PostgreSQL a pool of -db-max-conns connections
// whose sessions carry statement_timeout and lock_timeout.
//
// A second listener, -admin-addr (off by default; a host that is not
// loopback needs -admin-allow-remote), serves /metrics, /debug/pprof/
// (without cmdline), /healthz and /readyz. Traces are
// exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (package
// observe).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/flagenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/observe"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/operator/console"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/postgres"
	"github.com/orderly/orderly/store/sqlite"
)

// DevTenant and DevAPIKey are used when no API key is configured, which is
// allowed only on a loopback address or with -dev-mode (see Config.DevMode).
const (
	DevTenant = "dev"
	DevAPIKey = "sk_dev_orderly_local"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := ParseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orderd:", err)
		os.Exit(2)
	}
	if err := Run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "orderd:", err)
		os.Exit(1)
	}
}

// Config is orderd's configuration, parsed once by ParseConfig.
type Config struct {
	Addr              string
	AdminAddr         string // admin listener (/metrics, /debug/pprof/, probes); empty (the default) disables it
	DatabaseURL       string
	DataDir           string
	APIKeys           map[string]string     // API key → tenant
	OperatorKeys      []operator.Credential // operator API credentials (-operator-keys), served on the admin listener under operator.Prefix
	OperatorBasePath  string                // path prefix a reverse proxy serves the console under (-operator-base-path)
	Policy            idempotency.Policy
	KeyTTL            time.Duration
	DerivedKeyTTL     time.Duration
	VolatileFields    []string
	MaxBodyBytes      int64
	ShutdownTimeout   time.Duration
	PaymentURL        string
	WarehouseURL      string
	ProviderTimeout   time.Duration
	LeaseDuration     time.Duration
	MaxWait           time.Duration
	TombstoneTTL      time.Duration
	CompleterInterval time.Duration
	SweepInterval     time.Duration
	// UnresolvedAfter and CompleterParallel: service.Config's.
	UnresolvedAfter time.Duration
	// ProviderKeyMaxAge: service.Config's.
	ProviderKeyMaxAge time.Duration
	// PendingPaymentExpiry: service.Config's (issue 16).
	PendingPaymentExpiry time.Duration
	// Capture and CaptureMargin: service.Config's (issue 16, capture at
	// fulfilment).
	Capture           service.CaptureMode
	CaptureMargin     time.Duration
	CompleterParallel int
	// GroupCommit coalesces concurrent creates (service.Config.GroupCommit).
	GroupCommit bool
	LogLevel    slog.Level
	MaxInFlight int // API requests served at once; more are refused (503)
	// TenantMaxInFlight bounds one tenant's API requests and commands at
	// once (429 past it); after ParseConfig never 0.
	TenantMaxInFlight  int
	RequestTimeout     time.Duration // deadline of each API request
	DBMaxConns         int           // PostgreSQL pool size (after ParseConfig: never 0)
	DBStatementTimeout time.Duration // statement_timeout of each PostgreSQL session
	DBLockTimeout      time.Duration // lock_timeout of each PostgreSQL session
	// ReplicaURLs are the postgres:// URLs of read replicas of DatabaseURL
	// (streaming standbys); only the read endpoints use them.
	ReplicaURLs          []string
	ReplicaMaxLag        time.Duration // staleness bound of a replica in rotation
	ReplicaCheckInterval time.Duration // how often each replica's lag is measured
	Events               EventsConfig
	// Stripe selects the payment provider (-payment-provider) and holds
	// the Stripe settings (stripe.go).
	Stripe              StripeConfig
	usingDevelopmentKey bool

	// ProviderWebhookSecret, when set, serves POST /provider/webhooks for
	// paysim's signed webhooks.
	ProviderWebhookSecret string
	// CommandsNATSURL, when set, consumes commands from JetStream (stream
	// CommandsStream, durable consumer CommandsDurable).
	CommandsNATSURL string
	CommandsStream  string
	CommandsDurable string
	tracerProvider  trace.TracerProvider // tests: replaces the one the environment selects
	// DevMode allows the development key and the built-in simulators on an
	// address that is not loopback. Without it, orderd refuses to start
	// there unless API keys and provider URLs are configured.
	DevMode bool
	// AdminAllowRemote allows an AdminAddr whose host is not loopback.
	AdminAllowRemote bool
	// TenantRateLimit is each tenant's sustained request rate in requests
	// per second, and TenantBurst the requests it may make at once; 0 turns
	// the limit off (api.Config.TenantRateLimit).
	TenantRateLimit float64
	TenantBurst     int
	// AuthFailuresPerMinute bounds failed authentications per client
	// address; 0 turns the limit off (api.Config.AuthFailuresPerMinute).
	AuthFailuresPerMinute int
	// CommandsRoot is the first subject token of the commands
	// (<root>.<tenant>.commands.<op>), so that several deployments, or
	// tests, can share one NATS server with streams that do not overlap.
	CommandsRoot string
	// CommandsDuplicateWindow is the commands stream's duplicate window:
	// a command published again with the same Nats-Msg-Id within it is
	// dropped by the stream; later ones reach the idempotency ledger.
	CommandsDuplicateWindow time.Duration
	// CommandsSignatureTolerance is how far a command's signature
	// timestamp may be from when the stream stored it
	// (natsbus.Config.SignatureTolerance).
	CommandsSignatureTolerance time.Duration
}

// Defaults of the load bounds.
const (
	DefaultMaxInFlight        = 64
	DefaultRequestTimeout     = 15 * time.Second
	DefaultDBStatementTimeout = 5 * time.Second
	DefaultDBLockTimeout      = 2 * time.Second
	// MaxDerivedDBConns caps the pool size derived from -max-in-flight:
	// past a few dozen connections per instance PostgreSQL gains little
	// throughput, and several instances share its max_connections.
	MaxDerivedDBConns = 32
	// DBMinConns is the pool's floor of open connections, so the first
	// requests after a quiet spell do not each pay a connection setup.
	DBMinConns = 2
	// Defaults of the rate limits: far above what one tenant's honest
	// client needs and below what one instance serves.
	DefaultTenantRateLimit       = 1000
	DefaultTenantBurst           = 2000
	DefaultAuthFailuresPerMinute = 30
	// MaxMaxBodyBytes caps -max-body-bytes: an order has at most 100 items.
	MaxMaxBodyBytes = 16 << 20
)

// envName is the environment variable of flag name: ORDERD_ and the name
// in capitals, dashes as underscores.
func envName(flag string) string {
	return flagenv.Env("ORDERD", flag)
}

// ParseConfig parses args and ORDERD_* environment variables. Errors name
// the bad setting, as a flag and as an environment variable
// (nameSettings).
func ParseConfig(args []string, stderr io.Writer) (_ Config, err error) {
	fs := flag.NewFlagSet("orderd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c        Config
		keys     = fs.String("api-keys", "", "API keys as tenant:key,tenant:key (env ORDERD_API_KEYS)")
		keysFile = fs.String("api-keys-file", "", "file with one tenant:key per line (env ORDERD_API_KEYS_FILE)")
		opKeys   = fs.String("operator-keys", "", "operator API credentials as role:name:token,… with role reader or operator (env ORDERD_OPERATOR_KEYS); served on -admin-addr under /operator/v1/")
		opFile   = fs.String("operator-keys-file", "", "file with one role:name:token per line (env ORDERD_OPERATOR_KEYS_FILE)")
		policy   = fs.String("idempotency-policy", string(idempotency.PolicyDerive), "without an Idempotency-Key: derive, require or off")
		volatile = fs.String("volatile-fields", strings.Join(idempotency.DefaultVolatileFields, ","), "body members ignored by the fingerprint, comma-separated")
		level    = fs.String("log-level", "info", "debug, info, warn or error")
		capture  = fs.String("capture", string(service.CaptureAtPay), "when a pay's money is captured: at_pay, or at_fulfilment (a pay authorizes; a fulfilment ships, then captures; a cancel voids)")
		replicas = fs.String("database-replica-urls", "", "postgres:// URLs of streaming replicas of -database-url, comma-separated; only GET /v1/orders and GET /v1/orders/{id} read from them")
	)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen address (env ORDERD_ADDR)")
	fs.StringVar(&c.AdminAddr, "admin-addr", DefaultAdminAddr, "admin listen address for /metrics, /debug/pprof/, /healthz and /readyz, such as 127.0.0.1:9090; empty (the default) serves none")
	fs.StringVar(&c.OperatorBasePath, "operator-base-path", "", "path a reverse proxy serves the operator console under, such as /ops (pages at /ops/operator/); empty takes the proxy's X-Forwarded-Prefix")
	fs.BoolVar(&c.AdminAllowRemote, "admin-allow-remote", false, "allow an -admin-addr whose host is not loopback (the admin listener has no authentication)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "postgres:// URL; empty selects the embedded store (env ORDERD_DATABASE_URL)")
	fs.StringVar(&c.DataDir, "data-dir", "data", "directory of the embedded store's file (env ORDERD_DATA_DIR)")
	fs.DurationVar(&c.KeyTTL, "idempotency-key-ttl", idempotency.DefaultKeyTTL, "retention of client-sent idempotency keys")
	fs.DurationVar(&c.DerivedKeyTTL, "idempotency-derived-ttl", idempotency.DefaultDerivedKeyTTL, "retention of keys derived when none is sent")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "request body limit in bytes")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "how long in-flight requests may take at shutdown")
	fs.StringVar(&c.PaymentURL, "payment-url", "", "base URL of an HTTP payment provider (paysim); empty uses the built-in simulator")
	fs.StringVar(&c.WarehouseURL, "warehouse-url", "", "base URL of an HTTP warehouse (paysim); empty uses -payment-url, or the built-in simulator")
	fs.DurationVar(&c.ProviderTimeout, "provider-timeout", 10*time.Second, "timeout of one provider call")
	fs.DurationVar(&c.LeaseDuration, "lease", service.DefaultLeaseDuration, "how long a request holds its idempotency key while calling a provider; must exceed twice -provider-timeout (a resumed unknown outcome asks the provider, then calls it)")
	fs.DurationVar(&c.MaxWait, "max-wait", service.DefaultMaxWait, "cap on Prefer: wait for a concurrent duplicate")
	fs.DurationVar(&c.TombstoneTTL, "idempotency-tombstone-ttl", service.DefaultTombstoneTTL, "how long an expired key's tombstone is kept")
	fs.DurationVar(&c.CompleterInterval, "completer-interval", 5*time.Second, "how often the completer looks for abandoned requests")
	fs.DurationVar(&c.ProviderKeyMaxAge, "provider-key-max-age", service.DefaultProviderKeyMaxAge, "age past which a provider idempotency key is never sent again (the attempt is resolved by reading the provider's object); keep it below the provider's key retention (Stripe: 24h)")
	fs.DurationVar(&c.PendingPaymentExpiry, "pending-payment-expiry", service.DefaultPendingPaymentExpiry, "age past which a payment still waiting for the customer's 3-D Secure (requires_action) is cancelled at the provider and declined payment_expired")
	fs.DurationVar(&c.CaptureMargin, "capture-margin", service.DefaultCaptureMargin, "with -capture at_fulfilment: how long before an authorization's capture_before the completer flags it for an operator")
	fs.DurationVar(&c.UnresolvedAfter, "unresolved-after", service.DefaultUnresolvedAfter, "age past which a provider call whose outcome is still unknown is never retried but parked as needs_attention; keep it below the provider's key retention (Stripe: 24h)")
	fs.IntVar(&c.CompleterParallel, "completer-parallel", service.DefaultCompleterParallel, "abandoned requests one completer pass drives at once")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", time.Minute, "how often expired idempotency keys are swept")
	fs.BoolVar(&c.GroupCommit, "group-commit", true, "coalesce concurrent creates into one transaction per group (env ORDERD_GROUP_COMMIT)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", DefaultMaxInFlight, "API requests served at once; one more is refused with 503 and Retry-After (health probes are exempt)")
	fs.IntVar(&c.TenantMaxInFlight, "tenant-max-in-flight", 0, "API requests and commands one tenant may have in flight on one instance; one more is refused with 429 too_many_requests and Retry-After; 0 derives max(1, -max-in-flight / 2); at most -max-in-flight")
	fs.BoolVar(&c.DevMode, "dev-mode", false, "allow the development key and the built-in simulators on an address that is not loopback")
	fs.Float64Var(&c.TenantRateLimit, "tenant-rate-limit", DefaultTenantRateLimit, "requests per second each tenant may make, sustained (429 past it); 0 turns the limit off")
	fs.IntVar(&c.TenantBurst, "tenant-burst", DefaultTenantBurst, "requests each tenant may make at once, above its rate")
	fs.IntVar(&c.AuthFailuresPerMinute, "auth-failures-per-minute", DefaultAuthFailuresPerMinute, "failed authentications per client address and minute before its requests get 429; 0 turns the limit off")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", DefaultRequestTimeout, "deadline of each API request (503 and Retry-After past it); must exceed -max-wait")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 0, fmt.Sprintf("PostgreSQL pool size; 0 derives min(-max-in-flight, %d); a pool_max_conns URL parameter wins", MaxDerivedDBConns))
	fs.DurationVar(&c.DBStatementTimeout, "db-statement-timeout", DefaultDBStatementTimeout, "statement_timeout of orderd's PostgreSQL sessions; a statement_timeout URL parameter wins")
	fs.DurationVar(&c.ReplicaMaxLag, "database-replica-max-lag", postgres.DefaultReplicaMaxLag, "a replica further behind the primary than this, or unreachable, serves no reads until it catches up")
	fs.DurationVar(&c.ReplicaCheckInterval, "database-replica-check-interval", postgres.DefaultReplicaCheckInterval, "how often each replica's lag is measured; below -database-replica-max-lag")
	fs.DurationVar(&c.DBLockTimeout, "db-lock-timeout", DefaultDBLockTimeout, "lock_timeout of orderd's PostgreSQL sessions, below -db-statement-timeout; a lock_timeout URL parameter wins")
	c.Events.flags(fs)
	c.Stripe.flags(fs)
	fs.StringVar(&c.ProviderWebhookSecret, "provider-webhook-secret", "", "shared secret of paysim's signed webhooks (at least 16 bytes); empty serves no provider webhook endpoint")
	fs.StringVar(&c.CommandsNATSURL, "commands-nats-url", "", "nats:// URL of a JetStream server to take commands from (orderly.<tenant>.commands.<op>); empty takes none")
	fs.StringVar(&c.CommandsStream, "commands-stream", "ORDERLY_COMMANDS", "JetStream stream of commands and dead letters (created if missing)")
	fs.StringVar(&c.CommandsDurable, "commands-consumer", "orderd-commands", "durable consumer name shared by every orderd instance")
	fs.StringVar(&c.CommandsRoot, "commands-subject-root", natsbus.DefaultRoot, "first token of the command subjects <root>.<tenant>.commands.<op>")
	fs.DurationVar(&c.CommandsSignatureTolerance, "commands-signature-tolerance", natsbus.DefaultSignatureTolerance, "how far a command's signature timestamp may be from when the stream stored it (a replay window); at least 1s, below -idempotency-key-ttl")
	fs.DurationVar(&c.CommandsDuplicateWindow, "commands-duplicate-window", natsbus.DefaultDuplicateWindow, "the commands stream's duplicate window: a resend with the same Nats-Msg-Id within it is dropped by the stream")
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		if !strings.Contains(f.Usage, env) {
			f.Usage += " (env " + env + ")"
		}
	})
	settings.Record(fs)
	defer func() { err = nameSettings(err) }()
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("ORDERD")); err != nil {
		return c, err
	}
	emptyAdminAddr(fs, &c)
	if err := c.checkDurationFloors(); err != nil {
		return c, err
	}
	if err := c.checkAdminAddr(); err != nil {
		return c, err
	}
	if c.Capture, err = service.ParseCaptureMode(*capture); err != nil {
		return c, fmt.Errorf("-capture (ORDERD_CAPTURE) %w", err)
	}
	if c.CaptureMargin <= 0 {
		return c, errors.New("-capture-margin (ORDERD_CAPTURE_MARGIN) must be positive")
	}
	c.Policy = idempotency.Policy(*policy)
	if !c.Policy.Valid() {
		return c, fmt.Errorf("-idempotency-policy (ORDERD_IDEMPOTENCY_POLICY) must be derive, require or off, not %q", *policy)
	}
	if c.KeyTTL < time.Second || c.DerivedKeyTTL < time.Second || c.TombstoneTTL < time.Second {
		return c, errors.New("-idempotency-key-ttl, -idempotency-derived-ttl and -idempotency-tombstone-ttl must each be at least 1s")
	}
	if c.ProviderKeyMaxAge <= c.LeaseDuration {
		return c, errors.New("-provider-key-max-age (ORDERD_PROVIDER_KEY_MAX_AGE) must exceed -lease")
	}
	if c.UnresolvedAfter <= c.LeaseDuration || c.CompleterParallel < 1 {
		return c, errors.New("-unresolved-after (ORDERD_UNRESOLVED_AFTER) must exceed -lease, and -completer-parallel (ORDERD_COMPLETER_PARALLEL) be at least 1")
	}
	// A holder of a resumed unknown outcome asks the provider, then may
	// call it: two calls, each up to the provider timeout, within one
	// lease, or every holder runs out of lease mid-call and the key is
	// taken over again and again.
	if c.ProviderTimeout <= 0 || c.LeaseDuration <= 2*c.ProviderTimeout {
		return c, fmt.Errorf("-lease (ORDERD_LEASE, %s) must exceed twice -provider-timeout (ORDERD_PROVIDER_TIMEOUT, %s), both positive: "+
			"a resumed unknown outcome asks the provider and then calls it within one lease", c.LeaseDuration, c.ProviderTimeout)
	}
	if c.CompleterInterval <= 0 || c.SweepInterval <= 0 {
		return c, errors.New("-completer-interval (ORDERD_COMPLETER_INTERVAL) and -sweep-interval (ORDERD_SWEEP_INTERVAL) must be positive")
	}
	if err := c.checkLimits(); err != nil {
		return c, err
	}
	if err := c.Events.check(); err != nil {
		return c, err
	}
	if err := c.checkLoadBounds(); err != nil {
		return c, err
	}
	if c.WarehouseURL == "" {
		c.WarehouseURL = c.PaymentURL
	}
	c.VolatileFields = []string{}
	for _, f := range strings.Split(*volatile, ",") {
		if f = strings.TrimSpace(f); f != "" {
			c.VolatileFields = append(c.VolatileFields, f)
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("-log-level: %w", err)
	}
	if err := c.loadAPIKeys(*keys, *keysFile); err != nil {
		return c, err
	}
	if err := c.loadOperatorKeys(*opKeys, *opFile); err != nil {
		return c, err
	}
	c.OperatorBasePath = strings.TrimSuffix(c.OperatorBasePath, "/")
	if !console.CleanBasePath(c.OperatorBasePath) {
		return c, fmt.Errorf("-operator-base-path (ORDERD_OPERATOR_BASE_PATH) must be a path such as /ops (segments of letters, digits and ._~-), not %q", c.OperatorBasePath)
	}
	if c.CommandsRoot == "" || strings.ContainsAny(c.CommandsRoot, ".*> \t") {
		return c, fmt.Errorf("-commands-subject-root (ORDERD_COMMANDS_SUBJECT_ROOT) must be one subject token (no '.', '*', '>' or spaces), not %q", c.CommandsRoot)
	}
	if c.CommandsSignatureTolerance < time.Second || c.CommandsSignatureTolerance >= c.KeyTTL {
		return c, fmt.Errorf("-commands-signature-tolerance (ORDERD_COMMANDS_SIGNATURE_TOLERANCE) must be at least 1s and below -idempotency-key-ttl (%s), "+
			"so that a command replayed within it finds its key in the ledger; got %s", c.KeyTTL, c.CommandsSignatureTolerance)
	}
	if c.CommandsDuplicateWindow < 100*time.Millisecond {
		return c, errors.New("-commands-duplicate-window (ORDERD_COMMANDS_DUPLICATE_WINDOW) must be at least 100ms")
	}
	if c.ProviderWebhookSecret != "" && len(c.ProviderWebhookSecret) < 16 {
		return c, errors.New("-provider-webhook-secret (ORDERD_PROVIDER_WEBHOOK_SECRET) must be at least 16 bytes")
	}
	if c.DatabaseURL != "" && !isPostgresURL(c.DatabaseURL) {
		return c, errors.New("-database-url (ORDERD_DATABASE_URL) must be a postgres:// URL, or empty for the embedded store")
	}
	if err := c.parseReplicas(*replicas); err != nil {
		return c, err
	}
	if err := c.Stripe.check(&c); err != nil {
		return c, err
	}
	if err := c.checkFailClosed(); err != nil {
		return c, err
	}
	return c, nil
}

// loadOperatorKeys sets c.OperatorKeys from the -operator-keys spec and
// the -operator-keys-file file (operator.ParseCredentials). A token that is
// also a tenant API key is refused: the two surfaces never share a
// credential.
func (c *Config) loadOperatorKeys(spec, file string) error {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("-operator-keys-file (ORDERD_OPERATOR_KEYS_FILE): %w", err)
		}
		fileCreds, err := operator.ParseCredentials(string(b))
		if err != nil {
			return fmt.Errorf("-operator-keys-file (ORDERD_OPERATOR_KEYS_FILE): %w", err)
		}
		if len(fileCreds) == 0 {
			return fmt.Errorf("-operator-keys-file (ORDERD_OPERATOR_KEYS_FILE): %s holds no role:name:token line", file)
		}
		spec += "," + string(b)
	}
	creds, err := operator.ParseCredentials(spec)
	if err != nil {
		return fmt.Errorf("-operator-keys (ORDERD_OPERATOR_KEYS): %w", err)
	}
	for _, cr := range creds {
		if _, clash := c.APIKeys[cr.Token]; clash {
			return fmt.Errorf("-operator-keys (ORDERD_OPERATOR_KEYS): operator %q uses a tenant API key as its token; give it its own", cr.Name)
		}
	}
	c.OperatorKeys = creds
	return nil
}

// loadAPIKeys sets c.APIKeys from the -api-keys spec and the -api-keys-file
// file, or to the development key when neither is set. A setting that is
// given but holds no key (an empty file, a list of commas) is an error, never
// the development key.
func (c *Config) loadAPIKeys(spec, file string) error {
	given := strings.TrimSpace(spec) != ""
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("-api-keys-file (ORDERD_API_KEYS_FILE): %w", err)
		}
		fileKeys, err := parseAPIKeys(strings.Join(strings.Fields(string(b)), ","))
		if err != nil {
			return fmt.Errorf("-api-keys-file (ORDERD_API_KEYS_FILE): %w", err)
		}
		if len(fileKeys) == 0 {
			return fmt.Errorf("-api-keys-file (ORDERD_API_KEYS_FILE): %s holds no tenant:key line", file)
		}
		spec += "," + strings.Join(strings.Fields(string(b)), ",")
	}
	var err error
	if c.APIKeys, err = parseAPIKeys(spec); err != nil {
		return fmt.Errorf("-api-keys: %w", err)
	}
	if len(c.APIKeys) == 0 && given {
		return errors.New("-api-keys (ORDERD_API_KEYS) is set but holds no tenant:key pair")
	}
	if len(c.APIKeys) == 0 {
		c.APIKeys = map[string]string{DevAPIKey: DevTenant}
		c.usingDevelopmentKey = true
	}
	return nil
}

// checkFailClosed refuses the development key and the built-in simulators
// on an address that is not loopback, unless c.DevMode: a server reachable
// from other machines must not accept a published key or pretend to take
// payments. The error says what to configure.
func (c *Config) checkFailClosed() error {
	var open []string
	if c.usingDevelopmentKey {
		open = append(open, "no API keys are configured (set ORDERD_API_KEYS or ORDERD_API_KEYS_FILE)")
	}
	if c.PaymentURL == "" && c.Stripe.Provider != ProviderStripe {
		open = append(open, "no payment provider is configured (set ORDERD_PAYMENT_URL or ORDERD_PAYMENT_PROVIDER=stripe)")
	}
	if c.WarehouseURL == "" {
		open = append(open, "no warehouse is configured (set ORDERD_WAREHOUSE_URL or ORDERD_PAYMENT_URL)")
	}
	if len(open) == 0 || c.DevMode || loopback(c.Addr) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s, which is not a loopback address, in development mode: %s; "+
		"or set ORDERD_DEV_MODE=true to run the development key and the built-in simulators there on purpose",
		c.Addr, strings.Join(open, "; "))
}

// loopback reports whether the listen address addr names only the loopback
// interface: 127.0.0.0/8, ::1 or localhost. An empty host (all interfaces)
// or any other name is not loopback; names are not resolved.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkLimits validates the body limit, the rate limits and the durations
// that checkLoadBounds does not cover.
func (c *Config) checkLimits() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("-addr (ORDERD_ADDR) must be host:port, not %q", c.Addr)
	}
	if c.MaxBodyBytes < 1 || c.MaxBodyBytes > MaxMaxBodyBytes {
		return fmt.Errorf("-max-body-bytes (ORDERD_MAX_BODY_BYTES) must be from 1 to %d, not %d", MaxMaxBodyBytes, c.MaxBodyBytes)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("-shutdown-timeout (ORDERD_SHUTDOWN_TIMEOUT) must be positive, not %s", c.ShutdownTimeout)
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("-max-wait (ORDERD_MAX_WAIT) must not be negative, not %s", c.MaxWait)
	}
	if math.IsNaN(c.TenantRateLimit) || math.IsInf(c.TenantRateLimit, 0) || c.TenantRateLimit < 0 {
		return fmt.Errorf("-tenant-rate-limit (ORDERD_TENANT_RATE_LIMIT) must be 0 (off) or a positive number of requests per second, not %v", c.TenantRateLimit)
	}
	if c.TenantRateLimit > 0 && c.TenantBurst < 1 {
		return fmt.Errorf("-tenant-burst (ORDERD_TENANT_BURST) must be at least 1, not %d", c.TenantBurst)
	}
	if c.AuthFailuresPerMinute < 0 {
		return fmt.Errorf("-auth-failures-per-minute (ORDERD_AUTH_FAILURES_PER_MINUTE) must be 0 (off) or positive, not %d", c.AuthFailuresPerMinute)
	}
	return nil
}

func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// parseReplicas parses -database-replica-urls and checks the replica
// settings.
func (c *Config) parseReplicas(spec string) error {
	for _, u := range strings.Split(spec, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !isPostgresURL(u) {
			return fmt.Errorf("-database-replica-urls (ORDERD_DATABASE_REPLICA_URLS): replica %d must be a postgres:// URL", len(c.ReplicaURLs)+1)
		}
		c.ReplicaURLs = append(c.ReplicaURLs, u)
	}
	if len(c.ReplicaURLs) > 0 && c.DatabaseURL == "" {
		return errors.New("-database-replica-urls (ORDERD_DATABASE_REPLICA_URLS) is set, but the embedded store has no read replicas: " +
			"set -database-url (ORDERD_DATABASE_URL) to the primary, or unset the replica URLs")
	}
	if c.ReplicaMaxLag <= 0 || c.ReplicaCheckInterval <= 0 || c.ReplicaCheckInterval >= c.ReplicaMaxLag {
		return fmt.Errorf("-database-replica-check-interval (ORDERD_DATABASE_REPLICA_CHECK_INTERVAL, %s) must be positive and below -database-replica-max-lag (ORDERD_DATABASE_REPLICA_MAX_LAG, %s)",
			c.ReplicaCheckInterval, c.ReplicaMaxLag)
	}
	return nil
}

// checkLoadBounds validates the admission bound, the deadlines and the pool
// size, and derives the pool size when it is 0.
func (c *Config) checkLoadBounds() error {
	if c.MaxInFlight < 1 {
		return fmt.Errorf("-max-in-flight (ORDERD_MAX_IN_FLIGHT) must be at least 1, not %d", c.MaxInFlight)
	}
	maxWait := c.MaxWait
	if maxWait == 0 {
		maxWait = service.DefaultMaxWait // what the service takes for 0
	}
	if c.RequestTimeout <= maxWait {
		return fmt.Errorf("-request-timeout (ORDERD_REQUEST_TIMEOUT) must exceed -max-wait (ORDERD_MAX_WAIT, %s), so that a Prefer: wait can run its course; got %s",
			maxWait, c.RequestTimeout)
	}
	if c.DBMaxConns < 0 || c.DBMaxConns > math.MaxInt32 {
		return fmt.Errorf("-db-max-conns (ORDERD_DB_MAX_CONNS) must be at least 1, or 0 to derive it from -max-in-flight; got %d", c.DBMaxConns)
	}
	if c.DBMaxConns == 0 {
		c.DBMaxConns = min(c.MaxInFlight, MaxDerivedDBConns)
	}
	if c.TenantMaxInFlight < 0 || c.TenantMaxInFlight > c.MaxInFlight {
		return fmt.Errorf("-tenant-max-in-flight (ORDERD_TENANT_MAX_IN_FLIGHT) must be from 1 to -max-in-flight (%d), or 0 to derive it; got %d",
			c.MaxInFlight, c.TenantMaxInFlight)
	}
	if c.TenantMaxInFlight == 0 {
		c.TenantMaxInFlight = max(1, c.MaxInFlight/2)
	}
	// PostgreSQL counts these timeouts in milliseconds, and 0 turns them off.
	if c.DBStatementTimeout < time.Millisecond {
		return fmt.Errorf("-db-statement-timeout (ORDERD_DB_STATEMENT_TIMEOUT) must be at least 1ms, not %s", c.DBStatementTimeout)
	}
	if c.DBLockTimeout < time.Millisecond || c.DBLockTimeout >= c.DBStatementTimeout {
		return fmt.Errorf("-db-lock-timeout (ORDERD_DB_LOCK_TIMEOUT) must be at least 1ms and below -db-statement-timeout (%s), not %s",
			c.DBStatementTimeout, c.DBLockTimeout)
	}
	return nil
}

// parseAPIKeys parses "tenant:key,tenant:key".
func parseAPIKeys(spec string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		tenant, key, ok := strings.Cut(pair, ":")
		if !ok || tenant == "" || len(key) < 8 {
			return nil, errors.New("API keys must be tenant:key pairs with keys of at least 8 characters")
		}
		if !admission.ValidTenant(tenant) {
			// A tenant name is a NATS subject token (events and commands):
			// '.', '*', '>' or a space would split or widen a subject, and
			// two names must never share one.
			return nil, fmt.Errorf("tenant %q: a tenant name is 1 to %d ASCII letters, digits, '_' or '-'", tenant, admission.MaxTenantLen)
		}
		if _, dup := out[key]; dup {
			return nil, errors.New("an API key is configured twice")
		}
		out[key] = tenant
	}
	return out, nil
}

// Run serves until ctx is done, then shuts down gracefully. An error at
// start names the setting to change where one is at fault (nameSettings).
func Run(ctx context.Context, c Config, logOut io.Writer) (err error) {
	defer func() { err = nameSettings(err) }()
	tel, err := startTelemetry(ctx, c, logOut)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.shutdown(sctx) // flushes the spans still batched
	}()
	log := tel.log
	a, err := build(ctx, c, tel)
	if err != nil {
		return err
	}
	// Closes the workers, the service and the store, in that order, after
	// the listeners deferred below have stopped.
	defer a.close()
	svc, workers, apiCfg, handler := a.svc, a.workers, a.apiCfg, a.handler
	switch {
	case c.AdminAddr != "" && len(c.OperatorKeys) > 0:
		log.Info("operator API and console on the admin listener", "prefix", operator.Prefix, "console", c.OperatorBasePath+console.Prefix,
			"operators", len(c.OperatorKeys))
	case c.AdminAddr != "":
		log.Info("operator API on the admin listener answers 401: no operator credentials (set ORDERD_OPERATOR_KEYS)",
			"prefix", operator.Prefix)
	case len(c.OperatorKeys) > 0:
		log.Warn("operator credentials are set but the admin listener is off: set ORDERD_ADMIN_ADDR to serve the operator API")
	}
	stopAdmin, err := startAdmin(c, tel.metrics, svc, a.ops, a.console, log)
	if err != nil {
		return fmt.Errorf("-admin-addr (ORDERD_ADMIN_ADDR): %w", err)
	}
	defer stopAdmin(context.Background())
	if c.CommandsNATSURL != "" {
		stopCommands, err := startCommands(workers.ctx, c, svc, apiCfg, log)
		if err != nil {
			return err
		}
		defer stopCommands()
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	// A response may come as late as the request's deadline plus a provider
	// call's lease: the service finishes a call it has started.
	writeTimeout := max(60*time.Second, c.RequestTimeout+c.LeaseDuration+10*time.Second)
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	c.logDevelopmentMode(log)
	log.Info("listening", "addr", ln.Addr().String(), "idempotency_policy", string(c.Policy),
		"max_in_flight", c.MaxInFlight, "tenant_max_in_flight", c.TenantMaxInFlight, "request_timeout", c.RequestTimeout.String(), "group_commit", c.GroupCommit)

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
	err = srv.Shutdown(sctx)
	workers.stop()
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// app is what build assembles: the store, the service over it, the
// background workers (completer, sweeper, webhook dispatcher, publisher),
// the API configuration and handler, and the operator API's handler.
type app struct {
	st      store.Store
	svc     *service.Service
	workers *background
	apiCfg  api.Config
	handler http.Handler // the API listener's handler (apiHandler)
	ops     http.Handler // the operator API (served on the admin listener)
	console http.Handler // the operator console (served on the admin listener)
}

// close stops the workers, then closes the service, then the store: a
// completer pass may be in the middle of a provider call whose outcome it
// must still write.
func (a *app) close() {
	a.workers.stop()
	a.svc.Close()
	a.st.Close()
}

// build opens the configured store and assembles the service, its
// background workers and the API handler exactly as Run serves them (Run
// adds the listeners and the NATS commands). The benchmark of the
// production handler chain (BenchmarkHandler) builds it the same way. The
// caller calls close.
func build(ctx context.Context, c Config, tel *telemetry) (_ *app, err error) {
	log := tel.log
	st, attrs, err := openStore(ctx, c, tel)
	if err != nil {
		return nil, err
	}
	log.Info("store ready", attrs...)
	gw, wh, err := providers(c, tel)
	if err != nil {
		st.Close()
		return nil, err
	}
	svc := service.New(st, gw, wh, service.Config{
		KeyTTL: c.KeyTTL, DerivedKeyTTL: c.DerivedKeyTTL, TombstoneTTL: c.TombstoneTTL,
		LeaseDuration: c.LeaseDuration, MaxWait: c.MaxWait, Logger: log,
		GroupCommit: c.GroupCommit, UnresolvedAfter: c.UnresolvedAfter, ProviderKeyMaxAge: c.ProviderKeyMaxAge, CompleterParallel: c.CompleterParallel,
		PendingPaymentExpiry: c.PendingPaymentExpiry, Capture: c.Capture, CaptureMargin: c.CaptureMargin,
		Observer: observe.NewObserver(tel.metrics, tel.tp),
	})
	a := &app{st: st, svc: svc, workers: startBackground(ctx)}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	workers := a.workers
	workers.every(c.CompleterInterval, func(ctx context.Context) {
		if n, err := svc.RecoverAbandoned(ctx, 50); err != nil {
			log.Warn("completer pass failed", "err", err)
		} else if n > 0 {
			log.Info("completer pass", "taken_over", n)
		}
	})
	workers.every(c.SweepInterval, func(ctx context.Context) {
		for range 20 { // at most 20 batches a pass, so one pass stays short
			res, err := svc.SweepKeys(ctx, 500)
			if err != nil {
				log.Warn("sweep failed", "err", err)
				return
			}
			if res.Tombstoned+res.Deleted > 0 {
				log.Info("swept idempotency keys", "tombstoned", res.Tombstoned, "deleted", res.Deleted)
			}
			if res.Tombstoned < 500 && res.Deleted < 500 {
				return
			}
		}
	})
	endpoints, err := startEvents(workers, c.Events, st, log)
	if err != nil {
		return nil, err
	}
	// Registrations honour Idempotency-Key in the orders' ledger.
	endpoints.Ledger, endpoints.KeyTTL, endpoints.DerivedKeyTTL = st, c.KeyTTL, c.DerivedKeyTTL
	opsSvc, err := svc.Operations()
	if err != nil {
		return nil, err
	}
	a.ops = operator.New(opsSvc, operator.Config{Credentials: c.OperatorKeys, AuthFailuresPerMinute: c.AuthFailuresPerMinute,
		Logger: log})
	a.console = console.New(opsSvc, console.Config{Credentials: c.OperatorKeys, BasePath: c.OperatorBasePath,
		AuthFailuresPerMinute: c.AuthFailuresPerMinute, Logger: log})
	a.apiCfg = api.Config{
		Events:         endpoints,
		APIKeys:        c.APIKeys,
		Policy:         c.Policy,
		Fingerprinter:  idempotency.Fingerprinter{VolatileFields: c.VolatileFields},
		MaxBodyBytes:   c.MaxBodyBytes,
		Logger:         log,
		MaxInFlight:    c.MaxInFlight,
		RequestTimeout: c.RequestTimeout,

		TenantMaxInFlight:     c.TenantMaxInFlight,
		TenantRateLimit:       c.TenantRateLimit,
		TenantBurst:           c.TenantBurst,
		AuthFailuresPerMinute: c.AuthFailuresPerMinute,
	}
	// One gate for HTTP requests and NATS commands: a tenant's commands
	// count against its rate and in-flight slots, and the server's.
	a.apiCfg.Gate = api.NewGate(a.apiCfg)
	if c.ProviderWebhookSecret != "" {
		a.apiCfg.ProviderWebhook = paysimclient.Webhooks{Secret: []byte(c.ProviderWebhookSecret)}
	}
	if c.Stripe.Provider == ProviderStripe && len(c.Stripe.WebhookSecrets) > 0 {
		// POST /provider/stripe/webhooks, authenticated by Stripe-Signature
		// under any of the secrets (several while one rotates).
		a.apiCfg.StripeWebhook = stripepay.Webhooks{Verifier: stripepay.WebhookVerifier{Secrets: c.Stripe.WebhookSecrets}}
	}
	a.handler = apiHandler(svc, a.apiCfg, tel)
	return a, nil
}

// apiHandler is the handler the API listener serves: the API's router
// wrapped in the request metrics and tracing of tel (observe.HTTP). Run
// serves it, and tests build it the same way so every wrapper is covered.
func apiHandler(svc *service.Service, cfg api.Config, tel *telemetry) http.Handler {
	return observe.HTTP(api.New(svc, cfg), tel.metrics, tel.tp)
}

// MaxHeaderBytes bounds the request line and header fields that orderd reads
// (net/http answers 431 past it).
const MaxHeaderBytes = 64 << 10

// logDevelopmentMode logs, at warn level and in capitals, that the
// development key or a built-in simulator is in use: the public development
// key (it is published in the README, so it is no secret) and which
// simulators take the place of real providers.
func (c Config) logDevelopmentMode(log *slog.Logger) {
	if c.usingDevelopmentKey {
		log.Warn("DEVELOPMENT API KEY IN USE: no ORDERD_API_KEYS configured; do not expose this server",
			"api_key", DevAPIKey, "tenant", DevTenant, "authorization", "Bearer "+DevAPIKey)
	}
	c.Stripe.logStripe(log)
	var sims []string
	if c.PaymentURL == "" && c.Stripe.Provider != ProviderStripe {
		sims = append(sims, "payment")
	}
	if c.WarehouseURL == "" {
		sims = append(sims, "warehouse")
	}
	if len(sims) > 0 {
		log.Warn("BUILT-IN SIMULATOR IN USE: no real money moves and no goods ship; set ORDERD_PAYMENT_URL for a real provider",
			"simulated", sims)
	}
}

// providers returns the payment gateway and warehouse: HTTP clients of the
// configured provider, or the built-in simulators.
// The payment gateway is a payment.Gateway on provider objects: the
// built-in simulator.IntentGateway, paysim's intents (paysimclient.Intents),
// or Stripe's PaymentIntents (stripepay).
func providers(c Config, tel *telemetry) (payment.Gateway, fulfillment.Warehouse, error) {
	var gw payment.Gateway = simulator.NewIntentGateway()
	var wh fulfillment.Warehouse = simulator.NewWarehouse()
	hc := paysimclient.WithHTTPClient(observe.ProviderClient(tel.tp))
	switch {
	case c.Stripe.Provider == ProviderStripe:
		g, err := stripeGateway(c.Stripe, c, tel)
		if err != nil {
			return nil, nil, err
		}
		gw = g
	case c.PaymentURL != "":
		g, err := paysimclient.NewIntents(c.PaymentURL, paysimclient.WithTimeout(c.ProviderTimeout), hc)
		if err != nil {
			return nil, nil, fmt.Errorf("-payment-url: %w", err)
		}
		gw = g
	}
	if c.WarehouseURL != "" {
		w, err := paysimclient.NewWarehouse(c.WarehouseURL, paysimclient.WithTimeout(c.ProviderTimeout), hc)
		if err != nil {
			return nil, nil, fmt.Errorf("-warehouse-url: %w", err)
		}
		wh = w
	}
	return gw, wh, nil
}

// background runs the periodic workers (completer, sweeper) and stops them
// before the store is closed.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// startBackground returns workers whose context is parent's values without
// its cancellation: they stop only when stop is called.
func startBackground(parent context.Context) *background {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	return &background{ctx: ctx, cancel: cancel}
}

// every runs fn now and then every interval, in its own goroutine, until
// stop is called.
func (b *background) every(interval time.Duration, fn func(context.Context)) {
	b.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			fn(b.ctx)
			select {
			case <-b.ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// stop cancels the workers' context and waits until every running fn has
// returned (a completer pass finishes the provider calls it started,
// bounded by their leases). It may be called more than once.
func (b *background) stop() {
	b.once.Do(func() {
		b.cancel()
		b.wg.Wait()
	})
}

// openStore opens the configured store and returns it with log attributes
// describing it. On PostgreSQL, statements are traced and counted, and the
// pool's statistics exported, through tel.
func openStore(ctx context.Context, c Config, tel *telemetry) (store.Store, []any, error) {
	if c.DatabaseURL == "" {
		st, err := sqlite.Open(ctx, c.DataDir)
		if err != nil {
			return nil, nil, fmt.Errorf("-data-dir: %w", err)
		}
		return st, []any{"store", "sqlite"}, nil
	}
	pc, err := poolConfig(c, c.DatabaseURL, "-database-url (ORDERD_DATABASE_URL)")
	if err != nil {
		return nil, nil, err
	}
	pc.ConnConfig.Tracer = observe.NewPgxTracer(tel.metrics, tel.tp)
	rp := pc.ConnConfig.RuntimeParams
	attrs := []any{"store", "postgres", "pool_max_conns", pc.MaxConns, "pool_min_conns", pc.MinConns,
		"statement_timeout", rp["statement_timeout"], "lock_timeout", rp["lock_timeout"], "replicas", len(c.ReplicaURLs)}
	rc := postgres.ReplicaConfig{MaxLag: c.ReplicaMaxLag, CheckInterval: c.ReplicaCheckInterval, Logger: tel.log}
	for i, u := range c.ReplicaURLs {
		rpc, err := poolConfig(c, u, fmt.Sprintf("-database-replica-urls (ORDERD_DATABASE_REPLICA_URLS) replica %d", i+1))
		if err != nil {
			return nil, nil, err
		}
		rc.Replicas = append(rc.Replicas, rpc)
	}
	st, err := postgres.OpenConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("-database-url: %w", err)
	}
	tel.metrics.Registry().MustRegister(observe.NewPoolCollector(st.Pool()))
	if len(rc.Replicas) == 0 {
		return st, attrs, nil
	}
	rst, err := postgres.OpenReplicated(ctx, st, rc)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("-database-replica-urls (ORDERD_DATABASE_REPLICA_URLS): %w", err)
	}
	return rst, attrs, nil
}

// poolConfig is the PostgreSQL pool configuration of rawURL (the primary's
// or a replica's, named setting in errors) with
// orderd's sizing and session timeouts: MaxConns c.DBMaxConns, MinConns
// DBMinConns (at most MaxConns), and the runtime parameters
// statement_timeout and lock_timeout on every connection. What the URL sets
// itself (pool_max_conns, pool_min_conns, statement_timeout, lock_timeout)
// wins: it is the more specific setting.
func poolConfig(c Config, rawURL, setting string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New(setting + " is not a URL")
	}
	q := u.Query()
	if !q.Has("pool_max_conns") {
		pc.MaxConns = int32(c.DBMaxConns) //nolint:gosec // checkLoadBounds keeps it within int32
	}
	if !q.Has("pool_min_conns") {
		pc.MinConns = min(DBMinConns, pc.MaxConns)
	}
	if pc.MinConns > pc.MaxConns {
		return nil, fmt.Errorf("%s: pool_min_conns %d exceeds the pool size %d", setting, pc.MinConns, pc.MaxConns)
	}
	rp := pc.ConnConfig.RuntimeParams
	for name, d := range map[string]time.Duration{"statement_timeout": c.DBStatementTimeout, "lock_timeout": c.DBLockTimeout} {
		if _, set := rp[name]; !set {
			rp[name] = milliseconds(d)
		}
	}
	return pc, nil
}

// milliseconds formats d as a PostgreSQL time setting, rounded up to whole
// milliseconds (the unit of statement_timeout and lock_timeout).
func milliseconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
}
