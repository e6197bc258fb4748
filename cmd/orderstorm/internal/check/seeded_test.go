package check

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/hooks"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
)

// events writes one outbox event per sequence of seqs for order id, and
// returns the deliveries of those in delivered (by sequence), the last
// carrying state.
func (f *fixture) events(id, state string, seqs []int64, delivered map[int64]bool) []hooks.Delivery {
	f.t.Helper()
	var created any = time.Now().UTC()
	if f.sqlite {
		created = time.Now().UnixMicro()
	}
	var got []hooks.Delivery
	for i, s := range seqs {
		eid := event.NewID()
		f.exec(`INSERT INTO order_events (id, tenant_id, order_id, sequence, type, created_at, body) VALUES ($1, $2, $3, $4, $5, $6, '{}')`,
			eid, testTenant, id, s, string(event.OrderCreated), created)
		if delivered[s] {
			st := order.Received
			if i == len(seqs)-1 {
				st = order.State(state)
			}
			got = append(got, hooks.Delivery{EventID: eid, SigValid: true, HeaderOK: true,
				Event: event.Event{ID: eid, OrderID: id, Sequence: s, Order: order.Order{State: st}}})
		}
	}
	return got
}

func (f *fixture) setVersion(id string, version int64) {
	f.t.Helper()
	f.exec(`UPDATE orders SET version = $1 WHERE id = $2`, version, id)
}

func (f *fixture) ship(orderID string) {
	f.ledger.Shipments = append(f.ledger.Shipments, paysim.Shipment{ID: "sh_" + orderID, IdempotencyKey: orderID + "/ship/1",
		OrderID: orderID, Status: paysim.ShipmentShipped})
}

