package check

import (
	"context"
	"fmt"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/hooks"
)

// Webhook and outbox anomalies.
const (
	AnomalyEventMissing      = "event_missing"          // an order's version has no event in the outbox (a change without its event)
	AnomalyEventPhantom      = "event_without_change"   // an outbox event past the order's version, or twice for one version
	AnomalyWebhookMissing    = "webhook_not_delivered"  // a state change never reached the webhook receiver
	AnomalyWebhookPhantom    = "webhook_unknown_event"  // a delivered event the outbox does not hold as sent
	AnomalyWebhookSignature  = "webhook_bad_signature"  // a delivery whose signature does not verify
	AnomalyWebhookOutOfOrder = "webhook_out_of_order"   // an order's event delivered after a later one of it
	AnomalyWebhookState      = "webhook_state_mismatch" // the last delivered event's order disagrees with the database
)

// WebhookReport counts what the webhook check looked at.
type WebhookReport struct {
	// Changes is the sum of the run's orders' versions: one event each.
	Changes int64 `json:"changes"`
	Events  int   `json:"events"`
	// Delivered counts the outbox events received at least once.
	Delivered  int `json:"events_delivered"`
	Deliveries int `json:"deliveries"`
	Redelivery int `json:"redeliveries"`
}

type outboxEvent struct {
	id   string
	seen int
}

type orderVersion struct {
	version int64
	state   string
}

// RunOrders returns the run's orders (id → version and state).
func (c *Checker) runOrders(ctx context.Context, b *book.Book) (map[string]orderVersion, error) {
	rows, err := c.DB.QueryContext(ctx, c.DB.q(`SELECT id, version, state FROM orders
		WHERE tenant_id = $1 AND customer_id LIKE $2 ESCAPE '\'`), b.Tenant, escapeLike(b.MarkerPrefix())+"%")
	if err != nil {
		return nil, fmt.Errorf("reading orders: %w", err)
	}
	defer rows.Close()
	out := map[string]orderVersion{}
	for rows.Next() {
		var id string
		var v orderVersion
		if err := rows.Scan(&id, &v.version, &v.state); err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, rows.Err()
}

// CheckWebhooks checks the outbox and what the webhook receiver got, for
// the run's orders: every version of every order has exactly one event in
// the outbox and nothing more (never a change without its event nor an
// event without its change); every event was delivered at least once, with
// a valid signature, never after a later event of its order; nothing was
// delivered that the outbox does not hold; and the last delivered event of
// each order carries the order as the database has it.
func (c *Checker) CheckWebhooks(ctx context.Context, b *book.Book, got []hooks.Delivery, rep *Report) (WebhookReport, error) {
	var wr WebhookReport
	orders, err := c.runOrders(ctx, b)
	if err != nil {
		return wr, err
	}
	// The tenant's outbox in one pass, kept for the run's orders.
	rows, err := c.DB.QueryContext(ctx, c.DB.q(`SELECT id, order_id, sequence FROM order_events WHERE tenant_id = $1`), b.Tenant)
	if err != nil {
		return wr, fmt.Errorf("reading the outbox: %w", err)
	}
	outbox := map[string]map[int64]*outboxEvent{}
	for rows.Next() {
		var id, orderID string
		var seq int64
		if err := rows.Scan(&id, &orderID, &seq); err != nil {
			rows.Close()
			return wr, err
		}
		if _, ours := orders[orderID]; !ours {
			continue
		}
		wr.Events++
		if outbox[orderID] == nil {
			outbox[orderID] = map[int64]*outboxEvent{}
		}
		if _, dup := outbox[orderID][seq]; dup {
			rep.Add(AnomalyEventPhantom, orderID, "two events for sequence %d", seq)
		}
		outbox[orderID][seq] = &outboxEvent{id: id}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wr, err
	}
	for id, o := range orders {
		wr.Changes += o.version
		for s := int64(1); s <= o.version; s++ {
			if outbox[id][s] == nil {
				rep.Add(AnomalyEventMissing, id, "version %d (of %d) has no event", s, o.version)
			}
		}
		for s := range outbox[id] {
			if s > o.version {
				rep.Add(AnomalyEventPhantom, id, "event for sequence %d, the order is at version %d", s, o.version)
			}
		}
	}

	last := map[string]int64{}
	lastState := map[string]string{}
	for _, d := range got {
		e := d.Event
		o, ours := orders[e.OrderID]
		if !ours {
			continue // another run's order, or not a storm order
		}
		wr.Deliveries++
		if !d.SigValid || !d.HeaderOK {
			rep.Add(AnomalyWebhookSignature, e.ID, "signature valid %v, Orderly-Event-Id matches %v", d.SigValid, d.HeaderOK)
		}
		ob := outbox[e.OrderID][e.Sequence]
		if ob == nil || ob.id != e.ID || e.Sequence > o.version {
			rep.Add(AnomalyWebhookPhantom, e.ID, "delivered %s for %s sequence %d, which the outbox does not hold", e.Type, e.OrderID, e.Sequence)
			continue
		}
		if ob.seen++; ob.seen > 1 {
			wr.Redelivery++
		}
		if e.Sequence < last[e.OrderID] {
			rep.Add(AnomalyWebhookOutOfOrder, e.OrderID, "sequence %d delivered after %d", e.Sequence, last[e.OrderID])
		}
		if e.Sequence >= last[e.OrderID] {
			last[e.OrderID], lastState[e.OrderID] = e.Sequence, string(e.Order.State)
		}
	}
	for id, o := range orders {
		for s := int64(1); s <= o.version; s++ {
			if ob := outbox[id][s]; ob != nil && ob.seen == 0 {
				rep.Add(AnomalyWebhookMissing, id, "event %d (%s) never delivered", s, ob.id)
			} else if ob != nil {
				wr.Delivered++
			}
		}
		if last[id] == o.version && lastState[id] != o.state {
			rep.Add(AnomalyWebhookState, id, "the last event carries %s, the order is %s", lastState[id], o.state)
		}
	}
	return wr, nil
}

// WebhooksSettled reports whether every version of every run order has
// been delivered at least once (the storm waits for it before checking).
func (c *Checker) WebhooksSettled(ctx context.Context, b *book.Book, got []hooks.Delivery) (bool, error) {
	orders, err := c.runOrders(ctx, b)
	if err != nil {
		return false, err
	}
	seen := map[string]map[int64]bool{}
	for _, d := range got {
		if seen[d.Event.OrderID] == nil {
			seen[d.Event.OrderID] = map[int64]bool{}
		}
		seen[d.Event.OrderID][d.Event.Sequence] = true
	}
	for id, o := range orders {
		for s := int64(1); s <= o.version; s++ {
			if !seen[id][s] {
				return false, nil
			}
		}
	}
	return true, nil
}
