// Package sqlite is the embedded Store: one durable SQLite file for a single
// Orderly node that needs no setup, through the pure-Go modernc.org/sqlite.
//
// Writes run in BEGIN IMMEDIATE transactions, so SQLite serialises them; the
// file is in WAL mode with synchronous=FULL, so a committed claim survives a
// crash or power loss. Readers do not block the writer. All SQL is in
// queries.go.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/sqlitefile"
	"github.com/orderly/orderly/migrations"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// FileName is the database file Open creates in its directory.
const FileName = "orderly.db"

// Store implements store.Store on one SQLite file.
type Store struct {
	db *sql.DB
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database file FileName in dir, applies
// the embedded migrations, and returns the Store. Only one process may use a
// file at a time; several goroutines may.
func Open(ctx context.Context, dir string) (*Store, error) {
	db, err := sqlitefile.Open(dir, FileName)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := migrations.Apply(ctx, db, migrations.SQLite); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return translate(s.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one))
}

// CreateOrder implements store.Store: one IMMEDIATE transaction that claims
// the key, then inserts the order only if the claim succeeded.
func (s *Store) CreateOrder(ctx context.Context, key *idempotency.Record, o order.Order) (*idempotency.Record, error) {
	items, err := json.Marshal(o.Items)
	if err != nil {
		return nil, err
	}
	var held *idempotency.Record
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if key != nil {
			k := *key
			res, err := tx.ExecContext(ctx, claimCompleted, k.TenantID, k.KeyHash, k.Fingerprint, k.Derived, k.StatusCode,
				nullable(k.ResourceID), nullable(string(k.ErrorCode)), nullable(k.ErrorDetail), micros(k.CreatedAt), micros(k.ExpiresAt))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				r, err := scanKey(tx.QueryRowContext(ctx, selectKey, k.TenantID, k.KeyHash))
				held = &r
				return err
			}
		}
		_, err := tx.ExecContext(ctx, insertOrder, orderArgs(o, items)...)
		return err
	})
	return held, translate(err)
}

// AcquireLease implements store.Store in one IMMEDIATE transaction.
func (s *Store) AcquireLease(ctx context.Context, c idempotency.Record) (idempotency.Record, bool, error) {
	var r idempotency.Record
	acquired := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = scanKey(tx.QueryRowContext(ctx, acquireLease, c.TenantID, c.KeyHash, c.Fingerprint, c.Derived,
			nullable(c.ResourceID), micros(c.LockedUntil), micros(c.CreatedAt), micros(c.ExpiresAt)))
		if err == nil {
			acquired = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		r, err = scanKey(tx.QueryRowContext(ctx, selectKey, c.TenantID, c.KeyHash))
		return err
	})
	return r, acquired, translate(err)
}

// RecordAttempt implements store.Store in one IMMEDIATE transaction.
func (s *Store) RecordAttempt(ctx context.Context, l store.Lease, a store.Attempt, version int64) (store.Attempt, error) {
	var out store.Attempt
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := fenced(tx.ExecContext(ctx, fenceRecordAttempt, l.TenantID, l.KeyHash, l.Token, a.ProviderKey)); err != nil {
			return err
		}
		var current int64
		if err := tx.QueryRowContext(ctx, orderVersion, a.OrderID, a.TenantID).Scan(&current); err != nil {
			return err
		}
		if current != version {
			return store.ErrVersionConflict
		}
		if err := noOtherOpenAttempt(ctx, tx, a.OrderID, a.ProviderKey); err != nil {
			return err
		}
		var clash bool
		if err := tx.QueryRowContext(ctx, sameKeyOtherMethod, a.ProviderKey, a.PaymentMethod).Scan(&clash); err != nil {
			return err
		}
		if clash {
			return store.ErrAttemptInFlight
		}
		if _, err := tx.ExecContext(ctx, insertAttempt, a.ProviderKey, a.TenantID, a.OrderID, string(a.Kind), string(a.Status),
			a.Amount, a.Currency, a.PaymentMethod, nullable(a.ProviderRef), nullable(a.ErrorCode),
			micros(a.CreatedAt), micros(a.UpdatedAt)); err != nil {
			return err
		}
		var err error
		out, err = scanAttempt(tx.QueryRowContext(ctx, selectAttempt, a.ProviderKey))
		return err
	})
	return out, translate(err)
}

