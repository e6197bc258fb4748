// Package postgres is the Store for several Orderly instances sharing one
// PostgreSQL database, through github.com/jackc/pgx/v5.
//
// Round trips are the cost that matters, so the store pipelines:
//
//   - A create claims its idempotency key and inserts the order in one
//     statement (a data-modifying CTE whose INSERT into orders runs only if
//     the key's INSERT … ON CONFLICT claimed it); when the key is held, the
//     same statement returns the holder and its order, so a replay is one
//     round trip too. CreateOrders does the same for a group of creates.
//   - Phase 1 of a leased request (StartLeased) is four statements sent as
//     one batch, which PostgreSQL runs as one implicit transaction: acquire
//     the key, lock the order, record the attempt if the guard allows it,
//     read everything back.
//   - InTx queues guarded writes and sends them with the next read or with
//     the COMMIT; a transaction of writes alone (phase 3: complete the key,
//     compare-and-set the order, settle the attempt) is one batch, one round
//     trip. A guard that fails raises inside the database (orderly_guard,
//     SQLSTATE OL001), which aborts the whole batch.
//
// A stale worker's fenced write matches no row and raises lease_lost, so it
// changes nothing. The completer and the sweeper take rows with FOR UPDATE
// SKIP LOCKED, so several instances share the work without blocking each
// other. All SQL is in queries.go.
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

	"github.com/orderly/orderly/migrations"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// Store implements store.Store on a pgx connection pool.
type Store struct {
	executor
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
// a tracer, pool sizes or run-time parameters.
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
	return &Store{executor: executor{db: poolDB{pool}}, pool: pool}, nil
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

// InTx implements store.Store with a pipelined transaction (see the package
// documentation): a transaction of writes alone costs one round trip.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Executor) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return translate(err)
	}
	defer conn.Release()
	t := &pipeTx{conn: conn}
	if err := fn(executor{db: t}); err != nil {
		t.rollback(ctx)
		return translate(err)
	}
	return translate(t.commit(ctx))
}

// RecordAttempt implements store.Store in one transaction.
func (s *Store) RecordAttempt(ctx context.Context, l store.Lease, a payment.Attempt, orderVersion int64) (payment.Attempt, error) {
	var out payment.Attempt
	err := s.InTx(ctx, func(tx store.Executor) error {
		var err error
		out, err = tx.RecordAttempt(ctx, l, a, orderVersion)
		return err
	})
	return out, err
}

// CompareAndSetOrder implements store.Store in one transaction.
func (s *Store) CompareAndSetOrder(ctx context.Context, next order.Order, ownAttempt string) error {
	return s.InTx(ctx, func(tx store.Executor) error { return tx.CompareAndSetOrder(ctx, next, ownAttempt) })
}

// StartLeased implements store.Store: four statements in one batch, one
// implicit transaction, one round trip.
func (s *Store) StartLeased(ctx context.Context, c store.Claim, in store.Intent) (store.Started, error) {
	var st store.Started
	found := false
	b := &pgx.Batch{}
	b.Queue(acquireLease, acquireArgs(c)...)
	b.Queue(lockLeasedOrder, c.TenantID, c.KeyHash, c.ResourceID)
	if in.From != "" {
		b.Queue(recordIntent, c.TenantID, c.KeyHash, c.ResourceID, in.ProviderKeyPrefix, in.Versioned,
			string(in.From), in.Amount, in.Currency, string(in.Kind), in.PaymentMethod, in.At)
	}
	b.Queue(readStarted, c.TenantID, c.KeyHash).Query(func(rows pgx.Rows) error {
		if !rows.Next() {
			return rows.Err()
		}
		var kc keyCols
		var oc orderCols
		var ac attemptCols
		if err := rows.Scan(targets([]any{&st.Acquired, &st.Now}, kc.targets(), oc.targets(), ac.targets())...); err != nil {
			return err
		}
		st.Key, found = kc.record()
		st.Attempt = ac.attempt()
		var err error
		st.Order, err = oc.order()
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return store.Started{}, translate(err)
	}
	if !found {
		return store.Started{}, fmt.Errorf("postgres: key vanished during its own claim")
	}
	st.IntentAt, st.Now = in.At, st.Now.UTC()
	return st, nil
}

// CreateOrders implements store.Store: at most four statements (claim
// client keys, claim derived keys, insert orders without keys, read the
// holders of the keys not claimed) in one batch, one implicit transaction,
// one round trip.
func (s *Store) CreateOrders(ctx context.Context, batch []store.NewOrder) ([]*store.Holder, error) {
	var client, derived, bare manyArgs
	for i, n := range batch {
		items, err := json.Marshal(n.Order.Items)
		if err != nil {
			return nil, err
		}
		m := &client
		switch {
		case n.Key == nil:
			m = &bare
		case n.Key.Derived:
			m = &derived
		}
		if err := m.add(i, n, items); err != nil {
			return nil, err
		}
	}
	type tk struct{ tenant, hash string }
	claimed := map[tk]time.Time{} // when each claimed key was created
	var now time.Time             // the database's clock, from any row read
	collectClaimed := func(rows pgx.Rows) error {
		for rows.Next() {
			var k tk
			var created time.Time
			if err := rows.Scan(&k.tenant, &k.hash, &created); err != nil {
				return err
			}
			claimed[k], now = created.UTC(), created.UTC()
		}
		return nil
	}
	held := map[tk]*store.Holder{}
	b := &pgx.Batch{}
	if len(client.at) > 0 {
		b.Queue(claimManyClient, client.args()...).Query(collectClaimed)
	}
	if len(derived.at) > 0 {
		b.Queue(claimManyDerived, derived.args()...).Query(collectClaimed)
	}
	if len(bare.at) > 0 {
		args := bare.args()
		b.Queue(insertMany, append(args[:9:9], args[14:]...)...)
	}
	if n := len(client.at) + len(derived.at); n > 0 {
		tenants := append(append([]string{}, client.tenants...), derived.tenants...)
		hashes := append(append([]string{}, client.hashes...), derived.hashes...)
		b.Queue(readHolders, tenants, hashes).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var kc keyCols
				var oc orderCols
				if err := rows.Scan(targets([]any{&now}, kc.targets(), oc.targets())...); err != nil {
					return err
				}
				r, _ := kc.record()
				o, err := oc.order()
				if err != nil {
					return err
				}
				held[tk{r.TenantID, r.KeyHash}] = &store.Holder{Record: r, Order: o}
			}
			return nil
		})
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, translate(err)
	}
	out := make([]*store.Holder, len(batch))
	for _, m := range []*manyArgs{&client, &derived} {
		for j, i := range m.at {
			k := tk{m.tenants[j], m.hashes[j]}
			if created, ok := claimed[k]; ok {
				key := batch[i].Key
				key.CreatedAt, key.ExpiresAt = created, created.Add(key.TTL.Truncate(time.Microsecond)) // as stored: µs
				continue
			}
			h := held[k]
			if h == nil {
				// Claimed by nobody and held by nobody. The claim lost to a
				// committed row, and readHolders ran after it (each statement
				// of the batch has its own snapshot), so the row was deleted
				// in between: a leased request on the same key forgot it
				// (ForgetKey), or the sweeper took it. The key is free again:
				// claim it alone (CreateOrder reclaims a key that vanishes,
				// a bounded number of times). Its order was not inserted.
				var err error
				if h, err = s.CreateOrder(ctx, batch[i].Key, batch[i].Order); err != nil {
					return nil, err
				}
				out[i] = h
				continue
			}
			h.Now = now.UTC()
			out[i] = h
		}
	}
	return out, nil
}

