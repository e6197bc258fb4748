// Package postgres is the Store for several Orderly instances sharing one
// PostgreSQL database, through github.com/jackc/pgx/v5.
//
// A create claims its idempotency key and inserts the order in one statement
// (one round trip, one commit): a data-modifying CTE whose INSERT into orders
// runs only if the key's INSERT … ON CONFLICT claimed it. A concurrent
// duplicate blocks on the unique index until the first transaction commits,
// then sees the key held and replays. A leased request's writes are each one
// short transaction that first updates the key row guarded by its fencing
// token, so a stale worker's write matches no row and changes nothing. The
// completer and the sweeper take rows with FOR UPDATE SKIP LOCKED, so several
// instances share the work without blocking each other. All SQL is in
// queries.go.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/migrations"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// Store implements store.Store on a pgx connection pool.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// Open connects to the PostgreSQL database at url (a postgres:// URL or a
// key=value DSN), applies the embedded migrations, and returns the Store.
// Pool settings (pool_max_conns, …) may be given as URL parameters.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database URL: %w", err)
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig is Open with a parsed pool configuration, for callers that set
// a tracer or pool sizes.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config) (*Store, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	err = migrations.Apply(ctx, db, migrations.Postgres)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		pool.Close()
		// The cause (host, SQLSTATE) helps an operator; the URL's password
		// is never part of a pgx error.
		return nil, fmt.Errorf("postgres: connect and migrate: %w", err)
	}
	return &Store{pool: pool}, nil
}

// Pool returns the underlying pool, for tests and benchmarks.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return translate(s.pool.Ping(ctx))
}

// CreateOrder implements store.Store in one statement.
func (s *Store) CreateOrder(ctx context.Context, key *idempotency.Record, o order.Order) (*idempotency.Record, error) {
	items, err := json.Marshal(o.Items)
	if err != nil {
		return nil, err
	}
	if key == nil {
		_, err := s.pool.Exec(ctx, insertOrder, orderArgs(o, items)...)
		return nil, translate(err)
	}
	k := *key
	args := append(orderArgs(o, items), k.TenantID, k.KeyHash, k.Fingerprint, k.Derived, k.StatusCode,
		nullable(k.ResourceID), nullable(string(k.ErrorCode)), nullable(k.ErrorDetail), k.CreatedAt, k.ExpiresAt)
	query := claimAndInsertOrder
	if k.Derived {
		query = claimDerivedAndInsertOrder
	}
	var claimed bool
	if err := s.pool.QueryRow(ctx, query, args...).Scan(&claimed); err != nil {
		return nil, translate(err)
	}
	if claimed {
		return nil, nil
	}
	return s.held(ctx, k.TenantID, k.KeyHash)
}

// AcquireLease implements store.Store in one statement, plus a read of the
// holder when the key is not acquired.
func (s *Store) AcquireLease(ctx context.Context, c idempotency.Record) (idempotency.Record, bool, error) {
	rows, _ := s.pool.Query(ctx, acquireLease, c.TenantID, c.KeyHash, c.Fingerprint, c.Derived,
		nullable(c.ResourceID), c.LockedUntil, c.CreatedAt, c.ExpiresAt)
	r, err := pgx.CollectExactlyOneRow(rows, scanKey)
	switch {
	case err == nil:
		return r, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return idempotency.Record{}, false, translate(err)
	}
	held, err := s.LookupKey(ctx, c.TenantID, c.KeyHash)
	return held, false, err
}

// RecordAttempt implements store.Store in one transaction.
func (s *Store) RecordAttempt(ctx context.Context, l store.Lease, a store.Attempt, orderVersion int64) (store.Attempt, error) {
	var out store.Attempt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, fenceRecordAttempt, l.TenantID, l.KeyHash, l.Token, a.ProviderKey)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrLeaseLost
		}
		var version int64
		if err := tx.QueryRow(ctx, lockOrderVersion, a.OrderID, a.TenantID).Scan(&version); err != nil {
			return err
		}
		if version != orderVersion {
			return store.ErrVersionConflict
		}
		if err := noOtherOpenAttempt(ctx, tx, a.OrderID, a.ProviderKey); err != nil {
			return err
		}
		var clash bool
		if err := tx.QueryRow(ctx, sameKeyOtherMethod, a.ProviderKey, a.PaymentMethod).Scan(&clash); err != nil {
			return err
		}
		if clash {
			return store.ErrAttemptInFlight
		}
		if _, err := tx.Exec(ctx, insertAttempt, a.ProviderKey, a.TenantID, a.OrderID, string(a.Kind), string(a.Status),
			a.Amount, a.Currency, a.PaymentMethod, nullable(a.ProviderRef), nullable(a.ErrorCode), a.CreatedAt, a.UpdatedAt); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, selectAttempt, a.ProviderKey)
		out, err = pgx.CollectExactlyOneRow(rows, scanAttempt)
		return err
	})
	return out, translate(err)
}

