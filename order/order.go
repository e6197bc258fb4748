package order

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/orderly/orderly/apperr"
)

// Limits on an order's shape. Requests outside them get an EInvalid error
// listing each offending field.
const (
	MaxItems         = 100
	MaxSKULength     = 64
	MaxCustomerIDLen = 255
	MaxQuantity      = 1_000_000
	// MaxAmount bounds unit prices and order amounts (minor units): 2^53-1,
	// the largest integer every JSON implementation represents exactly
	// (RFC 7493 §2.2), so a request fingerprint (RFC 8785 numbers are IEEE
	// 754 doubles) never confuses two different amounts.
	MaxAmount = 1<<53 - 1
)

// IDPrefix starts every order id.
const IDPrefix = "ord_"

// Item is one line of an order. UnitPrice is in minor currency units.
type Item struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

// Order is a customer's order as stored. Amount is the sum of the items'
// Quantity*UnitPrice in minor units of Currency. Version increases by one on
// every transition and is the compare-and-set guard of every update.
type Order struct {
	ID          string     `json:"id"`
	TenantID    string     `json:"-"`
	CustomerID  string     `json:"customer_id"`
	Currency    string     `json:"currency"`
	Items       []Item     `json:"items"`
	Amount      int64      `json:"amount"`
	State       State      `json:"state"`
	Version     int64      `json:"version"`
	CreatedAt   time.Time  `json:"created_at"`
	PaidAt      *time.Time `json:"paid_at"`
	FulfilledAt *time.Time `json:"fulfilled_at"`
	CancelledAt *time.Time `json:"cancelled_at"`
	// AmountCaptured and AmountRefunded (minor units of Currency) are
	// what the order's charge captured and what its refunds returned
	// (issue 16: partial refunds, and a cancel's refund of the rest). Only
	// GET /v1/orders/{id} sets them; elsewhere they are nil and omitted.
	AmountCaptured *int64 `json:"amount_captured,omitempty"`
	AmountRefunded *int64 `json:"amount_refunded,omitempty"`
	// Payment is the order's payment when it was only authorized at pay
	// (capture at fulfilment, issue 16): its status and what can still be
	// captured. Only GET /v1/orders/{id} sets it; nil (omitted) for a
	// payment captured at pay.
	Payment *Payment `json:"payment,omitempty"`
}

// Payment statuses of an authorization (Payment.Status).
const (
	// PaymentAuthorized: the money is held at the provider, not captured.
	PaymentAuthorized = "authorized"
	// PaymentCaptured: the authorization was captured (after shipping).
	PaymentCaptured = "captured"
	// PaymentVoided: the authorization was voided (a cancel, or a shipment
	// refused for good); nothing was captured.
	PaymentVoided = "voided"
)

// Payment is an order's authorization (capture at fulfilment): Status is
// PaymentAuthorized, PaymentCaptured or PaymentVoided; IntentID the
// provider's intent; AmountCapturable what can still be captured (minor
// units: the amount while authorized, 0 after); CaptureBefore when the
// provider releases an uncaptured hold (UTC; nil when it did not say);
// CaptureAttention is true once the completer flagged the hold as close to
// CaptureBefore (README "Capture at fulfilment").
type Payment struct {
	Status           string     `json:"status"`
	IntentID         string     `json:"intent_id"`
	AmountCapturable int64      `json:"amount_capturable"`
	CaptureBefore    *time.Time `json:"capture_before,omitempty"`
	CaptureAttention bool       `json:"capture_attention,omitempty"`
}

// NewOrderInput is what a client sends to create an order.
type NewOrderInput struct {
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
	Items      []Item `json:"items"`
}

// NewID returns a fresh order id: IDPrefix followed by the 32 hex digits of a
// UUIDv7 (RFC 9562 §5.7), so ids sort by creation time.
func NewID() string {
	u := uuid.Must(uuid.NewV7())
	return IDPrefix + strings.ReplaceAll(u.String(), "-", "")
}

