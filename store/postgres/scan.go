package postgres

import (
	"encoding/json"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// The scanners below hold one row's columns as pointers, so the same code
// reads a row that must exist and the NULL side of an outer join.

// orderCols scans orderColumns.
type orderCols struct {
	id, tenant, customer, currency, state *string
	items                                 []byte
	amount, version                       *int64
	created, paid, fulfilled, cancelled   *time.Time
}

func (c *orderCols) targets() []any {
	return []any{&c.id, &c.tenant, &c.customer, &c.currency, &c.items, &c.amount,
		&c.state, &c.version, &c.created, &c.paid, &c.fulfilled, &c.cancelled}
}

// order returns the scanned order, or nil when the columns were NULL.
func (c *orderCols) order() (*order.Order, error) {
	if c.id == nil {
		return nil, nil
	}
	o := order.Order{ID: *c.id, TenantID: deref(c.tenant), CustomerID: deref(c.customer),
		Currency: deref(c.currency), Amount: deref(c.amount), State: order.State(deref(c.state)),
		Version: deref(c.version), CreatedAt: utc(deref(c.created)),
		PaidAt: utcPtr(c.paid), FulfilledAt: utcPtr(c.fulfilled), CancelledAt: utcPtr(c.cancelled)}
	if err := json.Unmarshal(c.items, &o.Items); err != nil {
		return nil, err
	}
	return &o, nil
}

// keyCols scans keyColumns.
type keyCols struct {
	tenant, keyHash, fingerprint, state                  *string
	operation, resource, code, detail, recovery, attempt *string
	derived                                              *bool
	token                                                *int64
	locked, created, expires, tombstone                  *time.Time
}

func (c *keyCols) targets() []any {
	return []any{&c.tenant, &c.keyHash, &c.fingerprint, &c.derived, &c.state, &c.operation,
		&c.resource, &c.code, &c.detail, &c.locked, &c.token, &c.recovery, &c.attempt,
		&c.created, &c.expires, &c.tombstone}
}

// record returns the scanned key, and false when the columns were NULL.
func (c *keyCols) record() (idempotency.Record, bool) {
	if c.keyHash == nil {
		return idempotency.Record{}, false
	}
	return idempotency.Record{
		TenantID: deref(c.tenant), KeyHash: *c.keyHash, Fingerprint: deref(c.fingerprint),
		Derived: deref(c.derived), State: idempotency.State(deref(c.state)),
		Operation: idempotency.Operation(deref(c.operation)), ResourceID: deref(c.resource),
		ErrorCode: apperr.Code(deref(c.code)), ErrorDetail: deref(c.detail),
		LockedUntil: utc(deref(c.locked)), FencingToken: deref(c.token),
		RecoveryPoint: idempotency.RecoveryPoint(deref(c.recovery)), AttemptKey: deref(c.attempt),
		CreatedAt: utc(deref(c.created)), ExpiresAt: utc(deref(c.expires)), TombstoneUntil: utc(deref(c.tombstone)),
	}, true
}

// attemptCols scans attemptColumns.
type attemptCols struct {
	key, tenant, orderID, kind, status, currency, method, ref, code *string
	amount                                                          *int64
	created, updated, sent                                          *time.Time
	intent                                                          *string
}

func (c *attemptCols) targets() []any {
	return []any{&c.key, &c.tenant, &c.orderID, &c.kind, &c.status, &c.amount, &c.currency,
		&c.method, &c.ref, &c.code, &c.created, &c.updated, &c.intent, &c.sent}
}

// attempt returns the scanned attempt, or nil when the columns were NULL.
func (c *attemptCols) attempt() *payment.Attempt {
	if c.key == nil {
		return nil
	}
	return &payment.Attempt{ProviderKey: *c.key, TenantID: deref(c.tenant), OrderID: deref(c.orderID),
		Kind: payment.AttemptKind(deref(c.kind)), Status: payment.AttemptStatus(deref(c.status)),
		Amount: deref(c.amount), Currency: deref(c.currency), PaymentMethod: deref(c.method),
		ProviderRef: deref(c.ref), ErrorCode: deref(c.code), IntentID: deref(c.intent), KeySentAt: utc(deref(c.sent)),
		CreatedAt: utc(deref(c.created)), UpdatedAt: utc(deref(c.updated))}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func targets(parts ...[]any) []any {
	var all []any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}
