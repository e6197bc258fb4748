package stripesim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/orderly/orderly/paysim"
)

// SignatureHeader carries a webhook's signature, as Stripe signs:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">", one v1 per
// configured secret (several while a secret rotates).
// docs.stripe.com/webhooks#verify-manually; stripe-go's webhook package
// verifies it.
const SignatureHeader = "Stripe-Signature"

// WebhookConfig configures event delivery; an empty URL sends none.
type WebhookConfig struct {
	// URL receives every event as a POST of its JSON.
	URL string
	// Secrets sign every delivery, one v1 each (whsec_… strings are used
	// as they are, as Stripe does).
	Secrets []string
	// Faults duplicate, drop, delay and reorder deliveries.
	Faults paysim.WebhookFaults
	// RetryFor bounds the retries of one delivery (default 10m).
	RetryFor time.Duration
	// Client sends the deliveries (default: 10s timeout).
	Client *http.Client
}

// Sign returns the Stripe-Signature value of body at t, one v1 per secret.
func Sign(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	parts := []string{"t=" + ts}
	for _, s := range secrets {
		m := hmac.New(sha256.New, []byte(s))
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		parts = append(parts, "v1="+hex.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(parts, ",")
}

type event struct {
	typ string
	obj any
	key string
	at  time.Time
}

// eventJSON is Stripe's Event object (docs.stripe.com/api/events/object).
type eventJSON struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	APIVersion string `json:"api_version"`
	Created    int64  `json:"created"`
	Data       struct {
		Object any `json:"object"`
	} `json:"data"`
	Livemode        bool `json:"livemode"`
	PendingWebhooks int  `json:"pending_webhooks"`
	Request         struct {
		ID             *string `json:"id"`
		IdempotencyKey *string `json:"idempotency_key"`
	} `json:"request"`
	Type string `json:"type"`
}

type webhooks struct {
	cfg  WebhookConfig
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	rng   *rand.Rand
	stats paysim.WebhookStats
}

func newWebhooks(c WebhookConfig, log *slog.Logger, stop chan struct{}) *webhooks {
	if c.RetryFor <= 0 {
		c.RetryFor = 10 * time.Minute
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return &webhooks{cfg: c, log: log, stop: stop, rng: rand.New(rand.NewPCG(c.Faults.Seed, 0x73747268))}
}

func (h *webhooks) emit(ev event) {
	if h.cfg.URL == "" {
		return
	}
	var e eventJSON
	e.ID, e.Object, e.APIVersion, e.Created, e.Type, e.PendingWebhooks = newID("evt"), "event", APIVersion, ev.at.Unix(), ev.typ, 1
	e.Data.Object = ev.obj
	if ev.key != "" {
		e.Request.IdempotencyKey = &ev.key
	}
	body, err := json.Marshal(e)
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
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set(SignatureHeader, Sign(h.cfg.Secrets, time.Now(), body))
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return fmt.Errorf("webhook answered %d", resp.StatusCode)
}

func (h *webhooks) snapshot() paysim.WebhookStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}
