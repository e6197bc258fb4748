package check

import (
	"context"
	"testing"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/hooks"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
)

// TestCheckWebhooks feeds the checker an outbox and deliveries with one
// fault each and expects exactly that anomaly.
func TestCheckWebhooks(t *testing.T) {
	type delivered struct {
		seq    int64
		id     string // "" for the outbox's id
		badSig bool
	}
	cases := []struct {
		name      string
		version   int64   // the order's version (PAID when 2)
		outbox    []int64 // sequences in the outbox
		delivered []delivered
		want      string // anomaly kind, "" for none
	}{
		{"all delivered once", 2, []int64{1, 2}, []delivered{{seq: 1}, {seq: 2}}, ""},
		{"redelivered in order", 2, []int64{1, 2}, []delivered{{seq: 1}, {seq: 1}, {seq: 2}, {seq: 2}}, ""},
		{"never delivered", 2, []int64{1, 2}, []delivered{{seq: 1}}, AnomalyWebhookMissing},
		{"bad signature", 2, []int64{1, 2}, []delivered{{seq: 1, badSig: true}, {seq: 2}}, AnomalyWebhookSignature},
		{"out of order", 2, []int64{1, 2}, []delivered{{seq: 2}, {seq: 1}}, AnomalyWebhookOutOfOrder},
		{"did not happen", 2, []int64{1, 2}, []delivered{{seq: 1}, {seq: 2}, {seq: 2, id: event.NewID()}}, AnomalyWebhookPhantom},
		{"change without its event", 2, []int64{1}, []delivered{{seq: 1}}, AnomalyEventMissing},
		{"event without its change", 1, []int64{1, 2}, []delivered{{seq: 1}}, AnomalyEventPhantom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, db := sqliteFixture(t)
			b := book.NewBook("r1", testTenant)
			id := order.NewID()
			f.order(id, b.MarkerPrefix()+"x", "RCVD")
			state := "RCVD"
			if c.version == 2 {
				state = "PAID"
				f.exec(`UPDATE orders SET version = 2, state = 'PAID', paid_at = created_at WHERE id = $1`, id)
			}
			ids := map[int64]string{}
			for _, s := range c.outbox {
				ids[s] = event.NewID()
				f.exec(`INSERT INTO order_events (id, tenant_id, order_id, sequence, type, created_at, body) VALUES ($1, $2, $3, $4, $5, 0, '{}')`,
					ids[s], testTenant, id, s, string(event.OrderCreated))
			}
			var got []hooks.Delivery
			for _, d := range c.delivered {
				eid := d.id
				if eid == "" {
					eid = ids[d.seq]
				}
				st := order.Received
				if d.seq == 2 {
					st = order.State(state)
				}
				got = append(got, hooks.Delivery{EventID: eid, SigValid: !d.badSig, HeaderOK: true,
					Event: event.Event{ID: eid, OrderID: id, Sequence: d.seq, Order: order.Order{State: st}}})
			}
			rep := Report{ByKind: map[string]int{}, DBStates: map[string]int{}}
			c2 := &Checker{DB: db, Now: time.Now}
			if _, err := c2.CheckWebhooks(context.Background(), b, got, &rep); err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == "" && rep.Total != 0:
				t.Fatalf("anomalies %v", rep.Anomalies)
			case c.want != "" && (rep.ByKind[c.want] == 0):
				t.Fatalf("want %s, got %v", c.want, rep.Anomalies)
			}
		})
	}
}