// Complete implements store.Store in one transaction: fence and complete the
// key, compare-and-set the order, settle the attempt.
func (s *Store) Complete(ctx context.Context, l store.Lease, c store.Completion) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		o := c.Outcome
		tag, err := tx.Exec(ctx, completeKey, l.TenantID, l.KeyHash, l.Token, o.StatusCode,
			nullable(o.ResourceID), nullable(string(o.ErrorCode)), nullable(o.ErrorDetail))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrLeaseLost
		}
		if c.Next != nil {
			tag, err := tx.Exec(ctx, casOrder, casArgs(*c.Next)...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
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
	})
	return translate(err)
}

// Release implements store.Store in one transaction.
func (s *Store) Release(ctx context.Context, l store.Lease, to idempotency.State, u *store.AttemptUpdate) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, releaseKey, l.TenantID, l.KeyHash, l.Token, string(to))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrLeaseLost
		}
		return settle(ctx, tx, u)
	})
	return translate(err)
}

// noOtherOpenAttempt returns ErrAttemptInFlight if an attempt on orderID
// other than providerKey is open. The caller holds the order's row lock.
func noOtherOpenAttempt(ctx context.Context, tx pgx.Tx, orderID, providerKey string) error {
	var open bool
	if err := tx.QueryRow(ctx, otherOpenAttempt, orderID, providerKey).Scan(&open); err != nil {
		return err
	}
	if open {
		return store.ErrAttemptInFlight
	}
	return nil
}

func settle(ctx context.Context, tx pgx.Tx, u *store.AttemptUpdate) error {
	if u == nil {
		return nil
	}
	_, err := tx.Exec(ctx, updateAttempt, u.ProviderKey, string(u.Status), nullable(u.ProviderRef), nullable(u.ErrorCode), u.At)
	return err
}

// TakeOverAbandoned implements store.Store in one statement.
func (s *Store) TakeOverAbandoned(ctx context.Context, now, leaseUntil time.Time, limit int) ([]idempotency.Record, error) {
	rows, _ := s.pool.Query(ctx, takeOverAbandoned, now, leaseUntil, limit)
	rs, err := pgx.CollectRows(rows, scanKey)
	return rs, translate(err)
}

// GetAttempt implements store.Store.
func (s *Store) GetAttempt(ctx context.Context, providerKey string) (store.Attempt, error) {
	rows, _ := s.pool.Query(ctx, selectAttempt, providerKey)
	a, err := pgx.CollectExactlyOneRow(rows, scanAttempt)
	return a, translate(err)
}

// Sweep implements store.Store: two batched statements, each its own short
// transaction, skipping rows other sweepers hold.
func (s *Store) Sweep(ctx context.Context, now time.Time, tombstoneFor time.Duration, limit int) (store.SweepResult, error) {
	var res store.SweepResult
	tag, err := s.pool.Exec(ctx, tombstoneKeys, now, tombstoneFor.Microseconds(), limit)
	if err != nil {
		return res, translate(err)
	}
	res.Tombstoned = int(tag.RowsAffected())
	tag, err = s.pool.Exec(ctx, deleteKeys, now, limit)
	if err != nil {
		return res, translate(err)
	}
	res.Deleted = int(tag.RowsAffected())
	return res, nil
}