// manyArgs gathers the parallel arrays of claimMany and insertMany.
type manyArgs struct {
	at                                                 []int
	ids, tenants, customers, currencies, items, states []string
	amounts, versions                                  []int64
	created                                            []any
	ttls                                               []int64
	hashes, fingerprints, operations                   []string
	derived                                            []bool
	eventIDs, eventBodies                              []string
	eventAt                                            []any
}

func (m *manyArgs) add(i int, n store.NewOrder, items []byte) error {
	o := n.Order
	ev, body, err := createdEvent(o)
	if err != nil {
		return err
	}
	m.eventIDs, m.eventBodies, m.eventAt = append(m.eventIDs, ev.ID), append(m.eventBodies, string(body)), append(m.eventAt, ev.CreatedAt)
	m.at = append(m.at, i)
	m.ids, m.tenants, m.customers = append(m.ids, o.ID), append(m.tenants, o.TenantID), append(m.customers, o.CustomerID)
	m.currencies, m.items, m.states = append(m.currencies, o.Currency), append(m.items, string(items)), append(m.states, string(o.State))
	m.amounts, m.versions, m.created = append(m.amounts, o.Amount), append(m.versions, o.Version), append(m.created, o.CreatedAt)
	if k := n.Key; k != nil {
		m.hashes, m.fingerprints, m.operations = append(m.hashes, k.KeyHash), append(m.fingerprints, k.Fingerprint), append(m.operations, string(k.Operation))
		m.derived, m.ttls = append(m.derived, k.Derived), append(m.ttls, k.TTL.Microseconds())
	}
	return nil
}

func (m *manyArgs) args() []any {
	return []any{m.ids, m.tenants, m.customers, m.currencies, m.items, m.amounts, m.states, m.versions, m.created,
		m.hashes, m.fingerprints, m.derived, m.operations, m.ttls, m.eventIDs, m.eventAt, m.eventBodies}
}

// guardViolations maps orderly_guard's messages to the store's sentinels.
var guardViolations = map[string]error{
	"lease_lost":        store.ErrLeaseLost,
	"version_conflict":  store.ErrVersionConflict,
	"attempt_in_flight": store.ErrAttemptInFlight,
}

// translate maps driver errors to the store's vocabulary at this boundary:
// no rows → ErrNotFound; a guard's raise (OL001) → its sentinel; connection
// failures, serialization failures (40001), deadlocks (40P01), statement
// and lock timeouts (57014, 55P03), too many connections (53300) and server
// shutdown (57P01..57P03) → ErrUnavailable. It is idempotent.
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
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "OL001":
			if sentinel, ok := guardViolations[pgErr.Message]; ok {
				return sentinel
			}
		case "40001", "40P01", "57014", "55P03", "57P01", "57P02", "57P03", "53300":
			return store.UnavailableBecause("the database asked for a retry: "+pgErr.Code, err)
		}
		return fmt.Errorf("postgres: %w", err)
	}
	var netErr net.Error
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isConnectError(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) ||
		isClosedPool(err) {
		// The connection broke (a restart, a reset). A statement that was
		// sent may or may not have committed; the client's retry with the
		// same key finds out.
		return store.Unavailable(err)
	}
	return fmt.Errorf("postgres: %w", err)
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// isClosedPool reports pgxpool's error for a pool being closed (shutdown).
func isClosedPool(err error) bool { return err != nil && err.Error() == "closed pool" }
