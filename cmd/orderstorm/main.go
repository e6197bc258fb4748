// Command orderstorm drives a running Orderly deployment — one or several
// orderd instances, on PostgreSQL or the embedded store — with many
// concurrent simulated shoppers, injects the duplicates and faults that real
// clients and networks produce, and then checks the promise ("a client may
// retry anything, and money moves once") from the database and the payment
// provider's ledger, not from its own bookkeeping.
//
// # Storm (the default mode)
//
// Each shopper places orders (each logical create has a unique customer_id
// marker) and pays, fulfils or cancels them with the Go client, which sends
// one Idempotency-Key per logical operation and retries with it. On top of
// that the harness sends:
//
//   - double clicks: the same body twice, a few milliseconds apart, with no
//     key (the server derives one);
//   - retries after a dropped reply: a TCP proxy in front of each instance
//     swallows replies after forwarding the request (-proxy-drop), tears
//     them (-proxy-truncate) or resets connections (-proxy-cut);
//   - parallel duplicates: one operation, one key, sent to every instance at
//     once;
//   - sequence replays: an order's whole create/pay/fulfil sequence sent
//     again with the same keys; every answer must be a replay equal to the
//     original;
//   - repeats with a new key (a reloaded page pays again), and races of pay
//     against cancel or fulfil on different instances.
//
// With -bus-commands F a fraction F of the keyed pays, fulfils and cancels
// are sent as NATS JetStream commands instead (orderd's -commands-nats-url):
// one to three copies with the key as Nats-Msg-Id, some raced by an HTTP
// twin with the same key, some redelivered -bus-late-after later; once the
// key is completed the outcome is read back over HTTP with the key and
// must be a replay.
//
// With -reads F a fraction F of the successful answers is followed by a GET
// of the order on another instance, three in four with the answer's
// Orderly-Consistency-Token: the read must show at least the answer's
// version (read your writes, through orderd's read replica if it has one).
//
// With -paysim it sets paysim's run-level faults (drop, timeout, error,
// latency) and some pays use its one-shot fault payment methods and SKUs.
// With -spawn N it builds and starts N orderd (and a paysim) itself, and
// with -kill-every it SIGKILLs and restarts them — only processes it
// started. With -spawn, -provider-webhooks has the spawned paysim send its
// signed webhooks to the first orderd (duplicated, dropped, delayed,
// reordered; with -provider stripe, Stripe-signed to
// /provider/stripe/webhooks), and -bus-commands gives the spawned orderd a commands stream,
// consumer and subject root of the run's own, deleted after it.
//
// After the storm every operation left without a definitive answer is sent
// again with its key, faults off (reconcile), and then the invariants are
// checked with read-only queries: exactly one order per logical create, no
// acknowledged order lost, answers and key records agree, at most one
// capture per order, and every order's state consistent with its provider
// attempts and the provider's ledger; with -webhooks, the outbox and the
// webhooks received; with -bus-commands, every command's effect exactly once
// (its read-back a replay, one order.payment_failed per declined key, the
// consumer drained). Every check reads each table once, by tenant, and
// joins in memory (PostgreSQL's statistics are refreshed with ANALYZE
// first); the checks' time is reported. The summary names each invariant
// with its counts and status (internal/check.Summarize). The run passes iff
// there are no anomalies — with -require-all-checks an invariant that did
// not run is one; the exit code is 1 otherwise (2 for a harness error).
//
// # Bench
//
// -mode bench measures requests/s and latency of new orders, replays and
// pays through the service, and the same SQL work through pgbench
// (-pgbench, scripts in -bench-sql) with the same client counts.
//
// Everything it talks to must be on the loopback interface; every loop is
// bounded by -ops, -duration and -settle.
//
// # Layout
//
// This file parses the flags and wires a run; stormrun.go runs a storm,
// bench.go a benchmark, storm.go makes the traffic, send.go sends it,
// cluster.go starts and kills the -spawn processes (through internal/spawn).
// Three parts are packages of their own: internal/faultproxy (the proxies),
// internal/book (the record of every operation and answer) and
// internal/check (the invariants, read from the database and the ledger).
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/faultproxy"
	"github.com/orderly/orderly/paysim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Config is orderstorm's configuration.