// held reads the record that holds a key. A claim that lost only ever loses
// to a committed row, so it is there.
func (s *Store) held(ctx context.Context, tenantID, keyHash string) (*idempotency.Record, error) {
	r, err := s.LookupKey(ctx, tenantID, keyHash)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// LookupKey implements store.Store.
func (s *Store) LookupKey(ctx context.Context, tenantID, key string) (idempotency.Record, error) {
	rows, _ := s.pool.Query(ctx, selectKey, tenantID, key)
	r, err := pgx.CollectExactlyOneRow(rows, scanKey)
	if err != nil {
		return idempotency.Record{}, translate(err)
	}
	return r, nil
}

// GetOrder implements store.Store.
func (s *Store) GetOrder(ctx context.Context, tenantID, id string) (order.Order, error) {
	rows, _ := s.pool.Query(ctx, selectOrder, tenantID, id)
	o, err := pgx.CollectExactlyOneRow(rows, scanOrder)
	if err != nil {
		return order.Order{}, translate(err)
	}
	return o, nil
}

// ListOrders implements store.Store.
func (s *Store) ListOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error) {
	rows, _ := s.pool.Query(ctx, listOrders, tenantID, string(f.State), f.CustomerID, f.After, f.Limit)
	os, err := pgx.CollectRows(rows, scanOrder)
	if err != nil {
		return nil, translate(err)
	}
	return os, nil
}

func orderArgs(o order.Order, items []byte) []any {
	return []any{o.ID, o.TenantID, o.CustomerID, o.Currency, items, o.Amount,
		string(o.State), o.Version, o.CreatedAt, o.PaidAt, o.FulfilledAt, o.CancelledAt}
}

func casArgs(next order.Order) []any {
	return []any{next.ID, next.TenantID, string(next.State), next.Version,
		next.PaidAt, next.FulfilledAt, next.CancelledAt}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func scanOrder(row pgx.CollectableRow) (order.Order, error) {
	var o order.Order
	var items []byte
	var state string
	err := row.Scan(&o.ID, &o.TenantID, &o.CustomerID, &o.Currency, &items, &o.Amount,
		&state, &o.Version, &o.CreatedAt, &o.PaidAt, &o.FulfilledAt, &o.CancelledAt)
	if err != nil {
		return o, err
	}
	o.State = order.State(state)
	o.CreatedAt = o.CreatedAt.UTC()
	for _, t := range []*time.Time{o.PaidAt, o.FulfilledAt, o.CancelledAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return o, json.Unmarshal(items, &o.Items)
}

func scanKey(row pgx.CollectableRow) (idempotency.Record, error) {
	var r idempotency.Record
	var state string
	var status *int
	var resource, code, detail, recovery, attempt *string
	var locked, tombstone *time.Time
	err := row.Scan(&r.TenantID, &r.KeyHash, &r.Fingerprint, &r.Derived, &state, &status,
		&resource, &code, &detail, &locked, &r.FencingToken, &recovery, &attempt,
		&r.CreatedAt, &r.ExpiresAt, &tombstone)
	r.State = idempotency.State(state)
	r.StatusCode = deref(status)
	r.ResourceID, r.ErrorCode, r.ErrorDetail = deref(resource), apperr.Code(deref(code)), deref(detail)
	r.RecoveryPoint, r.AttemptKey = idempotency.RecoveryPoint(deref(recovery)), deref(attempt)
	r.LockedUntil, r.TombstoneUntil = utc(deref(locked)), utc(deref(tombstone))
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return r, err
}

func scanAttempt(row pgx.CollectableRow) (store.Attempt, error) {
	var a store.Attempt
	var kind, status string
	var ref, code *string
	err := row.Scan(&a.ProviderKey, &a.TenantID, &a.OrderID, &kind, &status, &a.Amount, &a.Currency,
		&a.PaymentMethod, &ref, &code, &a.CreatedAt, &a.UpdatedAt)
	a.Kind, a.Status = store.AttemptKind(kind), store.AttemptStatus(status)
	a.ProviderRef, a.ErrorCode = deref(ref), deref(code)
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, err
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

// translate maps driver errors to the store's vocabulary at this boundary:
// no rows → ErrNotFound; connection failures, serialization failures
// (40001), deadlocks (40P01), and server shutdown (57P01..57P03) → an
// EUnavailable *apperr.Error a client may retry.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &apperr.Error{Code: apperr.EUnavailable, Message: "the request was cancelled or timed out"}
	}
	if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrVersionConflict) || errors.Is(err, store.ErrAttemptInFlight) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03", "53300", "57014", "55P03":
			return &apperr.Error{Code: apperr.EUnavailable, Message: "the database asked for a retry: " + pgErr.Code}
		}
		return fmt.Errorf("postgres: %w", err)
	}
	var netErr net.Error
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isConnectError(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) {
		// The connection broke (a restart, a reset). A statement that was
		// sent may or may not have committed; the client's retry with the
		// same key finds out.
		return &apperr.Error{Code: apperr.EUnavailable, Message: "the database is unavailable"}
	}
	return fmt.Errorf("postgres: %w", err)
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}
