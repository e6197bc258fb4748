package check

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
)

// TestCheckBus feeds the bus check one fault at a time: a bus command
// whose read-back was not a replay, and a decline that took effect twice
// or without its key; a read-back raced by an HTTP twin is not flagged.
func TestCheckBus(t *testing.T) {
	cases := []struct {
		name         string
		replayed     bool // the read-back was a replay
		twin         bool // an HTTP twin raced the command
		declinedKeys int
		failedEvents int
		sweptPay     bool   // a keyless pay was declined an hour ago: its derived key may be swept
		want         string // anomaly kind, "" for none
	}{
		{"applied once", true, false, 1, 1, false, ""},
		{"raced by an HTTP twin", false, true, 0, 0, false, ""},
		{"not applied before the read-back", false, false, 0, 0, false, AnomalyBusNotApplied},
		{"a decline applied twice", true, false, 1, 2, false, AnomalyDeclineEffects},
		{"a decline without its key", true, false, 0, 1, false, AnomalyDeclineEffects},
		{"a decline whose derived key was swept", true, false, 0, 1, true, ""},
		{"a swept decline without its event", true, false, 0, 0, true, AnomalyDeclineEffects},
		{"a swept decline applied twice", true, false, 0, 2, true, AnomalyDeclineEffects},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, db := sqliteFixture(t)
			r := newRun(f, "b1")
			id := order.NewID()
			o, _ := r.created(id)
			f.order(id, o.Marker, "RCVD")
			readback := ok(http.StatusOK, id, "RCVD", c.replayed)
			readback.Via = book.ViaBus
			obs := []book.Obs{readback}
			if c.twin {
				twin := ok(http.StatusOK, id, "RCVD", true)
				twin.Via = book.ViaBusTwin
				obs = append([]book.Obs{twin}, obs...)
			}
			r.op(o, book.KindPay, obs...).Bus = true
			if c.sweptPay {
				op, err := r.book.NewOp(o, book.OpSpec{Kind: book.KindPay, Keyed: false, Allowed: []int{http.StatusOK, http.StatusPaymentRequired},
					Pay: &client.PayInput{Amount: o.Amount, Currency: "USD", PaymentMethod: "pm_card_declined"}})
				if err != nil {
					t.Fatal(err)
				}
				declined := book.Obs{Via: book.ViaPrimary, Status: http.StatusPaymentRequired, Code: "payment_declined", Definitive: true,
					Attempts: 1, At: time.Now().Add(-time.Hour)}
				op.Record(declined)
			}
			now := time.Now().UTC().UnixMicro()
			for i := range c.declinedKeys {
				f.exec(`INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation, error_code, resource_id, created_at, expires_at)
					VALUES ($1, $2, 'fp', 0, 'completed', 'pay', 'payment_declined', $3, $4, $5)`,
					testTenant, strings.Repeat(string(rune('a'+i)), 64), id, now, now+3600e6)
			}
			for i := range c.failedEvents {
				f.exec(`INSERT INTO order_events (id, tenant_id, order_id, sequence, type, created_at, body) VALUES ($1, $2, $3, $4, $5, 0, '{}')`,
					event.NewID(), testTenant, id, i+2, string(event.OrderPaymentFailed))
			}
			var rep Report
			rep.ByKind = map[string]int{}
			br, err := (&Checker{DB: db, DerivedTTL: 10 * time.Minute}).CheckBus(context.Background(), r.book, &rep)
			if err != nil {
				t.Fatal(err)
			}
			if br.Commands != 1 || br.ReadBack != 1 {
				t.Errorf("looked at %+v, want one command read back", br)
			}
			if c.want == "" {
				wantKinds(t, rep)
			} else if rep.ByKind[c.want] == 0 || rep.Total != rep.ByKind[c.want] {
				t.Errorf("anomalies %v %+v, want only %s", rep.ByKind, rep.Anomalies, c.want)
			}
		})
	}
}
