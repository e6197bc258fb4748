package postgres

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// The scanners below hold one row's columns as pgtype values (Valid false
// for NULL), so the same code reads a row that must exist and the NULL side
// of an outer join. Value types, not pointers: pgx scans them without
// allocating the value or wrapping a pointer-to-pointer plan per column
// (issue 19: most of a replay's allocations were these).

// orderCols scans orderColumns.
type orderCols struct {
	id, tenant, customer, currency, state pgtype.Text
	items                                 []byte
	amount, version                       pgtype.Int8
	created, paid, fulfilled, cancelled   pgtype.Timestamptz
}

func (c *orderCols) targets() []any {
	return []any{&c.id, &c.tenant, &c.customer, &c.currency, &c.items, &c.amount,
		&c.state, &c.version, &c.created, &c.paid, &c.fulfilled, &c.cancelled}
}

// order returns the scanned order, or nil when the columns were NULL.
func (c *orderCols) order() (*order.Order, error) {
	if !c.id.Valid {
		return nil, nil
	}
	o := order.Order{ID: c.id.String, TenantID: c.tenant.String, CustomerID: c.customer.String,
		Currency: c.currency.String, Amount: c.amount.Int64, State: order.State(c.state.String),
		Version: c.version.Int64, CreatedAt: utcOf(c.created),
		PaidAt: utcPtr(c.paid), FulfilledAt: utcPtr(c.fulfilled), CancelledAt: utcPtr(c.cancelled)}
	if err := json.Unmarshal(c.items, &o.Items); err != nil {
		return nil, err
	}
	return &o, nil
}

// keyCols scans keyColumns.
type keyCols struct {
	tenant, keyHash, fingerprint, state                  pgtype.Text
	operation, resource, code, detail, recovery, attempt pgtype.Text
	derived                                              pgtype.Bool
	token                                                pgtype.Int8
	locked, created, expires, tombstone                  pgtype.Timestamptz
}

func (c *keyCols) targets() []any {
	return []any{&c.tenant, &c.keyHash, &c.fingerprint, &c.derived, &c.state, &c.operation,
		&c.resource, &c.code, &c.detail, &c.locked, &c.token, &c.recovery, &c.attempt,
		&c.created, &c.expires, &c.tombstone}
}

// record returns the scanned key, and false when the columns were NULL.
func (c *keyCols) record() (idempotency.Record, bool) {
	if !c.keyHash.Valid {
		return idempotency.Record{}, false
	}
	return idempotency.Record{
		TenantID: c.tenant.String, KeyHash: c.keyHash.String, Fingerprint: c.fingerprint.String,
		Derived: c.derived.Bool, State: idempotency.State(c.state.String),
		Operation: idempotency.Operation(c.operation.String), ResourceID: c.resource.String,
		ErrorCode: apperr.Code(c.code.String), ErrorDetail: c.detail.String,
		LockedUntil: utcOf(c.locked), FencingToken: c.token.Int64,
		RecoveryPoint: idempotency.RecoveryPoint(c.recovery.String), AttemptKey: c.attempt.String,
		CreatedAt: utcOf(c.created), ExpiresAt: utcOf(c.expires), TombstoneUntil: utcOf(c.tombstone),
	}, true
}

// attemptCols scans attemptColumns.
type attemptCols struct {
	key, tenant, orderID, kind, status, currency, method, ref, code pgtype.Text
	amount                                                          pgtype.Int8
	created, updated, sent                                          pgtype.Timestamptz
	intent                                                          pgtype.Text
}

func (c *attemptCols) targets() []any {
	return []any{&c.key, &c.tenant, &c.orderID, &c.kind, &c.status, &c.amount, &c.currency,
		&c.method, &c.ref, &c.code, &c.created, &c.updated, &c.intent, &c.sent}
}

// attempt returns the scanned attempt, or nil when the columns were NULL.
func (c *attemptCols) attempt() *payment.Attempt {
	if !c.key.Valid {
		return nil
	}
	return &payment.Attempt{ProviderKey: c.key.String, TenantID: c.tenant.String, OrderID: c.orderID.String,
		Kind: payment.AttemptKind(c.kind.String), Status: payment.AttemptStatus(c.status.String),
		Amount: c.amount.Int64, Currency: c.currency.String, PaymentMethod: c.method.String,
		ProviderRef: c.ref.String, ErrorCode: c.code.String, IntentID: c.intent.String, KeySentAt: utcOf(c.sent),
		CreatedAt: utcOf(c.created), UpdatedAt: utcOf(c.updated)}
}

// utcOf is a scanned timestamp in UTC, the zero time for NULL.
func utcOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return utc(t.Time)
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func utcPtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
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
