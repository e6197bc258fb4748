package paysim_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
)

func TestCharge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		req      request
		status   int
		errType  string
		errCode  string
		captures int
	}{
		{name: "captures an approved card", status: http.StatusCreated, captures: 1,
			req: request{key: "k", body: chargeParams("ord_1", "pm_card_visa")}},
		{name: "declines the declined card", status: http.StatusPaymentRequired, errType: "card_error", errCode: "card_declined",
			req: request{key: "k", body: chargeParams("ord_1", paysim.MethodDeclined)}},
		{name: "declines for insufficient funds", status: http.StatusPaymentRequired, errType: "card_error", errCode: "insufficient_funds",
			req: request{key: "k", body: chargeParams("ord_1", paysim.MethodInsufficientFunds)}},
		{name: "declines an empty payment method", status: http.StatusPaymentRequired, errType: "card_error", errCode: "invalid_payment_method",
			req: request{key: "k", body: chargeParams("ord_1", "")}},
		{name: "requires an idempotency key", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{body: chargeParams("ord_1", "pm_card_visa")}},
		{name: "rejects a key over 255 bytes", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: strings.Repeat("k", 256), body: chargeParams("ord_1", "pm_card_visa")}},
		{name: "rejects malformed JSON", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", body: `{"order_id":`}},
		{name: "rejects unknown members", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", body: `{"order_id":"ord_1","amount":1,"currency":"USD","payment_method":"pm_card_visa","tip":5}`}},
		{name: "rejects trailing data", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", body: `{"order_id":"ord_1","amount":1,"currency":"USD","payment_method":"pm_card_visa"} {}`}},
		{name: "rejects a negative amount", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", body: paysim.ChargeParams{OrderID: "ord_1", Amount: -1, Currency: "USD", PaymentMethod: "pm_card_visa"}}},
		{name: "requires a currency", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", body: paysim.ChargeParams{OrderID: "ord_1", Amount: 1, PaymentMethod: "pm_card_visa"}}},
		{name: "requires an order id", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", body: paysim.ChargeParams{Amount: 1, Currency: "USD", PaymentMethod: "pm_card_visa"}}},
		{name: "rejects a body over the limit", status: http.StatusRequestEntityTooLarge, errType: "invalid_request_error",
			req: request{key: "k", body: `{"order_id":"` + strings.Repeat("x", paysim.DefaultMaxBodyBytes) + `"}`}},
		{name: "rejects an unknown fault", status: http.StatusBadRequest, errType: "invalid_request_error",
			req: request{key: "k", fault: "explode", body: chargeParams("ord_1", "pm_card_visa")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, paysim.Faults{})
			tt.req.method, tt.req.path = "POST", "/v1/charges"
			r := e.do(tt.req)
			if tt.errType != "" {
				wantError(t, r, tt.status, tt.errType, tt.errCode)
			} else {
				var c paysim.Charge
				decode(t, r, tt.status, &c)
				want := paysim.Charge{ID: c.ID, IdempotencyKey: "k", OrderID: "ord_1", Amount: 4200, Currency: "USD",
					PaymentMethod: "pm_card_visa", Status: paysim.ChargeCaptured, CreatedAt: c.CreatedAt}
				if c != want || !strings.HasPrefix(c.ID, "ch_") || len(c.ID) != 27 || c.CreatedAt.IsZero() {
					t.Errorf("charge = %+v, want %+v with an id ch_ and 24 hex digits", c, want)
				}
				if r.replayed() {
					t.Error("a new charge is marked replayed")
				}
			}
			if got := e.stats().Charges; got != tt.captures {
				t.Errorf("captures = %d, want %d", got, tt.captures)
			}
		})
	}
}

func TestChargeRepeatedKeyReplaysAndNeverCapturesTwice(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	var first paysim.Charge
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &first)
	for i := range 3 {
		r := e.charge("ord_1/pay", "ord_1", "pm_card_visa", "")
		var again paysim.Charge
		decode(t, r, http.StatusOK, &again)
		if again != first || !r.replayed() {
			t.Fatalf("repeat %d = %+v (replayed %v), want %+v replayed", i, again, r.replayed(), first)
		}
	}

	t.Run("different parameters are refused", func(t *testing.T) {
		for _, p := range []paysim.ChargeParams{
			{OrderID: "ord_1", Amount: 1, Currency: "USD", PaymentMethod: "pm_card_visa"},
			{OrderID: "ord_2", Amount: 4200, Currency: "USD", PaymentMethod: "pm_card_visa"},
			{OrderID: "ord_1", Amount: 4200, Currency: "EUR", PaymentMethod: "pm_card_visa"},
			{OrderID: "ord_1", Amount: 4200, Currency: "USD", PaymentMethod: "pm_card_mastercard"},
		} {
			r := e.do(request{method: "POST", path: "/v1/charges", key: "ord_1/pay", body: p})
			wantError(t, r, http.StatusUnprocessableEntity, "idempotency_error", "")
		}
	})

	st := e.stats()
	if st.Charges != 1 || st.CapturesByOrder["ord_1"] != 1 || st.MaxCapturesPerOrder != 1 {
		t.Errorf("stats = %+v, want one capture for ord_1", st.Counts)
	}
}

func TestChargeDeclineIsRemembered(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	first := e.charge("ord_1/pay", "ord_1", paysim.MethodInsufficientFunds, "")
	wantError(t, first, http.StatusPaymentRequired, "card_error", "insufficient_funds")

	again := e.charge("ord_1/pay", "ord_1", paysim.MethodInsufficientFunds, "")
	wantError(t, again, http.StatusPaymentRequired, "card_error", "insufficient_funds")
	if !again.replayed() || string(again.body) != string(first.body) {
		t.Errorf("replayed decline = %s (replayed %v), want %s replayed", again.body, again.replayed(), first.body)
	}
	if c, ok := e.chargeUnder("ord_1/pay"); !ok || c.Status != paysim.ChargeFailed || c.FailureCode != "insufficient_funds" {
		t.Errorf("ledger holds %+v (%v) under the key, want the remembered insufficient_funds decline", c, ok)
	}
	if st := e.stats(); st.Charges != 0 || st.Declines != 1 {
		t.Errorf("stats = %+v, want 0 captures and 1 decline", st.Counts)
	}
}

func TestChargeConcurrentSameKeyCapturesOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	e := start(t, paysim.Faults{})
	replies := e.concurrently(n, func(int) request {
		return request{method: "POST", path: "/v1/charges", key: "ord_1/pay", body: chargeParams("ord_1", "pm_card_visa")}
	})
	created, ids := 0, map[string]bool{}
	for i := range n {
		var c paysim.Charge
		switch replies[i].status {
		case http.StatusCreated:
			created++
			decode(t, replies[i], http.StatusCreated, &c)
		default:
			decode(t, replies[i], http.StatusOK, &c)
		}
		ids[c.ID] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Errorf("%d answers were 201 and %d distinct charge ids were returned; want 1 and 1", created, len(ids))
	}
	if st := e.stats(); st.Charges != 1 || st.CapturesByOrder["ord_1"] != 1 {
		t.Errorf("stats = %+v, want exactly one capture", st.Counts)
	}
}

// TestNoChargeLookupByKey: paysim does not look a charge up by its
// idempotency key (no real provider does; issue 15): GET /v1/charges is
// not a route, and the charge made is in the ledger.
func TestNoChargeLookupByKey(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	var made paysim.Charge
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &made)
	wantError(t, e.lookup("charges", "ord_1/pay"), http.StatusNotFound, "not_found", "")
	if found, ok := e.chargeUnder("ord_1/pay"); !ok || found != made {
		t.Errorf("ledger holds %+v (%v), want %+v", found, ok, made)
	}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	var c paysim.Charge
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &c)
	wantError(t, e.charge("ord_2/pay", "ord_2", paysim.MethodDeclined, ""), http.StatusPaymentRequired, "card_error", "card_declined")
	refund := func(key, chargeKey string, amount int64) reply {
		return e.do(request{method: "POST", path: "/v1/refunds", key: key, body: paysim.RefundParams{ChargeKey: chargeKey, Amount: amount}})
	}

	var r1 paysim.Refund
	decode(t, refund("ord_1/refund", "ord_1/pay", 1000), http.StatusCreated, &r1)
	if !strings.HasPrefix(r1.ID, "re_") || r1.ChargeID != c.ID || r1.Amount != 1000 || r1.ChargeKey != "ord_1/pay" {
		t.Errorf("refund = %+v, want re_… of 1000 for charge %s", r1, c.ID)
	}

	t.Run("repeated key replays", func(t *testing.T) {
		again := refund("ord_1/refund", "ord_1/pay", 1000)
		var r paysim.Refund
		decode(t, again, http.StatusOK, &r)
		if r != r1 || !again.replayed() {
			t.Errorf("replay = %+v (replayed %v), want %+v", r, again.replayed(), r1)
		}
		var found paysim.Refund
		decode(t, e.lookup("refunds", "ord_1/refund"), http.StatusOK, &found)
		if found != r1 {
			t.Errorf("lookup = %+v, want %+v", found, r1)
		}
	})
	t.Run("repeated key with different parameters is refused", func(t *testing.T) {
		wantError(t, refund("ord_1/refund", "ord_1/pay", 999), http.StatusUnprocessableEntity, "idempotency_error", "")
	})
	t.Run("charge is marked refunded", func(t *testing.T) {
		got, _ := e.chargeUnder("ord_1/pay")
		if got.Status != paysim.ChargeRefunded || got.AmountRefunded != 1000 {
			t.Errorf("charge = %+v, want refunded with 1000 refunded", got)
		}
	})
	t.Run("unknown or declined charge is not found", func(t *testing.T) {
		wantError(t, refund("x/refund", "nope/pay", 1), http.StatusNotFound, "not_found", "")
		wantError(t, refund("ord_2/refund", "ord_2/pay", 1), http.StatusNotFound, "not_found", "")
	})
	t.Run("more than is left is refused", func(t *testing.T) {
		wantError(t, refund("ord_1/refund-2", "ord_1/pay", 3201), http.StatusBadRequest, "invalid_request_error", "amount_too_large")
		decode(t, refund("ord_1/refund-3", "ord_1/pay", 3200), http.StatusCreated, &paysim.Refund{})
	})
	t.Run("malformed refunds are refused", func(t *testing.T) {
		wantError(t, refund("", "ord_1/pay", 1), http.StatusBadRequest, "invalid_request_error", "")
		wantError(t, refund("k", "", 1), http.StatusBadRequest, "invalid_request_error", "")
		wantError(t, refund("k", "ord_1/pay", -1), http.StatusBadRequest, "invalid_request_error", "")
	})
	if st := e.stats(); st.Refunds != 2 {
		t.Errorf("refunds = %d, want 2", st.Refunds)
	}
}

func TestRefundConcurrentKeysNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	const n = 20
	e := start(t, paysim.Faults{})
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	replies := e.concurrently(n, func(i int) request {
		return request{method: "POST", path: "/v1/refunds", key: fmt.Sprint("refund-", i),
			body: paysim.RefundParams{ChargeKey: "ord_1/pay", Amount: 4200}}
	})
	created := 0
	for i, r := range replies {
		switch s := r.status; s {
		case http.StatusCreated:
			created++
		case http.StatusBadRequest:
		default:
			t.Errorf("refund %d: status %d", i, s)
		}
	}
	if created != 1 {
		t.Errorf("%d full refunds of one charge succeeded, want 1", created)
	}
}

func TestShipment(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	var first paysim.Shipment
	decode(t, e.ship("ord_1/fulfill", "ord_1", "", "sku_mug", "sku_tee"), http.StatusCreated, &first)
	if !strings.HasPrefix(first.ID, "sh_") || first.OrderID != "ord_1" || first.Status != paysim.ShipmentShipped || len(first.Items) != 2 {
		t.Errorf("shipment = %+v", first)
	}

	t.Run("repeated key replays", func(t *testing.T) {
		r := e.ship("ord_1/fulfill", "ord_1", "", "sku_mug", "sku_tee")
		var again paysim.Shipment
		decode(t, r, http.StatusOK, &again)
		if again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) || !r.replayed() {
			t.Errorf("replay = %+v (replayed %v), want %+v", again, r.replayed(), first)
		}
		var found paysim.Shipment
		decode(t, e.lookup("shipments", "ord_1/fulfill"), http.StatusOK, &found)
		if found.ID != first.ID {
			t.Errorf("lookup = %+v, want %s", found, first.ID)
		}
	})
	t.Run("repeated key with different items is refused", func(t *testing.T) {
		wantError(t, e.ship("ord_1/fulfill", "ord_1", "", "sku_mug"), http.StatusUnprocessableEntity, "idempotency_error", "")
	})
	t.Run("out of stock is final and remembered", func(t *testing.T) {
		r := e.ship("ord_2/fulfill", "ord_2", "", "sku_mug", paysim.SKUOutOfStock)
		wantError(t, r, http.StatusConflict, "out_of_stock", "")
		again := e.ship("ord_2/fulfill", "ord_2", "", "sku_mug", paysim.SKUOutOfStock)
		wantError(t, again, http.StatusConflict, "out_of_stock", "")
		if !again.replayed() || string(again.body) != string(r.body) {
			t.Errorf("replay = %s, want %s replayed", again.body, r.body)
		}
		wantError(t, e.lookup("shipments", "ord_2/fulfill"), http.StatusConflict, "out_of_stock", "")
	})
	t.Run("unknown key is not found", func(t *testing.T) {
		wantError(t, e.lookup("shipments", "nope"), http.StatusNotFound, "not_found", "")
	})
	t.Run("found by reference and by id", func(t *testing.T) {
		p := shipParams("ord_4")
		p.Reference = "ord_4/fulfill"
		var made paysim.Shipment
		decode(t, e.do(request{method: "POST", path: "/v1/shipments", key: "ord_4/fulfill", body: p}), http.StatusCreated, &made)
		if made.Reference != "ord_4/fulfill" {
			t.Errorf("shipment = %+v, want reference ord_4/fulfill", made)
		}
		var byRef, byID paysim.Shipment
		decode(t, e.do(request{method: "GET", path: "/v1/shipments?reference=ord_4/fulfill&order_id=ord_4"}), http.StatusOK, &byRef)
		decode(t, e.do(request{method: "GET", path: "/v1/shipments/" + made.ID}), http.StatusOK, &byID)
		if byRef.ID != made.ID || byID.ID != made.ID || byRef.Reference != made.Reference {
			t.Errorf("by reference %+v, by id %+v; want %s", byRef, byID, made.ID)
		}
		// Another request under the key with another reference is refused.
		p.Reference = "ord_4/other"
		wantError(t, e.do(request{method: "POST", path: "/v1/shipments", key: "ord_4/fulfill", body: p}),
			http.StatusUnprocessableEntity, "idempotency_error", "")
		wantError(t, e.do(request{method: "GET", path: "/v1/shipments?reference=ord_4/fulfill&order_id=ord_5"}), http.StatusNotFound, "not_found", "")
		wantError(t, e.do(request{method: "GET", path: "/v1/shipments?reference=ord_4/fulfill"}), http.StatusBadRequest, "invalid_request_error", "")
		wantError(t, e.do(request{method: "GET", path: "/v1/shipments/sh_nope"}), http.StatusNotFound, "not_found", "")
	})
	t.Run("malformed shipments are refused", func(t *testing.T) {
		for _, body := range []any{
			paysim.ShipmentParams{OrderID: "ord_3"},
			paysim.ShipmentParams{Items: shipParams("x").Items},
			paysim.ShipmentParams{OrderID: "ord_3", Items: []paysim.Item{{Quantity: 1}}},
			paysim.ShipmentParams{OrderID: "ord_3", Items: []paysim.Item{{SKU: "sku_mug"}}},
		} {
			r := e.do(request{method: "POST", path: "/v1/shipments", key: "ord_3/fulfill", body: body})
			wantError(t, r, http.StatusBadRequest, "invalid_request_error", "")
		}
	})
	st := e.stats()
	if st.Shipments != 2 || st.OutOfStock != 1 || st.ShipmentsByOrder["ord_1"] != 1 || st.ShipmentsByOrder["ord_4"] != 1 || st.MaxShipmentsPerOrder != 1 {
		t.Errorf("stats = %+v, want one shipment each for ord_1 and ord_4 and one out of stock", st.Counts)
	}
}

func TestShipmentConcurrentSameKeyShipsOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	e := start(t, paysim.Faults{})
	replies := e.concurrently(n, func(int) request {
		return request{method: "POST", path: "/v1/shipments", key: "ord_1/fulfill", body: shipParams("ord_1")}
	})
	created := 0
	for i, r := range replies {
		switch s := r.status; s {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("request %d: status %d", i, s)
		}
	}
	if st := e.stats(); created != 1 || st.Shipments != 1 {
		t.Errorf("%d answers were 201 and %d shipments were made, want 1 and 1", created, st.Shipments)
	}
}

func TestFaultErrorCommitsNothing(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{ErrorRate: 1})
	for i := range 6 {
		wantError(t, e.charge(fmt.Sprint("c", i), "ord_1", "pm_card_visa", ""), http.StatusServiceUnavailable, "api_error", "service_unavailable")
	}
	wantError(t, e.ship("s1", "ord_1", ""), http.StatusServiceUnavailable, "api_error", "service_unavailable")

	snap := e.snapshot()
	if len(snap.Charges)+len(snap.Refunds)+len(snap.Shipments) != 0 {
		t.Errorf("ledger = %+v, want empty", snap)
	}
	if st := e.stats(); st.FaultsInjected[paysim.FaultError] != 7 {
		t.Errorf("faults_injected = %v, want 7 errors", st.FaultsInjected)
	}

	t.Run("header error without run-level faults", func(t *testing.T) {
		e.setFaults(paysim.Faults{})
		wantError(t, e.charge("h1", "ord_2", "pm_card_visa", "error"), http.StatusServiceUnavailable, "api_error", "service_unavailable")
		if c, ok := e.chargeUnder("h1"); ok {
			t.Errorf("a 503 committed %+v", c)
		}
		decode(t, e.charge("h1", "ord_2", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	})
}

func TestFaultDropAfterCommit(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	_, err := e.send(context.Background(), request{method: "POST", path: "/v1/charges", key: "ord_1/pay",
		fault: "drop-after-commit", body: chargeParams("ord_1", "pm_card_visa")})
	if err == nil {
		t.Fatal("a dropped reply reached the client")
	}
	found, _ := e.chargeUnder("ord_1/pay")
	if found.Status != paysim.ChargeCaptured || found.Amount != 4200 {
		t.Errorf("lookup after the drop = %+v, want the captured charge", found)
	}
	// A retry with the header again is a replay, answered normally.
	r := e.charge("ord_1/pay", "ord_1", "pm_card_visa", "drop-after-commit")
	var again paysim.Charge
	decode(t, r, http.StatusOK, &again)
	if again != found || !r.replayed() {
		t.Errorf("retry = %+v (replayed %v), want %+v", again, r.replayed(), found)
	}

	t.Run("run-level drop rate on shipments and refunds", func(t *testing.T) {
		e.setFaults(paysim.Faults{DropRate: 1})
		if _, err := e.send(context.Background(), request{method: "POST", path: "/v1/shipments", key: "ord_1/fulfill", body: shipParams("ord_1")}); err == nil {
			t.Error("a dropped shipment reply reached the client")
		}
		if _, err := e.send(context.Background(), request{method: "POST", path: "/v1/refunds", key: "ord_1/refund",
			body: paysim.RefundParams{ChargeKey: "ord_1/pay", Amount: 4200}}); err == nil {
			t.Error("a dropped refund reply reached the client")
		}
		decode(t, e.lookup("shipments", "ord_1/fulfill"), http.StatusOK, &paysim.Shipment{})
		decode(t, e.lookup("refunds", "ord_1/refund"), http.StatusOK, &paysim.Refund{})
	})
	t.Run("a dropped lookup commits nothing", func(t *testing.T) {
		if _, err := e.send(context.Background(), request{method: "GET", path: "/v1/shipments?idempotency_key=ord_1/fulfill", fault: "drop"}); err == nil {
			t.Error("a dropped lookup reply reached the client")
		}
	})
	st := e.stats()
	if st.Charges != 1 || st.Shipments != 1 || st.Refunds != 1 || st.FaultsInjected[paysim.FaultDrop] != 4 {
		t.Errorf("stats = %+v, want one charge, shipment and refund and 4 drops", st)
	}
}

func TestFaultTimeout(t *testing.T) {
	t.Parallel()

	t.Run("holds the request then answers 504 and commits nothing", func(t *testing.T) {
		t.Parallel()
		e := start(t, paysim.Faults{TimeoutDelay: 150 * time.Millisecond})
		began := time.Now()
		wantError(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", "timeout"), http.StatusGatewayTimeout, "api_error", "timeout")
		if d := time.Since(began); d < 150*time.Millisecond {
			t.Errorf("answered after %s, want at least 150ms", d)
		}
		if c, ok := e.chargeUnder("ord_1/pay"); ok {
			t.Errorf("a timeout committed %+v", c)
		}
		decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	})

	t.Run("stops when the client disconnects", func(t *testing.T) {
		t.Parallel()
		e := start(t, paysim.Faults{TimeoutRate: 1, TimeoutDelay: paysim.MaxDelay})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := e.send(ctx, request{method: "POST", path: "/v1/charges", key: "k", body: chargeParams("ord_1", "pm_card_visa")}); err == nil {
			t.Fatal("want the client's deadline to end the request")
		}
		began := time.Now()
		e.ts.Close() // waits for the handler
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("the handler ran %s after the client went away", d)
		}
	})

	t.Run("StopDelays ends a timeout at once", func(t *testing.T) {
		t.Parallel()
		e := start(t, paysim.Faults{TimeoutRate: 1, TimeoutDelay: paysim.MaxDelay})
		done := make(chan reply, 1)
		go func() {
			r, _ := e.send(context.Background(), request{method: "POST", path: "/v1/charges", key: "k", body: chargeParams("ord_1", "pm_card_visa")})
			done <- r
		}()
		deadline := time.Now().Add(10 * time.Second)
		for e.stats().FaultsInjected[paysim.FaultTimeout] == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the timeout fault never fired")
			}
			time.Sleep(5 * time.Millisecond)
		}
		e.srv.StopDelays()
		select {
		case r := <-done:
			wantError(t, r, http.StatusGatewayTimeout, "api_error", "timeout")
		case <-time.After(10 * time.Second):
			t.Fatal("StopDelays did not end the timeout")
		}
		if n := e.stats().Charges; n != 0 {
			t.Errorf("captures = %d, want 0", n)
		}
	})
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	began := time.Now()
	decode(t, e.charge("k1", "ord_1", "pm_card_visa", "latency=200ms"), http.StatusCreated, &paysim.Charge{})
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("header latency: answered after %s, want at least 200ms", d)
	}

	e.setFaults(paysim.Faults{Latency: 150 * time.Millisecond})
	began = time.Now()
	wantError(t, e.lookup("shipments", "none"), http.StatusNotFound, "not_found", "")
	if d := time.Since(began); d < 150*time.Millisecond {
		t.Errorf("run-level latency on a lookup: answered after %s, want at least 150ms", d)
	}
	if n := e.stats().FaultsInjected[paysim.FaultLatency]; n != 2 {
		t.Errorf("latency faults = %d, want 2", n)
	}
	wantError(t, e.charge("k2", "ord_2", "pm_card_visa", "latency=forever"), http.StatusBadRequest, "invalid_request_error", "")
}

