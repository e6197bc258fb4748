package order

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/text/currency"
)

// Limits on an order's shape. Requests outside them get an EInvalid error
// listing each offending field.
const (
	MaxItems         = 100
	MaxSKULength     = 64
	MaxCustomerIDLen = 255
	MaxQuantity      = 1_000_000
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
// stores keep). It returns an *Error with code EInvalid listing every bad
// field, including an Amount that would overflow int64.
func New(tenantID string, in NewOrderInput, now time.Time) (Order, error) {
	var fe []FieldError
	bad := func(field, reason string) { fe = append(fe, FieldError{Field: field, Reason: reason}) }

	if in.CustomerID == "" {
		bad("customer_id", "is required")
	} else if len(in.CustomerID) > MaxCustomerIDLen {
		bad("customer_id", fmt.Sprintf("must be at most %d bytes", MaxCustomerIDLen))
	}
	cur := in.Currency
	if cur == "" {
		bad("currency", "is required")
	} else if u, err := currency.ParseISO(cur); err != nil || u.String() != cur {
		bad("currency", "must be an ISO 4217 alphabetic code in upper case, such as USD")
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
		p := fmt.Sprintf("items[%d]", i)
		if it.SKU == "" {
			bad(p+".sku", "is required")
		} else if len(it.SKU) > MaxSKULength {
			bad(p+".sku", fmt.Sprintf("must be at most %d bytes", MaxSKULength))
		}
		if it.Quantity < 1 || it.Quantity > MaxQuantity {
			bad(p+".quantity", fmt.Sprintf("must be between 1 and %d", MaxQuantity))
		}
		if it.UnitPrice < 0 {
			bad(p+".unit_price", "must be zero or more (minor currency units)")
		}
		if it.Quantity >= 1 && it.UnitPrice >= 0 && !overflow {
			if it.UnitPrice != 0 && it.Quantity > math.MaxInt64/it.UnitPrice {
				overflow = true
			} else if line := it.Quantity * it.UnitPrice; amount > math.MaxInt64-line {
				overflow = true
			} else {
				amount += line
			}
		}
	}
	if overflow {
		bad("amount", "the sum of quantity*unit_price overflows a 64-bit integer")
	}
	if len(fe) > 0 {
		return Order{}, &Error{Code: EInvalid, Message: "the order has invalid fields", Fields: fe}
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
