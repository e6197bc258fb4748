package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/check"
	"github.com/orderly/orderly/cmd/orderstorm/internal/faultproxy"
	"github.com/orderly/orderly/cmd/orderstorm/internal/hooks"
	"github.com/orderly/orderly/internal/spawn"
	"github.com/orderly/orderly/paysim"
)

// startProxies puts a fault proxy in front of each base URL and returns
// the proxies and their URLs, in the same order.
func startProxies(bases []string, fates faultproxy.Fates, seed uint64) ([]*faultproxy.Proxy, []string, error) {
	var proxies []*faultproxy.Proxy
	var urls []string
	for i, b := range bases {
		u, err := url.Parse(b)
		if err == nil {
			var p *faultproxy.Proxy
			if p, err = faultproxy.New(u.Host, fates, seed+uint64(i)*7919); err == nil {
				proxies, urls = append(proxies, p), append(urls, p.URL())
				continue
			}
		}
		closeAll(proxies)
		return nil, nil, err
	}
	return proxies, urls, nil
}

func closeAll(proxies []*faultproxy.Proxy) {
	for _, p := range proxies {
		_ = p.Close()
	}
}

// runStorm runs the storm, reconciles, and checks.
func runStorm(ctx context.Context, cfg Config, runID string, bases []string, cluster *Cluster, progress io.Writer) (*Result, error) {
	res := &Result{Mode: "storm", RunID: runID, StartedAt: time.Now().UTC(), Instances: len(bases), Shoppers: cfg.Shoppers,
		Store: storeOf(cfg.DatabaseURL), Config: cfg}
	clientBases := bases
	var proxies []*faultproxy.Proxy
	if cfg.Fates.Any() || cfg.ForceProxy {
		var err error
		if proxies, clientBases, err = startProxies(bases, cfg.Fates, cfg.Seed); err != nil {
			return nil, err
		}
		defer closeAll(proxies)
	}
	var admin *paysim.AdminClient
	var tally *faultTally
	stormFaults := cfg.PaysimFaults
	stormFaults.Seed = cfg.Seed
	if cfg.PaysimURL != "" {
		admin = paysim.NewAdminClient(cfg.PaysimURL)
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
	rec := book.NewBook(runID, cfg.Tenant)
	var receiver *hooks.Receiver
	if cfg.Webhooks {
		if receiver, err = hooks.Start(); err != nil {
			return nil, err
		}
		defer receiver.Close()
		if err := receiver.Register(ctx, bases[0], cfg.APIKey); err != nil {
			return nil, err
		}
	}
	var bus *Bus
	if cfg.Mix.BusCommands > 0 {
		cfg.Bus.Tenant, cfg.Bus.APIKey = cfg.Tenant, cfg.APIKey
		if bus, err = NewBus(cfg.Bus); err != nil {
			return nil, err
		}
		defer bus.Close()
		if cfg.DeleteBusStream {
			defer func() {
				if err := bus.DeleteStream(context.WithoutCancel(ctx)); err != nil {
					logf(progress, "deleting the commands stream %s: %v", cfg.Bus.Stream, err)
				}
			}()
		}
	}
	storm := &Storm{Book: rec, Send: sender, Instances: len(bases), Mix: cfg.Mix, Seed: cfg.Seed, Bus: bus, BusLateAfter: cfg.BusLateAfter}

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
	storm.WaitLate()
	res.Seconds = round3(time.Since(start).Seconds())
	stopChaos()
	<-chaosDone
	ticker.Stop()
	close(tickDone)

	// Faults off, then every operation without a definitive answer is sent
	// again with its key until it has one.
	for _, p := range proxies {
		p.SetFates(faultproxy.Fates{})
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
	if bus != nil {
		// Late copies and redeliveries: wait (bounded by -settle) until
		// orderd's consumer has handled every command.
		res.Bus = &BusResult{BusTotals: bus.Totals()}
		deadline := time.Now().Add(max(cfg.Settle, 30*time.Second))
		for {
			ok, err := bus.Drained(ctx)
			if ok || time.Now().After(deadline) || ctx.Err() != nil {
				res.Bus.Drained = ok && err == nil
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	// Totals.
	res.LogicalOps = storm.Logical()
	res.LogicalByKind = map[string]int{}
	for _, op := range rec.AllOps() {
		if !op.Repeat {
			res.LogicalByKind[op.Kind]++
		}
	}
	res.Orders = len(rec.Orders())
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
	seconds := map[string]float64{}
	timed := func(name string, f func() error) error {
		t0 := time.Now()
		err := f()
		seconds[name] = round3(time.Since(t0).Seconds())
		return err
	}
	checker := &check.Checker{HTTP500: sender.counter.status(500), DerivedTTL: cfg.DerivedTTL,
		CaptureAtFulfilment: cfg.Capture == "at_fulfilment"}
	var db *check.DB
	if cfg.DatabaseURL != "" {
		var err error
		if db, err = check.OpenDB(cfg.DatabaseURL); err != nil {
			return nil, err
		}
		defer db.Close()
		checker.DB = db
		// A provider call whose outcome was lost settles when a retry, the
		// completer or a provider webhook asks: wait (bounded by -settle)
		// until none of the run's attempts is open, before the ledger is
		// read; what is still open then is an anomaly.
		_ = timed("attempts_wait", func() error {
			deadline := time.Now().Add(max(cfg.Settle, 30*time.Second))
			for first := true; ; first = false {
				n, err := checker.OpenAttempts(ctx, rec)
				if first && err == nil {
					res.Reconcile.OpenAttempts = n
				}
				if err != nil || n == 0 || time.Now().After(deadline) || ctx.Err() != nil {
					return err
				}
				time.Sleep(time.Second)
			}
		})
		if res.Reconcile.OpenAttempts > 0 {
			logf(progress, "%d provider attempts were open after the reconcile; waited %.1fs for them", res.Reconcile.OpenAttempts, seconds["attempts_wait"])
		}
	}
	if admin != nil {
		after, err := admin.Stats(ctx)
		if err != nil {
			return nil, err
		}
		tally.fold(after)
		res.Faults.Paysim = tally.total()
		if after.Webhooks.Events > 0 {
			res.ProviderWebhooks = &after.Webhooks
		}
		snap, err := admin.Ledger(ctx)
		if err != nil {
			return nil, err
		}
		checker.Ledger = &snap
	}
	var rep check.Report
	var in check.Inputs
	if res.ProviderWebhooks != nil {
		in.ProviderEvents, in.ProviderDelivered = res.ProviderWebhooks.Events, res.ProviderWebhooks.Delivered
	}
	if cfg.DatabaseURL == "" {
		rep = check.Report{ByKind: map[string]int{}, DBStates: map[string]int{}}
		rep.Add(check.AnomalyHarnessUnreachable, "-", "no -database-url: the database invariants were not checked")
	} else {
		var err error
		logf(progress, "checking: analyze")
		analyzeErr := timed("analyze", func() error { return db.Analyze(ctx) })
		logf(progress, "checking: database and ledger")
		err = timed("database_and_ledger", func() error { rep, err = checker.Check(ctx, rec); return err })
		if rep.ByKind == nil {
			rep = check.Report{ByKind: map[string]int{}, DBStates: map[string]int{}}
		}
		if analyzeErr != nil {
			// Not an anomaly of the service, but the checks' speed rests
			// on it: say so.
			res.Notes = append(res.Notes, "ANALYZE before the checks failed: "+analyzeErr.Error())
		}
		if err != nil {
			rep.Add(check.AnomalyHarnessUnreachable, "database", "the database and ledger checks did not finish: %v", err)
		}
		if receiver != nil {
			// Delivery is asynchronous: wait (bounded by -settle) until
			// every change has arrived, then check what did.
			err := timed("webhooks_wait", func() error {
				deadline := time.Now().Add(max(cfg.Settle, 30*time.Second))
				for time.Now().Before(deadline) {
					if ok, err := checker.WebhooksSettled(ctx, rec, receiver.Deliveries()); err != nil || ok {
						return err
					}
					time.Sleep(time.Second)
				}
				return nil
			})
			var wr check.WebhookReport
			if err == nil {
				logf(progress, "checking: outbox and webhooks")
				err = timed("webhooks", func() error { wr, err = checker.CheckWebhooks(ctx, rec, receiver.Deliveries(), &rep); return err })
			}
			if err != nil {
				rep.Add(check.AnomalyHarnessUnreachable, "webhooks", "the outbox and webhook checks did not finish: %v", err)
			} else {
				res.Webhooks, in.Webhooks = &wr, &wr
				logf(progress, "webhooks: %d events, %d deliveries (%d redeliveries)", wr.Events, wr.Deliveries, wr.Redelivery)
			}
		}
		if res.Bus != nil {
			if !res.Bus.Drained {
				rep.Add(check.AnomalyBusNotDrained, cfg.Bus.Stream, "orderd's consumer %s still holds commands after the settle time", cfg.Bus.Consumer)
			}
			logf(progress, "checking: bus commands")
			err := timed("bus", func() error { res.Bus.Check, err = checker.CheckBus(ctx, rec, &rep); return err })
			if err != nil {
				rep.Add(check.AnomalyHarnessUnreachable, "bus", "the bus checks did not finish: %v", err)
			} else {
				in.Bus = &res.Bus.Check
			}
		}
	}
	readRep, readAnomalies := storm.reads.report()
	in.Reads = &readRep
	res.Reads = &readRep
	for _, a := range readAnomalies {
		rep.Add(a.Kind, a.Ref, "%s", a.Detail)
	}
	check.Summarize(&rep, in, cfg.RequireAll)
	var total float64
	for _, v := range seconds {
		total += v
	}
	seconds["total"] = round3(total)
	rep.Seconds = seconds
	res.Check = &rep
	res.Pass = res.Check.Total == 0
	return res, nil
}
