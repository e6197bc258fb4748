package paysim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/orderly/orderly/paysim/paysimwire"
	"github.com/orderly/orderly/paysim/testmode"
)

// The webhook wire format and its signature are package paysimwire's.
const (
	// SignatureHeader is paysimwire.SignatureHeader.
	SignatureHeader = paysimwire.SignatureHeader
	// DefaultSignatureTolerance is paysimwire.DefaultSignatureTolerance.
	DefaultSignatureTolerance = paysimwire.DefaultSignatureTolerance
	// Webhook event types.
	EventChargeSucceeded = paysimwire.EventChargeSucceeded
	EventChargeFailed    = paysimwire.EventChargeFailed
	EventRefundSucceeded = paysimwire.EventRefundSucceeded
	EventRefundFailed    = paysimwire.EventRefundFailed
)

// ErrSignature is paysimwire.ErrSignature.
var ErrSignature = paysimwire.ErrSignature

// Sign is paysimwire.Sign.
func Sign(secret []byte, t time.Time, body []byte) string { return paysimwire.Sign(secret, t, body) }

// VerifySignature is paysimwire.VerifySignature.
func VerifySignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	return paysimwire.VerifySignature(secret, header, body, now, tolerance)
}

// CheckSignatureHeader is paysimwire.CheckSignatureHeader.
func CheckSignatureHeader(header string, now time.Time, tolerance time.Duration) error {
	return paysimwire.CheckSignatureHeader(header, now, tolerance)
}

// WebhookFaults are the fault knobs of webhook delivery. The zero value
// delivers each event once, at once, in order of the outcomes.
type WebhookFaults struct {
	// DuplicateRate is the fraction of events delivered twice (two
	// independent deliveries of the same event id).
	DuplicateRate float64
	// DropRate is the fraction of events never delivered (lost).
	DropRate float64
	// Delay holds every delivery this long before its first try (late
	// webhooks: after the HTTP call that caused them has finished).
	Delay time.Duration
	// ReorderWindow adds a uniform random extra delay in [0, ReorderWindow)
	// to every delivery, so later events overtake earlier ones.
	ReorderWindow time.Duration
	// Seed seeds the draws of the rates and of ReorderWindow.
	Seed uint64
}

// Validate reports whether f is usable.
func (f WebhookFaults) Validate() error {
	if f.DuplicateRate < 0 || f.DuplicateRate > 1 || f.DropRate < 0 || f.DropRate > 1 {
		return errors.New("paysim: webhook duplicate and drop rates must be in [0, 1]")
	}
	if f.Delay < 0 || f.Delay > MaxDelay || f.ReorderWindow < 0 || f.ReorderWindow > MaxDelay {
		return fmt.Errorf("paysim: webhook delay and reorder window must be in [0, %s]", MaxDelay)
	}
	return nil
}

// WebhookConfig configures webhook delivery. An empty URL sends none.
type WebhookConfig struct {
	// URL receives every event as a POST of its JSON.
	URL string
	// Secret signs every delivery (SignatureHeader).
	Secret []byte
	// Faults are the delivery faults.
	Faults WebhookFaults
	// RetryFor bounds how long one delivery is retried (default 10m): any
	// answer but a 2xx, or no answer, is retried with exponential backoff
	// and full jitter (Retry-After honoured).
	RetryFor time.Duration
	// Client sends the deliveries (default: a client with a 10s timeout).
	Client *http.Client
}

// webhooks delivers events at least once, in the background.
type webhooks struct {
	cfg  WebhookConfig
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup

	mu  sync.Mutex
	rng *rand.Rand
	// counters, reported in Stats.Webhooks
	stats WebhookStats
}

// WebhookStats counts webhook deliveries.
type WebhookStats struct {
	Events     int64 `json:"events"`
	Dropped    int64 `json:"dropped"`
	Duplicated int64 `json:"duplicated"`
	Delivered  int64 `json:"delivered"`
	Failed     int64 `json:"failed_tries"`
	GaveUp     int64 `json:"gave_up"`
}

func newWebhooks(c WebhookConfig, log *slog.Logger, stop chan struct{}) *webhooks {
	if c.RetryFor <= 0 {
		c.RetryFor = 10 * time.Minute
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return &webhooks{cfg: c, log: log, stop: stop, rng: rand.New(rand.NewPCG(c.Faults.Seed, 0x77686b))}
}

// emit schedules the delivery of an event about obj, of type typ.
func (h *webhooks) emit(typ string, data WebhookData) {
	if h == nil || h.cfg.URL == "" {
		return
	}
	ev := WebhookEvent{ID: testmode.NewID("evt"), Type: typ, Created: time.Now().Unix(), Data: data}
	body, err := json.Marshal(ev)
	if err != nil {
		h.log.Error("webhook: encode", "err", err)
		return
	}
	f := h.cfg.Faults
	h.mu.Lock()
	h.stats.Events++
	copies := 1
	if h.rng.Float64() < f.DropRate {
		copies = 0
		h.stats.Dropped++
	} else if h.rng.Float64() < f.DuplicateRate {
		copies = 2
		h.stats.Duplicated++
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		delays[i] = f.Delay
		if f.ReorderWindow > 0 {
			delays[i] += time.Duration(h.rng.Int64N(int64(f.ReorderWindow)))
		}
	}
	h.mu.Unlock()
	for _, d := range delays {
		h.wg.Go(func() { h.deliver(body, d) })
	}
}

// deliver posts body after delay, retrying until a 2xx, RetryFor, or stop.
func (h *webhooks) deliver(body []byte, delay time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.RandomizationFactor = 100*time.Millisecond, 5*time.Second, 1
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := h.post(ctx, body)
		if err != nil {
			h.mu.Lock()
			h.stats.Failed++
			h.mu.Unlock()
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(h.cfg.RetryFor))
	h.mu.Lock()
	if err == nil {
		h.stats.Delivered++
	} else {
		h.stats.GaveUp++
	}
	h.mu.Unlock()
}

func (h *webhooks) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return backoff.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(h.cfg.Secret, time.Now(), body))
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		return backoff.RetryAfter(min(s, 60))
	}
	return fmt.Errorf("webhook answered %d", resp.StatusCode)
}

// snapshot returns the counters.
func (h *webhooks) snapshot() WebhookStats {
	if h == nil {
		return WebhookStats{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}
