package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/check"
	"github.com/orderly/orderly/cmd/orderstorm/internal/faultproxy"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

const testTenant = "acme"

// TestStormInProcess runs a small storm end to end, in this process: two
// service instances on one PostgreSQL database, a paysim with run-level
// faults, proxies that drop, cut and tear replies, and every duplicate
// pattern; then the checker must find the promise kept. It exercises the
// harness's own concurrency under -race.
func TestStormInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("a storm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	prev := slog.Default()
	slog.SetDefault(quiet) // the provider clients warn through the default logger
	t.Cleanup(func() { slog.SetDefault(prev) })

	ledger, err := paysim.OpenLedger(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	sim, err := paysim.NewServer(ledger, paysim.Config{Logger: quiet, Faults: paysim.Faults{
		DropRate: 0.05, ErrorRate: 0.05, TimeoutRate: 0.02, TimeoutDelay: 700 * time.Millisecond, Seed: 7}})
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(sim)
	t.Cleanup(provider.Close)
	t.Cleanup(sim.StopDelays)

	const apiKey = "sk_storm_test_key"
	var bases []string
	for range 2 {
		st, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		gw, err := paysimclient.NewIntents(provider.URL, paysimclient.WithTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wh, err := paysimclient.NewWarehouse(provider.URL, paysimclient.WithTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		svc := service.New(st, gw, wh, service.Config{LeaseDuration: 3 * time.Second, Logger: quiet})
		srv := httptest.NewServer(api.New(svc, api.Config{APIKeys: map[string]string{apiKey: testTenant}, Logger: quiet}))
		t.Cleanup(srv.Close)
		bases = append(bases, srv.URL)
	}

	var proxied []string
	for i, b := range bases {
		p, err := faultproxy.New(strings.TrimPrefix(b, "http://"), faultproxy.Fates{Drop: 0.05, Cut: 0.02, Truncate: 0.02}, uint64(42+i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxied = append(proxied, p.URL())
	}
	lat := NewLatencies()
	sender, err := NewSender(SenderConfig{Bases: proxied, APIKey: apiKey, Attempts: 6, Backoff: 20 * time.Millisecond,
		MaxBackoff: 1500 * time.Millisecond, AttemptTimeout: 10 * time.Second, Conns: 16}, lat)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseIdle()
	rec := book.NewBook("inproc1", testTenant)
	mix := DefaultMix
	mix.Replay, mix.DoubleClick, mix.Parallel = 0.4, 0.25, 0.25
	s := &Storm{Book: rec, Send: sender, Instances: 2, Mix: mix, Seed: 11}
	s.Run(ctx, 8, 250, time.Now().Add(90*time.Second))
	if s.Logical() < 250 {
		t.Errorf("only %d logical operations ran", s.Logical())
	}
	if err := sim.SetFaults(paysim.Faults{}); err != nil {
		t.Fatal(err)
	}
	before, after := s.Reconcile(ctx, time.Now().Add(60*time.Second), 8)
	t.Logf("%d logical ops, %d orders, %d requests; unresolved %d → %d", s.Logical(), len(rec.Orders()),
		sender.counter.requests.Load(), before, after)

	snap, err := ledger.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db, err := check.OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := (&check.Checker{DB: db, Ledger: &snap, HTTP500: sender.counter.status(500), DerivedTTL: 10 * time.Minute}).Check(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rep.Anomalies {
		t.Errorf("anomaly %s %s: %s", a.Kind, a.Ref, a.Detail)
	}
	if rep.DBOrders == 0 || rep.KeysChecked == 0 || rep.LedgerCaptures == 0 {
		t.Errorf("the checker saw nothing: %+v", rep)
	}
	// The reads after acknowledged writes: no replica here, so no token,
	// and every read finds its order.
	reads, readAnomalies := s.reads.report()
	for _, a := range readAnomalies {
		t.Errorf("read anomaly %s %s: %s", a.Kind, a.Ref, a.Detail)
	}
	if reads.WithoutToken == 0 || reads.WithToken != 0 {
		t.Errorf("reads %+v: want reads, none with a token (no replica)", reads)
	}
	dups := snapshot(&s.dups)
	for _, k := range []string{book.ViaDoubleClick, book.ViaParallel, book.ViaSequenceReplay} {
		if dups[k] == 0 {
			t.Errorf("no %s duplicates were sent: %v", k, dups)
		}
	}
	if st := lat.Stats(); len(st) == 0 || st[0].Kind != book.KindCreate || st[0].Count == 0 {
		t.Errorf("latency stats %+v", st)
	}
}
