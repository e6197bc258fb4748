package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
)

func TestStateEventMatrix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from   order.State
		event  order.Event
		status int
		to     order.State
	}{
		{order.Received, order.EventPay, http.StatusOK, order.Paid},
		{order.Paid, order.EventPay, http.StatusOK, order.Paid},
		{order.Fulfilled, order.EventPay, http.StatusOK, order.Fulfilled},
		{order.Cancelled, order.EventPay, http.StatusConflict, order.Cancelled},

		{order.Received, order.EventFulfill, http.StatusConflict, order.Received},
		{order.Paid, order.EventFulfill, http.StatusOK, order.Fulfilled},
		{order.Fulfilled, order.EventFulfill, http.StatusOK, order.Fulfilled},
		{order.Cancelled, order.EventFulfill, http.StatusConflict, order.Cancelled},

		{order.Received, order.EventCancel, http.StatusOK, order.Cancelled},
		{order.Paid, order.EventCancel, http.StatusOK, order.Cancelled}, // refunds the charge
		{order.Fulfilled, order.EventCancel, http.StatusConflict, order.Fulfilled},
		{order.Cancelled, order.EventCancel, http.StatusOK, order.Cancelled},
	}
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		for _, tc := range cases {
			outcome := "moves_to_" + string(tc.to)
			switch {
			case tc.status != http.StatusOK:
				outcome = "is_rejected"
			case tc.to == tc.from:
				outcome = "is_a_no-op"
			}
			t.Run(fmt.Sprintf("%s_on_%s_%s", tc.event, tc.from, outcome), func(t *testing.T) {
				before := orderIn(t, env, tc.from)
				captures, refunds, shipments := env.Gateway.Captures(before.ID), env.Gateway.Refunds(before.ID), env.Warehouse.Shipments(before.ID)

				r := fire(t, env, before, tc.event, newKey(t))

				wantStatus(t, r, tc.status)
				if tc.status == http.StatusConflict {
					p := wantProblem(t, r, http.StatusConflict, apperr.EInvalidTransition)
					if !strings.Contains(p.Detail, string(tc.from)) || !strings.Contains(p.Detail, string(tc.event)) {
						t.Errorf("problem detail %q names neither state %s nor event %s", p.Detail, tc.from, tc.event)
					}
				} else if got := orderOf(t, r); got.State != tc.to {
					t.Errorf("response shows the order %s, want %s", got.State, tc.to)
				}

				after := get(t, env, testenv.KeyA, before.ID)
				wantVersion := before.Version
				if tc.to != tc.from {
					wantVersion++
				}
				if after.State != tc.to || after.Version != wantVersion {
					t.Errorf("order is %s v%d, want %s v%d", after.State, after.Version, tc.to, wantVersion)
				}
				wantCaptures, wantShipments := captures, shipments
				if tc.from == order.Received && tc.event == order.EventPay {
					wantCaptures++
				}
				if tc.from == order.Paid && tc.event == order.EventFulfill {
					wantShipments++
				}
				if got := env.Gateway.Captures(before.ID); got != wantCaptures {
					t.Errorf("captures went from %d to %d, want %d", captures, got, wantCaptures)
				}
				wantRefunds := refunds
				if tc.from == order.Paid && tc.event == order.EventCancel {
					wantRefunds++
				}
				if got := env.Gateway.Refunds(before.ID); got != wantRefunds {
					t.Errorf("refunds went from %d to %d, want %d", refunds, got, wantRefunds)
				}
				if got := env.Warehouse.Shipments(before.ID); got != wantShipments {
					t.Errorf("shipments went from %d to %d, want %d", shipments, got, wantShipments)
				}
			})
		}
	})
}
