// Package service runs Orderly's use cases — create, pay, fulfil, cancel,
// read — with the idempotency protocol around each side-effecting one. It
// owns the order of operations; the statemachine decides, the store
// persists, and the payment and fulfillment providers act. It imports
// neither net/http nor SQL.
//
// # Protocol
//
// A side-effecting call carries an idempotency.Key (client-sent or derived
// from the request fingerprint). Its outcome — status code and resource id,
// or a final error — is claimed in the same store transaction as the
// business write. A repeat with the same fingerprint replays that outcome
// with the resource's current state (Result.Replayed); a repeat with another
// fingerprint is EKeyReused (draft-ietf-httpapi-idempotency-key-header
// §2.7). Input that fails validation, a request on an order the tenant does
// not have (ENotFound: its key is forgotten), EUnavailable and EInternal
// errors are never stored: the request did not happen, so a retry runs it
// afresh.
//
// # Transitions
//
// Pay, Fulfill and Cancel hold their key under a lease and run in three
// phases (see leased): claim and record the provider attempt; call the
// provider with no transaction open, with a provider-side key derived from
// the order so a logical charge, shipment or refund happens once however
// often it is attempted; then write the decision as a compare-and-set fenced
// by the lease's token. A lost race re-reads and decides again, which
// yields the no-op or the invalid-transition error, never a double effect.
// Provider calls on one order never overlap (store.ErrAttemptInFlight).
//
// # Recovery
//
// RecoverAbandoned (the completer) finishes requests whose holder vanished
// or whose provider outcome is unknown, asking the provider first: fairly
// (longest due first, per-key backoff), several at a time, within a lease.
// An outcome still unknown past Config.UnresolvedAfter is never retried: it
// is parked as needs_attention (AttemptsNeedingAttention lists it) and its
// order does not move. SweepKeys
// applies the key lifecycle: retention, tombstone, deletion.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// Defaults of Config.
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultMaxWait       = 10 * time.Second
	DefaultTombstoneTTL  = 30 * 24 * time.Hour
	// DefaultUnresolvedAfter is half of the 24 h for which Stripe keeps an
	// idempotency key: well inside any provider's retention.
	DefaultUnresolvedAfter = 12 * time.Hour
	// DefaultProviderKeyMaxAge is below the 24 h for which Stripe keeps an
	// idempotency key (docs.stripe.com/api/idempotent_requests).
	DefaultProviderKeyMaxAge   = 23 * time.Hour
	DefaultCompleterParallel   = 4
	DefaultCompleterBackoff    = 5 * time.Second
	DefaultCompleterMaxBackoff = 10 * time.Minute
	// DefaultPendingPaymentExpiry bounds how long a pay may wait for the
	// customer's 3-D Secure (an attempt in requires_action) before the
	// completer cancels its intent: Stripe never expires such a
	// PaymentIntent itself (docs.stripe.com/payments/paymentintents/
	// lifecycle; it stays open until canceled), and a challenge is
	// completed in minutes while the customer is at checkout, so an
	// abandoned one should not hold an open intent and the order's one open
	// attempt for ever (README "Asynchronous payments").
	DefaultPendingPaymentExpiry = time.Hour
	// DefaultCaptureMargin is how long before an authorization's
	// capture_before the completer flags it (README "Capture at
	// fulfilment"): a day, so an operator has a working day to ship or
	// cancel the order before Stripe releases the hold (7 days for online
	// card payments, docs.stripe.com/payments/place-a-hold-on-a-payment-method).
	DefaultCaptureMargin = 24 * time.Hour
)

// CaptureMode is when a deployment captures a payment (ORDERD_CAPTURE,
// issue 16).
type CaptureMode string

// Capture modes.
const (
	// CaptureAtPay: a pay captures the money (the default; "" means the
	// same).
	CaptureAtPay CaptureMode = "at_pay"
	// CaptureAtFulfilment: a pay only authorizes (a PaymentIntent with
	// capture_method=manual, docs.stripe.com/payments/place-a-hold-on-a-payment-method);
	// a fulfilment ships and then captures the whole amount; a cancel, or
	// a shipment refused for good, voids the authorization.
	CaptureAtFulfilment CaptureMode = "at_fulfilment"
)

