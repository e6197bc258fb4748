// Package sqlite is the embedded Store: one durable SQLite file for a single
// Orderly node that needs no setup, through the pure-Go modernc.org/sqlite.
//
// Writes run in BEGIN IMMEDIATE transactions, so SQLite serialises them; the
// file is in WAL mode with synchronous=FULL, so a committed claim survives a
// crash or power loss, and every commit costs an fsync: CreateOrders (group
// commit) puts many creates behind one. Readers do not block the writer.
// The store is in-process, so a transaction composed of several statements
// costs no round trips; InTx runs them one after another. All SQL is in
// queries.go.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/sqlitefile"
	"github.com/orderly/orderly/migrations"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// FileName is the database file Open creates in its directory.
const FileName = "orderly.db"

// Store implements store.Store on one SQLite file.
type Store struct {
	executor
	db     *sql.DB
	unlock func() error // releases the data directory's lock
}

var _ store.SerialWriter = (*Store)(nil)

// SerialWrites implements store.SerialWriter: SQLite runs one write
// transaction at a time (writers queue on sqlitefile's write slot).
func (s *Store) SerialWrites() {}

// Option configures Open.
type Option func(*executor)

// WithClock makes clock the store's clock (default time.Now). It is the
// embedded database's clock: the one process that may open the directory
// decides every lease, schedule and retention on it, read inside the
// write transaction that acts on it (writers are serialised), as the
// PostgreSQL store decides them on the server's clock. Tests give it a
// clock they move (internal/testclock).
func WithClock(clock func() time.Time) Option {
	return func(e *executor) { e.clock = clock }
}

// Open opens (creating if needed) the database file FileName in dir, applies
// the embedded migrations, and returns the Store. Only one Store may use a
// directory at a time, in any process; several goroutines may use it. Open
// holds an exclusive lock on the directory (sqlitefile.LockDir) until Close,
// so a second Open of the same directory fails with an error wrapping
// sqlitefile.ErrDirLocked.
func Open(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	unlock, err := sqlitefile.LockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db, err := sqlitefile.Open(dir, FileName)
	if err != nil {
		_ = unlock()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := migrations.Apply(ctx, db, migrations.SQLite); err != nil {
		db.Close()
		_ = unlock()
		return nil, err
	}
	e := executor{c: db, clock: time.Now}
	for _, o := range opts {
		o(&e)
	}
	return &Store{executor: e, db: db, unlock: unlock}, nil
}

// Close closes the database, then releases the directory's lock.
func (s *Store) Close() error { return errors.Join(s.db.Close(), s.unlock()) }

// Ping checks that the database can be written: it commits a one-row
// update (one WAL frame and one fsync), so a full disk, an I/O error or a
// read-only file fails it with ErrUnavailable, not only an unreadable one.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.c.ExecContext(ctx, pingWrite, time.Now().UnixMicro())
	return translate(err)
}

// conn is what the store's operations run on: the database (each statement
// its own transaction) or a transaction.
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor implements store.Executor over a conn. Operations of several
// statements must run in a transaction (Store opens one for them). clock is
// the database's clock (WithClock).
type executor struct {
	c     conn
	clock func() time.Time
}

// now reads the database's clock, in microseconds since the Unix epoch (the
// unit every timestamp column holds).
func (e executor) now() int64 { return e.clock().UnixMicro() }

var _ store.Executor = executor{}

