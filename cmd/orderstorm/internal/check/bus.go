package check

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
)

// Anomaly kinds of bus commands.
const (
	// AnomalyBusNotApplied: a bus command's outcome, read back over HTTP
	// with its key once the key was completed, was not a replay: the
	// command had not taken effect (or the read-back took effect again).
	AnomalyBusNotApplied = "bus_command_not_applied"
	// AnomalyDeclineEffects: an order's order.payment_failed events are
	// not one per declined pay key: a decline took effect twice (a
	// redelivered command or request run again), or without its key.
	AnomalyDeclineEffects = "decline_effect_count"
	// AnomalyBusNotDrained: orderd's consumer still held commands (pending
	// or unacknowledged) after the settle time.
	AnomalyBusNotDrained = "bus_not_drained"
)

// BusReport counts what the bus check looked at.
type BusReport struct {
	// SweptDeclinedKeys counts declined keyless pays whose derived key was
	// old enough to be swept and was: their event is counted without it.
	SweptDeclinedKeys int `json:"swept_declined_keys"`
	Commands          int `json:"commands"`
	ReadBack          int `json:"read_back"`
	Twinned           int `json:"raced_by_http_twin"`
	DeclinedKeys      int `json:"declined_pay_keys"`
	DeclineEvents     int `json:"payment_failed_events"`
}

// CheckBus checks that every bus command took effect exactly once: its
// outcome, read back over HTTP with its key, is a replay (unless an HTTP
// twin raced it, when the answers' own checks apply: one original at most,
// every answer the same outcome); and, for every order of the run, each
// declined pay key has exactly one order.payment_failed event (a decline
// is the one effect that a second run of a command would add as a new
// change rather than a no-op).
func (c *Checker) CheckBus(ctx context.Context, b *book.Book, rep *Report) (BusReport, error) {
	var br BusReport
	for _, op := range b.AllOps() {
		if !op.Bus {
			continue
		}
		br.Commands++
		twinned := false
		var readback *book.Obs
		for _, ob := range op.Observations() {
			switch {
			case ob.Via == book.ViaBusTwin:
				twinned = true
			case ob.Via == book.ViaBus && ob.Definitive && readback == nil:
				readback = &ob
			}
		}
		if twinned {
			br.Twinned++
		}
		if readback == nil {
			continue // no definitive read-back: the reconcile and the answer checks cover it
		}
		br.ReadBack++
		if !twinned && !readback.Replayed {
			rep.Add(AnomalyBusNotApplied, describeKey(op), "%s %s: the read-back after the key completed was answered %s, not as a replay",
				op.Kind, op.Order.ID(), readback.Outcome())
		}
	}

	// One pass over each table (the tenant's rows), kept for the run's
	// orders.
	orders, err := c.runOrders(ctx, b)
	if err != nil {
		return br, err
	}
	counts := func(query string) (map[string]int, error) {
		rows, err := c.DB.QueryContext(ctx, c.DB.q(query), b.Tenant)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return nil, err
			}
			if _, ours := orders[id]; ours {
				out[id] = n
			}
		}
		return out, rows.Err()
	}
	events, err := counts(`SELECT order_id, count(*) FROM order_events
		WHERE tenant_id = $1 AND type = 'order.payment_failed' GROUP BY order_id`)
	if err != nil {
		return br, fmt.Errorf("reading payment_failed events: %w", err)
	}
	// The declined keys, by order; and the declined keyless pays whose
	// derived key orderd may have swept (ORDERD_IDEMPOTENCY_DERIVED_TTL):
	// each still had its one event.
	keys := map[string]int{}
	declined := map[string]bool{}
	rows, err := c.DB.QueryContext(ctx, c.DB.q(`SELECT key_hash, resource_id FROM idempotency_keys
		WHERE tenant_id = $1 AND error_code = 'payment_declined' AND resource_id IS NOT NULL`), b.Tenant)
	if err != nil {
		return br, fmt.Errorf("reading declined keys: %w", err)
	}
	for rows.Next() {
		var h, id string
		if err := rows.Scan(&h, &id); err != nil {
			rows.Close()
			return br, err
		}
		if _, ours := orders[id]; ours {
			keys[id]++
			declined[h] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return br, err
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	swept := map[string]int{}
	for _, op := range b.AllOps() {
		first, ok := op.Definitive()
		if !ok || op.Keyed || op.Kind != book.KindPay || first.Status != http.StatusPaymentRequired ||
			c.DerivedTTL <= 0 || now().Sub(first.At) <= c.DerivedTTL-time.Minute {
			continue
		}
		if declined[op.KeyHash] || slices.ContainsFunc(op.AltKeyHashes, func(h string) bool { return declined[h] }) {
			continue
		}
		swept[op.Order.ID()]++
		br.SweptDeclinedKeys++
	}
	for id, n := range keys {
		br.DeclinedKeys += n
		if want := n + swept[id]; events[id] != want {
			rep.Add(AnomalyDeclineEffects, id, "%d declined pay keys (%d more swept), %d order.payment_failed events", n, swept[id], events[id])
		}
	}
	for id, n := range events {
		br.DeclineEvents += n
		if _, ok := keys[id]; !ok && swept[id] != n {
			rep.Add(AnomalyDeclineEffects, id, "%d order.payment_failed events, no declined pay key (%d declined keyless pays whose derived key was swept)", n, swept[id])
		}
	}
	for id, n := range swept {
		if _, ok := keys[id]; !ok && events[id] == 0 {
			rep.Add(AnomalyDeclineEffects, id, "%d declined keyless pays, no order.payment_failed event", n)
		}
	}
	return br, nil
}