func TestFaultDecline(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	wantError(t, e.charge("k1", "ord_1", "pm_card_visa", "decline"), http.StatusPaymentRequired, "card_error", "card_declined")
	again := e.charge("k1", "ord_1", "pm_card_visa", "")
	wantError(t, again, http.StatusPaymentRequired, "card_error", "card_declined")
	if !again.replayed() {
		t.Error("the injected decline was not remembered")
	}
	decode(t, e.ship("s1", "ord_1", "decline"), http.StatusCreated, &paysim.Shipment{}) // charges only

	e.setFaults(paysim.Faults{DeclineRate: 1})
	wantError(t, e.charge("k2", "ord_2", "pm_card_visa", ""), http.StatusPaymentRequired, "card_error", "card_declined")
	decode(t, e.ship("s2", "ord_2", ""), http.StatusCreated, &paysim.Shipment{})
	if st := e.stats(); st.Charges != 0 || st.Declines != 2 || st.FaultsInjected[paysim.FaultDecline] != 2 {
		t.Errorf("stats = %+v, want 2 injected declines and no capture", st)
	}
}

func TestTriggeredFaultsFireOnlyOncePerKey(t *testing.T) {
	t.Parallel()
	const delay = 50 * time.Millisecond
	tests := []struct {
		name  string
		post  func(e *env, key string) (reply, error)
		what  string // what is made: charges (read from the ledger) or shipments (looked up by key)
		first int    // status of the first request; 0 for a dropped reply
		kind  paysim.FaultKind
	}{
		{name: "pm_fault_503", what: "charges", first: http.StatusServiceUnavailable, kind: paysim.FaultError, post: charger(paysim.MethodFault503)},
		{name: "pm_fault_timeout", what: "charges", first: http.StatusGatewayTimeout, kind: paysim.FaultTimeout, post: charger(paysim.MethodFaultTimeout)},
		{name: "pm_fault_drop_after_commit", what: "charges", kind: paysim.FaultDrop, post: charger(paysim.MethodFaultDropAfterCommit)},
		{name: "sku_fault_503", what: "shipments", first: http.StatusServiceUnavailable, kind: paysim.FaultError, post: shipper(paysim.SKUFault503)},
		{name: "sku_fault_timeout", what: "shipments", first: http.StatusGatewayTimeout, kind: paysim.FaultTimeout, post: shipper(paysim.SKUFaultTimeout)},
		{name: "sku_fault_drop_after_commit", what: "shipments", kind: paysim.FaultDrop, post: shipper(paysim.SKUFaultDropAfterCommit)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, paysim.Faults{TimeoutDelay: delay})
			r, err := tt.post(e, "key-1")
			switch {
			case tt.first == 0 && err == nil:
				t.Fatalf("first request answered %d, want a dropped reply", r.status)
			case tt.first != 0 && (err != nil || r.status != tt.first):
				t.Fatalf("first request = %d, %v; want %d", r.status, err, tt.first)
			}
			// The second request for the key is processed normally: a new
			// outcome after error/timeout, a replay after a drop.
			r, err = tt.post(e, "key-1")
			wantStatus := http.StatusCreated
			if tt.first == 0 {
				wantStatus = http.StatusOK
			}
			if err != nil || r.status != wantStatus {
				t.Fatalf("second request = %d %s, %v; want %d", r.status, r.body, err, wantStatus)
			}
			if r, err = tt.post(e, "key-1"); err != nil || r.status != http.StatusOK || !r.replayed() {
				t.Fatalf("third request = %d, %v; want a 200 replay", r.status, err)
			}
			if tt.what == "charges" {
				if _, ok := e.chargeUnder("key-1"); !ok {
					t.Errorf("the ledger holds no charge under key-1")
				}
			} else if got := e.lookup(tt.what, "key-1"); got.status != http.StatusOK {
				t.Errorf("lookup = %d %s, want 200", got.status, got.body)
			}
			// Another key fires again.
			if r, err := tt.post(e, "key-2"); (tt.first == 0) != (err != nil) || (err == nil && r.status != tt.first) {
				t.Errorf("first request of another key = %d, %v; want the fault again", r.status, err)
			}
			st := e.stats()
			if st.FaultsInjected[tt.kind] != 2 {
				t.Errorf("faults_injected = %v, want 2 of %s", st.FaultsInjected, tt.kind)
			}
			if st.MaxCapturesPerOrder > 1 || st.MaxShipmentsPerOrder > 1 {
				t.Errorf("stats = %+v: something happened twice", st.Counts)
			}
		})
	}
}

