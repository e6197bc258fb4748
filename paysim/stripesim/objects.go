package stripesim

import (
	"database/sql"
	"encoding/json"
	"strings"
	"time"
)

// intent is a PaymentIntent as the ledger holds it.
type intent struct {
	ID                 string
	Amount             int64
	Currency           string
	Status             string
	CaptureMethod      string
	PaymentMethod      string
	Metadata           map[string]string
	AmountCapturable   int64
	AmountReceived     int64
	LatestCharge       string
	LastPaymentError   json.RawMessage
	NextAction         json.RawMessage
	Description        string
	CanceledAt         time.Time
	CancellationReason string
	FaultsFired        string
	CreatedAt          time.Time
}

// charge is a Charge as the ledger holds it.
type charge struct {
	ID             string
	PaymentIntent  string
	OrderID        string
	Amount         int64
	AmountCaptured int64
	AmountRefunded int64
	Currency       string
	PaymentMethod  string
	Status         string
	Captured       bool
	FailureCode    string
	DeclineCode    string
	FailureMessage string
	CreatedAt      time.Time
	// CaptureBefore is when an uncaptured authorization expires (zero:
	// none).
	CaptureBefore time.Time
}

// refund is a Refund as the ledger holds it.
type refund struct {
	ID            string
	PaymentIntent string
	Charge        string
	Amount        int64
	Currency      string
	Status        string
	Reason        string
	Metadata      map[string]string
	CreatedAt     time.Time
}

const intentCols = `id, amount, currency, status, capture_method, payment_method, metadata, amount_capturable,
	amount_received, latest_charge, last_payment_error, next_action, description, canceled_at, cancellation_reason,
	faults_fired, created_at`

const chargeCols = `id, payment_intent, order_id, amount, amount_captured, amount_refunded, currency, payment_method,
	status, captured, failure_code, decline_code, failure_message, created_at, capture_before`

const refundCols = `id, payment_intent, charge, amount, currency, status, reason, metadata, created_at`

type scanner interface{ Scan(dest ...any) error }

func scanIntent(r scanner) (intent, error) {
	var pi intent
	var pm, latest, lpe, na, desc, reason sql.NullString
	var meta string
	var canceled sql.NullInt64
	var created int64
	err := r.Scan(&pi.ID, &pi.Amount, &pi.Currency, &pi.Status, &pi.CaptureMethod, &pm, &meta, &pi.AmountCapturable,
		&pi.AmountReceived, &latest, &lpe, &na, &desc, &canceled, &reason, &pi.FaultsFired, &created)
	if err != nil {
		return pi, err
	}
	pi.PaymentMethod, pi.LatestCharge, pi.Description, pi.CancellationReason = pm.String, latest.String, desc.String, reason.String
	if lpe.Valid {
		pi.LastPaymentError = json.RawMessage(lpe.String)
	}
	if na.Valid {
		pi.NextAction = json.RawMessage(na.String)
	}
	if canceled.Valid {
		pi.CanceledAt = fromMicros(canceled.Int64)
	}
	pi.CreatedAt = fromMicros(created)
	return pi, json.Unmarshal([]byte(meta), &pi.Metadata)
}

func scanCharge(r scanner) (charge, error) {
	var c charge
	var order, code, decline, msg sql.NullString
	var captured, created int64
	var before sql.NullInt64
	err := r.Scan(&c.ID, &c.PaymentIntent, &order, &c.Amount, &c.AmountCaptured, &c.AmountRefunded, &c.Currency,
		&c.PaymentMethod, &c.Status, &captured, &code, &decline, &msg, &created, &before)
	if before.Valid {
		c.CaptureBefore = fromMicros(before.Int64)
	}
	c.OrderID, c.FailureCode, c.DeclineCode, c.FailureMessage = order.String, code.String, decline.String, msg.String
	c.Captured, c.CreatedAt = captured == 1, fromMicros(created)
	return c, err
}

func scanRefund(r scanner) (refund, error) {
	var rf refund
	var reason sql.NullString
	var meta string
	var created int64
	if err := r.Scan(&rf.ID, &rf.PaymentIntent, &rf.Charge, &rf.Amount, &rf.Currency, &rf.Status, &reason, &meta, &created); err != nil {
		return rf, err
	}
	rf.Reason, rf.CreatedAt = reason.String, fromMicros(created)
	return rf, json.Unmarshal([]byte(meta), &rf.Metadata)
}

// --- wire forms (docs.stripe.com/api/payment_intents/object, /api/charges/object, /api/refunds/object)

// piJSON is the PaymentIntent object. LatestCharge is an id, or the charge
// object when expand[]=latest_charge was asked for.
type piJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Description        *string           `json:"description"`
	LastPaymentError   json.RawMessage   `json:"last_payment_error"`
	LatestCharge       any               `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         json.RawMessage   `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
}

