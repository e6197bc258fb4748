package paysim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// operation is what one POST /v1/<endpoint> and its GET lookup do apart from
// the flow they share (post and get): P is the request body, R the outcome
// the ledger records under the key.
type operation[P, R any] struct {
	endpoint string // the route's collection; it also names the one-shot faults' namespace
	what     string // the outcome's name in messages
	declines bool   // a decline fault (run-level or FaultHeader) applies
	// path, if set, completes p from the request's path (an intent id).
	path func(r *http.Request, p *P)
	// validate returns why p is malformed, or "".
	validate func(p P) string
	// plan returns the latency p adds (a latency test method or SKU) and
	// the one-shot fault it triggers, if any.
	plan func(p P) (latency time.Duration, trigger FaultKind)
	// find returns the outcome held under a key, or ErrNotFound.
	find func(l *Ledger, ctx context.Context, key string) (R, error)
	// same reports whether a repeated request asks for what held records.
	same func(held R, p P) bool
	// build makes the new outcome of p under key given the fault decided,
	// and returns the fault it applied (a decline), to count once answered.
	build func(key string, p P, fault FaultKind) (rec R, applied FaultKind)
	// create records rec unless the key holds an outcome, which it returns
	// with created false.
	create func(l *Ledger, ctx context.Context, rec R) (_ R, created bool, _ error)
	// refused answers the final errors of create (nil: there are none).
	refused func(err error, p P) (status int, e apiError, ok bool)
	// write answers rec with status.
	write func(w http.ResponseWriter, rec R, status int, replayed bool)
	// event returns the webhook event type and data a new rec causes ("":
	// none).
	event func(rec R) (string, WebhookData)
}

// post is the flow of every POST: key, body, FaultHeader and latency; a
// replay if the key holds an outcome; else the fault decided for the
// request, and the new outcome committed (whether the client stays or not)
// and answered — or dropped, after the commit, for a drop fault.
func post[P, R any](s *Server, op *operation[P, R]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := idempotencyKey(w, r)
		if !ok {
			return
		}
		var p P
		if !s.decode(w, r, &p) {
			return
		}
		if op.path != nil {
			op.path(r, &p)
		}
		if msg := op.validate(p); msg != "" {
			invalid(w, msg)
			return
		}
		rf, ok := faultHeader(w, r)
		if !ok {
			return
		}
		var trigger FaultKind
		if op.plan != nil {
			var extra time.Duration
			extra, trigger = op.plan(p)
			rf.latency += extra
		}
		if !s.delay(r.Context(), rf.latency) {
			return
		}
		ctx := r.Context()
		if held, err := op.find(s.ledger, ctx, key); err == nil {
			replay(w, op, held, p, key)
			return
		} else if !errors.Is(err, ErrNotFound) {
			s.fail(w, err)
			return
		}
		fault, err := s.decide(ctx, op.endpoint, key, rf, trigger, op.declines)
		if err != nil {
			s.fail(w, err)
			return
		}
		if s.answerFault(w, r, fault) {
			return
		}
		rec, applied := op.build(key, p, fault)
		// The commit does not depend on the client staying: a request that
		// reached it commits, as at a real provider.
		rec, created, err := op.create(s.ledger, context.WithoutCancel(ctx), rec)
		if err != nil && op.refused != nil {
			if status, e, ok := op.refused(err, p); ok {
				writeError(w, status, e)
				return
			}
		}
		switch {
		case err != nil:
			s.fail(w, err)
			return
		case !created: // a concurrent request with the key won
			replay(w, op, rec, p, key)
			return
		}
		if op.event != nil {
			if typ, data := op.event(rec); typ != "" {
				s.hooks.emit(typ, data)
			}
		}
		switch fault {
		case FaultDrop:
			s.fired(r, FaultDrop)
			drop(w)
		default:
			if applied != "" {
				s.fired(r, applied)
			}
			op.write(w, rec, http.StatusCreated, false)
		}
	}
}

// replay answers a request whose key holds an outcome: the outcome, flagged
// as replayed, or a 422 if the request asks for something else.
func replay[P, R any](w http.ResponseWriter, op *operation[P, R], held R, p P, key string) {
	if !op.same(held, p) {
		keyReused(w, op.what, key)
		return
	}
	op.write(w, held, http.StatusOK, true)
}

