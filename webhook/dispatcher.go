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
	// Batch is how many deliveries one pass leases and sends concurrently
	// (default 16).
	Batch int
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
)

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

// RunOnce leases at most Batch due deliveries, sends them concurrently and
// records each outcome. It returns how many it leased.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	ds, err := d.store.ClaimDeliveries(ctx, d.cfg.Lease, d.cfg.Batch)
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
		// event (days), is this instance's call.
		retryIn := max(d.Backoff(del.Attempts), retryAfter)
		if now.Add(retryIn).After(del.CreatedAt.Add(d.cfg.RetryWindow)) {
			out.Status = event.DeliveryFailed
		} else {
			out.Status, out.RetryIn = event.DeliveryPending, retryIn
		}
	}
	d.cfg.Logger.Debug("webhook delivery", "endpoint_id", del.EndpointID, "event_id", del.EventID,
		"attempt", del.Attempts, "status_code", code, "outcome", string(out.Status))
	err = d.store.FinishDelivery(context.WithoutCancel(ctx), out)
	if errors.Is(err, store.ErrLeaseLost) {
		return nil
	}
	return err
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
	req.Header.Set(event.SignatureHeader, event.Sign(del.Secret, d.cfg.Now(), del.Body))
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