// CreateOrder implements store.Executor: it claims the key, then inserts the
// order and its order.created event only if the claim succeeded. It must
// run in a transaction.
func (e executor) CreateOrder(ctx context.Context, key *store.Claim, o order.Order) (*store.Holder, error) {
	items, err := json.Marshal(o.Items)
	if err != nil {
		return nil, err
	}
	if key != nil {
		k, now := *key, e.now()
		res, err := e.c.ExecContext(ctx, claimCompleted, k.TenantID, k.KeyHash, k.Fingerprint, k.Derived,
			nullable(string(k.Operation)), nullable(k.ResourceID), nullable(string(k.ErrorCode)), nullable(k.ErrorDetail),
			now, now+k.TTL.Microseconds())
		if err != nil {
			return nil, translate(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, translate(err)
		} else if n == 0 {
			held, err := store.ReadHolder(ctx, e, k.TenantID, k.KeyHash)
			if held != nil {
				held.Now = fromMicros(now)
			}
			return held, err
		}
		key.CreatedAt, key.ExpiresAt = fromMicros(now), fromMicros(now+k.TTL.Microseconds())
	}
	if _, err = e.c.ExecContext(ctx, insertOrder, orderArgs(o, items)...); err != nil {
		return nil, translate(err)
	}
	return nil, e.AppendEvent(ctx, event.For(o, o.CreatedAt))
}

// AcquireLease implements store.Executor. It must run in a transaction.
func (e executor) AcquireLease(ctx context.Context, c store.Claim) (idempotency.Record, bool, error) {
	now := e.now()
	r, err := scanKey(e.c.QueryRowContext(ctx, acquireLease, c.TenantID, c.KeyHash, c.Fingerprint, c.Derived,
		nullable(c.ResourceID), now+c.Lease.Microseconds(), now, now+c.TTL.Microseconds(), nullable(string(c.Operation))))
	if err == nil {
		return r, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return r, false, translate(err)
	}
	r, err = e.LookupKey(ctx, c.TenantID, c.KeyHash)
	return r, false, err
}

// RecordAttempt implements store.Executor. It must run in a transaction.
func (e executor) RecordAttempt(ctx context.Context, l store.Lease, a payment.Attempt, version int64) (payment.Attempt, error) {
	if err := fenced(e.c.ExecContext(ctx, fenceRecordAttempt, l.TenantID, l.KeyHash, l.Token, a.ProviderKey)); err != nil {
		return payment.Attempt{}, err
	}
	var current int64
	if err := e.c.QueryRowContext(ctx, orderVersion, a.OrderID, a.TenantID).Scan(&current); err != nil {
		return payment.Attempt{}, translate(err)
	}
	if current != version {
		return payment.Attempt{}, store.ErrVersionConflict
	}
	if err := e.noOtherOpenAttempt(ctx, a.OrderID, a.ProviderKey); err != nil {
		return payment.Attempt{}, err
	}
	var clash bool
	if err := e.c.QueryRowContext(ctx, sameKeyOtherMethod, a.ProviderKey, a.PaymentMethod).Scan(&clash); err != nil {
		return payment.Attempt{}, translate(err)
	}
	if clash {
		return payment.Attempt{}, store.ErrAttemptInFlight
	}
	if _, err := e.c.ExecContext(ctx, insertAttempt, a.ProviderKey, a.TenantID, a.OrderID, string(a.Kind), string(a.Status),
		a.Amount, a.Currency, a.PaymentMethod, nullable(a.ProviderRef), nullable(a.ErrorCode),
		micros(a.CreatedAt), micros(a.UpdatedAt)); err != nil {
		return payment.Attempt{}, translate(err)
	}
	return e.GetAttempt(ctx, a.ProviderKey)
}

// CompleteKey implements store.Executor.
func (e executor) CompleteKey(ctx context.Context, l store.Lease, o idempotency.Record) error {
	return fenced(e.c.ExecContext(ctx, completeKey, l.TenantID, l.KeyHash, l.Token,
		nullable(o.ResourceID), nullable(string(o.ErrorCode)), nullable(o.ErrorDetail)))
}

// ReleaseKey implements store.Executor.
func (e executor) ReleaseKey(ctx context.Context, l store.Lease, to idempotency.State) error {
	return fenced(e.c.ExecContext(ctx, releaseKey, l.TenantID, l.KeyHash, l.Token, string(to)))
}

// CompareAndSetOrder implements store.Executor. It must run in a
// transaction.
func (e executor) CompareAndSetOrder(ctx context.Context, next order.Order, ownAttempt string) error {
	res, err := e.c.ExecContext(ctx, casOrder, casArgs(next)...)
	if err != nil {
		return translate(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return translate(err)
	} else if n == 0 {
		return store.ErrVersionConflict
	}
	return e.noOtherOpenAttempt(ctx, next.ID, ownAttempt)
}

// SettleAttempt implements store.Executor.
func (e executor) SettleAttempt(ctx context.Context, u store.AttemptUpdate) error {
	_, err := e.c.ExecContext(ctx, updateAttempt, u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), micros(u.At))
	return translate(err)
}

// fenced turns a fenced UPDATE that matched no row into ErrLeaseLost.
func fenced(res sql.Result, err error) error {
	if err != nil {
		return translate(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return translate(err)
	} else if n == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

// noOtherOpenAttempt returns ErrAttemptInFlight if an attempt on orderID
// other than providerKey is open.
func (e executor) noOtherOpenAttempt(ctx context.Context, orderID, providerKey string) error {
	var open bool
	if err := e.c.QueryRowContext(ctx, otherOpenAttempt, orderID, providerKey).Scan(&open); err != nil {
		return translate(err)
	}
	if open {
		return store.ErrAttemptInFlight
	}
	return nil
}

// TakeOverAbandoned implements store.Executor.
func (e executor) TakeOverAbandoned(ctx context.Context, to store.TakeOver) ([]idempotency.Record, error) {
	now := e.now()
	rows, err := e.c.QueryContext(ctx, takeOverAbandoned, now, now+to.Lease.Microseconds(), to.Limit,
		to.Backoff.Microseconds(), to.MaxBackoff.Microseconds())
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []idempotency.Record
	for rows.Next() {
		r, err := scanKey(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, r)
	}
	return out, translate(rows.Err())
}

// AbandonedBacklog implements store.Executor in one statement.
func (e executor) AbandonedBacklog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var oldest sql.NullInt64
	err := e.c.QueryRowContext(ctx, abandonedBacklog, e.now()).Scan(
		&b.ExpiredLeases, &b.UnknownDue, &b.UnknownDeferred, &b.NeedsAttention, &oldest)
	if oldest.Valid {
		b.OldestDue = fromMicros(oldest.Int64)
	}
	return b, translate(err)
}

// ForgetKey implements store.Executor.
func (e executor) ForgetKey(ctx context.Context, l store.Lease) error {
	return fenced(e.c.ExecContext(ctx, forgetKey, l.TenantID, l.KeyHash, l.Token))
}

// AttemptsNeedingAttention implements store.Executor.
func (e executor) AttemptsNeedingAttention(ctx context.Context, tenantID string, limit int) ([]payment.Attempt, error) {
	rows, err := e.c.QueryContext(ctx, attemptsNeedingAttention, tenantID, limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []payment.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, a)
	}
	return out, translate(rows.Err())
}

// GetAttempt implements store.Executor.
func (e executor) GetAttempt(ctx context.Context, providerKey string) (payment.Attempt, error) {
	a, err := scanAttempt(e.c.QueryRowContext(ctx, selectAttempt, providerKey))
	return a, translate(err)
}

// GetAttemptByIntent implements store.Executor.
func (e executor) GetAttemptByIntent(ctx context.Context, intentID string) (payment.Attempt, error) {
	if intentID == "" {
		return payment.Attempt{}, store.ErrNotFound
	}
	a, err := scanAttempt(e.c.QueryRowContext(ctx, selectAttemptByIntent, intentID))
	return a, translate(err)
}

// RecordAttemptProgress implements store.Executor in one statement.
func (e executor) RecordAttemptProgress(ctx context.Context, l store.Lease, p store.AttemptProgress) (payment.Attempt, error) {
	var sent any
	if !p.SentAt.IsZero() {
		sent = micros(p.SentAt)
	}
	a, err := scanAttempt(e.c.QueryRowContext(ctx, recordAttemptProgress, l.TenantID, l.KeyHash, l.Token, p.ProviderKey, p.IntentID, sent))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return payment.Attempt{}, store.ErrLeaseLost
	case err != nil:
		return payment.Attempt{}, translate(err)
	case p.IntentID != "" && a.IntentID != p.IntentID:
		return a, store.ErrIntentConflict
	}
	return a, nil
}

