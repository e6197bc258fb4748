// Package postgres is the Store for several Orderly instances sharing one
// PostgreSQL database, through github.com/jackc/pgx/v5.
//
// A create claims its idempotency key and inserts the order in one statement
// (one round trip, one commit): a data-modifying CTE whose INSERT into orders
// runs only if the key's INSERT … ON CONFLICT claimed it. A concurrent
// duplicate blocks on the unique index until the first transaction commits,
// then sees the key held and replays. A transition claims the key and writes
// a compare-and-set UPDATE in one transaction, rolled back if either misses.
// All SQL is in queries.go.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

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
		return nil, translate(err)
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
	args := append(orderArgs(o, items), keyArgs(*key)...)
	var claimed bool
	if err := s.pool.QueryRow(ctx, claimAndInsertOrder, args...).Scan(&claimed); err != nil {
		return nil, translate(err)
	}
	if claimed {
		return nil, nil
	}
	return s.held(ctx, *key)
}

// Transition implements store.Store: BEGIN, one statement that claims the
// key and compare-and-sets the order, COMMIT — or ROLLBACK when either part
// missed.
func (s *Store) Transition(ctx context.Context, key *idempotency.Record, next order.Order) (*idempotency.Record, error) {
	if key == nil {
		tag, err := s.pool.Exec(ctx, casOrder, casArgs(next)...)
		if err != nil {
			return nil, translate(err)
		}
		if tag.RowsAffected() == 0 {
			return nil, store.ErrVersionConflict
		}
		return nil, nil
	}
	var claimed, updated bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		args := append(casArgs(next), keyArgs(*key)...)
		if err := tx.QueryRow(ctx, claimAndCAS, args...).Scan(&claimed, &updated); err != nil {
			return err
		}
		if !claimed || !updated {
			return errRollback
		}
		return nil
	})
	switch {
	case err == nil:
		return nil, nil
	case !errors.Is(err, errRollback):
		return nil, translate(err)
	case !claimed:
		return s.held(ctx, *key)
	default:
		return nil, store.ErrVersionConflict
	}
}

// errRollback makes pgx.BeginFunc roll back without it being a failure.
var errRollback = errors.New("rollback")

// SaveRecord implements store.Store.
func (s *Store) SaveRecord(ctx context.Context, rec idempotency.Record) (*idempotency.Record, error) {
	tag, err := s.pool.Exec(ctx, claimKey, keyArgs(rec)...)
	if err != nil {
		return nil, translate(err)
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	return s.held(ctx, rec)
}

// held reads the record that holds key's (tenant, key). A claim that lost
// only ever loses to a committed row, so it is there.
func (s *Store) held(ctx context.Context, key idempotency.Record) (*idempotency.Record, error) {
	r, err := s.LookupKey(ctx, key.TenantID, key.KeyHash)
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

func keyArgs(r idempotency.Record) []any {
	return []any{r.TenantID, r.KeyHash, r.Fingerprint, r.Derived, r.StatusCode,
		nullable(r.ResourceID), nullable(string(r.ErrorCode)), nullable(r.ErrorDetail),
		r.CreatedAt, r.ExpiresAt}
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
	var resource, code, detail *string
	err := row.Scan(&r.TenantID, &r.KeyHash, &r.Fingerprint, &r.Derived, &r.StatusCode,
		&resource, &code, &detail, &r.CreatedAt, &r.ExpiresAt)
	if resource != nil {
		r.ResourceID = *resource
	}
	if code != nil {
		r.ErrorCode = order.Code(*code)
	}
	if detail != nil {
		r.ErrorDetail = *detail
	}
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return r, err
}

// translate maps driver errors to the store's vocabulary at this boundary:
// no rows → ErrNotFound; connection failures, serialization failures
// (40001), deadlocks (40P01), and server shutdown (57P01..57P03) → an
// EUnavailable *order.Error a client may retry.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03", "53300":
			return &order.Error{Code: order.EUnavailable, Message: "the database asked for a retry: " + pgErr.Code}
		}
		return fmt.Errorf("postgres: %w", err)
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isConnectError(err) {
		return &order.Error{Code: order.EUnavailable, Message: "the database is unavailable"}
	}
	return fmt.Errorf("postgres: %w", err)
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}