// Complete implements store.Store in one IMMEDIATE transaction.
func (s *Store) Complete(ctx context.Context, l store.Lease, c store.Completion) error {
	return translate(s.inTx(ctx, func(tx *sql.Tx) error {
		o := c.Outcome
		if err := fenced(tx.ExecContext(ctx, completeKey, l.TenantID, l.KeyHash, l.Token, o.StatusCode,
			nullable(o.ResourceID), nullable(string(o.ErrorCode)), nullable(o.ErrorDetail))); err != nil {
			return err
		}
		if c.Next != nil {
			res, err := tx.ExecContext(ctx, casOrder, casArgs(*c.Next)...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return store.ErrVersionConflict
			}
			own := ""
			if c.Attempt != nil {
				own = c.Attempt.ProviderKey
			}
			if err := noOtherOpenAttempt(ctx, tx, c.Next.ID, own); err != nil {
				return err
			}
		}
		return settle(ctx, tx, c.Attempt)
	}))
}

// Release implements store.Store in one IMMEDIATE transaction.
func (s *Store) Release(ctx context.Context, l store.Lease, to idempotency.State, u *store.AttemptUpdate) error {
	return translate(s.inTx(ctx, func(tx *sql.Tx) error {
		if err := fenced(tx.ExecContext(ctx, releaseKey, l.TenantID, l.KeyHash, l.Token, string(to))); err != nil {
			return err
		}
		return settle(ctx, tx, u)
	}))
}

// fenced turns a fenced UPDATE that matched no row into ErrLeaseLost.
func fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

// noOtherOpenAttempt returns ErrAttemptInFlight if an attempt on orderID
// other than providerKey is open.
func noOtherOpenAttempt(ctx context.Context, tx *sql.Tx, orderID, providerKey string) error {
	var open bool
	if err := tx.QueryRowContext(ctx, otherOpenAttempt, orderID, providerKey).Scan(&open); err != nil {
		return err
	}
	if open {
		return store.ErrAttemptInFlight
	}
	return nil
}

func settle(ctx context.Context, tx *sql.Tx, u *store.AttemptUpdate) error {
	if u == nil {
		return nil
	}
	_, err := tx.ExecContext(ctx, updateAttempt, u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), micros(u.At))
	return err
}

// TakeOverAbandoned implements store.Store in one IMMEDIATE transaction.
func (s *Store) TakeOverAbandoned(ctx context.Context, now, leaseUntil time.Time, limit int) ([]idempotency.Record, error) {
	var out []idempotency.Record
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, takeOverAbandoned, micros(now), micros(leaseUntil), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanKey(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, translate(err)
}

// GetAttempt implements store.Store.
func (s *Store) GetAttempt(ctx context.Context, providerKey string) (store.Attempt, error) {
	a, err := scanAttempt(s.db.QueryRowContext(ctx, selectAttempt, providerKey))
	return a, translate(err)
}

// Sweep implements store.Store: two batched statements, each its own short
// transaction.
func (s *Store) Sweep(ctx context.Context, now time.Time, tombstoneFor time.Duration, limit int) (store.SweepResult, error) {
	var res store.SweepResult
	r, err := s.db.ExecContext(ctx, tombstoneKeys, micros(now), tombstoneFor.Microseconds(), limit)
	if err != nil {
		return res, translate(err)
	}
	n, _ := r.RowsAffected()
	res.Tombstoned = int(n)
	r, err = s.db.ExecContext(ctx, deleteKeys, micros(now), limit)
	if err != nil {
		return res, translate(err)
	}
	n, _ = r.RowsAffected()
	res.Deleted = int(n)
	return res, nil
}

// inTx runs fn in a transaction (BEGIN IMMEDIATE, set by the DSN), committing
// when fn returns nil and rolling back otherwise. A commit error is returned,
// never lost; a held key (fn returned nil with nothing to write) commits an
// empty transaction.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// LookupKey implements store.Store.
func (s *Store) LookupKey(ctx context.Context, tenantID, key string) (idempotency.Record, error) {
	r, err := scanKey(s.db.QueryRowContext(ctx, selectKey, tenantID, key))
	return r, translate(err)
}

// GetOrder implements store.Store.
func (s *Store) GetOrder(ctx context.Context, tenantID, id string) (order.Order, error) {
	o, err := scanOrder(s.db.QueryRowContext(ctx, selectOrder, tenantID, id))
	return o, translate(err)
}

// ListOrders implements store.Store.
func (s *Store) ListOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error) {
	rows, err := s.db.QueryContext(ctx, listOrders, tenantID, string(f.State), f.CustomerID, f.After, f.Limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var os []order.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, translate(err)
		}
		os = append(os, o)
	}
	return os, translate(rows.Err())
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func microsPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromMicrosPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

