package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// noRow is the error of a statement that returns exactly one row when rows
// has none: the connection's or the statement's error when there is one (a
// terminated backend, SQLSTATE 57P01, ends rows early too), else
// pgx.ErrNoRows. Answering pgx.ErrNoRows for a broken connection would turn
// a retryable failure into store.ErrNotFound.
func noRow(rows pgx.Rows) error {
	if err := rows.Err(); err != nil {
		return err
	}
	return pgx.ErrNoRows
}

// executor implements store.Executor over a db: the pool, or a pipelined
// transaction. Its errors are the driver's; Store and InTx translate them.
type executor struct{ db db }

var _ store.Executor = executor{}

// CreateOrder implements store.Executor in one statement.
func (e executor) CreateOrder(ctx context.Context, key *store.Claim, o order.Order) (*store.Holder, error) {
	items, err := json.Marshal(o.Items)
	if err != nil {
		return nil, err
	}
	ev, body, err := createdEvent(o)
	if err != nil {
		return nil, err
	}
	if key == nil {
		return nil, translate(e.db.exec(ctx, insertOrder, append(orderArgs(o, items), ev.ID, ev.CreatedAt, string(body))...))
	}
	for range claimRounds {
		held, vanished, err := e.claimAndInsert(ctx, key, o, items, ev.ID, ev.CreatedAt, body)
		if !vanished {
			return held, err
		}
	}
	return nil, store.UnavailableBecause("the idempotency key changed hands while this request claimed it; retry with the same key",
		errKeyVanished)
}

// errKeyVanished is the cause of CreateOrder's ErrUnavailable when the key
// vanished in every one of its claimRounds.
var errKeyVanished = errors.New("postgres: the idempotency key was deleted between its claim and the read of its holder")

// claimRounds bounds CreateOrder's claims of a key that vanishes between
// the claim and the read of its holder (see claimAndInsert).
const claimRounds = 3

// claimAndInsert is one round of CreateOrder with a key: claim it and
// insert o, or read the key's holder. vanished reports a key claimed by
// nobody and held by nobody: the claim lost to a row that was deleted
// before it could be read (a leased request on the same key that forgot it
// — ForgetKey — or the sweeper). The key is then free, so the caller claims
// again: "not found" is never an answer to a create.
func (e executor) claimAndInsert(ctx context.Context, key *store.Claim, o order.Order, items []byte,
	eventID string, eventAt time.Time, body []byte) (_ *store.Holder, vanished bool, _ error) {
	k := *key
	args := append(orderArgs(o, items), k.TenantID, k.KeyHash, k.Fingerprint, k.Derived, nullable(string(k.Operation)),
		nullable(k.ResourceID), nullable(string(k.ErrorCode)), nullable(k.ErrorDetail), k.TTL.Microseconds(),
		eventID, eventAt, string(body))
	query := claimAndInsertOrder
	if k.Derived {
		query = claimDerivedAndInsertOrder
	}
	var claimed bool
	var now time.Time // the database's clock
	var held *store.Holder
	err := e.db.query(ctx, query, args, func(rows pgx.Rows) error {
		var kc keyCols
		var oc orderCols
		if !rows.Next() {
			return noRow(rows)
		}
		if err := rows.Scan(targets([]any{&claimed, &now}, kc.targets(), oc.targets())...); err != nil {
			return err
		}
		if r, ok := kc.record(); ok {
			o, err := oc.order()
			held = &store.Holder{Record: r, Order: o}
			return err
		}
		return nil
	})
	now = now.UTC()
	switch {
	case err != nil:
		return nil, false, translate(err)
	case claimed:
		key.CreatedAt, key.ExpiresAt = now, now.Add(k.TTL.Truncate(time.Microsecond)) // as stored: µs
		return nil, false, nil
	case held != nil && !replaceable(held.Record, k.Derived, now):
		held.Now = now
		return held, false, nil
	}
	// The holder committed after this statement's snapshot was taken (a
	// new key, or an expired derived key another create took over): the
	// statement saw no row, or the row as it was. Read it now. A claim
	// only ever loses to a committed row, but that row may be deleted
	// since (vanished).
	held, err = store.ReadHolder(ctx, e, k.TenantID, k.KeyHash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, true, nil
	}
	if held != nil {
		held.Now = now
	}
	return held, false, err
}