// get is the flow of every GET lookup by idempotency key.
func get[P, R any](s *Server, op *operation[P, R]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := s.lookupPrelude(w, r)
		if !ok {
			return
		}
		rec, err := op.find(s.ledger, r.Context(), key)
		if err != nil {
			s.lookupFailed(w, err, op.what, key)
			return
		}
		op.write(w, rec, http.StatusOK, false)
	}
}

// charges is POST /v1/charges: a capture, or a decline remembered under
// the key. No route looks a charge up by its key (no real provider does);
// GET /admin/ledger lists them.
var charges = &operation[ChargeParams, Charge]{
	endpoint: "charges",
	what:     "charge",
	declines: true,
	validate: func(p ChargeParams) string {
		switch {
		case p.OrderID == "":
			return "order_id is required"
		case p.Amount < 0:
			return fmt.Sprintf("amount %d is negative", p.Amount)
		case p.Currency == "":
			return "currency is required"
		}
		return ""
	},
	plan: func(p ChargeParams) (time.Duration, FaultKind) {
		var latency time.Duration
		if p.PaymentMethod == MethodFaultLatency {
			latency = MethodLatency
		}
		return latency, triggered[p.PaymentMethod]
	},
	find: (*Ledger).Charge,
	same: func(held Charge, p ChargeParams) bool { return held.Params() == p },
	build: func(key string, p ChargeParams, fault FaultKind) (Charge, FaultKind) {
		c := Charge{
			ID: newID("ch_"), IdempotencyKey: key, OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency,
			PaymentMethod: p.PaymentMethod, Status: ChargeCaptured, CreatedAt: now(),
		}
		var applied FaultKind
		c.FailureCode, c.FailureMessage = decline(p.PaymentMethod)
		if fault == FaultDecline && c.FailureCode == "" {
			c.FailureCode, c.FailureMessage = DeclineCardDeclined, "Your card was declined (injected)."
			applied = FaultDecline
		}
		if c.FailureCode != "" {
			c.Status = ChargeFailed
		}
		return c, applied
	},
	create: (*Ledger).CreateCharge,
	write:  writeCharge,
	event: func(c Charge) (string, WebhookData) {
		d := WebhookData{ObjectID: c.ID, IdempotencyKey: c.IdempotencyKey, OrderID: c.OrderID, Amount: c.Amount,
			Currency: c.Currency, DeclineCode: c.FailureCode}
		if c.Status == ChargeFailed {
			return EventChargeFailed, d
		}
		return EventChargeSucceeded, d
	},
}

// decline returns the decline code and message of a payment method, or ""
// if it is approved.
func decline(method string) (code, message string) {
	switch method {
	case "":
		return DeclineInvalidPaymentMethod, "No payment method was given."
	case MethodDeclined:
		return DeclineCardDeclined, "Your card was declined."
	case MethodInsufficientFunds:
		return DeclineInsufficientFunds, "Your card has insufficient funds."
	}
	return "", ""
}

// writeCharge answers c: the charge with status, or a 402 for a decline.
func writeCharge(w http.ResponseWriter, c Charge, status int, replayed bool) {
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	if c.Status == ChargeFailed {
		writeError(w, http.StatusPaymentRequired, apiError{Type: ErrTypeCard, Code: c.FailureCode, Message: c.FailureMessage, Charge: c.ID})
		return
	}
	writeJSON(w, status, c)
}

