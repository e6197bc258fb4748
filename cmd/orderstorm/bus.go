package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/natsbus"
)

// BusConfig says where orderd takes its commands from.
type BusConfig struct {
	URL      string // nats:// URL on the loopback
	Root     string // the commands' subject root (orderd's -commands-subject-root)
	Tenant   string
	APIKey   string // the tenant's API key, which signs its commands (natsbus.Sign)
	Stream   string // orderd's -commands-stream; empty: the drain is not awaited
	Consumer string // orderd's -commands-consumer
}

// Bus publishes operations as JetStream commands, the way a publisher that
// resends does: every copy of one command carries the operation's key as
// Nats-Msg-Id.
type Bus struct {
	cfg BusConfig
	nc  *nats.Conn
	js  jetstream.JetStream

	commands  atomic.Int64 // operations sent as commands
	published atomic.Int64 // copies published
	accepted  atomic.Int64 // copies the stream took in (the rest it dropped as duplicates)
	late      atomic.Int64 // copies published after the command's outcome was read back
	twins     atomic.Int64 // commands raced by an HTTP twin
}

// BusTotals counts what the bus sent, for the results.
type BusTotals struct {
	Commands  int64 `json:"commands"`
	Published int64 `json:"copies_published"`
	Accepted  int64 `json:"copies_taken_in_by_the_stream"`
	Late      int64 `json:"late_redeliveries"`
	Twins     int64 `json:"raced_by_http_twin"`
	Drained   bool  `json:"consumer_drained"`
}

// NewBus connects to cfg.URL.
func NewBus(cfg BusConfig) (*Bus, error) {
	nc, err := nats.Connect(cfg.URL, nats.Name("orderstorm"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("-nats-url: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Bus{cfg: cfg, nc: nc, js: js}, nil
}

// Publish publishes one copy of op as a command.
func (b *Bus) Publish(ctx context.Context, op *book.Op) error {
	m := nats.NewMsg(natsbus.CommandSubject(b.cfg.Root, b.cfg.Tenant, op.Kind))
	m.Header.Set(nats.MsgIdHdr, op.Key)
	m.Header.Set(natsbus.OrderIDHeader, op.Order.ID())
	m.Data = op.Body
	natsbus.Sign(m, b.cfg.APIKey, time.Now())
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b.published.Add(1)
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		return err
	}
	if !ack.Duplicate {
		b.accepted.Add(1)
	}
	return nil
}

// Drained reports whether orderd's consumer has handled every command
// (none pending, none awaiting its acknowledgement).
func (b *Bus) Drained(ctx context.Context) (bool, error) {
	if b.cfg.Stream == "" {
		return true, nil
	}
	c, err := b.js.Consumer(ctx, b.cfg.Stream, b.cfg.Consumer)
	if err != nil {
		return false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}

// Totals returns the counters.
func (b *Bus) Totals() BusTotals {
	return BusTotals{Commands: b.commands.Load(), Published: b.published.Load(), Accepted: b.accepted.Load(),
		Late: b.late.Load(), Twins: b.twins.Load()}
}

// DeleteStream deletes the commands stream (the run's own).
func (b *Bus) DeleteStream(ctx context.Context) error {
	err := b.js.DeleteStream(ctx, b.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return err
}

// Close disconnects.
func (b *Bus) Close() { b.nc.Close() }

// awaitKeyCompleted polls the key's status on instance inst until it is
// completed, ctx ends, or limit passes.
func (s *Sender) awaitKeyCompleted(ctx context.Context, inst int, key string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if res, err := s.clients[inst].KeyStatus(ctx, key); err == nil && res.Value.State == client.KeyCompleted {
			return true
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return false
}
