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
	// WebhookWorkers is how many deliveries one instance sends at once;
	// WebhookInFlightPerTenant and WebhookInFlightPerEndpoint cap one
	// tenant's, and one endpoint's, across instances (0: no cap);
	// WebhookEndpointsPerTenant caps each tenant's endpoints (0: no cap).
	WebhookWorkers             int
	WebhookInFlightPerTenant   int
	WebhookInFlightPerEndpoint int
	WebhookEndpointsPerTenant  int
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
	fs.IntVar(&e.WebhookWorkers, "webhook-workers", webhook.DefaultWorkers, "webhook deliveries one instance sends at once, each freeing its slot when done")
	fs.IntVar(&e.WebhookInFlightPerTenant, "webhook-in-flight-per-tenant", webhook.DefaultInFlightPerTenant, "webhook deliveries one tenant may have in flight at once, all instances together; 0 turns the cap off")
	fs.IntVar(&e.WebhookInFlightPerEndpoint, "webhook-in-flight-per-endpoint", webhook.DefaultInFlightPerEndpoint, "webhook deliveries one endpoint may have in flight at once, all instances together; 0 turns the cap off")
	fs.IntVar(&e.WebhookEndpointsPerTenant, "webhook-endpoints-per-tenant", webhook.DefaultEndpointsPerTenant, "webhook endpoints one tenant may register (one more is a 409 limit_reached); 0 turns the cap off")
	fs.StringVar(&e.NATSURL, "nats-url", "", "NATS server URL; when set, every event is published to JetStream subject orderly.<tenant>.events.<type> (a stream over orderly.*.events.> holds them)")
	fs.DurationVar(&e.PublishInterval, "publish-interval", 200*time.Millisecond, "how often new events are published to NATS JetStream")
}

func (e *EventsConfig) check() error {
	if e.WebhookRetryWindow <= 0 || e.WebhookTimeout <= 0 || e.WebhookInterval <= 0 || e.WebhookBackoff <= 0 || e.PublishInterval <= 0 {
		return errors.New("-webhook-retry-window, -webhook-timeout, -webhook-interval, -webhook-backoff and -publish-interval must be positive")
	}
	if e.WebhookWorkers < 1 || e.WebhookWorkers > 10000 {
		return fmt.Errorf("-webhook-workers (ORDERD_WEBHOOK_WORKERS) must be from 1 to 10000, not %d", e.WebhookWorkers)
	}
	for _, c := range []struct {
		flag string
		v    int
	}{
		{"webhook-in-flight-per-tenant", e.WebhookInFlightPerTenant},
		{"webhook-in-flight-per-endpoint", e.WebhookInFlightPerEndpoint},
		{"webhook-endpoints-per-tenant", e.WebhookEndpointsPerTenant},
	} {
		if c.v < 0 {
			return fmt.Errorf("-%s (%s) must be 0 (no cap) or positive, not %d", c.flag, envName(c.flag), c.v)
		}
	}
	return nil
}

// dispatcherConfig is the webhook dispatcher's configuration from e (0,
// no cap, is -1 for webhook.Config).
func (e *EventsConfig) dispatcherConfig(log *slog.Logger) webhook.Config {
	noCap := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	return webhook.Config{AllowPrivate: e.WebhookAllowPrivate, RetryWindow: e.WebhookRetryWindow,
		Timeout: e.WebhookTimeout, BaseBackoff: e.WebhookBackoff, Logger: log, Workers: e.WebhookWorkers,
		InFlightPerTenant: noCap(e.WebhookInFlightPerTenant), InFlightPerEndpoint: noCap(e.WebhookInFlightPerEndpoint)}
}

// startEvents starts the webhook dispatcher and, with a NATS URL, the
// JetStream publisher, as background workers (stopped, and waited for, with
// the completer and the sweeper); it returns the endpoints the API serves.
func startEvents(b *background, c EventsConfig, st store.Store, log *slog.Logger) (*webhook.Endpoints, error) {
	es, ok := st.(store.EventStore)
	if !ok {
		return nil, errors.New("the store keeps no events")
	}
	d := webhook.NewDispatcher(es, c.dispatcherConfig(log.With("worker", "webhooks")))
	b.wg.Go(func() { d.Run(b.ctx, c.WebhookInterval) })
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
		log.Info("publishing events to NATS JetStream", "subjects", eventpub.SubjectPrefix+"<tenant>."+eventpub.EventsToken+".<type>", "stream_subjects", eventpub.StreamSubjects)
	}
	return &webhook.Endpoints{Store: es, AllowPrivate: c.WebhookAllowPrivate, MaxPerTenant: c.WebhookEndpointsPerTenant,
		AllowPrivateSetting: "ORDERD_WEBHOOK_ALLOW_PRIVATE=true"}, nil
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
