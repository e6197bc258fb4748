package postgres_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

// beforeKeyRead runs hook once, armed, before the store reads key
// (tenant, hash) back with LookupKey: it puts another instance's write
// exactly between a create's claim and its read of the key's holder.
type beforeKeyRead struct {
	tenant, hash string
	armed        atomic.Bool
	hook         func(ctx context.Context)
}

func (b *beforeKeyRead) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(strings.TrimSpace(d.SQL), "SELECT tenant_id, key_hash") && len(d.Args) == 2 &&
		d.Args[0] == b.tenant && d.Args[1] == b.hash && b.armed.CompareAndSwap(true, false) {
		b.hook(ctx)
	}
	return ctx
}

func (*beforeKeyRead) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestCreateOrderKeyForgottenBetweenClaimAndRead: a create whose claim
// loses to another request's key that commits while the claim waits, and
// which that request then forgets (ForgetKey: a leased request on a missing
// order, same Idempotency-Key) before the create reads the holder, finds the
// key claimed by nobody and held by nobody. It claims again and creates the
// order once; it used to answer store.ErrNotFound (an HTTP 500).
func TestCreateOrderKeyForgottenBetweenClaimAndRead(t *testing.T) {
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	const tenant, key = "tenant-vanish", "key-vanish"
	hash := idempotency.HashKey(key)

	other, err := postgres.Open(ctx, withPoolSize(t, dbURL)) // the other instance
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = other.Close() })
	forgot := make(chan error, 1)
	tracer := &beforeKeyRead{tenant: tenant, hash: hash, hook: func(ctx context.Context) {
		forgot <- other.ForgetKey(ctx, store.Lease{TenantID: tenant, KeyHash: hash, Token: 1})
	}}
	cfg, err := pgxpool.ParseConfig(withPoolSize(t, dbURL))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	cfg.ConnConfig.Tracer = tracer
	s, err := postgres.OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("postgres.OpenConfig: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })

	// The other request's key, in progress with no attempt, not yet
	// committed: the create's claim waits for it.
	holder, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation,
		resource_id, locked_until, fencing_token, recovery_point, created_at, expires_at)
		VALUES ($1, $2, 'sha256:pay', false, 'in_progress', 'pay', 'ord_missing', now() + interval '1 minute', 1, 'started',
		now(), now() + interval '1 day')`, tenant, hash); err != nil {
		t.Fatalf("insert the other request's key: %v", err)
	}

	o, err := order.New(tenant, order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR",
		Items: []order.Item{{SKU: "SKU-RED", Quantity: 2, UnitPrice: 1250}}}, time.Now())
	if err != nil {
		t.Fatalf("order.New: %v", err)
	}
	claim := store.Claim{Record: idempotency.Record{TenantID: tenant, KeyHash: hash, Fingerprint: "sha256:create",
		Operation: idempotency.OpCreate, ResourceID: o.ID, State: idempotency.StateCompleted}, TTL: idempotency.DefaultKeyTTL}
	tracer.armed.Store(true)
	done := createAsync(ctx, s, &claim, o)
	waitForClaimWait(t, dbURL, holder.PgConn().PID(), done)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit the other request's key: %v", err)
	}
	r := <-done
	select {
	case err := <-forgot:
		if err != nil {
			t.Fatalf("the other request's ForgetKey: %v", err)
		}
	default:
		t.Fatal("the create never read the key's holder: the test did not put ForgetKey between claim and read")
	}
	if r.err != nil || r.held != nil {
		t.Fatalf("CreateOrder of a key forgotten between claim and read = (%+v, %v), want claimed", r.held, r.err)
	}
	got, err := s.GetOrder(ctx, tenant, o.ID)
	if err != nil || got.ID != o.ID {
		t.Fatalf("GetOrder = (%v, %v), want the order", got.ID, err)
	}
	k, err := s.LookupKey(ctx, tenant, hash)
	if err != nil || k.ResourceID != o.ID || k.State != idempotency.StateCompleted || k.Fingerprint != "sha256:create" {
		t.Fatalf("LookupKey = (%+v, %v), want the create's completed key", k, err)
	}
	// A replay answers the same order.
	if h, err := s.CreateOrder(ctx, &claim, o); err != nil || h == nil || h.Order == nil || h.Order.ID != o.ID {
		t.Fatalf("replay = (%+v, %v), want the order", h, err)
	}
}

// TestCreateOrdersKeyForgottenBetweenClaimAndRead is the group commit's
// version: the group's claim loses key K to another request's key that
// commits while the claim waits, the claim then waits on key L, and K is
// forgotten before the claim ends; the batch's read of the holders (its own
// snapshot, after the claim) finds K claimed by nobody and held by nobody.
// K is claimed again and its order created once; it used to fail the whole
// group with store.ErrNotFound.
func TestCreateOrdersKeyForgottenBetweenClaimAndRead(t *testing.T) {
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	s, err := postgres.Open(ctx, withPoolSize(t, dbURL))
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const tenant = "tenant-vanish-group"
	hashK, hashL := idempotency.HashKey("key-k"), idempotency.HashKey("key-l")

	// Other requests' keys K and L, each in progress with no attempt, in
	// transactions not yet committed.
	holdKey := func(hash string) pgx.Tx {
		t.Helper()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation,
			resource_id, locked_until, fencing_token, recovery_point, created_at, expires_at)
			VALUES ($1, $2, 'sha256:pay', false, 'in_progress', 'pay', 'ord_missing', now() + interval '1 minute', 1, 'started',
			now(), now() + interval '1 day')`, tenant, hash); err != nil {
			t.Fatalf("insert another request's key: %v", err)
		}
		return tx
	}
	txK, txL := holdKey(hashK), holdKey(hashL)

	newCreate := func(hash string) store.NewOrder {
		o, err := order.New(tenant, order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR",
			Items: []order.Item{{SKU: "SKU-RED", Quantity: 2, UnitPrice: 1250}}}, time.Now())
		if err != nil {
			t.Fatalf("order.New: %v", err)
		}
		return store.NewOrder{Order: o, Key: &store.Claim{Record: idempotency.Record{TenantID: tenant, KeyHash: hash,
			Fingerprint: "sha256:create/" + hash, Operation: idempotency.OpCreate, ResourceID: o.ID,
			State: idempotency.StateCompleted}, TTL: idempotency.DefaultKeyTTL}}
	}
	batch := []store.NewOrder{newCreate(hashK), newCreate(hashL)}
	type groupResult struct {
		held []*store.Holder
		err  error
	}
	done := make(chan groupResult, 1)
	go func() {
		h, err := s.CreateOrders(ctx, batch)
		done <- groupResult{h, err}
	}()
	// watch waits until the group's claim waits for the backend pid.
	watch := func(pid uint32) {
		t.Helper()
		select {
		case r := <-done:
			t.Fatalf("CreateOrders returned (%v, %v) before waiting", r.held, r.err)
		default:
		}
		waitForClaimWait(t, dbURL, pid, nil)
	}
	watch(txK.Conn().PgConn().PID())
	if err := txK.Commit(ctx); err != nil {
		t.Fatalf("commit K: %v", err)
	}
	watch(txL.Conn().PgConn().PID()) // the claim has passed K and waits on L
	if err := s.ForgetKey(ctx, store.Lease{TenantID: tenant, KeyHash: hashK, Token: 1}); err != nil {
		t.Fatalf("the other request's ForgetKey of K: %v", err)
	}
	if err := txL.Rollback(ctx); err != nil {
		t.Fatalf("roll back L: %v", err)
	}
	r := <-done
	if r.err != nil || len(r.held) != 2 || r.held[0] != nil || r.held[1] != nil {
		t.Fatalf("CreateOrders = (%v, %v), want both keys claimed", r.held, r.err)
	}
	for _, n := range batch {
		got, err := s.GetOrder(ctx, tenant, n.Order.ID)
		if err != nil || got.ID != n.Order.ID {
			t.Fatalf("GetOrder(%s) = (%v, %v), want the order", n.Order.ID, got.ID, err)
		}
		k, err := s.LookupKey(ctx, tenant, n.Key.KeyHash)
		if err != nil || k.ResourceID != n.Order.ID || k.State != idempotency.StateCompleted {
			t.Fatalf("LookupKey = (%+v, %v), want the create's completed key", k, err)
		}
		if n.Key.CreatedAt.IsZero() {
			t.Fatalf("the claim of %s has no CreatedAt as stored", n.Order.ID)
		}
	}
}