type Config struct {
	Mode         string           `json:"mode"`
	Targets      []string         `json:"targets,omitempty"`
	Spawn        int              `json:"spawn"`
	BinDir       string           `json:"-"`
	WorkDir      string           `json:"-"`
	KeepWorkDir  bool             `json:"-"`
	DatabaseURL  string           `json:"-"`
	PaysimURL    string           `json:"-"`
	APIKey       string           `json:"-"`
	Tenant       string           `json:"tenant"`
	Ops          int64            `json:"ops"`
	Duration     time.Duration    `json:"duration"`
	Shoppers     int              `json:"shoppers"`
	Seed         uint64           `json:"seed"`
	Fates        faultproxy.Fates `json:"proxy_faults"`
	ForceProxy   bool             `json:"proxy"`
	PaysimFaults paysim.Faults    `json:"paysim_faults"`
	// Provider is the payment API of the spawned cluster: "paysim"
	// (paysim's native API) or "stripe" (paysim -api stripe, orderd on the
	// Stripe adapter).
	Provider string `json:"provider"`
	// Capture is orderd's capture mode (ORDERD_CAPTURE): at_pay, or
	// at_fulfilment (a pay authorizes, a fulfilment captures, a cancel
	// voids; issue 16). With -spawn it is set on the orderd; the checker
	// expects its ledger either way.
	Capture       string        `json:"capture"`
	Mix           Mix           `json:"mix"`
	KillEvery     time.Duration `json:"kill_every"`
	KillPaysim    bool          `json:"kill_paysim"`
	KillDBEvery   time.Duration `json:"kill_db_connections_every"`
	Settle        time.Duration `json:"settle"`
	Attempts      int           `json:"client_attempts"`
	Backoff       time.Duration `json:"client_backoff"`
	MaxBackoff    time.Duration `json:"client_max_backoff"`
	AttemptTO     time.Duration `json:"client_attempt_timeout"`
	OrderdEnv     []string      `json:"orderd_env,omitempty"`
	DerivedTTL    time.Duration `json:"derived_key_ttl"`
	JSONPath      string        `json:"-"`
	SVGPath       string        `json:"-"`
	BenchClients  []int         `json:"bench_clients,omitempty"`
	BenchDuration time.Duration `json:"bench_duration,omitempty"`
	Pgbench       string        `json:"-"`
	BenchSQL      string        `json:"-"`
	Quiet         bool          `json:"-"`
	// Webhooks registers a loopback webhook receiver with orderd and checks
	// the outbox and the deliveries after the storm.
	Webhooks bool `json:"webhooks"`
	// Bus, with Mix.BusCommands > 0, sends some operations as JetStream
	// commands; DeleteBusStream deletes Bus.Stream after the run.
	Bus             BusConfig     `json:"-"`
	DeleteBusStream bool          `json:"-"`
	BusLateAfter    time.Duration `json:"bus_late_after"`
	// RequireAll makes every invariant that did not run (its entry point
	// not configured, or its check failed) an anomaly.
	RequireAll bool `json:"require_all_checks"`
	// ProviderWebhooks, with -spawn, has paysim send its signed webhooks
	// to orderd, with faults.
	ProviderWebhooks *ProviderWebhooks `json:"provider_webhooks,omitempty"`
}

