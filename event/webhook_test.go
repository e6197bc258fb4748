package event_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	secret, body := "whsec_test", []byte(`{"id":"evt_1"}`)
	now := time.Unix(1_700_000_000, 0)
	good := event.Sign(secret, now, body)
	cases := []struct {
		name   string
		header string
		body   []byte
		at     time.Time
		want   error
	}{
		{"good", good, body, now, nil},
		{"good within tolerance", good, body, now.Add(4 * time.Minute), nil},
		{"tampered body", good, []byte(`{"id":"evt_2"}`), now, event.ErrSignatureMismatch},
		{"wrong secret", event.Sign("whsec_other", now, body), body, now, event.ErrSignatureMismatch},
		{"tampered timestamp", "t=1700000001" + good[len("t=1700000000"):], body, now, event.ErrSignatureMismatch},
		{"stale", good, body, now.Add(6 * time.Minute), event.ErrSignatureStale},
		{"from the future", good, body, now.Add(-6 * time.Minute), event.ErrSignatureStale},
		{"empty", "", body, now, event.ErrSignatureMalformed},
		{"no v1", "t=1700000000", body, now, event.ErrSignatureMalformed},
		{"bad hex", "t=1700000000,v1=zz", body, now, event.ErrSignatureMalformed},
		{"second signature matches", "t=1700000000,v1=00," + good[len("t=1700000000,"):], body, now, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := event.Verify(secret, c.header, c.body, c.at, 5*time.Minute); !errors.Is(err, c.want) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
		})
	}
}

func TestFor(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	created := order.Order{ID: order.NewID(), TenantID: "acme", State: order.Received, Version: 1, CreatedAt: at}
	paid := created.Apply(order.Paid, at)
	declined := created.Apply(order.Received, at)
	cases := []struct {
		name     string
		o        order.Order
		want     event.Type
		refunded *bool
	}{
		{"created", created, event.OrderCreated, nil},
		{"paid", paid, event.OrderPaid, nil},
		{"declined", declined, event.OrderPaymentFailed, nil},
		{"fulfilled", paid.Apply(order.Fulfilled, at), event.OrderFulfilled, nil},
		{"cancelled from RCVD", created.Apply(order.Cancelled, at), event.OrderCancelled, new(false)},
		{"cancelled from PAID", paid.Apply(order.Cancelled, at), event.OrderCancelled, new(true)},
	}
	for _, c := range cases {
		e := event.For(c.o, at)
		if e.Type != c.want || e.Sequence != c.o.Version || e.OrderVersion != c.o.Version || e.TenantID != "acme" || !event.ValidID(e.ID) {
			t.Errorf("%s: For = %+v", c.name, e)
		}
		if (e.Refunded == nil) != (c.refunded == nil) || (e.Refunded != nil && *e.Refunded != *c.refunded) {
			t.Errorf("%s: Refunded = %v, want %v", c.name, e.Refunded, c.refunded)
		}
	}
}
