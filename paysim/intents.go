package paysim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/orderly/orderly/paysim/paysimwire"
)

// CodeIntentState is the error code (400 invalid_request_error) of an
// operation an intent's status forbids, Stripe's name for it.
const CodeIntentState = "payment_intent_unexpected_state"

// CodeAmountTooLarge is the error code (400 invalid_request_error) of a
// capture above the authorized amount, Stripe's name for it.
const CodeAmountTooLarge = "amount_too_large"

// confirmParams is the body of POST /v1/payment_intents/{id}/confirm with
// the intent id of its path.
type confirmParams struct {
	PaymentMethod string `json:"payment_method"`
	intentID      string
}

// cancelParams is the (empty) body of POST /v1/payment_intents/{id}/cancel
// with the intent id of its path.
type cancelParams struct {
	intentID string
}

// cancelRec is the outcome of a cancel key: the intent as it stood after.
type cancelRec struct {
	key, intentID string
	intent        Intent
}

func intentIDFromPath[P any](set func(p *P, id string)) func(r *http.Request, p *P) {
	return func(r *http.Request, p *P) { set(p, r.PathValue("id")) }
}

// prepares is POST /v1/payment_intents: an intent, moving no money.
var prepares = &operation[IntentParams, Intent]{
	endpoint: "intents",
	what:     "payment intent",
	validate: func(p IntentParams) string {
		switch {
		case p.OrderID == "":
			return "order_id is required"
		case p.Reference == "" || len(p.Reference) > maxKeyLen:
			return fmt.Sprintf("reference is required, at most %d bytes", maxKeyLen)
		case p.Amount < 0:
			return fmt.Sprintf("amount %d is negative", p.Amount)
		case p.Currency == "":
			return "currency is required"
		case p.CaptureMethod != "" && p.CaptureMethod != paysimwire.CaptureAutomatic && p.CaptureMethod != paysimwire.CaptureManual:
			return fmt.Sprintf("capture_method %q is neither %q nor %q", p.CaptureMethod, paysimwire.CaptureAutomatic, paysimwire.CaptureManual)
		}
		return ""
	},
	find: (*Ledger).IntentByKey,
	same: func(held Intent, p IntentParams) bool {
		return held.OrderID == p.OrderID && held.Reference == p.Reference && held.Amount == p.Amount && held.Currency == p.Currency &&
			held.CaptureMethod == captureMethodOf(p)
	},
	build: func(key string, p IntentParams, _ FaultKind) (Intent, FaultKind) {
		return Intent{ID: newID("pi_"), IdempotencyKey: key, OrderID: p.OrderID, Reference: p.Reference, Amount: p.Amount,
			Currency: p.Currency, Status: paysimwire.IntentRequiresPaymentMethod, CaptureMethod: captureMethodOf(p), CreatedAt: now()}, ""
	},
	create: (*Ledger).CreateIntent,
	write:  writeIntent,
}

// captureMethodOf is p's capture method, automatic when omitted.
func captureMethodOf(p IntentParams) string {
	if p.CaptureMethod == "" {
		return paysimwire.CaptureAutomatic
	}
	return p.CaptureMethod
}

func writeIntent(w http.ResponseWriter, in Intent, status int, replayed bool) {
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	writeJSON(w, status, in)
}

// intentRefused answers the final errors of a confirm or a cancel.
func intentRefused(err error, id string) (int, apiError, bool) {
	switch {
	case errors.Is(err, ErrIntentNotFound):
		return http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no payment intent %q", id)}, true
	case errors.Is(err, ErrIntentState):
		return http.StatusBadRequest, apiError{Type: ErrTypeInvalidRequest, Code: CodeIntentState, Message: err.Error()}, true
	case errors.Is(err, ErrCaptureTooLarge):
		return http.StatusBadRequest, apiError{Type: ErrTypeInvalidRequest, Code: CodeAmountTooLarge, Message: err.Error()}, true
	}
	return 0, apiError{}, false
}