func charger(method string) func(*env, string) (reply, error) {
	return func(e *env, key string) (reply, error) {
		return e.send(context.Background(), request{method: "POST", path: "/v1/charges", key: key, body: chargeParams("ord_"+key, method)})
	}
}

func shipper(sku string) func(*env, string) (reply, error) {
	return func(e *env, key string) (reply, error) {
		return e.send(context.Background(), request{method: "POST", path: "/v1/shipments", key: key, body: shipParams("ord_"+key, "sku_mug", sku)})
	}
}

func TestMethodLatency(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	began := time.Now()
	decode(t, e.charge("k", "ord_1", paysim.MethodFaultLatency, ""), http.StatusCreated, &paysim.Charge{})
	if d := time.Since(began); d < paysim.MethodLatency {
		t.Errorf("answered after %s, want at least %s", d, paysim.MethodLatency)
	}
}

func TestFiredFaultSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := startIn(t, dir, paysim.Faults{})
	wantError(t, e.charge("ord_1/pay", "ord_1", paysim.MethodFault503, ""), http.StatusServiceUnavailable, "api_error", "service_unavailable")
	e.stop()

	e = startIn(t, dir, paysim.Faults{})
	decode(t, e.charge("ord_1/pay", "ord_1", paysim.MethodFault503, ""), http.StatusCreated, &paysim.Charge{})
}

func TestLedgerIsDurableAcrossReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := startIn(t, dir, paysim.Faults{})
	var c paysim.Charge
	var sh paysim.Shipment
	var ref paysim.Refund
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &c)
	decode(t, e.ship("ord_1/fulfill", "ord_1", ""), http.StatusCreated, &sh)
	decode(t, e.charge("ord_2/pay", "ord_2", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	decode(t, e.do(request{method: "POST", path: "/v1/refunds", key: "ord_2/refund", body: paysim.RefundParams{ChargeKey: "ord_2/pay", Amount: 4200}}),
		http.StatusCreated, &ref)
	wantError(t, e.charge("ord_3/pay", "ord_3", paysim.MethodDeclined, ""), http.StatusPaymentRequired, "card_error", "card_declined")
	before := e.snapshot()
	e.stop()

	e = startIn(t, dir, paysim.Faults{})
	r := e.charge("ord_1/pay", "ord_1", "pm_card_visa", "")
	var again paysim.Charge
	decode(t, r, http.StatusOK, &again)
	if again != c || !r.replayed() {
		t.Errorf("replay after reopen = %+v, want %+v", again, c)
	}
	r = e.ship("ord_1/fulfill", "ord_1", "")
	var shAgain paysim.Shipment
	decode(t, r, http.StatusOK, &shAgain)
	if shAgain.ID != sh.ID || !r.replayed() {
		t.Errorf("shipment replay after reopen = %+v, want %s", shAgain, sh.ID)
	}
	var refAgain paysim.Refund
	decode(t, e.do(request{method: "POST", path: "/v1/refunds", key: "ord_2/refund", body: paysim.RefundParams{ChargeKey: "ord_2/pay", Amount: 4200}}),
		http.StatusOK, &refAgain)
	if refAgain != ref {
		t.Errorf("refund replay after reopen = %+v, want %+v", refAgain, ref)
	}
	wantError(t, e.charge("ord_3/pay", "ord_3", paysim.MethodDeclined, ""), http.StatusPaymentRequired, "card_error", "card_declined")

	after := e.snapshot()
	if len(after.Charges) != 3 || len(after.Refunds) != 1 || len(after.Shipments) != 1 {
		t.Fatalf("ledger after reopen = %+v", after)
	}
	for i := range after.Charges {
		if after.Charges[i] != before.Charges[i] {
			t.Errorf("charge %d after reopen = %+v, before %+v", i, after.Charges[i], before.Charges[i])
		}
	}
	if st := e.stats(); st.Charges != 2 || st.Declines != 1 || st.MaxCapturesPerOrder != 1 {
		t.Errorf("stats after reopen = %+v", st.Counts)
	}
}

func TestSeedMakesRunLevelFaultsRepeatable(t *testing.T) {
	t.Parallel()
	run := func() []int {
		e := start(t, paysim.Faults{ErrorRate: 0.3, DeclineRate: 0.3, Seed: 7})
		var statuses []int
		for i := range 30 {
			statuses = append(statuses, e.charge(fmt.Sprint("k", i), "ord_1", "pm_card_visa", "").status)
		}
		return statuses
	}
	a, b := run(), run()
	seen := map[int]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("run 1 = %v, run 2 = %v; want the same sequence", a, b)
		}
		seen[a[i]] = true
	}
	if !seen[http.StatusCreated] || !seen[http.StatusServiceUnavailable] || !seen[http.StatusPaymentRequired] {
		t.Errorf("statuses %v: want captures, errors and declines", a)
	}
}