// AcquireLease implements store.Executor in one statement, plus a read of
// the holder when the key is not acquired.
func (e executor) AcquireLease(ctx context.Context, c store.Claim) (idempotency.Record, bool, error) {
	rs, err := e.keys(ctx, acquireLease, acquireArgs(c)...)
	if err != nil {
		return idempotency.Record{}, false, err
	}
	if len(rs) == 1 {
		return rs[0], true, nil
	}
	held, err := e.LookupKey(ctx, c.TenantID, c.KeyHash)
	return held, false, err
}

func acquireArgs(c store.Claim) []any {
	return []any{c.TenantID, c.KeyHash, c.Fingerprint, c.Derived, nullable(c.ResourceID), c.Lease.Microseconds(),
		c.TTL.Microseconds(), nullable(string(c.Operation))}
}

// RecordAttempt implements store.Executor. It must run in a transaction
// (Store.RecordAttempt opens one).
func (e executor) RecordAttempt(ctx context.Context, l store.Lease, a payment.Attempt, orderVersion int64) (payment.Attempt, error) {
	if err := e.db.exec(ctx, fenceRecordAttempt, l.TenantID, l.KeyHash, l.Token, a.ProviderKey); err != nil {
		return payment.Attempt{}, translate(err)
	}
	var version int64
	err := e.db.query(ctx, lockOrderVersion, []any{a.OrderID, a.TenantID}, func(rows pgx.Rows) error {
		v, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		version = v
		return err
	})
	if err != nil {
		return payment.Attempt{}, translate(err)
	}
	if version != orderVersion {
		return payment.Attempt{}, store.ErrVersionConflict
	}
	// Guarded, in this order; a pipelined transaction sends them with the
	// read below, and a guard's raise surfaces from it.
	if err := e.db.exec(ctx, noOtherOpenAttempt, a.OrderID, a.ProviderKey); err != nil {
		return payment.Attempt{}, translate(err)
	}
	if err := e.db.exec(ctx, sameKeyOtherMethod, a.ProviderKey, a.PaymentMethod); err != nil {
		return payment.Attempt{}, translate(err)
	}
	if err := e.db.exec(ctx, insertAttempt, a.ProviderKey, a.TenantID, a.OrderID, string(a.Kind), string(a.Status),
		a.Amount, a.Currency, a.PaymentMethod, nullable(a.ProviderRef), nullable(a.ErrorCode), a.CreatedAt, a.UpdatedAt); err != nil {
		return payment.Attempt{}, translate(err)
	}
	return e.GetAttempt(ctx, a.ProviderKey)
}

// CompleteKey implements store.Executor.
func (e executor) CompleteKey(ctx context.Context, l store.Lease, o idempotency.Record) error {
	return translate(e.db.exec(ctx, completeKey, l.TenantID, l.KeyHash, l.Token,
		nullable(o.ResourceID), nullable(string(o.ErrorCode)), nullable(o.ErrorDetail)))
}

// ReleaseKey implements store.Executor.
func (e executor) ReleaseKey(ctx context.Context, l store.Lease, to idempotency.State) error {
	return translate(e.db.exec(ctx, releaseKey, l.TenantID, l.KeyHash, l.Token, string(to)))
}

// CompareAndSetOrder implements store.Executor: two guarded statements,
// so it must run in a transaction (Store.CompareAndSetOrder opens one).
func (e executor) CompareAndSetOrder(ctx context.Context, next order.Order, ownAttempt string) error {
	if err := e.db.exec(ctx, casOrder, casArgs(next)...); err != nil {
		return translate(err)
	}
	return translate(e.db.exec(ctx, noOtherOpenAttempt, next.ID, ownAttempt))
}

// SettleAttempt implements store.Executor.
func (e executor) SettleAttempt(ctx context.Context, u store.AttemptUpdate) error {
	return translate(e.db.exec(ctx, updateAttempt, u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), u.At))
}

