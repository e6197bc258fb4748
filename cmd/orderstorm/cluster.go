package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/internal/spawn"
)

// buildBinaries builds orderd and paysim into dir (from the module the
// working directory is in) unless binDir already holds them.
func buildBinaries(ctx context.Context, binDir, dir string) (orderd, paysim string, err error) {
	if binDir != "" {
		orderd, paysim = filepath.Join(binDir, "orderd"), filepath.Join(binDir, "paysim")
		for _, b := range []string{orderd, paysim} {
			if _, err := os.Stat(b); err != nil {
				return "", "", fmt.Errorf("-bin-dir: %w", err)
			}
		}
		return orderd, paysim, nil
	}
	if orderd, err = spawn.Build(ctx, "github.com/orderly/orderly/cmd/orderd", dir, false); err == nil {
		paysim, err = spawn.Build(ctx, "github.com/orderly/orderly/cmd/paysim", dir, false)
	}
	if err != nil {
		return "", "", fmt.Errorf("run orderstorm from inside the module, or pass -bin-dir: %w", err)
	}
	return orderd, paysim, nil
}

// startProc starts one process of the cluster: bin with env added to the
// environment, logging to dir/name.log, restartable on its address through
// addrEnv, and killed by the kernel if the harness dies.
func startProc(name, bin, addrEnv, dir string, env []string) (*spawn.Process, error) {
	return spawn.Start(spawn.Config{Bin: bin, Name: name, Env: append(os.Environ(), env...), AddrEnv: addrEnv,
		LogPath: filepath.Join(dir, name+".log"), DieWithParent: true})
}

// Cluster is what -spawn started: N orderd and perhaps a paysim.
type Cluster struct {
	Dir    string
	Paysim *spawn.Process
	Orderd []*spawn.Process
	Kills  atomic.Int64
	// PaysimKills counts SIGKILLs of the spawned paysim.
	PaysimKills atomic.Int64
}

// ClusterConfig configures Spawn.
type ClusterConfig struct {
	N            int
	DatabaseURL  string // "" selects the embedded store (N must be 1)
	APIKeys      string // ORDERD_API_KEYS
	WithPaysim   bool
	PaysimURL    string // an external paysim for orderd, if not WithPaysim
	BinDir       string
	Dir          string
	OrderdEnv    []string // extra ORDERD_* settings
	TimeoutDelay time.Duration
	// ProviderWebhooks, if set (with WithPaysim), has the spawned paysim
	// send its signed webhooks to the first orderd, with these faults.
	ProviderWebhooks *ProviderWebhooks
	// Stripe (with WithPaysim) runs paysim in Stripe mode (-api stripe)
	// and orderd on the Stripe adapter against it
	// (ORDERD_PAYMENT_PROVIDER=stripe, ORDERD_STRIPE_API_BASE, and paysim as
	// ORDERD_WAREHOUSE_URL).
	Stripe bool
}

// stormStripeKey is the test key a Stripe-mode cluster uses.
const stormStripeKey = "sk_test_orderstorm"

// ProviderWebhooks are the provider webhooks of a spawned cluster: paysim
// signs them with Secret and sends them to orderd's POST /provider/webhooks
// (ORDERD_PROVIDER_WEBHOOK_SECRET) or, in Stripe mode, Stripe-signed to
// POST /provider/stripe/webhooks (PAYSIM_STRIPE_WEBHOOK_SECRET,
// ORDERD_STRIPE_WEBHOOK_SECRET), duplicating, dropping, delaying and
// reordering some (paysim's -webhook-* settings).
type ProviderWebhooks struct {
	Secret        string        `json:"-"`
	DuplicateRate float64       `json:"duplicate_rate"`
	DropRate      float64       `json:"drop_rate"`
	Delay         time.Duration `json:"delay"`
	ReorderWindow time.Duration `json:"reorder_window"`
}