func TestAdminFaults(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{ErrorRate: 0.25})
	var got paysim.Faults
	decode(t, e.do(request{method: "GET", path: "/admin/faults"}), http.StatusOK, &got)
	if got.ErrorRate != 0.25 {
		t.Errorf("GET /admin/faults = %+v, want error_rate 0.25", got)
	}
	r := e.do(request{method: "PUT", path: "/admin/faults", body: `{"latency":"10ms","drop_rate":0.5,"timeout_delay":"2s","seed":3}`})
	decode(t, r, http.StatusOK, &got)
	want := paysim.Faults{Latency: 10 * time.Millisecond, DropRate: 0.5, TimeoutDelay: 2 * time.Second, Seed: 3}
	if got != want || e.srv.Faults() != want {
		t.Errorf("after PUT = %+v (server %+v), want %+v", got, e.srv.Faults(), want)
	}
	for _, bad := range []string{
		`{"error_rate":2}`,
		`{"error_rate":0.6,"drop_rate":0.6}`,
		`{"latency":"soon"}`,
		`{"timeout_delay":"1h"}`,
		`{"jitter":1}`,
	} {
		wantError(t, e.do(request{method: "PUT", path: "/admin/faults", body: bad}), http.StatusBadRequest, "invalid_request_error", "")
	}
	if e.srv.Faults() != want {
		t.Errorf("a refused PUT changed the faults to %+v", e.srv.Faults())
	}
}