// RecordAttemptProgress implements store.Executor in one statement, sent
// at once.
func (e executor) RecordAttemptProgress(ctx context.Context, l store.Lease, p store.AttemptProgress) (payment.Attempt, error) {
	var sent *time.Time
	if !p.SentAt.IsZero() {
		sent = &p.SentAt
	}
	var a *payment.Attempt
	err := e.db.query(ctx, recordAttemptProgress, []any{l.TenantID, l.KeyHash, l.Token, p.ProviderKey, p.IntentID, sent},
		func(rows pgx.Rows) error {
			for rows.Next() {
				var c attemptCols
				if err := rows.Scan(c.targets()...); err != nil {
					return err
				}
				a = c.attempt()
			}
			return nil
		})
	switch {
	case err != nil:
		return payment.Attempt{}, translate(err)
	case a == nil:
		return payment.Attempt{}, store.ErrLeaseLost
	case p.IntentID != "" && a.IntentID != p.IntentID:
		return *a, store.ErrIntentConflict
	}
	return *a, nil
}

// TakeOverAbandoned implements store.Executor in one statement.
func (e executor) TakeOverAbandoned(ctx context.Context, to store.TakeOver) ([]idempotency.Record, error) {
	return e.keys(ctx, takeOverAbandoned, to.Lease.Microseconds(), to.Limit, to.Backoff.Microseconds(), to.MaxBackoff.Microseconds())
}

// AbandonedBacklog implements store.Executor in one statement.
func (e executor) AbandonedBacklog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	err := e.db.query(ctx, abandonedBacklog, nil, func(rows pgx.Rows) error {
		if !rows.Next() {
			return noRow(rows)
		}
		var oldest *time.Time
		if err := rows.Scan(&b.ExpiredLeases, &b.UnknownDue, &b.UnknownDeferred, &b.NeedsAttention, &oldest); err != nil {
			return err
		}
		if oldest != nil {
			b.OldestDue = oldest.UTC()
		}
		return nil
	})
	return b, translate(err)
}

// ForgetKey implements store.Executor.
func (e executor) ForgetKey(ctx context.Context, l store.Lease) error {
	return translate(e.db.exec(ctx, forgetKey, l.TenantID, l.KeyHash, l.Token))
}

// AttemptsNeedingAttention implements store.Executor.
func (e executor) AttemptsNeedingAttention(ctx context.Context, tenantID string, limit int) ([]payment.Attempt, error) {
	var out []payment.Attempt
	err := e.db.query(ctx, attemptsNeedingAttention, []any{tenantID, limit}, collectAttempts(&out))
	return out, translate(err)
}

// collectAttempts returns a row handler that appends every row, read as
// attemptColumns, to out.
func collectAttempts(out *[]payment.Attempt) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var c attemptCols
			if err := rows.Scan(c.targets()...); err != nil {
				return err
			}
			*out = append(*out, *c.attempt())
		}
		return nil
	}
}

// GetAttempt implements store.Executor.
func (e executor) GetAttempt(ctx context.Context, providerKey string) (payment.Attempt, error) {
	return e.getAttempt(ctx, selectAttempt, providerKey)
}

// GetAttemptByIntent implements store.Executor.
func (e executor) GetAttemptByIntent(ctx context.Context, intentID string) (payment.Attempt, error) {
	if intentID == "" {
		return payment.Attempt{}, store.ErrNotFound
	}
	return e.getAttempt(ctx, selectAttemptByIntent, intentID)
}

// getAttempt reads the one attempt q selects by arg, or ErrNotFound.
func (e executor) getAttempt(ctx context.Context, q, arg string) (payment.Attempt, error) {
	var a *payment.Attempt
	err := e.db.query(ctx, q, []any{arg}, func(rows pgx.Rows) error {
		for rows.Next() {
			var c attemptCols
			if err := rows.Scan(c.targets()...); err != nil {
				return err
			}
			a = c.attempt()
		}
		return nil
	})
	if err != nil {
		return payment.Attempt{}, translate(err)
	}
	if a == nil {
		return payment.Attempt{}, store.ErrNotFound
	}
	return *a, nil
}