// confirmOp is POST /v1/payment_intents/{id}/confirm: a charge of the
// intent's amount (or a decline, after which the intent may be confirmed
// again under another key), recorded in the ledger's charges under the
// confirm's key; for a manual intent, an authorization held for window
// instead of a charge (no webhook: nothing moved). It shares the one-shot
// faults of the charge endpoint.
func confirmOp(l *Ledger, window time.Duration) *operation[confirmParams, Charge] {
	return &operation[confirmParams, Charge]{
		endpoint: "charges",
		what:     "confirm",
		declines: true,
		path:     intentIDFromPath(func(p *confirmParams, id string) { p.intentID = id }),
		validate: func(confirmParams) string { return "" },
		plan: func(p confirmParams) (time.Duration, FaultKind) {
			return charges.plan(ChargeParams{PaymentMethod: p.PaymentMethod})
		},
		find: (*Ledger).Confirm,
		same: func(held Charge, p confirmParams) bool {
			return held.PaymentIntent == p.intentID && held.PaymentMethod == p.PaymentMethod
		},
		build: func(key string, p confirmParams, fault FaultKind) (Charge, FaultKind) {
			c, applied := charges.build(key, ChargeParams{PaymentMethod: p.PaymentMethod}, fault)
			c.PaymentIntent = p.intentID
			return c, applied
		},
		create: func(l *Ledger, ctx context.Context, c Charge) (Charge, bool, error) {
			return l.CreateConfirm(ctx, c, window)
		},
		refused: func(err error, p confirmParams) (int, apiError, bool) { return intentRefused(err, p.intentID) },
		write: func(w http.ResponseWriter, c Charge, status int, replayed bool) {
			if c.Status == ChargeFailed {
				writeCharge(w, c, status, replayed)
				return
			}
			in, err := l.Intent(context.Background(), c.PaymentIntent)
			if err != nil {
				writeError(w, http.StatusInternalServerError, apiError{Type: ErrTypeAPI, Message: err.Error()})
				return
			}
			writeIntent(w, in, status, replayed)
		},
		event: func(c Charge) (string, WebhookData) {
			if c.Status == ChargeAuthorized {
				return "", WebhookData{}
			}
			typ, d := charges.event(c)
			d.ObjectID, d.ChargeID = c.PaymentIntent, c.ID
			return typ, d
		},
	}
}

// captureParamsOf is the body of POST /v1/payment_intents/{id}/capture with
// the intent id of its path.
type captureParamsOf struct {
	Amount   int64 `json:"amount"`
	intentID string
}

// captureRec is the outcome of a capture key: the intent as it stood after,
// and the amount the key captured.
type captureRec struct {
	key, intentID string
	amount        int64
	intent        Intent
}

// captureOp is POST /v1/payment_intents/{id}/capture {"amount"}: of an
// intent in requires_capture (a manual intent, confirmed and authorized),
// the ledger's one charge of amount minor units, at most the authorized
// amount; the rest is released. Once per intent: a second capture (another
// key) is 400 payment_intent_unexpected_state. It shares the run-level
// faults of the charge endpoint and sends charge.succeeded for the charge.
func captureOp() *operation[captureParamsOf, captureRec] {
	return &operation[captureParamsOf, captureRec]{
		endpoint: "charges",
		what:     "capture",
		path:     intentIDFromPath(func(p *captureParamsOf, id string) { p.intentID = id }),
		validate: func(p captureParamsOf) string {
			if p.Amount <= 0 {
				return fmt.Sprintf("amount %d is not positive", p.Amount)
			}
			return ""
		},
		find: func(l *Ledger, ctx context.Context, key string) (captureRec, error) {
			var id string
			var amount int64
			if err := l.db.QueryRowContext(ctx, selectCaptureByKey, key).Scan(&id, &amount); err != nil {
				return captureRec{}, translate(err)
			}
			in, err := l.Intent(ctx, id)
			return captureRec{key: key, intentID: id, amount: amount, intent: in}, err
		},
		same: func(held captureRec, p captureParamsOf) bool {
			return held.intentID == p.intentID && held.amount == p.Amount
		},
		build: func(key string, p captureParamsOf, _ FaultKind) (captureRec, FaultKind) {
			return captureRec{key: key, intentID: p.intentID, amount: p.Amount}, ""
		},
		create: func(l *Ledger, ctx context.Context, rec captureRec) (captureRec, bool, error) {
			in, amount, created, err := l.CaptureIntent(ctx, rec.key, rec.intentID, rec.amount)
			if err == nil && !created {
				rec.intentID, rec.amount = in.ID, amount
			}
			rec.intent = in
			return rec, created, err
		},
		refused: func(err error, p captureParamsOf) (int, apiError, bool) { return intentRefused(err, p.intentID) },
		write: func(w http.ResponseWriter, rec captureRec, status int, replayed bool) {
			writeIntent(w, rec.intent, status, replayed)
		},
		event: func(rec captureRec) (string, WebhookData) {
			return EventChargeSucceeded, WebhookData{ObjectID: rec.intentID, IdempotencyKey: rec.key, OrderID: rec.intent.OrderID,
				Amount: rec.amount, Currency: rec.intent.Currency}
		},
	}
}