// Sweep implements store.Executor: two batched statements.
func (e executor) Sweep(ctx context.Context, tombstoneFor time.Duration, limit int) (store.SweepResult, error) {
	var res store.SweepResult
	now := e.now()
	r, err := e.c.ExecContext(ctx, tombstoneKeys, now, tombstoneFor.Microseconds(), limit)
	if err != nil {
		return res, translate(err)
	}
	n, _ := r.RowsAffected()
	res.Tombstoned = int(n)
	r, err = e.c.ExecContext(ctx, deleteKeys, now, limit)
	if err != nil {
		return res, translate(err)
	}
	n, _ = r.RowsAffected()
	res.Deleted = int(n)
	return res, nil
}

// Now implements store.Executor: the store's clock.
func (e executor) Now(context.Context) (time.Time, error) { return fromMicros(e.now()), nil }

// LookupKey implements store.Executor.
func (e executor) LookupKey(ctx context.Context, tenantID, key string) (idempotency.Record, error) {
	r, err := scanKey(e.c.QueryRowContext(ctx, selectKey, tenantID, key))
	return r, translate(err)
}

// GetOrder implements store.Executor.
func (e executor) GetOrder(ctx context.Context, tenantID, id string) (order.Order, error) {
	o, err := scanOrder(e.c.QueryRowContext(ctx, selectOrder, tenantID, id))
	return o, translate(err)
}