// paysimEnv is the spawned paysim's environment, with its webhooks to
// orderdBase if pw is set.
func paysimEnv(cfg ClusterConfig, addr, orderdBase string) []string {
	env := []string{"PAYSIM_ADDR=" + addr, "PAYSIM_DATA_DIR=" + filepath.Join(cfg.Dir, "paysim-data"),
		"PAYSIM_TIMEOUT_DELAY=" + cfg.TimeoutDelay.String()}
	if cfg.Stripe {
		env = append(env, "PAYSIM_API=stripe", "PAYSIM_STRIPE_SECRET_KEY="+stormStripeKey)
	}
	if pw := cfg.ProviderWebhooks; pw != nil && orderdBase != "" {
		if cfg.Stripe {
			env = append(env, "PAYSIM_WEBHOOK_URL="+orderdBase+"/provider/stripe/webhooks", "PAYSIM_STRIPE_WEBHOOK_SECRET="+pw.Secret)
		} else {
			env = append(env, "PAYSIM_WEBHOOK_URL="+orderdBase+"/provider/webhooks", "PAYSIM_WEBHOOK_SECRET="+pw.Secret)
		}
		env = append(env,
			fmt.Sprintf("PAYSIM_WEBHOOK_DUPLICATE_RATE=%g", pw.DuplicateRate), fmt.Sprintf("PAYSIM_WEBHOOK_DROP_RATE=%g", pw.DropRate),
			"PAYSIM_WEBHOOK_DELAY="+pw.Delay.String(), "PAYSIM_WEBHOOK_REORDER_WINDOW="+pw.ReorderWindow.String())
	}
	return env
}

// Spawn builds (unless cfg.BinDir is set) and starts the cluster.
func Spawn(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.N < 1 {
		return nil, errors.New("-spawn must be at least 1")
	}
	if cfg.DatabaseURL == "" && cfg.N > 1 {
		return nil, errors.New("-spawn N > 1 needs a PostgreSQL -database-url: the embedded store serves one instance")
	}
	orderdBin, paysimBin, err := buildBinaries(ctx, cfg.BinDir, cfg.Dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: cfg.Dir}
	payURL := cfg.PaysimURL
	if cfg.Stripe && !cfg.WithPaysim {
		return nil, errors.New("the Stripe mode needs the spawned paysim")
	}
	if cfg.ProviderWebhooks != nil && !cfg.WithPaysim {
		return nil, errors.New("provider webhooks need the spawned paysim (no -paysim URL)")
	}
	if cfg.WithPaysim {
		p, err := startProc("paysim", paysimBin, "PAYSIM_ADDR", cfg.Dir, paysimEnv(cfg, "127.0.0.1:0", ""))
		if err != nil {
			return nil, err
		}
		c.Paysim = p
		payURL = "http://" + p.Addr()
	}
	for i := range cfg.N {
		// A storm or a benchmark is one tenant on purpose: its rate limit is
		// off, so what is measured is the service (-orderd-env may set it).
		env := []string{"ORDERD_ADDR=127.0.0.1:0", "ORDERD_ADMIN_ADDR=127.0.0.1:0", "ORDERD_API_KEYS=" + cfg.APIKeys,
			"ORDERD_PROVIDER_TIMEOUT=2s", "ORDERD_LEASE=6s", "ORDERD_COMPLETER_INTERVAL=1s", "ORDERD_TENANT_RATE_LIMIT=0"}
		if cfg.DatabaseURL != "" {
			env = append(env, "ORDERD_DATABASE_URL="+cfg.DatabaseURL)
		} else {
			env = append(env, "ORDERD_DATA_DIR="+filepath.Join(cfg.Dir, "orderd-data"))
		}
		switch {
		case cfg.Stripe:
			env = append(env, "ORDERD_PAYMENT_PROVIDER=stripe", "ORDERD_STRIPE_SECRET_KEY="+stormStripeKey,
				"ORDERD_STRIPE_API_BASE="+payURL, "ORDERD_WAREHOUSE_URL="+payURL)
		case payURL != "":
			env = append(env, "ORDERD_PAYMENT_URL="+payURL)
		}
		switch {
		case cfg.ProviderWebhooks != nil && cfg.Stripe:
			env = append(env, "ORDERD_STRIPE_WEBHOOK_SECRET="+cfg.ProviderWebhooks.Secret)
		case cfg.ProviderWebhooks != nil:
			env = append(env, "ORDERD_PROVIDER_WEBHOOK_SECRET="+cfg.ProviderWebhooks.Secret)
		}
		env = append(env, cfg.OrderdEnv...)
		p, err := startProc(fmt.Sprintf("orderd-%d", i), orderdBin, "ORDERD_ADDR", cfg.Dir, env)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Orderd = append(c.Orderd, p)
	}
	if cfg.ProviderWebhooks != nil {
		// paysim again, on its address and ledger, now that the first
		// orderd's address is known (as .ci/storm did before -spawn had
		// provider webhooks); its restarts keep these settings.
		addr := c.Paysim.Addr()
		if err := c.Paysim.Stop(stopTimeout); err != nil {
			c.Stop()
			return nil, fmt.Errorf("stopping paysim to give it its webhook URL: %w", err)
		}
		var p *spawn.Process
		for try := 0; ; try++ { // the port may take a moment to free
			p, err = startProc("paysim", paysimBin, "PAYSIM_ADDR", cfg.Dir, paysimEnv(cfg, addr, "http://"+c.Orderd[0].Addr()))
			if err == nil || try == 10 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			c.Paysim = nil
			c.Stop()
			return nil, err
		}
		c.Paysim = p
	}
	return c, nil
}