func parseFlags(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("orderstorm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	var targets, orderdEnv, benchClients string
	var pf paysim.Faults
	fs.StringVar(&c.Mode, "mode", "storm", "storm, or bench (load benchmark with pgbench)")
	fs.StringVar(&targets, "targets", "", "comma-separated orderd base URLs on the loopback (ignored with -spawn)")
	fs.IntVar(&c.Spawn, "spawn", 0, "build and start N orderd processes (and a paysim in storm mode) and drive them")
	fs.StringVar(&c.BinDir, "bin-dir", "", "with -spawn: directory with prebuilt orderd and paysim (default: go build them)")
	fs.StringVar(&c.WorkDir, "work-dir", "", "directory for logs and spawned data (default: a new temporary one)")
	fs.BoolVar(&c.KeepWorkDir, "keep", false, "keep the work directory (it is always kept after a failure)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "the deployment's database for the checks (postgres://…, or sqlite:PATH for the embedded store); with -spawn, the database orderd uses")
	fs.StringVar(&c.PaysimURL, "paysim", "", "paysim base URL: ledger checks and run-level faults (with -spawn: started if empty)")
	fs.StringVar(&c.APIKey, "api-key", "sk_dev_orderly_local", "API key (ignored with -spawn, which configures its own)")
	fs.StringVar(&c.Tenant, "tenant", "dev", "the API key's tenant, for the database checks (ignored with -spawn)")
	fs.Int64Var(&c.Ops, "ops", 2000, "stop starting orders after this many logical operations")
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "stop starting orders after this long")
	fs.IntVar(&c.Shoppers, "shoppers", 16, "concurrent shoppers")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the traffic and proxy fault draws (0: random)")
	fs.Float64Var(&c.Fates.Drop, "proxy-drop", 0.03, "fraction of requests whose reply the proxy swallows after forwarding")
	fs.Float64Var(&c.Fates.Cut, "proxy-cut", 0.01, "fraction of requests whose connection the proxy resets before forwarding")
	fs.Float64Var(&c.Fates.Truncate, "proxy-truncate", 0.01, "fraction of requests whose reply the proxy tears")
	fs.BoolVar(&c.ForceProxy, "proxy", false, "put the proxies in front even with all proxy fault rates 0")
	fs.DurationVar(&pf.Latency, "paysim-latency", 0, "paysim run-level latency")
	fs.Float64Var(&pf.ErrorRate, "paysim-error-rate", 0.02, "paysim run-level 503 rate")
	fs.Float64Var(&pf.TimeoutRate, "paysim-timeout-rate", 0.01, "paysim run-level timeout rate")
	fs.Float64Var(&pf.DropRate, "paysim-drop-rate", 0.03, "paysim run-level drop-after-commit rate")
	fs.DurationVar(&pf.TimeoutDelay, "paysim-timeout-delay", 3*time.Second, "how long a paysim timeout holds a request (keep it above orderd's provider timeout)")
	fs.Float64Var(&c.Mix.DoubleClick, "double-click", DefaultMix.DoubleClick, "fraction of operations sent twice without a key")
	fs.Float64Var(&c.Mix.Parallel, "parallel", DefaultMix.Parallel, "fraction of operations sent with one key to every instance at once")
	fs.Float64Var(&c.Mix.Replay, "replay", DefaultMix.Replay, "fraction of orders whose whole sequence is replayed")
	fs.Float64Var(&c.Mix.MethodFaults, "method-faults", DefaultMix.MethodFaults, "fraction of pays with a paysim one-shot fault payment method")
	fs.Float64Var(&c.Mix.SKUFaults, "sku-faults", DefaultMix.SKUFaults, "fraction of orders with a paysim one-shot fault SKU")
	fs.DurationVar(&c.KillEvery, "kill-every", 0, "with -spawn: SIGKILL and restart a random orderd this often during the storm")
	fs.BoolVar(&c.KillPaysim, "kill-paysim", false, "with -spawn and -kill-every: the spawned paysim may be the one killed too")
	fs.DurationVar(&c.KillDBEvery, "kill-db-connections-every", 0, "with -spawn on PostgreSQL: terminate the spawned orderd's database connections this often")
	fs.DurationVar(&c.Settle, "settle", 90*time.Second, "how long the reconcile phase may take")
	fs.IntVar(&c.Attempts, "attempts", 6, "client attempts per call")
	fs.DurationVar(&c.Backoff, "backoff", 50*time.Millisecond, "client backoff base")
	fs.DurationVar(&c.MaxBackoff, "max-backoff", 2*time.Second, "client backoff cap (and Retry-After cap)")
	fs.DurationVar(&c.AttemptTO, "attempt-timeout", 15*time.Second, "client per-attempt timeout")
	fs.StringVar(&orderdEnv, "orderd-env", "", "with -spawn: extra orderd settings, comma-separated ORDERD_X=V")
	fs.DurationVar(&c.DerivedTTL, "derived-ttl", 10*time.Minute, "orderd's derived-key retention (keys older than it are not looked up)")
	fs.StringVar(&c.JSONPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&c.SVGPath, "svg", "", "write a latency chart as SVG to this file")
	fs.StringVar(&benchClients, "bench-clients", "4,16", "bench: client counts, comma-separated")
	fs.DurationVar(&c.BenchDuration, "bench-duration", 10*time.Second, "bench: duration of each phase")
	fs.StringVar(&c.Pgbench, "pgbench", "", "bench: pgbench binary (empty: skip pgbench)")
	fs.StringVar(&c.BenchSQL, "bench-sql", "bench", "bench: directory of the pgbench scripts")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress lines")
	fs.Float64Var(&c.Mix.BusCommands, "bus-commands", 0, "fraction of keyed pays, fulfils, cancels and partial refunds sent as JetStream commands (orderd needs -commands-nats-url)")
	fs.Float64Var(&c.Mix.Reads, "reads", DefaultMix.Reads, "fraction of successful answers followed by a GET of the order on another instance, most with the answer's Orderly-Consistency-Token (read your writes, through a read replica if orderd has one)")
	fs.Float64Var(&c.Mix.BusTwin, "bus-twin", DefaultMix.BusTwin, "fraction of bus commands raced by an HTTP request with the same key")
	fs.Float64Var(&c.Mix.Refunds, "refunds", DefaultMix.Refunds, "fraction of paid orders given one to three partial refunds (before a cancel, after a fulfil, or left PAID)")
	fs.StringVar(&c.Bus.URL, "nats-url", "nats://127.0.0.1:4222", "with -bus-commands: the JetStream server orderd takes commands from")
	fs.StringVar(&c.Bus.Root, "bus-subject-root", "orderly", "with -bus-commands: orderd's -commands-subject-root")
	fs.StringVar(&c.Bus.Stream, "bus-stream", "", "with -bus-commands: orderd's -commands-stream, to wait until its consumer has handled every command")
	fs.StringVar(&c.Bus.Consumer, "bus-consumer", "orderd-commands", "with -bus-stream: orderd's -commands-consumer")
	fs.DurationVar(&c.BusLateAfter, "bus-late-after", 3*time.Second, "a late redelivery of a bus command is published this long after its read-back (keep it above orderd's -commands-duplicate-window)")
	fs.BoolVar(&c.DeleteBusStream, "bus-delete-stream", false, "delete -bus-stream after the run (a stream of the run's own)")
	fs.BoolVar(&c.Webhooks, "webhooks", false, "receive orderd's webhooks on a loopback endpoint and check them after the storm (orderd needs ORDERD_WEBHOOK_ALLOW_PRIVATE=true; -spawn sets it)")
	var pw ProviderWebhooks
	fs.StringVar(&c.Capture, "capture", "at_pay", "orderd's capture mode, at_pay or at_fulfilment (with -spawn set as ORDERD_CAPTURE; the checker expects authorizations on PAID orders, captures on FULFILLED ones, voids on cancels)")
	fs.StringVar(&c.Provider, "provider", "paysim", "with -spawn: paysim (its native API) or stripe (paysim -api stripe, and orderd with ORDERD_PAYMENT_PROVIDER=stripe: the Stripe adapter end to end)")
	providerWebhooks := fs.Bool("provider-webhooks", false, "with -spawn: the spawned paysim sends signed webhooks to the first orderd (ORDERD_PROVIDER_WEBHOOK_SECRET; with -provider stripe, Stripe-signed to /provider/stripe/webhooks, ORDERD_STRIPE_WEBHOOK_SECRET), with the faults below")
	fs.Float64Var(&pw.DuplicateRate, "provider-webhook-duplicate-rate", 0.3, "with -provider-webhooks: fraction of provider webhooks delivered twice")
	fs.Float64Var(&pw.DropRate, "provider-webhook-drop-rate", 0.05, "with -provider-webhooks: fraction never delivered")
	fs.DurationVar(&pw.Delay, "provider-webhook-delay", 100*time.Millisecond, "with -provider-webhooks: delay before each delivery")
	fs.DurationVar(&pw.ReorderWindow, "provider-webhook-reorder-window", time.Second, "with -provider-webhooks: random extra delay in [0, window) per delivery, so webhooks overtake each other")
	fs.BoolVar(&c.RequireAll, "require-all-checks", false, "fail the run if any invariant did not run (the ledger, webhooks, bus commands and provider webhooks must all be in it)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.PaysimFaults = pf
	if *providerWebhooks {
		c.ProviderWebhooks = &pw
	}
	m := DefaultMix
	m.DoubleClick, m.Parallel, m.Replay, m.MethodFaults, m.SKUFaults = c.Mix.DoubleClick, c.Mix.Parallel, c.Mix.Replay, c.Mix.MethodFaults, c.Mix.SKUFaults
	m.BusCommands, m.BusTwin, m.Reads, m.Refunds = c.Mix.BusCommands, c.Mix.BusTwin, c.Mix.Reads, c.Mix.Refunds
	c.Mix = m
	for _, t := range strings.Split(targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.Targets = append(c.Targets, strings.TrimSuffix(t, "/"))
		}
	}
	for _, e := range strings.Split(orderdEnv, ",") {
		if e = strings.TrimSpace(e); e != "" {
			if !strings.HasPrefix(e, "ORDERD_") || !strings.Contains(e, "=") {
				return c, fmt.Errorf("-orderd-env: %q is not ORDERD_X=V", e)
			}
			c.OrderdEnv = append(c.OrderdEnv, e)
		}
	}
	for _, s := range strings.Split(benchClients, ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return c, fmt.Errorf("-bench-clients: %q", s)
			}
			c.BenchClients = append(c.BenchClients, n)
		}
	}
	switch {
	case c.Mode != "storm" && c.Mode != "bench":
		return c, fmt.Errorf("-mode must be storm or bench, not %q", c.Mode)
	case c.Spawn == 0 && len(c.Targets) == 0:
		return c, errors.New("give -targets URL[,URL…] or -spawn N")
	case c.Ops < 1 || c.Duration <= 0 || c.Shoppers < 1 || c.Settle < 0 || c.Attempts < 1:
		return c, errors.New("-ops, -duration, -shoppers and -attempts must be positive")
	case c.Duration > 6*time.Hour || c.Settle > time.Hour:
		return c, errors.New("-duration is capped at 6h and -settle at 1h")
	case (c.KillEvery > 0 || c.KillDBEvery > 0) && c.Spawn == 0:
		return c, errors.New("-kill-every and -kill-db-connections-every only hit what orderstorm started: they need -spawn")
	case c.KillDBEvery > 0 && !strings.HasPrefix(c.DatabaseURL, "postgres"):
		return c, errors.New("-kill-db-connections-every needs a postgres:// -database-url")
	case c.Mix.BusCommands < 0 || c.Mix.BusCommands > 1 || c.Mix.BusTwin < 0 || c.Mix.BusTwin > 1 || c.Mix.Reads < 0 || c.Mix.Reads > 1:
		return c, errors.New("-bus-commands, -bus-twin and -reads must be in [0, 1]")
	case c.DeleteBusStream && c.Bus.Stream == "" && c.Spawn == 0:
		return c, errors.New("-bus-delete-stream needs -bus-stream")
	case c.Capture != "at_pay" && c.Capture != "at_fulfilment":
		return c, fmt.Errorf("-capture must be at_pay or at_fulfilment, not %q", c.Capture)
	case c.Provider != "paysim" && c.Provider != "stripe":
		return c, fmt.Errorf("-provider must be paysim or stripe, not %q", c.Provider)
	case c.Provider == "stripe" && (c.Spawn == 0 || c.PaysimURL != ""):
		return c, errors.New("-provider stripe configures the cluster orderstorm spawns: it needs -spawn and no -paysim")
	case c.ProviderWebhooks != nil && (c.Spawn == 0 || c.PaysimURL != ""):
		return c, errors.New("-provider-webhooks configures the paysim orderstorm spawns: it needs -spawn and no -paysim (with -targets, configure paysim's -webhook-url yourself)")
	case c.ProviderWebhooks != nil && (pw.DuplicateRate < 0 || pw.DuplicateRate > 1 || pw.DropRate < 0 || pw.DropRate > 1 || pw.Delay < 0 || pw.ReorderWindow < 0):
		return c, errors.New("-provider-webhook-duplicate-rate and -drop-rate must be in [0, 1], -delay and -reorder-window not negative")
	}
	if err := c.Fates.Validate(); err != nil {
		return c, err
	}
	if err := c.PaysimFaults.Validate(); err != nil {
		return c, fmt.Errorf("paysim faults: %w", err)
	}
	natsURL := ""
	if c.Mix.BusCommands > 0 {
		natsURL = strings.Replace(c.Bus.URL, "nats://", "http://", 1) // the same host check
	}
	for _, u := range append(append([]string{}, c.Targets...), c.PaysimURL, c.DatabaseURL, natsURL) {
		if err := loopbackOnly(u); err != nil {
			return c, err
		}
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c, nil
}