// TestCheckerNamesEverySeededAnomaly seeds a database (on each store) with
// three consistent orders (one partially refunded) and one of each anomaly
// — a double capture, a PAID order without a capture, a shipment of an
// order that is not FULFILLED, an outbox event without its change, an
// event never delivered, refunds above the capture, a provider refund the
// order's totals never counted — and
// requires the checker to name each one, on its order, under its
// invariant, and nothing on the consistent orders.
func TestCheckerNamesEverySeededAnomaly(t *testing.T) {
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			var f *fixture
			var db *DB
			if store == "postgres" {
				f, db = pgFixture(t)
			} else {
				f, db = sqliteFixture(t)
			}
			r := newRun(f, "seeded01")
			all := map[int64]bool{1: true, 2: true, 3: true}
			var got []hooks.Delivery

			// Consistent: a PAID order and a FULFILLED one.
			r.paidOrder("ord_ok_paid")
			f.setVersion("ord_ok_paid", 2)
			got = append(got, f.events("ord_ok_paid", "PAID", []int64{1, 2}, all)...)
			o := r.paidOrder("ord_ok_fulfilled")
			ful := r.op(o, book.KindFulfill, ok(http.StatusOK, "ord_ok_fulfilled", "FULFILLED", false))
			f.key(ful, http.StatusOK)
			f.exec(`UPDATE orders SET state = 'FULFILLED', fulfilled_at = paid_at, version = 3 WHERE id = 'ord_ok_fulfilled'`)
			f.attempt("ord_ok_fulfilled", "shipment", "succeeded")
			f.ship("ord_ok_fulfilled")
			got = append(got, f.events("ord_ok_fulfilled", "FULFILLED", []int64{1, 2, 3}, all)...)

			// A double capture: the provider captured a PAID order twice.
			r.paidOrder("ord_double_capture")
			f.setVersion("ord_double_capture", 2)
			f.ledger.Charges = append(f.ledger.Charges, paysim.Charge{ID: "ch_again", IdempotencyKey: "ord_double_capture/pay/9",
				OrderID: "ord_double_capture", Amount: 100, Currency: "USD", Status: paysim.ChargeCaptured})
			got = append(got, f.events("ord_double_capture", "PAID", []int64{1, 2}, all)...)

			// A PAID order the provider never captured.
			r.paidOrder("ord_paid_no_capture")
			f.setVersion("ord_paid_no_capture", 2)
			f.ledger.Charges = f.ledger.Charges[:len(f.ledger.Charges)-1] // paidOrder's capture, undone
			got = append(got, f.events("ord_paid_no_capture", "PAID", []int64{1, 2}, all)...)

			// A shipment of an order that is only PAID.
			r.paidOrder("ord_shipped_not_fulfilled")
			f.setVersion("ord_shipped_not_fulfilled", 2)
			f.ship("ord_shipped_not_fulfilled")
			got = append(got, f.events("ord_shipped_not_fulfilled", "PAID", []int64{1, 2}, all)...)

			// An event without its change: sequence 3 of an order at version 2.
			r.paidOrder("ord_event_no_change")
			f.setVersion("ord_event_no_change", 2)
			got = append(got, f.events("ord_event_no_change", "PAID", []int64{1, 2, 3}, map[int64]bool{1: true, 2: true})...)

			// A missing delivery: sequence 2 never reached the receiver.
			r.paidOrder("ord_not_delivered")
			f.setVersion("ord_not_delivered", 2)
			got = append(got, f.events("ord_not_delivered", "PAID", []int64{1, 2}, map[int64]bool{1: true})...)

			// Partial refunds (issue 16): a consistent PAID order refunded 30
			// of its 100 by one partial refund; one the provider refunded
			// above what it captured; one whose provider refund the order
			// never counted.
			partial := func(id string, refunded int64, refunds ...int64) {
				r.paidOrder(id)
				f.setVersion(id, 2+int64(len(refunds)))
				var ts any = time.Now().UTC()
				if f.sqlite {
					ts = time.Now().UnixMicro()
				}
				if refunded > 0 {
					f.exec(`INSERT INTO order_refund_totals (order_id, tenant_id, captured, reserved, refunded) VALUES ($1, $2, 100, $3, $3)`,
						id, testTenant, refunded)
				}
				seqs := []int64{1, 2}
				for i, amt := range refunds {
					if refunded > 0 {
						f.exec(`INSERT INTO provider_attempts (provider_key, tenant_id, order_id, kind, status, amount, currency, created_at, updated_at)
							VALUES ($1, $2, $3, 'refund', 'succeeded', $4, 'USD', $5, $5)`, fmt.Sprintf("%s/refunds/%016d", id, i), testTenant, id, amt, ts)
					}
					f.ledger.Refunds = append(f.ledger.Refunds, paysim.Refund{ID: fmt.Sprintf("re_%s_%d", id, i), ChargeKey: id + "/pay/1", Amount: amt})
					seqs = append(seqs, int64(3+i))
				}
				got = append(got, f.events(id, "PAID", seqs, map[int64]bool{1: true, 2: true, 3: true, 4: true})...)
			}
			partial("ord_ok_refunded", 30, 30)
			partial("ord_over_refunded", 100, 60, 90)
			partial("ord_refund_not_counted", 0, 40)

			c := &Checker{DB: db, DerivedTTL: 10 * time.Minute, Ledger: &f.ledger}
			ctx := context.Background()
			if err := db.Analyze(ctx); err != nil {
				t.Fatal(err)
			}
			// The harness waits for open attempts before it checks: none here,
			// then one.
			if n, err := c.OpenAttempts(ctx, r.book); err != nil || n != 0 {
				t.Fatalf("open attempts %d, %v; want 0", n, err)
			}
			f.attempt("ord_double_capture", "refund", "unknown")
			if n, err := c.OpenAttempts(ctx, r.book); err != nil || n != 1 {
				t.Fatalf("open attempts %d, %v; want 1", n, err)
			}
			rep, err := c.Check(ctx, r.book)
			if err != nil {
				t.Fatal(err)
			}
			wr, err := c.CheckWebhooks(ctx, r.book, got, &rep)
			if err != nil {
				t.Fatal(err)
			}
			Summarize(&rep, Inputs{Webhooks: &wr}, false)

			seeded := []struct{ kind, order, invariant string }{
				{AnomalyDoubleCapture, "ord_double_capture", "captures vs paid orders"},
				{AnomalyAttemptNotSettled, "ord_double_capture", "every operation answered, keys agree"},
				{AnomalyPaidNoCapture, "ord_paid_no_capture", "captures vs paid orders"},
				{AnomalyShipNotFulfilled, "ord_shipped_not_fulfilled", "shipments vs fulfilled orders"},
				{AnomalyEventPhantom, "ord_event_no_change", "events per change"},
				{AnomalyWebhookMissing, "ord_not_delivered", "deliveries per event"},
				{AnomalyRefundNoCapture, "ord_over_refunded", "refunds vs cancelled paid orders"},
				{AnomalyRefundTotals, "ord_over_refunded", "refunds vs cancelled paid orders"},
				{AnomalyRefundTotals, "ord_refund_not_counted", "refunds vs cancelled paid orders"},
				{AnomalyMoney, "ord_refund_not_counted", "captures vs paid orders"},
			}
			for _, s := range seeded {
				found := false
				for _, a := range rep.Anomalies {
					found = found || (a.Kind == s.kind && strings.Contains(a.Ref, s.order))
				}
				if !found {
					t.Errorf("the %s of %s was not reported; anomalies: %+v", s.kind, s.order, rep.Anomalies)
				}
				for _, iv := range rep.Invariants {
					if iv.Name == s.invariant && (iv.Status != StatusFailed || iv.Kinds[s.kind] == 0) {
						t.Errorf("invariant %q is %s with %v, not failed by %s", iv.Name, iv.Status, iv.Kinds, s.kind)
					}
				}
			}
			for _, a := range rep.Anomalies {
				if strings.Contains(a.Ref, "ord_ok_") {
					t.Errorf("an anomaly on a consistent order: %+v", a)
				}
			}
			if wr.Events != 16+3+4+3 || wr.Changes != 15+3+4+3 || rep.DBOrders != 10 || rep.RunShipments != 2 || rep.PartialRefunds != 3 {
				t.Errorf("the checker did not see every row: %+v, %+v", wr, rep)
			}
		})
	}
}
