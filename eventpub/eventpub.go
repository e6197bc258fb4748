// Package eventpub publishes the outbox (package event) to NATS JetStream:
// every event goes to subject orderly.<tenant>.events.<event type> with header
// Nats-Msg-Id set to the event id, so a stream's duplicate window drops a
// message published twice (after a crash between publishing and recording
// progress, or by two instances around a lease takeover).
//
// A Publisher follows the feed (store.EventStore.ListEvents, oldest first)
// from a cursor kept in the store under a lease, so one instance at a time
// publishes and a crashed instance's successor resumes where the cursor
// stands; the cursor moves only after JetStream acknowledged the events
// before it: at least once.
package eventpub

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/store"
)

// CursorName is the name of the Publisher's cursor in the store.
const CursorName = "nats-jetstream"

// SubjectPrefix starts every subject an event is published to.
const SubjectPrefix = "orderly."

// EventsToken is the subject token after the tenant of every event:
// orderly.<tenant>.events.<type>. The commands of package natsbus have
// "commands" there, so a stream over orderly.*.events.> (StreamSubjects)
// never overlaps the commands stream (orderly.*.commands.*), whatever the
// tenants are called.
const EventsToken = "events"

// StreamSubjects is the subject filter of a stream holding every tenant's
// events and nothing else: orderly.*.events.>.
const StreamSubjects = SubjectPrefix + "*." + EventsToken + ".>"

// Subject returns the subject of an event of type t for tenant:
// orderly.<tenant>.events.<type>. Tenant names are one subject token
// (admission.ValidTenant, checked when orderd starts); characters a token
// may not hold (whitespace, '.', '*', '>') would become '_' all the same.
func Subject(tenant string, t event.Type) string {
	tok := strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f:
			return '_'
		}
		return r
	}, tenant)
	return SubjectPrefix + tok + "." + EventsToken + "." + string(t)
}

// Publisher publishes events to JetStream.
type Publisher struct {
	Store store.EventStore
	JS    jetstream.JetStream
	// Holder names this instance for the cursor's lease.
	Holder string
	// Lease is how long one pass holds the cursor (default 30s), from the
	// database's clock, which decides when it has run out.
	Lease time.Duration
	// Batch is how many events one pass publishes (default 100).
	Batch int
}

func (p *Publisher) defaults() {
	if p.Lease <= 0 {
		p.Lease = 30 * time.Second
	}
	if p.Batch <= 0 {
		p.Batch = 100
	}
}

// RunOnce publishes up to Batch events after the cursor, if this instance
// holds (or can take) the cursor's lease, and returns how many it
// published. Each publish waits for JetStream's acknowledgement; the
// cursor then moves past it.
func (p *Publisher) RunOnce(ctx context.Context) (int, error) {
	p.defaults()
	cursor, held, err := p.Store.LeaseCursor(ctx, CursorName, p.Holder, p.Lease)
	if err != nil || !held {
		return 0, err
	}
	evs, err := p.Store.ListEvents(ctx, "", event.Filter{After: cursor, Limit: p.Batch})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ev := range evs {
		msg := &nats.Msg{Subject: Subject(ev.TenantID, ev.Type), Data: ev.Body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, ev.ID)
		// A PubAck.Duplicate is this event published before (a crash
		// between publishing and advancing the cursor, or a lease
		// takeover), never a forgery: an event id is a UUIDv7 (74 random
		// bits), which nobody can publish ahead of it.
		if _, err := p.JS.PublishMsg(ctx, msg); err != nil {
			if n > 0 {
				err = errJoin(err, p.Store.AdvanceCursor(ctx, CursorName, p.Holder, evs[n-1].Cursor))
			}
			return n, fmt.Errorf("eventpub: publish %s: %w", ev.ID, err)
		}
		n++
	}
	if n > 0 {
		return n, p.Store.AdvanceCursor(ctx, CursorName, p.Holder, evs[n-1].Cursor)
	}
	return 0, nil
}

func errJoin(a, b error) error {
	if b == nil {
		return a
	}
	return fmt.Errorf("%w (and recording progress: %v)", a, b)
}