// loopbackOnly refuses a URL whose host is not a loopback address: the
// harness only ever sends traffic to this machine.
func loopbackOnly(raw string) error {
	if raw == "" || strings.HasPrefix(raw, "sqlite:") {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q: %w", raw, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if host == "" && u.Scheme != "http" && u.Scheme != "https" {
		return nil // a postgres URL without a host uses the local socket
	}
	return fmt.Errorf("%q: orderstorm only targets loopback addresses (127.0.0.0/8, ::1, localhost)", raw)
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "orderstorm:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The hard bound of the whole run: the storm, then the reconcile, the
	// bus drain, the wait for open provider attempts and the webhook wait
	// (each bounded by -settle, at least 30 s), and the checks.
	limit := cfg.Duration + 4*max(cfg.Settle, 30*time.Second) + 10*time.Minute
	if cfg.Mode == "bench" {
		limit = time.Duration(len(cfg.BenchClients))*6*(cfg.BenchDuration+30*time.Second) + 5*time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	var rb [4]byte
	_, _ = crand.Read(rb[:])
	runID := hex.EncodeToString(rb[:])
	progress := stderr
	if cfg.Quiet {
		progress = nil
	}
	work := cfg.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "orderstorm-"+runID+"-"); err != nil {
			fmt.Fprintln(stderr, "orderstorm:", err)
			return 2
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		fmt.Fprintln(stderr, "orderstorm:", err)
		return 2
	}
	code := 2
	defer func() {
		switch {
		case cfg.WorkDir != "": // the caller's directory: left as it is
		case code == 0 && !cfg.KeepWorkDir:
			_ = os.RemoveAll(work)
		default:
			fmt.Fprintf(stderr, "orderstorm: logs and data kept in %s\n", work)
		}
	}()

	bases := cfg.Targets
	var cluster *Cluster
	if cfg.Spawn > 0 {
		cfg.APIKey = "sk_storm_" + runID + "_key"
		cfg.Tenant = "storm"
		logf(progress, "spawning %d orderd in %s", cfg.Spawn, work)
		if cfg.Mix.BusCommands > 0 {
			// The spawned orderd take commands from a stream, consumer and
			// subjects of the run's own (unless given), removed after it;
			// the duplicate window is short so that -bus-late-after's late
			// copies reach the ledger's replay, not the stream's dedup.
			if cfg.Bus.Stream == "" {
				cfg.Bus.Root, cfg.Bus.Stream, cfg.Bus.Consumer = "storm"+runID, "STORM_COMMANDS_"+runID, "orderd-storm-"+runID
				cfg.DeleteBusStream = true
			}
			cfg.OrderdEnv = append([]string{"ORDERD_COMMANDS_NATS_URL=" + cfg.Bus.URL, "ORDERD_COMMANDS_STREAM=" + cfg.Bus.Stream,
				"ORDERD_COMMANDS_CONSUMER=" + cfg.Bus.Consumer, "ORDERD_COMMANDS_SUBJECT_ROOT=" + cfg.Bus.Root,
				"ORDERD_COMMANDS_DUPLICATE_WINDOW=1s"}, cfg.OrderdEnv...)
		}
		if cfg.ProviderWebhooks != nil {
			var sb [16]byte
			_, _ = crand.Read(sb[:])
			cfg.ProviderWebhooks.Secret = "whsec_storm_" + hex.EncodeToString(sb[:])
		}
		if cfg.Capture == "at_fulfilment" {
			cfg.OrderdEnv = append([]string{"ORDERD_CAPTURE=at_fulfilment"}, cfg.OrderdEnv...)
		}
		if cfg.Webhooks {
			// The receiver is on the loopback; quick retries keep the
			// post-storm wait short.
			cfg.OrderdEnv = append([]string{"ORDERD_WEBHOOK_ALLOW_PRIVATE=true", "ORDERD_WEBHOOK_INTERVAL=200ms",
				"ORDERD_WEBHOOK_BACKOFF=200ms"}, cfg.OrderdEnv...)
		}
		cluster, err = Spawn(ctx, ClusterConfig{N: cfg.Spawn, DatabaseURL: cfg.DatabaseURL, APIKeys: cfg.Tenant + ":" + cfg.APIKey,
			WithPaysim: cfg.Mode == "storm" && cfg.PaysimURL == "", PaysimURL: cfg.PaysimURL, BinDir: cfg.BinDir, Dir: work,
			OrderdEnv: cfg.OrderdEnv, TimeoutDelay: cfg.PaysimFaults.TimeoutDelay, ProviderWebhooks: cfg.ProviderWebhooks,
			Stripe: cfg.Provider == "stripe"})
		if err != nil {
			fmt.Fprintln(stderr, "orderstorm:", err)
			return 2
		}
		defer cluster.Stop()
		bases = cluster.Bases()
		if cfg.PaysimURL == "" {
			cfg.PaysimURL = cluster.PaysimURL()
		}
		if cfg.DatabaseURL == "" {
			cfg.DatabaseURL = "sqlite:" + filepath.Join(work, "orderd-data", "orderly.db")
		}
		logf(progress, "orderd at %s; paysim at %s", strings.Join(bases, " "), cfg.PaysimURL)
	}
	var res *Result
	if cfg.Mode == "bench" {
		res, err = runBench(ctx, cfg, runID, bases, work, progress)
	} else {
		res, err = runStorm(ctx, cfg, runID, bases, cluster, progress)
	}
	if err != nil {
		fmt.Fprintln(stderr, "orderstorm:", err)
		return 2
	}
	if cluster != nil {
		res.Store = "postgres"
		if strings.HasPrefix(cfg.DatabaseURL, "sqlite:") {
			res.Store = "embedded"
		}
	}
	if cfg.Mode == "bench" {
		PrintLatency(stdout, res.Latency)
		PrintBench(stdout, res.Bench)
	} else {
		PrintSummary(stdout, res)
	}
	if cfg.JSONPath != "" {
		if err := WriteJSON(cfg.JSONPath, res); err != nil {
			fmt.Fprintln(stderr, "orderstorm:", err)
			return 2
		}
	}
	if cfg.SVGPath != "" {
		title := fmt.Sprintf("orderstorm %s %s: %d instance(s), %d logical ops", res.Mode, res.RunID, res.Instances, res.LogicalOps)
		if cfg.Mode == "bench" {
			title = fmt.Sprintf("orderstorm bench %s: %d instance(s), service vs pgbench", res.RunID, res.Instances)
		}
		if err := WriteSVG(cfg.SVGPath, title, res.Latency, res.Bench); err != nil {
			fmt.Fprintln(stderr, "orderstorm:", err)
			return 2
		}
	}
	if res.Pass {
		code = 0
	} else {
		code = 1
	}
	return code
}

// storeOf names the store a database URL selects, for the results.
func storeOf(dbURL string) string {
	switch {
	case strings.HasPrefix(dbURL, "sqlite:"):
		return "embedded"
	case dbURL == "":
		return "unknown"
	}
	return "postgres"
}
