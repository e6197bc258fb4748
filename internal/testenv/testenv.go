// Package testenv starts the whole Orderly HTTP stack for tests and
// benchmarks: a store of the chosen kind (a fresh PostgreSQL database, or an
// embedded store in a temporary directory), the simulated payment provider
// and warehouse, the service and the API, behind an httptest.Server.
package testenv

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
	"github.com/orderly/orderly/store/sqlite"
	"github.com/orderly/orderly/webhook"
)

// Store kinds.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Kinds lists every store kind, for tests that must pass on each.
var Kinds = []string{Postgres, SQLite}

// Tenants and their API keys configured in every Env.
const (
	TenantA = "tenant_a"
	KeyA    = "sk_test_tenant_a_0001"
	TenantB = "tenant_b"
	KeyB    = "sk_test_tenant_b_0002"
)

// Options adjusts an Env. Zero values take the service defaults.
type Options struct {
	Policy        idempotency.Policy
	KeyTTL        time.Duration
	DerivedKeyTTL time.Duration
	MaxBodyBytes  int64
	Now           func() time.Time
	// Clock, if set, is the clock of the service (Now defaults to it) and
	// of the store's database (see internal/testclock): moving it expires
	// leases and keys on every side at once.
	Clock *testclock.Clock
	// Location reuses a store: a PostgreSQL URL or an SQLite directory (for
	// restart tests). Empty creates a fresh one.
	Location string
	// NoGroupCommit turns group commit off (orderd's default is on, and so
	// is the stack's).
	NoGroupCommit bool
	// MaxInFlight and RequestTimeout are the API's admission bound and
	// per-request deadline (api.Config); zero means none.
	MaxInFlight    int
	RequestTimeout time.Duration
	// TenantMaxInFlight is the API's per-tenant in-flight bound
	// (api.Config); zero means none.
	TenantMaxInFlight int
	// Gate, if set, is the API's admission gate (api.Config.Gate), to
	// share with a command consumer under test.
	Gate *admission.Gate
	// WrapGateway, if set, wraps Env.Gateway in what the service calls, so
	// a test can hold or observe provider calls. Env.Gateway stays the
	// simulator underneath, for counting captures.
	WrapGateway func(payment.Gateway) payment.Gateway
	// WrapWarehouse, if set, wraps Env.Warehouse in what the service
	// calls, as WrapGateway does the gateway.
	WrapWarehouse func(fulfillment.Warehouse) fulfillment.Warehouse
	// ProviderWebhook serves the provider webhook endpoint (api.Config).
	ProviderWebhook api.ProviderWebhook
	// StripeWebhook serves the Stripe webhook endpoint (api.Config).
	StripeWebhook api.ProviderWebhook
	// TenantRateLimit, TenantBurst and AuthFailuresPerMinute are the API's
	// rate limits (api.Config); zero means none.
	TenantRateLimit       float64
	TenantBurst           int
	AuthFailuresPerMinute int
	// Logger receives the API's logs (default slog.Default()).
	Logger *slog.Logger
	// Observer, if set, is the service's (service.Config.Observer), so a
	// test can wait on an idempotency event instead of a sleep.
	Observer service.Observer
	// UnresolvedAfter is the service's (service.Config.UnresolvedAfter);
	// zero takes its default.
	UnresolvedAfter time.Duration
	// EndpointsPerTenant caps each tenant's webhook endpoints
	// (webhook.Endpoints.MaxPerTenant); zero means none.
	EndpointsPerTenant int
}

// Env is a running stack.
type Env struct {
	Kind      string
	Location  string // PostgreSQL URL or SQLite directory
	Store     store.Store
	Gateway   *simulator.IntentGateway
	Warehouse *simulator.Warehouse
	Service   *service.Service
	Server    *httptest.Server
}