func orderArgs(o order.Order, items []byte) []any {
	return []any{o.ID, o.TenantID, o.CustomerID, o.Currency, string(items), o.Amount,
		string(o.State), o.Version, micros(o.CreatedAt), microsPtr(o.PaidAt),
		microsPtr(o.FulfilledAt), microsPtr(o.CancelledAt)}
}

func casArgs(next order.Order) []any {
	return []any{next.ID, next.TenantID, string(next.State), next.Version,
		microsPtr(next.PaidAt), microsPtr(next.FulfilledAt), microsPtr(next.CancelledAt)}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

type scanner interface{ Scan(dest ...any) error }

func scanOrder(row scanner) (order.Order, error) {
	var o order.Order
	var items, state string
	var created int64
	var paid, fulfilled, cancelled sql.NullInt64
	err := row.Scan(&o.ID, &o.TenantID, &o.CustomerID, &o.Currency, &items, &o.Amount,
		&state, &o.Version, &created, &paid, &fulfilled, &cancelled)
	if err != nil {
		return o, err
	}
	o.State = order.State(state)
	o.CreatedAt = fromMicros(created)
	o.PaidAt, o.FulfilledAt, o.CancelledAt = fromMicrosPtr(paid), fromMicrosPtr(fulfilled), fromMicrosPtr(cancelled)
	return o, json.Unmarshal([]byte(items), &o.Items)
}

func scanKey(row scanner) (idempotency.Record, error) {
	var r idempotency.Record
	var state string
	var status, locked, tombstone sql.NullInt64
	var resource, code, detail, recovery, attempt sql.NullString
	var created, expires int64
	err := row.Scan(&r.TenantID, &r.KeyHash, &r.Fingerprint, &r.Derived, &state, &status,
		&resource, &code, &detail, &locked, &r.FencingToken, &recovery, &attempt,
		&created, &expires, &tombstone)
	r.State = idempotency.State(state)
	r.StatusCode = int(status.Int64)
	r.ResourceID, r.ErrorCode, r.ErrorDetail = resource.String, apperr.Code(code.String), detail.String
	r.RecoveryPoint, r.AttemptKey = idempotency.RecoveryPoint(recovery.String), attempt.String
	r.LockedUntil, r.TombstoneUntil = zeroOrTime(locked), zeroOrTime(tombstone)
	r.CreatedAt, r.ExpiresAt = fromMicros(created), fromMicros(expires)
	return r, err
}

func scanAttempt(row scanner) (store.Attempt, error) {
	var a store.Attempt
	var kind, status string
	var ref, code sql.NullString
	var created, updated int64
	err := row.Scan(&a.ProviderKey, &a.TenantID, &a.OrderID, &kind, &status, &a.Amount, &a.Currency,
		&a.PaymentMethod, &ref, &code, &created, &updated)
	a.Kind, a.Status = store.AttemptKind(kind), store.AttemptStatus(status)
	a.ProviderRef, a.ErrorCode = ref.String, code.String
	a.CreatedAt, a.UpdatedAt = fromMicros(created), fromMicros(updated)
	return a, err
}

func zeroOrTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// translate maps driver errors to the store's vocabulary: no rows →
// ErrNotFound; SQLITE_BUSY/LOCKED (after the busy timeout) → a retryable
// EUnavailable *apperr.Error.
func translate(err error) error {
	if err == nil || errors.Is(err, store.ErrVersionConflict) || errors.Is(err, store.ErrLeaseLost) ||
		errors.Is(err, store.ErrAttemptInFlight) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &apperr.Error{Code: apperr.EUnavailable, Message: "the request was cancelled or timed out"}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return &apperr.Error{Code: apperr.EUnavailable, Message: "the database is busy"}
		}
	}
	if strings.Contains(err.Error(), "database is closed") {
		return &apperr.Error{Code: apperr.EUnavailable, Message: "the database is closed"}
	}
	return fmt.Errorf("sqlite: %w", err)
}