// Bases returns the orderd base URLs.
func (c *Cluster) Bases() []string {
	out := make([]string, len(c.Orderd))
	for i, p := range c.Orderd {
		out[i] = "http://" + p.Addr()
	}
	return out
}

// PaysimURL returns the spawned paysim's base URL ("" if none).
func (c *Cluster) PaysimURL() string {
	if c.Paysim == nil {
		return ""
	}
	return "http://" + c.Paysim.Addr()
}

// Chaos SIGKILLs a random spawned orderd (or, with withPaysim, the spawned
// paysim too) every interval and restarts it on its address, until ctx ends
// or stop passes; a victim that a failed restart left down is restarted
// without a kill. It reports failures to logf.
//
// beforePaysimKill and afterPaysimRestart (either may be nil) run around a
// kill of paysim, whose run-level faults and counters a restart resets.
func (c *Cluster) Chaos(ctx context.Context, every time.Duration, stop time.Time, withPaysim bool, pick func(int) int,
	beforePaysimKill, afterPaysimRestart func(), logf func(string, ...any)) {
	victims := append([]*spawn.Process{}, c.Orderd...)
	if withPaysim && c.Paysim != nil {
		victims = append(victims, c.Paysim)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Now().After(stop) {
			return
		}
		p := victims[pick(len(victims))]
		if !p.Exited() { // one a failed restart left down is only restarted
			if p == c.Paysim && beforePaysimKill != nil {
				beforePaysimKill()
			}
			if err := p.Kill(); err != nil {
				logf("chaos: kill %s: %v", p.Name(), err)
				continue
			}
			if p == c.Paysim {
				c.PaysimKills.Add(1)
			} else {
				c.Kills.Add(1)
			}
			time.Sleep(200 * time.Millisecond)
		}
		var err error
		for try := 0; try < 5; try++ { // the port may take a moment to free
			if err = p.Restart(); err == nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			logf("chaos: restart %s: %v", p.Name(), err)
		} else if p == c.Paysim && afterPaysimRestart != nil {
			afterPaysimRestart()
		}
	}
}

// stopTimeout is how long Stop lets a process shut down after SIGTERM
// before it kills it.
const stopTimeout = 20 * time.Second

// Stop ends every process of the cluster.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, p := range c.Orderd {
		wg.Go(func() { _ = p.Stop(stopTimeout) })
	}
	wg.Wait()
	if c.Paysim != nil {
		_ = c.Paysim.Stop(stopTimeout)
	}
}

// KillDBConnections terminates, every interval until ctx ends or stop
// passes, the PostgreSQL backends of the run's database that serve the
// spawned orderd (every client backend of that database but this one and
// the harness's own): their next statement fails, and a COMMIT in flight
// may have committed without orderd hearing it. It returns how many
// backends it terminated.
func KillDBConnections(ctx context.Context, dbURL string, every time.Duration, stop time.Time, logf func(string, ...any)) int64 {
	var n int64
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
		if time.Now().After(stop) {
			return n
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, dbURL)
		if err != nil {
			cancel()
			logf("chaos: connect to kill backends: %v", err)
			continue
		}
		var k int64
		err = conn.QueryRow(cctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
			  AND application_name NOT LIKE 'orderstorm%'`).Scan(&k)
		_ = conn.Close(cctx)
		cancel()
		if err != nil {
			logf("chaos: kill backends: %v", err)
			continue
		}
		n += k
	}
}