// Sweep implements store.Executor: two batched statements, each its own
// short transaction on the pool, skipping rows other sweepers hold.
func (e executor) Sweep(ctx context.Context, tombstoneFor time.Duration, limit int) (store.SweepResult, error) {
	var res store.SweepResult
	n, err := e.count(ctx, tombstoneKeys, tombstoneFor.Microseconds(), limit)
	if err != nil {
		return res, err
	}
	res.Tombstoned = n
	res.Deleted, err = e.count(ctx, deleteKeys, limit)
	return res, err
}

// count runs a data-modifying statement and returns how many rows it
// touched.
func (e executor) count(ctx context.Context, sql string, args ...any) (int, error) {
	var n int
	err := e.db.query(ctx, `WITH touched AS (`+sql+` RETURNING 1) SELECT count(*) FROM touched`, args,
		func(rows pgx.Rows) error {
			var err error
			n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
			return err
		})
	return n, translate(err)
}

// Now implements store.Executor: one read of orderly_now().
func (e executor) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := e.db.query(ctx, `SELECT orderly_now()`, nil, func(rows pgx.Rows) error {
		v, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[time.Time])
		now = v
		return err
	})
	return now.UTC(), translate(err)
}

// LookupKey implements store.Executor.
func (e executor) LookupKey(ctx context.Context, tenantID, keyHash string) (idempotency.Record, error) {
	rs, err := e.keys(ctx, selectKey, tenantID, keyHash)
	if err != nil {
		return idempotency.Record{}, err
	}
	if len(rs) == 0 {
		return idempotency.Record{}, store.ErrNotFound
	}
	return rs[0], nil
}

// keys runs a query returning keyColumns rows.
func (e executor) keys(ctx context.Context, sql string, args ...any) ([]idempotency.Record, error) {
	var out []idempotency.Record
	err := e.db.query(ctx, sql, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var c keyCols
			if err := rows.Scan(c.targets()...); err != nil {
				return err
			}
			r, _ := c.record()
			out = append(out, r)
		}
		return nil
	})
	return out, translate(err)
}

// orders runs a query returning orderColumns rows.
func (e executor) orders(ctx context.Context, sql string, args ...any) ([]order.Order, error) {
	var out []order.Order
	err := e.db.query(ctx, sql, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var c orderCols
			if err := rows.Scan(c.targets()...); err != nil {
				return err
			}
			o, err := c.order()
			if err != nil {
				return err
			}
			out = append(out, *o)
		}
		return nil
	})
	return out, translate(err)
}

// GetOrder implements store.Executor.
func (e executor) GetOrder(ctx context.Context, tenantID, id string) (order.Order, error) {
	os, err := e.orders(ctx, selectOrder, tenantID, id)
	if err != nil {
		return order.Order{}, err
	}
	if len(os) == 0 {
		return order.Order{}, store.ErrNotFound
	}
	return os[0], nil
}

// ListOrders implements store.Executor.
func (e executor) ListOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error) {
	return e.orders(ctx, listOrders, tenantID, string(f.State), f.CustomerID, f.After, f.Limit)
}

func orderArgs(o order.Order, items []byte) []any {
	return []any{o.ID, o.TenantID, o.CustomerID, o.Currency, items, o.Amount,
		string(o.State), o.Version, o.CreatedAt, o.PaidAt, o.FulfilledAt, o.CancelledAt}
}

func casArgs(next order.Order) []any {
	return []any{next.ID, next.TenantID, string(next.State), next.Version,
		next.PaidAt, next.FulfilledAt, next.CancelledAt}
}

// replaceable reports whether a claim (derived or not) made at now, the
// database's clock, would have taken over held (an expired derived key): if
// the claim lost to it anyway, held is an old version and another claim
// took the key over since.
func replaceable(held idempotency.Record, derived bool, now time.Time) bool {
	return derived && held.Derived && !held.ExpiresAt.After(now) &&
		(held.State == idempotency.StateCompleted || held.State == idempotency.StateExpired)
}