// New starts a stack on a store of kind, closed when t ends. PostgreSQL
// tests skip (or fail in CI) without a server; see pgtest.
func New(t testing.TB, kind string, opt Options) *Env {
	t.Helper()
	e := &Env{Kind: kind, Location: opt.Location, Gateway: simulator.NewIntentGateway(), Warehouse: simulator.NewWarehouse()}
	if e.Location == "" {
		switch kind {
		case Postgres:
			e.Location = pgtest.NewDatabase(t)
		case SQLite:
			e.Location = t.TempDir()
		default:
			t.Fatalf("unknown store kind %q", kind)
		}
	}
	if opt.Clock != nil && opt.Now == nil {
		opt.Now = opt.Clock.Now
	}
	e.Store = OpenWithClock(t, kind, e.Location, opt.Clock)
	var gw payment.Gateway = e.Gateway
	if opt.WrapGateway != nil {
		gw = opt.WrapGateway(gw)
	}
	var wh fulfillment.Warehouse = e.Warehouse
	if opt.WrapWarehouse != nil {
		wh = opt.WrapWarehouse(wh)
	}
	e.Service = service.New(e.Store, gw, wh, service.Config{
		KeyTTL: opt.KeyTTL, DerivedKeyTTL: opt.DerivedKeyTTL, Now: opt.Now, GroupCommit: !opt.NoGroupCommit,
		Observer: opt.Observer, UnresolvedAfter: opt.UnresolvedAfter,
	})
	e.Server = httptest.NewServer(api.New(e.Service, api.Config{
		APIKeys:           map[string]string{KeyA: TenantA, KeyB: TenantB},
		Policy:            opt.Policy,
		MaxBodyBytes:      opt.MaxBodyBytes,
		MaxInFlight:       opt.MaxInFlight,
		TenantMaxInFlight: opt.TenantMaxInFlight,
		Gate:              opt.Gate,
		RequestTimeout:    opt.RequestTimeout,
		ProviderWebhook:   opt.ProviderWebhook,
		StripeWebhook:     opt.StripeWebhook,
		// Loopback webhook receivers are what tests have.
		Events: &webhook.Endpoints{Store: e.Store.(store.EventStore), AllowPrivate: true, Now: opt.Now, MaxPerTenant: opt.EndpointsPerTenant,
			Ledger: e.Store, KeyTTL: opt.KeyTTL, DerivedKeyTTL: opt.DerivedKeyTTL},
		Logger: opt.Logger,

		TenantRateLimit:       opt.TenantRateLimit,
		TenantBurst:           opt.TenantBurst,
		AuthFailuresPerMinute: opt.AuthFailuresPerMinute,
	}))
	t.Cleanup(e.Close)
	return e
}

// Open opens a store of kind at location (URL or directory).
func Open(t testing.TB, kind, location string) store.Store {
	t.Helper()
	return OpenWithClock(t, kind, location, nil)
}

// OpenWithClock is Open with the store's database following clk (nil: its
// own clock).
func OpenWithClock(t testing.TB, kind, location string, clk *testclock.Clock) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var st store.Store
	var err error
	switch kind {
	case Postgres:
		st, err = postgres.Open(ctx, location)
		if err == nil && clk != nil {
			pgtest.FollowClock(t, location, clk)
		}
	case SQLite:
		var opts []sqlite.Option
		if clk != nil {
			opts = append(opts, sqlite.WithClock(clk.Now))
		}
		st, err = sqlite.Open(ctx, location, opts...)
	}
	if err != nil {
		t.Fatalf("open %s store: %v", kind, err)
	}
	return st
}

// Close stops the server and closes the store; it is safe to call twice.
func (e *Env) Close() {
	if e.Server != nil {
		e.Server.Close()
		e.Server = nil
	}
	if e.Service != nil {
		e.Service.Close()
		e.Service = nil
	}
	if e.Store != nil {
		_ = e.Store.Close()
		e.Store = nil
	}
}

// SyncBuffer is a bytes.Buffer that several goroutines may write, such as
// the log output of a server under test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