type chargeJSON struct {
	ID             string  `json:"id"`
	Object         string  `json:"object"`
	Amount         int64   `json:"amount"`
	AmountCaptured int64   `json:"amount_captured"`
	AmountRefunded int64   `json:"amount_refunded"`
	Captured       bool    `json:"captured"`
	Created        int64   `json:"created"`
	Currency       string  `json:"currency"`
	FailureCode    *string `json:"failure_code"`
	FailureMessage *string `json:"failure_message"`
	Livemode       bool    `json:"livemode"`
	Paid           bool    `json:"paid"`
	PaymentIntent  string  `json:"payment_intent"`
	PaymentMethod  string  `json:"payment_method"`
	Refunded       bool    `json:"refunded"`
	Status         string  `json:"status"`
	Outcome        any     `json:"outcome"`
	// PaymentMethodDetails carries card.capture_before of an uncaptured
	// authorization; nil otherwise.
	PaymentMethodDetails any `json:"payment_method_details,omitempty"`
}

type refundJSON struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
	// FailureReason is set on a failed refund only (Stripe's
	// failure_reason: lost_or_stolen_card, expired_or_canceled_card,
	// unknown).
	FailureReason *string `json:"failure_reason,omitempty"`
}

type listJSON struct {
	Object  string `json:"object"`
	Data    any    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
	// NextPage is set on search results only.
	NextPage *string `json:"next_page,omitempty"`
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (pi intent) json(latest *charge) piJSON {
	out := piJSON{ID: pi.ID, Object: "payment_intent", Amount: pi.Amount, AmountCapturable: pi.AmountCapturable,
		AmountReceived: pi.AmountReceived, CancellationReason: strp(pi.CancellationReason), CaptureMethod: pi.CaptureMethod,
		ClientSecret: pi.ID + "_secret_paysim", ConfirmationMethod: "automatic", Created: pi.CreatedAt.Unix(),
		Currency: pi.Currency, Description: strp(pi.Description), LastPaymentError: pi.LastPaymentError,
		Metadata: pi.Metadata, NextAction: pi.NextAction, PaymentMethod: strp(pi.PaymentMethod),
		PaymentMethodTypes: []string{"card"}, Status: pi.Status}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if m, ok := methods[pi.PaymentMethod]; ok && m.typ != "card" {
		out.PaymentMethodTypes = []string{m.typ}
	}
	if !pi.CanceledAt.IsZero() {
		t := pi.CanceledAt.Unix()
		out.CanceledAt = &t
	}
	if out.LastPaymentError == nil {
		out.LastPaymentError = json.RawMessage("null")
	}
	if out.NextAction == nil {
		out.NextAction = json.RawMessage("null")
	}
	switch {
	case latest != nil:
		out.LatestCharge = latest.json()
	case pi.LatestCharge != "":
		out.LatestCharge = pi.LatestCharge
	}
	return out
}

func (c charge) json() chargeJSON {
	out := chargeJSON{ID: c.ID, Object: "charge", Amount: c.Amount, AmountCaptured: c.AmountCaptured,
		AmountRefunded: c.AmountRefunded, Captured: c.Captured, Created: c.CreatedAt.Unix(), Currency: c.Currency,
		FailureCode: strp(c.FailureCode), FailureMessage: strp(c.FailureMessage), Paid: c.Status == "succeeded",
		PaymentIntent: c.PaymentIntent, PaymentMethod: c.PaymentMethod,
		Refunded: c.AmountCaptured > 0 && c.AmountRefunded == c.AmountCaptured, Status: c.Status}
	outcome := map[string]any{"type": "authorized", "network_status": "approved_by_network", "reason": nil}
	if c.Status == "failed" {
		outcome = map[string]any{"type": "issuer_declined", "network_status": "declined_by_network", "reason": strp(c.DeclineCode)}
	}
	out.Outcome = outcome
	if !c.CaptureBefore.IsZero() && !c.Captured {
		out.PaymentMethodDetails = map[string]any{"type": "card", "card": map[string]any{"capture_before": c.CaptureBefore.Unix()}}
	}
	return out
}

func (r refund) json() refundJSON {
	m := r.Metadata
	if m == nil {
		m = map[string]string{}
	}
	out := refundJSON{ID: r.ID, Object: "refund", Amount: r.Amount, Charge: r.Charge, Created: r.CreatedAt.Unix(),
		Currency: r.Currency, Metadata: m, PaymentIntent: r.PaymentIntent, Reason: strp(r.Reason), Status: r.Status}
	if r.Status == "failed" {
		out.FailureReason = strp("expired_or_canceled_card")
	}
	return out
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func hasFault(fired string, f faultKind) bool {
	for s := range strings.SplitSeq(fired, ",") {
		if s == string(f) {
			return true
		}
	}
	return false
}
