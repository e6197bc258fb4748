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
// With -paysim it sets paysim's run-level faults (drop, timeout, error,
// latency) and some pays use its one-shot fault payment methods and SKUs.
// With -spawn N it builds and starts N orderd (and a paysim) itself, and
// with -kill-every it SIGKILLs and restarts them — only processes it
// started.
//
// After the storm every operation left without a definitive answer is sent
// again with its key, faults off (reconcile), and then the invariants are
// checked with read-only queries: exactly one order per logical create, no
// acknowledged order lost, answers and key records agree, at most one
// capture per order, and every order's state consistent with its provider
// attempts and the provider's ledger. The run passes iff there are no
// anomalies; the exit code is 1 otherwise (2 for a harness error).
//
// # Bench
//
// -mode bench measures requests/s and latency of new orders, replays and
// pays through the service, and the same SQL work through pgbench
// (-pgbench, scripts in -bench-sql) with the same client counts.
//
// Everything it talks to must be on the loopback interface; every loop is
// bounded by -ops, -duration and -settle.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orderly/orderly/internal/spawn"
	"github.com/orderly/orderly/paysim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Config is orderstorm's configuration.
type Config struct {
	Mode          string        `json:"mode"`
	Targets       []string      `json:"targets,omitempty"`
	Spawn         int           `json:"spawn"`
	BinDir        string        `json:"-"`
	WorkDir       string        `json:"-"`
	KeepWorkDir   bool          `json:"-"`
	DatabaseURL   string        `json:"-"`
	PaysimURL     string        `json:"-"`
	APIKey        string        `json:"-"`
	Tenant        string        `json:"tenant"`
	Ops           int64         `json:"ops"`
	Duration      time.Duration `json:"duration"`
	Shoppers      int           `json:"shoppers"`
	Seed          uint64        `json:"seed"`
	Fates         Fates         `json:"proxy_faults"`
	ForceProxy    bool          `json:"proxy"`
	PaysimFaults  paysim.Faults `json:"paysim_faults"`
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
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.PaysimFaults = pf
	m := DefaultMix
	m.DoubleClick, m.Parallel, m.Replay, m.MethodFaults, m.SKUFaults = c.Mix.DoubleClick, c.Mix.Parallel, c.Mix.Replay, c.Mix.MethodFaults, c.Mix.SKUFaults
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
	}
	if err := c.Fates.Validate(); err != nil {
		return c, err
	}
	if err := c.PaysimFaults.Validate(); err != nil {
		return c, fmt.Errorf("paysim faults: %w", err)
	}
	for _, u := range append(append([]string{}, c.Targets...), c.PaysimURL, c.DatabaseURL) {
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
	// The hard bound of the whole run.
	limit := cfg.Duration + cfg.Settle + 5*time.Minute
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
		cluster, err = Spawn(ctx, ClusterConfig{N: cfg.Spawn, DatabaseURL: cfg.DatabaseURL, APIKeys: cfg.Tenant + ":" + cfg.APIKey,
			WithPaysim: cfg.Mode == "storm" && cfg.PaysimURL == "", PaysimURL: cfg.PaysimURL, BinDir: cfg.BinDir, Dir: work,
			OrderdEnv: cfg.OrderdEnv, TimeoutDelay: cfg.PaysimFaults.TimeoutDelay})
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

// runStorm runs the storm, reconciles, and checks.
func runStorm(ctx context.Context, cfg Config, runID string, bases []string, cluster *Cluster, progress io.Writer) (*Result, error) {
	res := &Result{Mode: "storm", RunID: runID, StartedAt: time.Now().UTC(), Instances: len(bases), Shoppers: cfg.Shoppers,
		Store: storeOf(cfg.DatabaseURL), Config: cfg}
	clientBases := bases
	var proxies []*Proxy
	if cfg.Fates.Any() || cfg.ForceProxy {
		clientBases = nil
		for i, b := range bases {
			u, err := url.Parse(b)
			if err != nil {
				return nil, err
			}
			p, err := NewProxy(u.Host, cfg.Fates, cfg.Seed+uint64(i)*7919)
			if err != nil {
				return nil, err
			}
			defer p.Close()
			proxies = append(proxies, p)
			clientBases = append(clientBases, p.URL())
		}
	}
	var admin *PaysimAdmin
	var tally *faultTally
	stormFaults := cfg.PaysimFaults
	stormFaults.Seed = cfg.Seed
	if cfg.PaysimURL != "" {
		admin = NewPaysimAdmin(cfg.PaysimURL)
		prev, err := admin.Faults(ctx)
		if err != nil {
			return nil, err
		}
		before, err := admin.Stats(ctx)
		if err != nil {
			return nil, err
		}
		tally = newFaultTally(before)
		if err := admin.SetFaults(ctx, stormFaults); err != nil {
			return nil, err
		}
		defer func() { _ = admin.SetFaults(context.WithoutCancel(ctx), prev) }()
	} else {
		cfg.Mix.MethodFaults, cfg.Mix.SKUFaults = 0, 0 // the one-shot faults are paysim's
		res.Notes = append(res.Notes, "no -paysim: provider ledger not checked, no provider faults injected")
	}
	lat := NewLatencies()
	sender, err := NewSender(SenderConfig{Bases: clientBases, APIKey: cfg.APIKey, Attempts: cfg.Attempts, Backoff: cfg.Backoff,
		MaxBackoff: cfg.MaxBackoff, AttemptTimeout: cfg.AttemptTO, Conns: cfg.Shoppers * 2}, lat)
	if err != nil {
		return nil, err
	}
	defer sender.CloseIdle()
	book := NewBook(runID, cfg.Tenant)
	storm := &Storm{Book: book, Send: sender, Instances: len(bases), Mix: cfg.Mix, Seed: cfg.Seed}

	start := time.Now()
	stopAt := start.Add(cfg.Duration)
	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan struct{})
	var dbKills atomic.Int64
	var chaos sync.WaitGroup
	chaosLog := func(f string, a ...any) { logf(progress, f, a...) }
	if cfg.KillEvery > 0 && cluster != nil {
		rng := rand.New(rand.NewPCG(cfg.Seed, 99))
		var beforeKill, afterRestart func()
		if admin != nil {
			// A restarted paysim has its startup faults and zeroed counters:
			// count what it injected, and set the storm's faults again.
			beforeKill = func() {
				if st, err := admin.Stats(chaosCtx); err == nil {
					tally.fold(st)
				}
			}
			afterRestart = func() {
				tally.restarted()
				if err := admin.SetFaults(chaosCtx, stormFaults); err != nil {
					chaosLog("chaos: setting paysim's faults after its restart: %v", err)
				}
			}
		}
		chaos.Go(func() {
			cluster.Chaos(chaosCtx, cfg.KillEvery, stopAt, cfg.KillPaysim, rng.IntN, beforeKill, afterRestart, chaosLog)
		})
	}
	if cfg.KillDBEvery > 0 && cluster != nil {
		chaos.Go(func() { dbKills.Store(KillDBConnections(chaosCtx, cfg.DatabaseURL, cfg.KillDBEvery, stopAt, chaosLog)) })
	}
	go func() { chaos.Wait(); close(chaosDone) }()
	ticker := time.NewTicker(5 * time.Second)
	tickDone := make(chan struct{})
	go func() {
		for {
			select {
			case <-tickDone:
				return
			case <-ticker.C:
				logf(progress, "storm: %d logical ops, %d orders, %d requests", storm.Logical(), storm.orders.Load(), sender.counter.requests.Load())
			}
		}
	}()
	logf(progress, "storm %s: %d shoppers on %d instance(s), up to %d logical ops or %s (seed %d)",
		runID, cfg.Shoppers, len(bases), cfg.Ops, cfg.Duration, cfg.Seed)
	storm.Run(ctx, cfg.Shoppers, cfg.Ops, stopAt)
	res.Seconds = round3(time.Since(start).Seconds())
	stopChaos()
	<-chaosDone
	ticker.Stop()
	close(tickDone)

	// Faults off, then every operation without a definitive answer is sent
	// again with its key until it has one.
	for _, p := range proxies {
		p.SetFates(Fates{})
	}
	if admin != nil {
		if err := admin.SetFaults(ctx, paysim.Faults{TimeoutDelay: cfg.PaysimFaults.TimeoutDelay, Seed: cfg.Seed}); err != nil {
			return nil, err
		}
	}
	if cluster != nil {
		procs := append([]*spawn.Process{}, cluster.Orderd...)
		if cluster.Paysim != nil {
			procs = append(procs, cluster.Paysim)
		}
		for _, p := range procs {
			if p.Exited() {
				if err := p.Restart(); err != nil {
					return nil, fmt.Errorf("restarting %s for the reconcile: %w", p.Name(), err)
				}
				if p == cluster.Paysim && tally != nil {
					tally.restarted()
				}
			}
		}
	}
	logf(progress, "storm done in %.1fs: %d logical ops; reconciling", res.Seconds, storm.Logical())
	res.Reconcile.Before, res.Reconcile.After = storm.Reconcile(ctx, time.Now().Add(cfg.Settle), 8)

	// Totals.
	res.LogicalOps = storm.Logical()
	res.LogicalByKind = map[string]int{}
	for _, op := range book.AllOps() {
		if !op.Repeat {
			res.LogicalByKind[op.Kind]++
		}
	}
	res.Orders = len(book.Orders())
	res.HTTP = HTTPTotals{ClientRequests: sender.counter.requests.Load(), ClientRetries: sender.retries.Load(),
		NetworkErrors: sender.counter.neterrs.Load(), ByStatus: sender.counter.Statuses()}
	for _, p := range proxies {
		res.Faults.Proxy = res.Faults.Proxy.Add(p.Stats())
	}
	res.HTTP.ServerSide = res.Faults.Proxy.Requests
	res.Duplicates = snapshot(&storm.dups)
	res.Duplicates["retry after a proxy fault (client or net/http resend)"] = res.Faults.Proxy.Faults()
	res.Faults.Planned = snapshot(&storm.planned)
	if cluster != nil {
		res.Faults.OrderdKilled = cluster.Kills.Load()
		res.Faults.PaysimKilled = cluster.PaysimKills.Load()
	}
	res.Faults.DBConnsKilled = dbKills.Load()
	res.Latency = lat.Stats()

	// The checks: database and provider ledger.
	checker := &Checker{HTTP500: sender.counter.status(500), DerivedTTL: cfg.DerivedTTL}
	if admin != nil {
		after, err := admin.Stats(ctx)
		if err != nil {
			return nil, err
		}
		tally.fold(after)
		res.Faults.Paysim = tally.total()
		snap, err := admin.Ledger(ctx)
		if err != nil {
			return nil, err
		}
		checker.Ledger = &snap
	}
	if cfg.DatabaseURL == "" {
		rep := CheckReport{ByKind: map[string]int{}, DBStates: map[string]int{}}
		rep.add(AnomalyHarnessUnreachable, "-", "no -database-url: the database invariants were not checked")
		res.Check = &rep
	} else {
		db, err := OpenCheckDB(cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		defer db.Close()
		checker.DB = db
		rep, err := checker.Check(ctx, book)
		if err != nil {
			return nil, fmt.Errorf("checking: %w", err)
		}
		res.Check = &rep
	}
	res.Pass = res.Check.Total == 0
	return res, nil
}

func storeOf(dbURL string) string {
	switch {
	case strings.HasPrefix(dbURL, "sqlite:"):
		return "embedded"
	case dbURL == "":
		return "unknown"
	}
	return "postgres"
}

// runBench runs the load benchmark.
func runBench(ctx context.Context, cfg Config, runID string, bases []string, work string, progress io.Writer) (*Result, error) {
	res := &Result{Mode: "bench", RunID: runID, StartedAt: time.Now().UTC(), Instances: len(bases), Store: storeOf(cfg.DatabaseURL), Config: cfg}
	if cfg.Pgbench != "" && !strings.HasPrefix(cfg.DatabaseURL, "postgres") {
		return nil, errors.New("-pgbench needs a postgres:// -database-url (the deployment's database)")
	}
	maxC := 0
	for _, c := range cfg.BenchClients {
		maxC = max(maxC, c)
	}
	lat := NewLatencies()
	sender, err := NewSender(SenderConfig{Bases: bases, APIKey: cfg.APIKey, Attempts: cfg.Attempts, Backoff: cfg.Backoff,
		MaxBackoff: cfg.MaxBackoff, AttemptTimeout: cfg.AttemptTO, Conns: maxC * 2}, nil)
	if err != nil {
		return nil, err
	}
	defer sender.CloseIdle()
	sqlDir, err := filepath.Abs(cfg.BenchSQL)
	if err != nil {
		return nil, err
	}
	cfg.BenchSQL = sqlDir
	b := &Bench{Send: sender, RunID: runID, Clients: cfg.BenchClients, Duration: cfg.BenchDuration, DatabaseURL: cfg.DatabaseURL,
		Pgbench: cfg.Pgbench, SQLDir: cfg.BenchSQL, WorkDir: work, Lat: lat, Log: progress}
	start := time.Now()
	rows, err := b.Run(ctx)
	if err != nil {
		return nil, err
	}
	res.Seconds = round3(time.Since(start).Seconds())
	res.Bench = rows
	res.Latency = lat.Stats()
	res.HTTP = HTTPTotals{ClientRequests: sender.counter.requests.Load(), ClientRetries: sender.retries.Load(),
		NetworkErrors: sender.counter.neterrs.Load(), ByStatus: sender.counter.Statuses()}
	res.Pass = true
	for _, r := range rows {
		if r.ServiceErrors > 0 {
			res.Pass = false
			res.Notes = append(res.Notes, fmt.Sprintf("%s c=%d: %d errors", r.Op, r.Clients, r.ServiceErrors))
		}
	}
	return res, nil
}