// New validates in and returns an order in state Received with a new id,
// Version 1 and CreatedAt now (UTC, microsecond precision, the precision both
// stores keep). It returns an *apperr.Error with code apperr.EInvalid listing every bad
// field, including an Amount that would overflow int64.
func New(tenantID string, in NewOrderInput, now time.Time) (Order, error) {
	var fe []apperr.FieldError
	bad := func(field, reason string) { fe = append(fe, apperr.FieldError{Field: field, Reason: reason}) }

	if reason := TextReason(in.CustomerID, MaxCustomerIDLen); reason != "" {
		bad("customer_id", reason)
	}
	cur := in.Currency
	if reason := CurrencyReason(cur); reason != "" {
		bad("currency", reason)
	}
	switch {
	case len(in.Items) == 0:
		bad("items", "must have at least one item")
	case len(in.Items) > MaxItems:
		bad("items", fmt.Sprintf("must have at most %d items", MaxItems))
	}
	var amount int64
	overflow := false
	for i, it := range in.Items {
		p := func(member string) string { return "items[" + strconv.Itoa(i) + "]" + member } // named only on an error
		if reason := TextReason(it.SKU, MaxSKULength); reason != "" {
			bad(p(".sku"), reason)
		}
		if it.Quantity < 1 || it.Quantity > MaxQuantity {
			bad(p(".quantity"), fmt.Sprintf("must be between 1 and %d", MaxQuantity))
		}
		if it.UnitPrice < 0 || it.UnitPrice > MaxAmount {
			bad(p(".unit_price"), "must be from 0 to 2^53-1 (minor currency units)")
		}
		if it.Quantity >= 1 && it.Quantity <= MaxQuantity && it.UnitPrice >= 0 && it.UnitPrice <= MaxAmount && !overflow {
			if it.UnitPrice != 0 && it.Quantity > math.MaxInt64/it.UnitPrice {
				overflow = true
			} else if line := it.Quantity * it.UnitPrice; amount > math.MaxInt64-line {
				overflow = true
			} else {
				amount += line
			}
		}
	}
	if overflow || amount > MaxAmount {
		bad("amount", "the sum of quantity*unit_price exceeds 2^53-1 minor units")
	}
	if len(fe) > 0 {
		return Order{}, &apperr.Error{Code: apperr.EInvalid, Message: "the order has invalid fields", Fields: fe}
	}
	items := make([]Item, len(in.Items))
	copy(items, in.Items)
	return Order{
		ID:         NewID(),
		TenantID:   tenantID,
		CustomerID: in.CustomerID,
		Currency:   cur,
		Items:      items,
		Amount:     amount,
		State:      Received,
		Version:    1,
		CreatedAt:  now.UTC().Truncate(time.Microsecond),
	}, nil
}

// TextReason says what is wrong with a required text field (an identifier:
// a customer id, a SKU, a provider event id) of at most max
// bytes, or "" if nothing: it must be present, valid UTF-8, free of control
// characters (Unicode category Cc, NUL included), of format characters
// (category Cf: BiDi overrides and isolates, zero-width characters, tag
// characters), which make an identifier display as another, and of line
// and paragraph separators (Zl, Zp), and not only whitespace. The reason
// names the offending character (U+XXXX).
func TextReason(v string, max int) string {
	switch {
	case v == "":
		return "is required"
	case len(v) > max:
		return fmt.Sprintf("must be at most %d bytes", max)
	case !utf8.ValidString(v):
		return "must be valid UTF-8"
	}
	for _, r := range v {
		switch {
		case unicode.IsControl(r):
			return fmt.Sprintf("must not contain control characters (found U+%04X)", r)
		case unicode.Is(unicode.Cf, r):
			return fmt.Sprintf("must not contain format characters such as BiDi controls, zero-width or tag characters (found U+%04X)", r)
		case unicode.In(r, unicode.Zl, unicode.Zp):
			return fmt.Sprintf("must not contain line or paragraph separators (found U+%04X)", r)
		}
	}
	if strings.TrimSpace(v) == "" {
		return "must not be only whitespace"
	}
	return ""
}

// ValidID reports whether id has the shape of an order id: IDPrefix and 32
// lower-case hex digits.
func ValidID(id string) bool {
	hex, ok := strings.CutPrefix(id, IDPrefix)
	if !ok || len(hex) != 32 {
		return false
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidFilterText reports whether a filter value (such as a customer id in
// a list query) is text a stored field could hold.
func ValidFilterText(v string) bool {
	return utf8.ValidString(v) && strings.IndexFunc(v, unicode.IsControl) < 0
}

// Apply returns o moved to state to by event at time at: Version increases by
// one and the matching timestamp is set. It does not check that the move is
// allowed; the statemachine package decides that.
func (o Order) Apply(to State, at time.Time) Order {
	at = at.UTC().Truncate(time.Microsecond)
	o.State = to
	o.Version++
	switch to {
	case Paid:
		o.PaidAt = &at
	case Fulfilled:
		o.FulfilledAt = &at
	case Cancelled:
		o.CancelledAt = &at
	}
	return o
}

// Filter selects orders in a list. Zero values select everything. Limit is
// clamped to [1, 100] with 20 as the default; Cursor is the id of the last
// order of the previous page (newest first).
type Filter struct {
	State      State
	CustomerID string
	Limit      int
	After      string
}
