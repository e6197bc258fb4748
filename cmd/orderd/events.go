package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/eventpub"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/webhook"
)

// EventsConfig configures webhook delivery and NATS JetStream publishing.
type EventsConfig struct {
	// WebhookAllowPrivate lets webhook endpoints target loopback, private
	// and link-local addresses.
	WebhookAllowPrivate bool
	// WebhookRetryWindow is how long a delivery is retried after its event.
	WebhookRetryWindow time.Duration
	// WebhookTimeout bounds one delivery attempt.
	WebhookTimeout time.Duration
	// WebhookInterval is how often due deliveries are looked for.
	WebhookInterval time.Duration
	// WebhookBackoff is the base of the exponential retry backoff.
	WebhookBackoff time.Duration
	// NATSURL, when set, publishes every event to NATS JetStream.
	NATSURL string
	// PublishInterval is how often new events are published to NATS.
	PublishInterval time.Duration
}

func (e *EventsConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&e.WebhookAllowPrivate, "webhook-allow-private", false, "let webhook endpoints target loopback, private and link-local addresses (tests, private networks)")
	fs.DurationVar(&e.WebhookRetryWindow, "webhook-retry-window", webhook.DefaultRetryWindow, "how long after its event a webhook delivery is retried")
	fs.DurationVar(&e.WebhookTimeout, "webhook-timeout", webhook.DefaultTimeout, "timeout of one webhook delivery attempt")
	fs.DurationVar(&e.WebhookInterval, "webhook-interval", time.Second, "how often due webhook deliveries are looked for")
	fs.DurationVar(&e.WebhookBackoff, "webhook-backoff", webhook.DefaultBaseBackoff, "base of the exponential backoff (full jitter) between webhook attempts")
	fs.StringVar(&e.NATSURL, "nats-url", "", "NATS server URL; when set, every event is published to JetStream subject orderly.<tenant>.<type>")
	fs.DurationVar(&e.PublishInterval, "publish-interval", 200*time.Millisecond, "how often new events are published to NATS JetStream")
}

func (e *EventsConfig) check() error {
	if e.WebhookRetryWindow <= 0 || e.WebhookTimeout <= 0 || e.WebhookInterval <= 0 || e.WebhookBackoff <= 0 || e.PublishInterval <= 0 {
		return errors.New("-webhook-retry-window, -webhook-timeout, -webhook-interval, -webhook-backoff and -publish-interval must be positive")
	}
	return nil
}

// startEvents starts the webhook dispatcher and, with a NATS URL, the
// JetStream publisher, as background workers (stopped, and waited for, with
// the completer and the sweeper); it returns the endpoints the API serves.
func startEvents(b *background, c EventsConfig, st store.Store, log *slog.Logger) (*webhook.Endpoints, error) {
	es, ok := st.(store.EventStore)
	if !ok {
		return nil, errors.New("the store keeps no events")
	}
	d := webhook.NewDispatcher(es, webhook.Config{AllowPrivate: c.WebhookAllowPrivate, RetryWindow: c.WebhookRetryWindow,
		Timeout: c.WebhookTimeout, BaseBackoff: c.WebhookBackoff, Logger: log})
	drainEvery(b, c.WebhookInterval, d.RunOnce, log.With("worker", "webhooks"))
	if c.NATSURL != "" {
		nc, err := nats.Connect(c.NATSURL, nats.Name("orderd"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
		if err != nil {
			return nil, fmt.Errorf("-nats-url (ORDERD_NATS_URL): %w", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("-nats-url (ORDERD_NATS_URL): %w", err)
		}
		host, _ := os.Hostname()
		p := &eventpub.Publisher{Store: es, JS: js, Holder: host + "/" + uuid.NewString()}
		drainEvery(b, c.PublishInterval, p.RunOnce, log.With("worker", "nats"))
		b.wg.Go(func() {
			<-b.ctx.Done()
			nc.Close()
		})
		log.Info("publishing events to NATS JetStream", "subjects", eventpub.SubjectPrefix+"<tenant>.<type>")
	}
	return &webhook.Endpoints{Store: es, AllowPrivate: c.WebhookAllowPrivate}, nil
}

// drainEvery runs pass every interval until ctx ends; a pass that did
// something (n > 0) is followed at once by another, at most 100 in a row.
func drainEvery(b *background, interval time.Duration, pass func(context.Context) (int, error), log *slog.Logger) {
	b.every(interval, func(ctx context.Context) {
		for range 100 {
			n, err := pass(ctx)
			if err != nil && ctx.Err() == nil {
				log.Warn("event pass failed; retrying", "err", err)
			}
			if n == 0 || err != nil {
				return
			}
		}
	})
}
