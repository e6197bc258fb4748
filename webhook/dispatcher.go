package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/store"
)

// Config configures a Dispatcher. Zero values take the defaults.
type Config struct {
	// AllowPrivate lets deliveries connect to loopback, private and
	// link-local addresses (default false: refused at connect time).
	AllowPrivate bool
	// RetryWindow is how long after its event a delivery is retried before
	// it is given up (default 72h).
	RetryWindow time.Duration
	// Timeout bounds one attempt, connect to last byte (default 10s).
	Timeout time.Duration
	// Lease is how long an instance holds a delivery it is sending; it
	// must exceed Timeout (default Timeout + 5s, time enough to record the
	// outcome). Past it, on the database's clock, another instance may
	// send it again; retries are scheduled on that clock too.
	Lease time.Duration
	// BaseBackoff and MaxBackoff bound the exponential backoff: attempt n
	// waits a uniformly random time in [0, min(MaxBackoff, BaseBackoff ×
	// 2^(n-1))) — full jitter (defaults 5s and 1h).
	BaseBackoff, MaxBackoff time.Duration
	// Batch is how many deliveries one claim leases at most (default 16).
	Batch int
	// Workers is how many deliveries Run sends at once, each in a slot of
	// its own that it frees when its outcome is recorded, so no delivery
	// waits for a slower one (default DefaultWorkers).
	Workers int
	// InFlightPerTenant and InFlightPerEndpoint cap the deliveries one
	// tenant, and one endpoint, has in flight at once, on every instance
	// together (store.DeliveryClaim): a tenant whose endpoints hang holds
	// at most InFlightPerTenant slots, the others stay free for the other
	// tenants. Defaults DefaultInFlightPerTenant and
	// DefaultInFlightPerEndpoint; negative turns a cap off.
	InFlightPerTenant, InFlightPerEndpoint int
	// Now is this instance's clock (default time.Now): signature
	// timestamps, Retry-After dates and the retry window.
	Now func() time.Time
	// Logger receives delivery logs (default slog.Default()).
	Logger *slog.Logger
	// Transport overrides the HTTP transport (tests); its dialer must do
	// its own address checks.
	Transport http.RoundTripper
}

// Defaults.
const (
	DefaultRetryWindow = 72 * time.Hour
	DefaultTimeout     = 10 * time.Second
	DefaultBaseBackoff = 5 * time.Second
	DefaultMaxBackoff  = time.Hour
	// DefaultWorkers is Run's pool of delivery slots per instance.
	DefaultWorkers = 32
	// DefaultInFlightPerTenant keeps a quarter of one instance's slots
	// the most one tenant holds, however slow its endpoints.
	DefaultInFlightPerTenant = 8
	// DefaultInFlightPerEndpoint: a few concurrent requests per receiver
	// (an order's own events still go one at a time, in sequence).
	DefaultInFlightPerEndpoint = 4
)

// minLastAttempt is the least time left in the retry window for which a
// retry is still scheduled (at the window's end); with less, the delivery
// is given up.
const minLastAttempt = time.Second

// Dispatcher sends due webhook deliveries. Several may run against one
// store, in one process or many.
type Dispatcher struct {
	store  store.EventStore
	cfg    Config
	client *http.Client
}