// ListOrders implements store.Executor.
func (e executor) ListOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error) {
	rows, err := e.c.QueryContext(ctx, listOrders, tenantID, string(f.State), f.CustomerID, f.After, f.Limit)
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

// InTx implements store.Store: one IMMEDIATE transaction.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Executor) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return fn(executor{c: tx, clock: s.clock}) })
}

// CreateOrder implements store.Store in one IMMEDIATE transaction.
func (s *Store) CreateOrder(ctx context.Context, key *store.Claim, o order.Order) (*store.Holder, error) {
	var held *store.Holder
	err := s.InTx(ctx, func(tx store.Executor) error {
		var err error
		held, err = tx.CreateOrder(ctx, key, o)
		return err
	})
	return held, err
}

// CreateOrders implements store.Store: one IMMEDIATE transaction, one
// commit and one fsync for the whole group.
func (s *Store) CreateOrders(ctx context.Context, batch []store.NewOrder) ([]*store.Holder, error) {
	out := make([]*store.Holder, len(batch))
	err := s.InTx(ctx, func(tx store.Executor) error {
		for i, n := range batch {
			var err error
			if out[i], err = tx.CreateOrder(ctx, n.Key, n.Order); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AcquireLease implements store.Store in one IMMEDIATE transaction.
func (s *Store) AcquireLease(ctx context.Context, c store.Claim) (r idempotency.Record, acquired bool, err error) {
	err = s.InTx(ctx, func(tx store.Executor) error {
		r, acquired, err = tx.AcquireLease(ctx, c)
		return err
	})
	return r, acquired, err
}

// RecordAttempt implements store.Store in one IMMEDIATE transaction.
func (s *Store) RecordAttempt(ctx context.Context, l store.Lease, a payment.Attempt, version int64) (out payment.Attempt, err error) {
	err = s.InTx(ctx, func(tx store.Executor) error {
		out, err = tx.RecordAttempt(ctx, l, a, version)
		return err
	})
	return out, err
}

// CompareAndSetOrder implements store.Store in one IMMEDIATE transaction.
func (s *Store) CompareAndSetOrder(ctx context.Context, next order.Order, ownAttempt string) error {
	return s.InTx(ctx, func(tx store.Executor) error { return tx.CompareAndSetOrder(ctx, next, ownAttempt) })
}

// TakeOverAbandoned implements store.Store in one IMMEDIATE transaction.
func (s *Store) TakeOverAbandoned(ctx context.Context, to store.TakeOver) (out []idempotency.Record, err error) {
	err = s.InTx(ctx, func(tx store.Executor) error {
		out, err = tx.TakeOverAbandoned(ctx, to)
		return err
	})
	return out, err
}

// StartLeased implements store.Store in one IMMEDIATE transaction, with the
// same steps as the PostgreSQL store's single batch.
func (s *Store) StartLeased(ctx context.Context, c store.Claim, in store.Intent) (st store.Started, err error) {
	err = s.InTx(ctx, func(tx store.Executor) error {
		st, err = startLeased(ctx, tx.(executor), c, in)
		return err
	})
	return st, err
}

func startLeased(ctx context.Context, e executor, c store.Claim, in store.Intent) (store.Started, error) {
	r, acquired, err := e.AcquireLease(ctx, c)
	if err != nil {
		return store.Started{}, err
	}
	st := store.Started{Acquired: acquired, Key: r, IntentAt: in.At, Now: time.UnixMicro(e.now()).UTC()}
	if r.ResourceID != "" {
		o, err := e.GetOrder(ctx, r.TenantID, r.ResourceID)
		switch {
		case err == nil:
			st.Order = &o
		case !errors.Is(err, store.ErrNotFound):
			return store.Started{}, err
		}
	}
	if acquired && st.Order != nil && in.Allows(*st.Order) {
		pk := in.ProviderKey(st.Order.Version)
		if r.AttemptKey == "" || r.AttemptKey == pk {
			o := *st.Order
			a := payment.Attempt{ProviderKey: pk, TenantID: o.TenantID, OrderID: o.ID, Kind: in.Kind,
				Status: payment.AttemptPending, Amount: o.Amount, Currency: o.Currency,
				PaymentMethod: in.PaymentMethod, CreatedAt: in.At, UpdatedAt: in.At}
			// A refused attempt records nothing: its writes are undone to
			// the savepoint and the lease stays acquired.
			if _, err := e.c.ExecContext(ctx, `SAVEPOINT intent`); err != nil {
				return store.Started{}, translate(err)
			}
			_, err := e.RecordAttempt(ctx, store.LeaseOf(r), a, o.Version)
			switch {
			case err == nil:
				st.Key.RecoveryPoint, st.Key.AttemptKey = idempotency.RecoveryAttemptRecorded, pk
			case errors.Is(err, store.ErrAttemptInFlight):
				if _, err := e.c.ExecContext(ctx, `ROLLBACK TO intent`); err != nil {
					return store.Started{}, translate(err)
				}
			default:
				return store.Started{}, err
			}
			if _, err := e.c.ExecContext(ctx, `RELEASE intent`); err != nil {
				return store.Started{}, translate(err)
			}
		}
	}
	if st.Key.AttemptKey != "" {
		a, err := e.GetAttempt(ctx, st.Key.AttemptKey)
		switch {
		case err == nil:
			st.Attempt = &a
		case !errors.Is(err, store.ErrNotFound):
			return store.Started{}, err
		}
	}
	return st, nil
}

// inTx runs fn in a transaction (BEGIN IMMEDIATE, set by the DSN) with
// sqlitefile.InTx: it commits when fn returns nil and rolls back otherwise;
// a commit error is returned, never lost.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return translate(sqlitefile.InTx(ctx, s.db, fn))
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
	var locked, tombstone sql.NullInt64
	var operation, resource, code, detail, recovery, attempt sql.NullString
	var created, expires int64
	err := row.Scan(&r.TenantID, &r.KeyHash, &r.Fingerprint, &r.Derived, &state, &operation,
		&resource, &code, &detail, &locked, &r.FencingToken, &recovery, &attempt,
		&created, &expires, &tombstone)
	r.State = idempotency.State(state)
	r.Operation = idempotency.Operation(operation.String)
	r.ResourceID, r.ErrorCode, r.ErrorDetail = resource.String, apperr.Code(code.String), detail.String
	r.RecoveryPoint, r.AttemptKey = idempotency.RecoveryPoint(recovery.String), attempt.String
	r.LockedUntil, r.TombstoneUntil = zeroOrTime(locked), zeroOrTime(tombstone)
	r.CreatedAt, r.ExpiresAt = fromMicros(created), fromMicros(expires)
	return r, err
}

func scanAttempt(row scanner) (payment.Attempt, error) {
	var a payment.Attempt
	var kind, status string
	var ref, code, intent sql.NullString
	var created, updated int64
	var sent sql.NullInt64
	err := row.Scan(&a.ProviderKey, &a.TenantID, &a.OrderID, &kind, &status, &a.Amount, &a.Currency,
		&a.PaymentMethod, &ref, &code, &created, &updated, &intent, &sent)
	a.Kind, a.Status = payment.AttemptKind(kind), payment.AttemptStatus(status)
	a.ProviderRef, a.ErrorCode, a.IntentID, a.KeySentAt = ref.String, code.String, intent.String, zeroOrTime(sent)
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
// ErrNotFound; SQLITE_BUSY/LOCKED (after the busy timeout), a closed
// database, an I/O error (disk full) or a cancelled context →
// ErrUnavailable. It is idempotent.
func translate(err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{store.ErrLeaseLost, store.ErrVersionConflict, store.ErrAttemptInFlight,
		store.ErrNotFound, store.ErrUnavailable} {
		if errors.Is(err, known) {
			return err
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return store.UnavailableBecause("the request timed out or was cancelled", err)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	// Busy past the busy timeout, closed, or an I/O error (disk full): a
	// retry may succeed; after an I/O error in COMMIT the retry with the
	// same key finds out whether it committed.
	if err := sqlitefile.Translate(err); errors.Is(err, sqlitefile.ErrBusy) ||
		errors.Is(err, sqlitefile.ErrClosed) || errors.Is(err, sqlitefile.ErrIO) {
		return store.Unavailable(err)
	}
	return fmt.Errorf("sqlite: %w", err)
}
