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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/orderly/orderly/idempotency"
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
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: data directory: %w", err)
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(15000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	dsn := "file:" + filepath.ToSlash(filepath.Join(dir, FileName)) + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(0)
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
			var err error
			if held, err = claim(ctx, tx, *key); err != nil || held != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, insertOrder, orderArgs(o, items)...)
		return err
	})
	return held, translate(err)
}

// Transition implements store.Store: one IMMEDIATE transaction that claims
// the key and runs the compare-and-set, rolled back unless both succeed.
func (s *Store) Transition(ctx context.Context, key *idempotency.Record, next order.Order) (*idempotency.Record, error) {
	var held *idempotency.Record
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if key != nil {
			var err error
			if held, err = claim(ctx, tx, *key); err != nil || held != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, casOrder, casArgs(next)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrVersionConflict
		}
		return nil
	})
	return held, translate(err)
}

// SaveRecord implements store.Store.
func (s *Store) SaveRecord(ctx context.Context, rec idempotency.Record) (*idempotency.Record, error) {
	var held *idempotency.Record
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		held, err = claim(ctx, tx, rec)
		return err
	})
	return held, translate(err)
}

// claim inserts key in tx, or returns the record that holds it.
func claim(ctx context.Context, tx *sql.Tx, key idempotency.Record) (*idempotency.Record, error) {
	res, err := tx.ExecContext(ctx, claimKey, keyArgs(key)...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, err
	} else if n == 1 {
		return nil, nil
	}
	r, err := scanKey(tx.QueryRowContext(ctx, selectKey, key.TenantID, key.KeyHash))
	if err != nil {
		return nil, err
	}
	return &r, nil
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

func keyArgs(r idempotency.Record) []any {
	return []any{r.TenantID, r.KeyHash, r.Fingerprint, r.Derived, r.StatusCode,
		nullable(r.ResourceID), nullable(string(r.ErrorCode)), nullable(r.ErrorDetail),
		micros(r.CreatedAt), micros(r.ExpiresAt)}
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
	var resource, code, detail sql.NullString
	var created, expires int64
	err := row.Scan(&r.TenantID, &r.KeyHash, &r.Fingerprint, &r.Derived, &r.StatusCode,
		&resource, &code, &detail, &created, &expires)
	r.ResourceID, r.ErrorCode, r.ErrorDetail = resource.String, order.Code(code.String), detail.String
	r.CreatedAt, r.ExpiresAt = fromMicros(created), fromMicros(expires)
	return r, err
}

// translate maps driver errors to the store's vocabulary: no rows →
// ErrNotFound; SQLITE_BUSY/LOCKED (after the busy timeout) → a retryable
// EUnavailable *order.Error.
func translate(err error) error {
	if err == nil || errors.Is(err, store.ErrVersionConflict) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return &order.Error{Code: order.EUnavailable, Message: "the database is busy"}
		}
	}
	if strings.Contains(err.Error(), "database is closed") {
		return &order.Error{Code: order.EUnavailable, Message: "the database is closed"}
	}
	return fmt.Errorf("sqlite: %w", err)
}