// cancelOp is POST /v1/payment_intents/{id}/cancel.
func cancelOp() *operation[cancelParams, cancelRec] {
	return &operation[cancelParams, cancelRec]{
		endpoint: "intents",
		what:     "cancel",
		path:     intentIDFromPath(func(p *cancelParams, id string) { p.intentID = id }),
		validate: func(cancelParams) string { return "" },
		find: func(l *Ledger, ctx context.Context, key string) (cancelRec, error) {
			var id string
			err := l.db.QueryRowContext(ctx, selectCancelIntentID, key).Scan(&id)
			if err != nil {
				return cancelRec{}, translate(err)
			}
			in, err := l.Intent(ctx, id)
			return cancelRec{key: key, intentID: id, intent: in}, err
		},
		same: func(held cancelRec, p cancelParams) bool { return held.intentID == p.intentID },
		build: func(key string, p cancelParams, _ FaultKind) (cancelRec, FaultKind) {
			return cancelRec{key: key, intentID: p.intentID}, ""
		},
		create: func(l *Ledger, ctx context.Context, rec cancelRec) (cancelRec, bool, error) {
			in, created, err := l.CancelIntent(ctx, rec.key, rec.intentID)
			if err == nil && !created {
				rec.intentID = in.ID
			}
			rec.intent = in
			return rec, created, err
		},
		refused: func(err error, p cancelParams) (int, apiError, bool) { return intentRefused(err, p.intentID) },
		write: func(w http.ResponseWriter, rec cancelRec, status int, replayed bool) {
			writeIntent(w, rec.intent, status, replayed)
		},
	}
}

// getIntent is GET /v1/payment_intents/{id}.
func (s *Server) getIntent(w http.ResponseWriter, r *http.Request) {
	if !s.delay(r.Context(), 0) {
		return
	}
	in, err := s.ledger.Intent(r.Context(), r.PathValue("id"))
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no payment intent %q", r.PathValue("id"))})
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// findIntent is GET /v1/payment_intents?reference=R&order_id=O: the
// intent created with that reference for that order. The index never
// lags.
func (s *Server) findIntent(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref, orderID := q.Get("reference"), q.Get("order_id")
	if ref == "" || orderID == "" {
		invalid(w, "the reference and order_id query parameters are required")
		return
	}
	if !s.delay(r.Context(), 0) {
		return
	}
	in, err := s.ledger.IntentByReference(r.Context(), ref, orderID)
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound,
			Message: fmt.Sprintf("no payment intent of order %q has reference %q", orderID, ref)})
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// getRefunds is GET /v1/refunds: ?payment_intent=ID lists the intent's
// refunds (RefundList); ?idempotency_key=K looks one up by key.
func (s *Server) getRefunds(byKey http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("payment_intent")
		if id == "" {
			byKey(w, r)
			return
		}
		if !s.delay(r.Context(), 0) {
			return
		}
		if _, err := s.ledger.Intent(r.Context(), id); errors.Is(err, ErrNotFound) {
			writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no payment intent %q", id)})
			return
		} else if err != nil {
			s.fail(w, err)
			return
		}
		list, err := s.ledger.RefundsOfIntent(r.Context(), id)
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, RefundList{Data: list})
	}
}