// ParseCaptureMode returns the mode s names ("at_pay" or "at_fulfilment"),
// or an error saying which are allowed.
func ParseCaptureMode(s string) (CaptureMode, error) {
	switch m := CaptureMode(s); m {
	case CaptureAtPay, CaptureAtFulfilment:
		return m, nil
	}
	return "", fmt.Errorf("must be %s or %s, not %q", CaptureAtPay, CaptureAtFulfilment, s)
}

// maxDecisions bounds how often a transition re-reads and decides again after
// losing a compare-and-set race. Each lost race means another request moved
// the order; with three states to pass through, a handful always suffices.
const maxDecisions = 8

// Config configures a Service. Zero durations take the idempotency
// package's defaults.
type Config struct {
	// KeyTTL is the retention of client-sent keys (default 24h).
	KeyTTL time.Duration
	// DerivedKeyTTL is the retention of keys derived from a fingerprint
	// (default 10m).
	DerivedKeyTTL time.Duration
	// LeaseDuration is how long a request holds its key while it calls a
	// provider (default 30s), from the database's clock when phase 1 runs;
	// the holder bounds its own work by it on its monotonic clock from
	// before then. It must exceed the providers' timeouts, so a live
	// request's lease never lapses mid-call.
	LeaseDuration time.Duration
	// MaxWait caps how long a request may wait for a concurrent duplicate
	// (Prefer: wait; default 10s).
	MaxWait time.Duration
	// TombstoneTTL is how long an expired client key's tombstone is kept
	// (default 30 days).
	TombstoneTTL time.Duration
	// UnresolvedAfter is the age (from the first call under its provider
	// key) past which a provider attempt whose outcome is still unknown is
	// never called again: the provider may have forgotten the key, so a
	// lookup that finds nothing proves nothing and a new call could charge,
	// ship or refund twice. The attempt is parked as needs_attention, its
	// key too, its order does not move, and an error-level log line says
	// so (default DefaultUnresolvedAfter, 12h). It must be shorter than the
	// providers' key retention.
	UnresolvedAfter time.Duration
	// ProviderKeyMaxAge is the age (from Attempt.KeySentAt) past which a
	// provider key is never sent again, because the provider may have
	// pruned it and would start a new request under it: the attempt is
	// resolved by reading the provider's object instead (default
	// DefaultProviderKeyMaxAge, 23h, below Stripe's 24 h retention).
	ProviderKeyMaxAge time.Duration
	// CompleterParallel is how many abandoned keys one completer pass
	// drives at once (default 4).
	CompleterParallel int
	// CompleterBackoff and CompleterMaxBackoff space the completer's
	// questions about one unknown outcome: the n-th takeover defers the next
	// by min(CompleterBackoff·2^n, CompleterMaxBackoff) (defaults 5s, 10m).
	CompleterBackoff, CompleterMaxBackoff time.Duration
	// PendingPaymentExpiry is the age (from the attempt's creation) past
	// which a charge still waiting for the customer (requires_action) is
	// expired: the completer cancels its intent at the provider
	// (Gateway.Cancel) and declines the attempt with error code
	// payment_expired (default DefaultPendingPaymentExpiry, 1h). A
	// processing payment (a bank debit) is not expired: the provider
	// decides it (Stripe cancels processing only "in rare cases",
	// docs.stripe.com/api/payment_intents/cancel).
	PendingPaymentExpiry time.Duration
	// Capture is when a pay's money is captured (default CaptureAtPay).
	// The mode decides how a new pay charges; an order keeps the way it
	// was paid (its authorization, store.CaptureStore) whatever the mode
	// later is.
	Capture CaptureMode
	// CaptureMargin is how long before an authorization's capture_before
	// the completer's pass flags it (FlagExpiringAuthorizations; default
	// DefaultCaptureMargin, 24h): an error-level log line and the order's
	// payment.capture_attention. It never captures early: capturing
	// before shipping is what the mode exists to avoid.
	CaptureMargin time.Duration
	// Now is this instance's clock (default time.Now): order, attempt and
	// event timestamps, and the hours-long ages compared with them
	// (UnresolvedAfter). Leases, key expiry and every schedule another
	// instance must agree on are decided on the database's clock instead.
	Now func() time.Time
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
	// GroupCommit coalesces concurrent creates into one multi-row
	// statement in one transaction (see groupCommit). Each create keeps its
	// own key claim, replay and errors.
	GroupCommit bool
	// GroupCommitMaxBatch bounds a group's size (default 64).
	GroupCommitMaxBatch int
	// GroupCommitWorkers is how many groups may be in flight at once
	// (default 2, and 1 on a store.SerialWriter, whose writes run one at a
	// time anyway); each waits for nothing but the previous group.
	GroupCommitWorkers int
	// Observer is told what the service does, for metrics and traces
	// (default: nothing is observed).
	Observer Observer
}