// refunds is POST and GET /v1/refunds: a refund of a capture, applied to
// the charge in the same transaction.
var refunds = &operation[RefundParams, Refund]{
	endpoint: "refunds",
	what:     "refund",
	validate: func(p RefundParams) string {
		switch {
		case (p.ChargeKey == "") == (p.PaymentIntent == ""):
			return "exactly one of charge_key and payment_intent is required"
		case p.Amount < 0:
			return fmt.Sprintf("amount %d is negative", p.Amount)
		}
		return ""
	},
	find: (*Ledger).Refund,
	same: func(held Refund, p RefundParams) bool {
		return (p.ChargeKey == "" || held.ChargeKey == p.ChargeKey) && (p.PaymentIntent == "" || held.PaymentIntent == p.PaymentIntent) &&
			held.Amount == p.Amount && held.Reference == p.Reference
	},
	build: func(key string, p RefundParams, _ FaultKind) (Refund, FaultKind) {
		return Refund{ID: newID("re_"), IdempotencyKey: key, ChargeKey: p.ChargeKey, PaymentIntent: p.PaymentIntent,
			Reference: p.Reference, Amount: p.Amount, CreatedAt: now()}, ""
	},
	create: (*Ledger).CreateRefund,
	event: func(r Refund) (string, WebhookData) {
		return EventRefundSucceeded, WebhookData{ObjectID: r.ID, IdempotencyKey: r.IdempotencyKey, ChargeID: r.ChargeID,
			OrderID: r.OrderID, Amount: r.Amount, Currency: r.Currency}
	},
	refused: func(err error, p RefundParams) (int, apiError, bool) {
		switch {
		case errors.Is(err, ErrChargeNotFound):
			return http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no captured charge has key %q", p.ChargeKey)}, true
		case errors.Is(err, ErrIntentNotFound):
			return http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no payment intent %q", p.PaymentIntent)}, true
		case errors.Is(err, ErrIntentState):
			return http.StatusBadRequest, apiError{Type: ErrTypeInvalidRequest, Code: CodeIntentState, Message: err.Error()}, true
		case errors.Is(err, ErrRefundTooLarge):
			return http.StatusBadRequest, apiError{Type: ErrTypeInvalidRequest, Code: "amount_too_large", Message: err.Error()}, true
		}
		return 0, apiError{}, false
	},
	write: func(w http.ResponseWriter, ref Refund, status int, replayed bool) {
		if replayed {
			w.Header().Set(ReplayedHeader, "true")
		}
		writeJSON(w, status, ref)
	},
}

// shipments is POST and GET /v1/shipments: a shipment, or an out-of-stock
// failure remembered under the key.
var shipments = &operation[ShipmentParams, Shipment]{
	endpoint: "shipments",
	what:     "shipment",
	validate: validateShipment,
	plan: func(p ShipmentParams) (time.Duration, FaultKind) {
		var latency time.Duration
		var trigger FaultKind
		outOfStock := false
		for _, it := range p.Items {
			switch {
			case it.SKU == SKUFaultLatency:
				latency += MethodLatency
			case it.SKU == SKUOutOfStock && !outOfStock:
				outOfStock = true
			case trigger == "":
				trigger = triggered[it.SKU]
			}
		}
		return latency, trigger
	},
	find: (*Ledger).Shipment,
	same: func(held Shipment, p ShipmentParams) bool {
		return held.OrderID == p.OrderID && held.Reference == p.Reference && slices.Equal(held.Items, p.Items)
	},
	build: func(key string, p ShipmentParams, _ FaultKind) (Shipment, FaultKind) {
		sh := Shipment{
			ID: newID("sh_"), IdempotencyKey: key, OrderID: p.OrderID, Reference: p.Reference, Items: p.Items,
			Status: ShipmentShipped, CreatedAt: now(),
		}
		if slices.ContainsFunc(p.Items, func(it Item) bool { return it.SKU == SKUOutOfStock }) {
			sh.Status, sh.FailureMessage = ShipmentOutOfStock, fmt.Sprintf("SKU %q cannot be shipped", SKUOutOfStock)
		}
		return sh, ""
	},
	create: (*Ledger).CreateShipment,
	write:  writeShipment,
}

func validateShipment(p ShipmentParams) string {
	if p.OrderID == "" {
		return "order_id is required"
	}
	if len(p.Reference) > maxKeyLen {
		return fmt.Sprintf("reference is %d characters, more than %d", len(p.Reference), maxKeyLen)
	}
	if len(p.Items) == 0 {
		return "a shipment needs at least one item"
	}
	for i, it := range p.Items {
		switch {
		case it.SKU == "":
			return fmt.Sprintf("items[%d].sku is required", i)
		case it.Quantity <= 0:
			return fmt.Sprintf("items[%d].quantity must be positive", i)
		case it.UnitPrice < 0:
			return fmt.Sprintf("items[%d].unit_price is negative", i)
		}
	}
	return ""
}

// writeShipment answers sh: the shipment with status, or a 409 for a
// remembered out-of-stock failure.
func writeShipment(w http.ResponseWriter, sh Shipment, status int, replayed bool) {
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	if sh.Status == ShipmentOutOfStock {
		writeError(w, http.StatusConflict, apiError{Type: ErrTypeOutOfStock, Message: sh.FailureMessage, Shipment: sh.ID})
		return
	}
	writeJSON(w, status, sh)
}