func TestAdminAndHealth(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	decode(t, e.charge("ord_1/pay-again", "ord_1", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{}) // a second key: a double charge
	e.lookup("shipments", "ord_1/fulfill")

	st := e.stats()
	if st.CapturesByOrder["ord_1"] != 2 || st.MaxCapturesPerOrder != 2 || st.Charges != 2 || st.Requests != 3 {
		t.Errorf("stats = %+v, want two captures for ord_1 in 3 requests", st)
	}
	if len(st.FaultsInjected) != 5 {
		t.Errorf("faults_injected = %v, want every kind", st.FaultsInjected)
	}
	if snap := e.snapshot(); len(snap.Charges) != 2 || snap.Refunds == nil || snap.Shipments == nil {
		t.Errorf("ledger = %+v, want two charges and empty lists", snap)
	}
	var h map[string]string
	decode(t, e.do(request{method: "GET", path: "/healthz"}), http.StatusOK, &h)
	if h["status"] != "ok" {
		t.Errorf("healthz = %v", h)
	}
	wantError(t, e.do(request{method: "GET", path: "/v2/nothing"}), http.StatusNotFound, "not_found", "")
}

func TestNewServerRejectsInvalidFaults(t *testing.T) {
	t.Parallel()
	l, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := paysim.NewServer(l, paysim.Config{Faults: paysim.Faults{DropRate: -0.1}}); err == nil {
		t.Error("NewServer accepted a negative drop rate")
	}
}

// TestAdminClient: what a harness reads and sets through the admin client
// is what the server holds.
func TestAdminClient(t *testing.T) {
	t.Parallel()
	e := start(t, paysim.Faults{})
	ctx := context.Background()
	admin := paysim.NewAdminClient(e.ts.URL + "/")
	set := paysim.Faults{ErrorRate: 0.25, TimeoutDelay: time.Second, Seed: 9}
	if err := admin.SetFaults(ctx, set); err != nil {
		t.Fatal(err)
	}
	if got, err := admin.Faults(ctx); err != nil || got != set {
		t.Errorf("Faults = %+v, %v; want %+v", got, err, set)
	}
	if err := admin.SetFaults(ctx, paysim.Faults{ErrorRate: 2}); err == nil {
		t.Error("SetFaults accepted an error rate of 2")
	}
	if err := admin.SetFaults(ctx, paysim.Faults{}); err != nil {
		t.Fatal(err)
	}
	decode(t, e.charge("ord_1/pay", "ord_1", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	st, err := admin.Stats(ctx)
	if err != nil || st.Charges != 1 || st.CapturesByOrder["ord_1"] != 1 {
		t.Errorf("Stats = %+v, %v; want one capture of ord_1", st.Counts, err)
	}
	snap, err := admin.Ledger(ctx)
	if err != nil || len(snap.Charges) != 1 || snap.Charges[0].OrderID != "ord_1" {
		t.Errorf("Ledger = %+v, %v; want the one charge", snap, err)
	}
}
