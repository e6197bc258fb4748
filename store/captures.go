package store

import (
	"context"
	"time"
)

// AuthorizationStatus is where an order's authorization stands (capture at
// fulfilment, issue 16): AuthAuthorized, then AuthCaptured or AuthVoided,
// never back.
type AuthorizationStatus string

// Authorization statuses.
const (
	AuthAuthorized AuthorizationStatus = "authorized"
	AuthCaptured   AuthorizationStatus = "captured"
	AuthVoided     AuthorizationStatus = "voided"
)

// Authorization is the authorization a pay made when the deployment
// captures at fulfilment (ORDERD_CAPTURE=at_fulfilment): the charge
// attempt that made it (ChargeKey), its provider intent (IntentID, in
// payment.IntentRequiresCapture while AuthAuthorized), the amount held
// (minor units of Currency), and CaptureBefore, when the provider releases
// an uncaptured hold (zero when it did not say). FlaggedAt is when the
// completer flagged it as close to CaptureBefore (zero: not flagged).
type Authorization struct {
	TenantID      string
	OrderID       string
	ChargeKey     string
	IntentID      string
	Amount        int64
	Currency      string
	CaptureBefore time.Time
	Status        AuthorizationStatus
	FlaggedAt     time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// CaptureExecutor is the capability of a store's Executor (the store's and
// the one InTx hands out) that keeps authorizations; both stores have it,
// and the service asserts it on the tx of a phase 3 so an authorization
// changes in the transaction of its order's change.
type CaptureExecutor interface {
	// PutAuthorization records a (its Status is written as
	// AuthAuthorized) and the order's refund totals with Captured 0, so
	// no refund can be reserved before the capture (ErrRefundExceedsCaptured).
	// An authorization the order has already is kept as it is.
	PutAuthorization(ctx context.Context, a Authorization) error
	// SetAuthorization moves the tenant's order's authorization from
	// AuthAuthorized to to (AuthCaptured or AuthVoided) at at, a
	// compare-and-set: ErrVersionConflict when it is not AuthAuthorized
	// (moved already), ErrNotFound when the order has none. To
	// AuthCaptured it also sets the order's refund totals' Captured to
	// the authorized amount.
	SetAuthorization(ctx context.Context, tenantID, orderID string, to AuthorizationStatus, at time.Time) error
	// GetAuthorization returns the tenant's order's authorization, or
	// ErrNotFound (its payment was captured at pay, or it is unpaid).
	GetAuthorization(ctx context.Context, tenantID, orderID string) (Authorization, error)
}

// CaptureStore is a Store that keeps authorizations (both stores are).
type CaptureStore interface {
	CaptureExecutor
	// FlagExpiringAuthorizations sets FlaggedAt to at on at most limit
	// authorizations still AuthAuthorized, not flagged yet, whose
	// CaptureBefore is before before, soonest first, and returns them as
	// flagged.
	FlagExpiringAuthorizations(ctx context.Context, before, at time.Time, limit int) ([]Authorization, error)
}
