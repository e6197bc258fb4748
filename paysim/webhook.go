package paysim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/orderly/orderly/paysim/testmode"
)

// SignatureHeader carries a webhook's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the shared
// secret>" (the Stripe scheme). Several v1 values may appear while a secret
// is rotated; one matching is enough.
const SignatureHeader = "Paysim-Signature"

// DefaultSignatureTolerance is how old (or how far ahead) a signature's
// timestamp may be before VerifySignature refuses it as a replay.
const DefaultSignatureTolerance = 5 * time.Minute

// Webhook event types.
const (
	EventChargeSucceeded = "charge.succeeded"
	EventChargeFailed    = "charge.failed"
	EventRefundSucceeded = "refund.succeeded"
)

// WebhookEvent is the body of a webhook: a provider event id (unique, the
// same on every delivery of the event), its type, when it happened, and the
// object it is about. Data.IdempotencyKey is the key the client sent with
// the call that made the object, so the client finds its own record.
type WebhookEvent struct {
	ID      string      `json:"id"`
	Type    string      `json:"type"`
	Created int64       `json:"created"`
	Data    WebhookData `json:"data"`
}

// WebhookData is the object a WebhookEvent is about. Amount is in minor
// units of Currency (empty for a refund).
type WebhookData struct {
	ObjectID       string `json:"object_id"`
	IdempotencyKey string `json:"idempotency_key"`
	OrderID        string `json:"order_id,omitempty"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency,omitempty"`
	DeclineCode    string `json:"decline_code,omitempty"`
}

// Sign returns the SignatureHeader value of body signed with secret at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// ErrSignature is returned by VerifySignature for a missing, malformed,
// wrong or stale signature.
var ErrSignature = errors.New("paysim: webhook signature does not verify")

// VerifySignature checks header, a SignatureHeader value, against body and
// secret: one v1 must be the HMAC-SHA256 of "<t>.<body>" (compared in
// constant time) and t must be within tolerance of now (a replayed old
// delivery is refused). Errors wrap ErrSignature.
func VerifySignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := parseSignature(header, now, tolerance)
	if err != nil {
		return err
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrSignature)
}

// CheckSignatureHeader checks what VerifySignature can check without the
// body: that header has the shape t=<unix seconds>,v1=<hex>[,v1=…] and its
// timestamp is within tolerance of now. A receiver calls it before it reads
// a body, so a sender without a fresh signature cannot make it read one.
// Errors wrap ErrSignature.
func CheckSignatureHeader(header string, now time.Time, tolerance time.Duration) error {
	_, _, err := parseSignature(header, now, tolerance)
	return err
}

// parseSignature returns the timestamp and the v1 signatures of header,
// or an error wrapping ErrSignature when it is malformed or its timestamp
// is outside tolerance of now.
func parseSignature(header string, now time.Time, tolerance time.Duration) (string, [][]byte, error) {
	if len(header) > maxSignatureHeader {
		return "", nil, fmt.Errorf("%w: the header is longer than %d bytes", ErrSignature, maxSignatureHeader)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
		case k == "t":
			ts = v
		case k == "v1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return "", nil, fmt.Errorf("%w: want t=<unix seconds>,v1=<hex>", ErrSignature)
	}
	if age := now.Sub(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return "", nil, fmt.Errorf("%w: timestamp %d is outside the tolerance of %s", ErrSignature, sec, tolerance)
	}
	return ts, sigs, nil
}

// maxSignatureHeader bounds the signature header VerifySignature parses
// (a timestamp and a few signatures while a secret rotates).
const maxSignatureHeader = 1024

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