// NewDispatcher returns a Dispatcher over s.
func NewDispatcher(s store.EventStore, cfg Config) *Dispatcher {
	if cfg.RetryWindow <= 0 {
		cfg.RetryWindow = DefaultRetryWindow
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Lease <= cfg.Timeout {
		cfg.Lease = cfg.Timeout + 5*time.Second
	}
	if cfg.BaseBackoff <= 0 {
		cfg.BaseBackoff = DefaultBaseBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 16
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.InFlightPerTenant == 0 {
		cfg.InFlightPerTenant = DefaultInFlightPerTenant
	}
	if cfg.InFlightPerEndpoint == 0 {
		cfg.InFlightPerEndpoint = DefaultInFlightPerEndpoint
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rt := cfg.Transport
	if rt == nil {
		d := &net.Dialer{Timeout: cfg.Timeout}
		if !cfg.AllowPrivate {
			d.Control = checkDial
		}
		// No proxy: a proxy would connect on our behalf, past the check.
		rt = &http.Transport{DialContext: d.DialContext, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: cfg.Timeout}
	}
	return &Dispatcher{store: s, cfg: cfg, client: &http.Client{
		Transport: rt,
		Timeout:   cfg.Timeout,
		// A redirect is not a delivery: the 3xx is retried like any other
		// non-2xx, and never followed to an address nobody checked.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// claim asks the store for at most limit due deliveries within the caps.
func (d *Dispatcher) claim(ctx context.Context, limit int) ([]event.Delivery, error) {
	return d.store.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: d.cfg.Lease, Limit: limit,
		PerTenant: max(d.cfg.InFlightPerTenant, 0), PerEndpoint: max(d.cfg.InFlightPerEndpoint, 0)})
}

// RunOnce leases at most Batch due deliveries (within the in-flight caps),
// sends them concurrently and records each outcome; it returns once all
// have finished, with how many it leased. Tests and tools step with it;
// orderd runs Run, whose deliveries never wait for one another.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	ds, err := d.claim(ctx, d.cfg.Batch)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ds))
	for i, del := range ds {
		wg.Go(func() { errs[i] = d.deliver(ctx, del) })
	}
	wg.Wait()
	return len(ds), errors.Join(errs...)
}

// Run delivers until ctx is done, with a pool of Workers slots: each
// claimed delivery runs in its own goroutine and frees its slot as soon as
// its outcome is recorded, so a hanging endpoint holds only its own slots
// (and at most InFlightPerTenant of them for its tenant), never a batch.
// It claims as many deliveries as slots are free (at most Batch) when a
// slot frees, after a claim that filled what it asked for, and every
// interval. Once ctx is done it stops claiming and returns when every
// delivery it started has finished (an attempt cut short by ctx is
// recorded as a retry).
func (d *Dispatcher) Run(ctx context.Context, interval time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	busy := make(chan struct{}, d.cfg.Workers) // one token per delivery in flight
	freed := make(chan struct{}, 1)
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if free := d.cfg.Workers - len(busy); free > 0 {
			want := min(free, d.cfg.Batch)
			ds, err := d.claim(ctx, want)
			if err != nil && ctx.Err() == nil {
				d.cfg.Logger.Warn("webhook claim failed; retrying", "err", err)
			}
			for _, del := range ds {
				busy <- struct{}{}
				wg.Go(func() {
					defer func() {
						<-busy
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					if err := d.deliver(ctx, del); err != nil && ctx.Err() == nil {
						d.cfg.Logger.Warn("webhook outcome not recorded", "endpoint_id", del.EndpointID, "event_id", del.EventID, "err", err)
					}
				})
			}
			if err == nil && len(ds) == want {
				continue // there may be more due: claim again at once
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-freed:
		}
	}
}

// deliver sends one delivery and records its outcome, fenced by its
// attempt number: a lease lost meanwhile (this instance was too slow and
// another took over) records nothing.
func (d *Dispatcher) deliver(ctx context.Context, del event.Delivery) error {
	code, retryAfter, err := d.send(ctx, del)
	now := d.cfg.Now()
	out := store.DeliveryOutcome{EndpointID: del.EndpointID, EventID: del.EventID, Attempts: del.Attempts,
		LastStatus: code}
	if err != nil {
		out.LastError = describeSendError(err)
		d.cfg.Logger.Info("webhook attempt failed", "endpoint_id", del.EndpointID, "event_id", del.EventID,
			"attempt", del.Attempts, "err", err)
	}
	switch {
	case err == nil && code >= 200 && code < 300:
		out.Status = event.DeliverySucceeded
	case code == http.StatusGone:
		out.Status, out.DisableEndpoint = event.DeliveryFailed, "the endpoint answered 410 Gone"
	default:
		if out.LastError == "" {
			out.LastError = "HTTP " + strconv.Itoa(code)
		}
		// The store schedules the retry on the database's clock; whether
		// it still falls in the retry window, which counts from the
		// event (days), is this instance's call. A wait past the
		// window's end (a long Retry-After, a backoff) is capped: the
		// last attempt is made at the window's end.
		out.Status, out.RetryIn = event.DeliveryPending, max(d.Backoff(del.Attempts), retryAfter)
		if left := del.CreatedAt.Add(d.cfg.RetryWindow).Sub(now); left < minLastAttempt {
			out.Status, out.RetryIn = event.DeliveryFailed, 0
		} else if out.RetryIn > left {
			out.RetryIn = left
		}
	}
	d.cfg.Logger.Debug("webhook delivery", "endpoint_id", del.EndpointID, "event_id", del.EventID,
		"attempt", del.Attempts, "status_code", code, "outcome", string(out.Status))
	return d.finish(context.WithoutCancel(ctx), out)
}

// finish records out, retrying while the store is unavailable (a busy
// SQLite file, a failover) for a few seconds: an outcome not recorded
// leaves the delivery in flight, holding its endpoint's and tenant's
// places, until its lease lapses, and is then sent again. A lease lost
// meanwhile records nothing (another instance took the delivery over).
func (d *Dispatcher) finish(ctx context.Context, out store.DeliveryOutcome) error {
	wait := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := d.store.FinishDelivery(ctx, out)
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			return nil
		case !errors.Is(err, store.ErrUnavailable) || attempt == 8:
			return err
		}
		time.Sleep(wait + rand.N(wait))
		wait *= 2
	}
}

// Backoff returns the full-jitter wait after attempt n (1-based): uniform
// in [0, min(MaxBackoff, BaseBackoff × 2^(n-1))).
func (d *Dispatcher) Backoff(n int) time.Duration {
	ceiling := d.cfg.MaxBackoff
	if n >= 1 && n < 40 {
		if c := d.cfg.BaseBackoff << (n - 1); c > 0 && c < ceiling {
			ceiling = c
		}
	}
	return rand.N(ceiling)
}

// send POSTs del and returns the status code (0 when no answer came) and
// the wait a 429 or 503 asked for with Retry-After.
func (d *Dispatcher) send(ctx context.Context, del event.Delivery) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Orderly-Webhooks/1")
	req.Header.Set(event.EventIDHeader, del.EventID)
	req.Header.Set(event.SignatureHeader, event.SignAll([]string{del.Secret, del.PreviousSecret}, d.cfg.Now(), del.Body))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, retryAfter(resp.Header.Get("Retry-After"), d.cfg.Now()), nil
}

// retryAfter parses a Retry-After value (RFC 9110 §10.2.3): delay seconds
// or an HTTP date. Unparseable or past values are zero.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
		return time.Duration(min(s, int64(365*24*3600))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
