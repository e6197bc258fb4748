package payment

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ChargeGateway is the seam before issue 15, kept only while the service
// moves to Gateway; it will be removed. Deprecated: use Gateway.
//
// ChargeGateway charges and refunds through a payment provider. Implementations
// must honour IdempotencyKey: a repeated key returns the original result and
// never captures (or refunds) twice. Implementations must be safe for
// concurrent use.
type ChargeGateway interface {
	// Charge captures req.Amount minor units of req.Currency with
	// req.PaymentMethod. A repeated req.IdempotencyKey with the same
	// parameters returns the original Charge, or the original decline.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)
	// Refund returns req.Amount minor units of the charge whose idempotency
	// key is req.ChargeKey. A repeated req.IdempotencyKey with the same
	// parameters returns the original Refund. An unknown ChargeKey yields an
	// error wrapping ErrChargeNotFound.
	Refund(ctx context.Context, req ChargeRefundRequest) (ChargeRefund, error)
	// Lookup returns the outcome the provider recorded under the charge
	// idempotency key: the Charge (with its current Status), the remembered
	// decline as a *DeclineError, or an error wrapping ErrChargeNotFound if
	// the provider has nothing under the key. It changes nothing, so a
	// caller whose Charge ended with an unknown outcome (IsUnknownOutcome)
	// may use it to learn what happened.
	Lookup(ctx context.Context, idempotencyKey string) (Charge, error)
}

// ChargeRequest asks a Gateway to capture a payment for one order.
type ChargeRequest struct {
	// IdempotencyKey is the provider-side key, such as "<order id>/pay": one
	// logical charge per order. It is required.
	IdempotencyKey string
	// OrderID is the id of the order being paid.
	OrderID string
	// Amount is the amount to capture in minor units of Currency; it must
	// not be negative.
	Amount int64
	// Currency is an ISO 4217 alphabetic code such as "USD".
	Currency string
	// PaymentMethod is the provider's token for the customer's payment
	// method, such as "pm_card_visa".
	PaymentMethod string
}

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without capturing anything: for
// a request without IdempotencyKey or Currency, or with a negative Amount.
func (r ChargeRequest) Validate() error {
	switch {
	case r.IdempotencyKey == "":
		return &ProviderError{Err: errors.New("idempotency key is required")}
	case r.Currency == "":
		return &ProviderError{Err: errors.New("currency is required")}
	case r.Amount < 0:
		return &ProviderError{Err: fmt.Errorf("amount %d is negative", r.Amount)}
	}
	return nil
}

// Charge is a captured payment as the provider records it.
type Charge struct {
	// ID is the provider's charge id, such as "ch_" followed by 24 hex digits.
	ID string
	// IdempotencyKey is the key of the ChargeRequest that created the charge.
	IdempotencyKey string
	// OrderID is the id of the order the charge pays.
	OrderID string
	// Amount is the captured amount in minor units of Currency.
	Amount int64
	// Currency is an ISO 4217 alphabetic code such as "USD".
	Currency string
	// Status is the charge's current status.
	Status ChargeStatus
	// CreatedAt is when the charge was captured (UTC).
	CreatedAt time.Time
}

// ChargeStatus is the status of a Charge: ChargeCaptured or ChargeRefunded.
type ChargeStatus string

// Charge statuses.
const (
	// ChargeCaptured is the status of a charge whose funds were captured and
	// not refunded.
	ChargeCaptured ChargeStatus = "captured"
	// ChargeRefunded is the status of a charge that has been refunded, in
	// whole or in part.
	ChargeRefunded ChargeStatus = "refunded"
)

// ChargeRefundRequest asks a Gateway to refund (part of) an earlier charge.
type ChargeRefundRequest struct {
	// IdempotencyKey is the provider-side key of the refund, such as
	// "<order id>/refund". It is required.
	IdempotencyKey string
	// ChargeKey is the idempotency key of the charge to refund.
	ChargeKey string
	// Amount is the amount to refund in minor units of the charge's
	// currency; it must not be negative nor exceed what is left unrefunded.
	Amount int64
}

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without refunding anything: for
// a request without IdempotencyKey. Whether Amount is within what is left
// of the charge only the provider knows.
func (r ChargeRefundRequest) Validate() error {
	if r.IdempotencyKey == "" {
		return &ProviderError{Err: errors.New("idempotency key is required")}
	}
	return nil
}

// ChargeRefund is a refund as the provider records it.
type ChargeRefund struct {
	// ID is the provider's refund id, such as "re_" followed by 24 hex digits.
	ID string
	// ChargeID is the ID of the refunded Charge.
	ChargeID string
	// Amount is the refunded amount in minor units of the charge's currency.
	Amount int64
	// CreatedAt is when the refund was made (UTC).
	CreatedAt time.Time
}