// Service runs the use cases. It is safe for concurrent use and holds no
// per-order state: every decision is made from what the store returns.
type Service struct {
	store     store.Store
	gateway   payment.Gateway
	warehouse fulfillment.Warehouse
	cfg       Config
	creates   *groupCommit // nil when group commit is off
	obs       Observer
}

// New returns a Service over st, charging through gw and shipping through wh.
func New(st store.Store, gw payment.Gateway, wh fulfillment.Warehouse, cfg Config) *Service {
	if cfg.KeyTTL <= 0 {
		cfg.KeyTTL = idempotency.DefaultKeyTTL
	}
	if cfg.DerivedKeyTTL <= 0 {
		cfg.DerivedKeyTTL = idempotency.DefaultDerivedKeyTTL
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.TombstoneTTL <= 0 {
		cfg.TombstoneTTL = DefaultTombstoneTTL
	}
	if cfg.ProviderKeyMaxAge <= 0 {
		cfg.ProviderKeyMaxAge = DefaultProviderKeyMaxAge
	}
	if cfg.UnresolvedAfter <= 0 {
		cfg.UnresolvedAfter = DefaultUnresolvedAfter
	}
	if cfg.PendingPaymentExpiry <= 0 {
		cfg.PendingPaymentExpiry = DefaultPendingPaymentExpiry
	}
	if cfg.Capture == "" {
		cfg.Capture = CaptureAtPay
	}
	if cfg.CaptureMargin <= 0 {
		cfg.CaptureMargin = DefaultCaptureMargin
	}
	if cfg.CompleterParallel <= 0 {
		cfg.CompleterParallel = DefaultCompleterParallel
	}
	if cfg.CompleterBackoff <= 0 {
		cfg.CompleterBackoff = DefaultCompleterBackoff
	}
	if cfg.CompleterMaxBackoff < cfg.CompleterBackoff {
		cfg.CompleterMaxBackoff = max(DefaultCompleterMaxBackoff, cfg.CompleterBackoff)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	svc := &Service{store: st, gateway: gw, warehouse: wh, cfg: cfg, obs: cfg.Observer}
	if svc.obs == nil {
		svc.obs = nopObserver{}
	}
	if cfg.GroupCommit {
		svc.creates = newGroupCommit(st, cfg.GroupCommitMaxBatch, cfg.GroupCommitWorkers)
		svc.creates.stages, _ = svc.obs.(StageObserver)
	}
	return svc
}

// Close stops the service's background work (the group-commit workers),
// after the requests they hold are answered.
func (s *Service) Close() {
	if s.creates != nil {
		s.creates.close()
	}
}

// Result is the outcome of a use case: the order after it (its current
// state for a replay). Replayed is true when the outcome was recorded by an
// earlier request with the same key. KeyExpiresAt is when the key's record
// expires (zero without a key). The service speaks no HTTP: the api derives
// the status from the operation and, for an error, its code.
type Result struct {
	Order        order.Order
	Replayed     bool
	KeyExpiresAt time.Time
	// Payment is set when a pay was accepted but its payment is pending
	// (the api answers 202): the customer must act, or the provider is
	// still collecting (issue 16). Nil otherwise.
	Payment *PendingPayment
}

// PendingPayment is a pay's charge waiting asynchronously, as a pay answers
// it (202 Accepted, README "Asynchronous payments"): Status is
// payment.AttemptRequiresAction (the customer must complete NextAction,
// with ClientSecret, in Stripe's shape, docs.stripe.com/payments/
// paymentintents/lifecycle) or payment.AttemptProcessing (a bank debit the
// provider is collecting). IntentID is the provider's intent.
type PendingPayment struct {
	Status       payment.AttemptStatus
	IntentID     string
	ClientSecret string
	NextAction   *payment.NextAction
}

// Call is one side-effecting request on an order: who asks, with which
// idempotency key, and how long the client is prepared to wait for a
// concurrent duplicate to finish (Prefer: wait=N, RFC 7240; 0 answers 409 at
// once).
type Call struct {
	TenantID string
	OrderID  string
	Key      idempotency.Key
	Wait     time.Duration
}

// PayInput is the body of a pay request. Amount (minor units) and Currency
// must equal the order's; PaymentMethod is a provider payment method id.
type PayInput struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// Ping checks the store.
func (s *Service) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

// Get returns the tenant's order id, or ENotFound. It is the read
// endpoint's use case, never a decision: with read replicas it may answer
// from one (see WithConsistencyToken).
func (s *Service) Get(ctx context.Context, tenantID, id string) (order.Order, error) {
	if !order.ValidID(id) {
		return order.Order{}, notFound(store.ErrNotFound, id)
	}
	o, err := s.readOrder(ctx, tenantID, id)
	if err == nil {
		err = s.withRefunds(ctx, &o)
	}
	return o, notFound(err, id)
}

// PendingPayment returns the payment of order o that waits asynchronously
// (its charge attempt at o's version in requires_action or processing,
// issue 16), with Status and IntentID only — the client secret and next
// action are the pay's answer, not stored — or nil when o is not RCVD or
// no payment of it waits. It reads the primary store.
func (s *Service) PendingPayment(ctx context.Context, o order.Order) (*PendingPayment, error) {
	if o.State != order.Received {
		return nil, nil
	}
	a, err := s.store.GetAttempt(ctx, chargeKey(o.ID, o.Version))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case !a.Status.Awaiting():
		return nil, nil
	}
	return &PendingPayment{Status: a.Status, IntentID: a.IntentID}, nil
}

// List returns the tenant's orders matching f, newest first, and the cursor
// of the next page ("" on the last page). Limit is clamped to [1, 100],
// default 20. Like Get, it may answer from a read replica.
func (s *Service) List(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, string, error) {
	switch {
	case f.Limit <= 0:
		f.Limit = 20
	case f.Limit > 100:
		f.Limit = 100
	}
	if f.State != "" && !f.State.Valid() {
		return nil, "", &apperr.Error{Code: apperr.EInvalid, Message: "unknown state filter",
			Fields: []apperr.FieldError{{Field: "state", Reason: "must be one of RCVD, PAID, FULFILLED, CANCELLED"}}}
	}
	want := f.Limit
	f.Limit++
	os, err := s.readOrders(ctx, tenantID, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(os) > want {
		os = os[:want]
		next = os[want-1].ID
	}
	return os, next, nil
}

// Create validates in and creates the order, claiming key in the same
// transaction. Errors: EInvalid (not stored), EKeyReused, EKeyExpired,
// EUnavailable.
func (s *Service) Create(ctx context.Context, tenantID string, key idempotency.Key, in order.NewOrderInput) (_ Result, err error) {
	ctx, end := s.obs.StartOperation(ctx, idempotency.OpCreate)
	defer func() { end(err) }()
	now := s.cfg.Now()
	o, err := order.New(tenantID, in, now)
	if err != nil {
		return Result{}, err
	}
	rec := s.record(tenantID, key, now, o.ID)
	var held *store.Holder
	if s.creates != nil {
		held, err = s.creates.do(ctx, store.NewOrder{Key: rec, Order: o})
	} else {
		held, err = s.store.CreateOrder(ctx, rec, o)
	}
	if err != nil {
		return Result{}, err
	}
	if held != nil {
		res, err := s.held(ctx, key, *held, dbNow(held.Now, now))
		s.observeHeld(idempotency.OpCreate, res, err)
		return res, err
	}
	if rec != nil {
		s.observeClaim(idempotency.OpCreate, rec.Record)
	}
	s.obs.Transition(eventCreate, "", o.State)
	return Result{Order: o, KeyExpiresAt: expiry(rec)}, nil
}

// held answers a request whose key another request holds: a replay of a
// completed outcome, or the reason there is none (EKeyReused, EKeyExpired,
// EKeyInProgress).
func (s *Service) held(ctx context.Context, key idempotency.Key, h store.Holder, now time.Time) (Result, error) {
	keyed := Result{KeyExpiresAt: h.ExpiresAt}
	if h.Fingerprint != key.Fingerprint {
		return keyed, apperr.Errorf(apperr.EKeyReused,
			"this Idempotency-Key was used with a different request; use a new key for a new request")
	}
	if h.State == idempotency.StateExpired || (h.State == idempotency.StateCompleted && h.Expired(now)) {
		return keyed, apperr.Errorf(apperr.EKeyExpired,
			"this Idempotency-Key expired at %s; retry with a new key", h.ExpiresAt.Format(time.RFC3339))
	}
	if h.State == idempotency.StateNeedsAttention {
		return keyed, apperr.Errorf(apperr.ENeedsAttention, "the provider's answer to this request stayed unknown past the "+
			"provider's key retention; it will not be retried and the order will not move until an operator resolves "+
			"its attempt (POST /operator/v1/attempts/recheck or /operator/v1/attempts/resolve with its provider_key); do not retry before then")
	}
	if h.State != idempotency.StateCompleted {
		e := apperr.Errorf(apperr.EKeyInProgress,
			"a request with this Idempotency-Key is still being processed; retry later with the same key")
		if h.State == idempotency.StateInProgress {
			// The holder finishes, or its lease lapses and a retry may
			// take over, by then (the api bounds it).
			e.RetryAfter = h.LockedUntil.Sub(now)
		}
		return keyed, e
	}
	return s.replay(ctx, h)
}

// awaitHolder polls a key held in progress until its holder completes or
// releases it, or wait (Prefer: wait, RFC 7240 §4.3) runs out, and returns
// the key as last read.
func (s *Service) awaitHolder(ctx context.Context, h idempotency.Record, wait time.Duration) idempotency.Record {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for h.State == idempotency.StateInProgress {
		select {
		case <-ctx.Done():
			return h
		case <-t.C:
		}
		if r, err := s.store.LookupKey(ctx, h.TenantID, h.KeyHash); err == nil {
			h = r
		}
	}
	return h
}

// waitPoll is how often a request that waits (Prefer: wait) re-reads a key.
const waitPoll = 50 * time.Millisecond

// replay answers with the outcome h recorded: the order's current state
// (read with the key, so a replay is one store round trip), or the same
// final error.
func (s *Service) replay(ctx context.Context, h store.Holder) (Result, error) {
	res := Result{Replayed: true, KeyExpiresAt: h.ExpiresAt}
	if err := h.Err(); err != nil {
		return res, err
	}
	if h.Order != nil {
		res.Order = *h.Order
		return res, nil
	}
	o, err := s.store.GetOrder(ctx, h.TenantID, h.ResourceID)
	if err != nil {
		return Result{}, fmt.Errorf("replay of key for %s: %w", h.ResourceID, err)
	}
	res.Order = o
	return res, nil
}

// record returns the completed key to claim for a create, or nil without a
// key.
func (s *Service) record(tenantID string, key idempotency.Key, now time.Time, resourceID string) *store.Claim {
	if key.IsZero() {
		return nil
	}
	r := s.claim(tenantID, key, now, idempotency.OpCreate, resourceID)
	r.State = idempotency.StateCompleted
	return &r
}

// claim returns the key a request claims: tenant-scoped, by hash, kept for
// the key's retention window and leased (when claimed in progress) for
// Config.LeaseDuration, both counted by the store on the database's clock.
// The record's CreatedAt and ExpiresAt are this instance's estimate at now,
// for answers that need one before the store has said (a create's
// Idempotency-Key expiry); the store writes its own.
func (s *Service) claim(tenantID string, key idempotency.Key, now time.Time, op idempotency.Operation, resourceID string) store.Claim {
	ttl := s.cfg.KeyTTL
	if key.Derived {
		ttl = s.cfg.DerivedKeyTTL
	}
	now = now.UTC().Truncate(time.Microsecond)
	return store.Claim{Record: idempotency.Record{
		TenantID: tenantID, KeyHash: idempotency.HashKey(key.Value), Fingerprint: key.Fingerprint,
		Derived: key.Derived, Operation: op, ResourceID: resourceID, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}, TTL: ttl, Lease: s.cfg.LeaseDuration}
}

// dbNow returns the database's clock as a store read it, or, when the
// store could not say (zero), this instance's fallback.
func dbNow(read, fallback time.Time) time.Time {
	if read.IsZero() {
		return fallback
	}
	return read
}

func expiry(r *store.Claim) time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.ExpiresAt
}

func notFound(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return apperr.Errorf(apperr.ENotFound, "order %s not found", id)
	}
	return err
}
