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
// §2.7). Input that fails validation, EUnavailable and EInternal errors are
// never stored: the request did not happen, so a retry runs it afresh.
//
// # Transitions
//
// Pay, Fulfill and Cancel read the order, let the statemachine decide, call
// the provider (with a provider-side key derived from the order, so a
// logical charge or shipment happens once however often it is attempted),
// then write the decision as a compare-and-set. A decline moves the order's
// version on (state unchanged), so a later pay is a new logical charge. A lost race re-reads and
// decides again, which yields the no-op or the invalid-transition error,
// never a double effect. A charge captured for an order that a racing
// cancel won is refunded.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/statemachine"
	"github.com/orderly/orderly/store"
)

// Status codes the service records for successful outcomes.
const (
	StatusCreated = 201
	StatusOK      = 200
)

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
	// StatusOf maps an error code to the HTTP status recorded for a final
	// error (the api package's table). Required.
	StatusOf func(order.Code) int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
}

// Service runs the use cases. It is safe for concurrent use and holds no
// per-order state: every decision is made from what the store returns.
type Service struct {
	store     store.Store
	gateway   payment.Gateway
	warehouse fulfillment.Warehouse
	cfg       Config
}

// New returns a Service over st, charging through gw and shipping through wh.
func New(st store.Store, gw payment.Gateway, wh fulfillment.Warehouse, cfg Config) *Service {
	if cfg.KeyTTL <= 0 {
		cfg.KeyTTL = idempotency.DefaultKeyTTL
	}
	if cfg.DerivedKeyTTL <= 0 {
		cfg.DerivedKeyTTL = idempotency.DefaultDerivedKeyTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatusOf == nil {
		panic("service: Config.StatusOf is required")
	}
	return &Service{store: st, gateway: gw, warehouse: wh, cfg: cfg}
}

// Result is the outcome of a use case. Status is the HTTP status of the
// outcome (201, 200, or a replayed final error's). Replayed is true when the
// outcome was recorded by an earlier request with the same key; Order is
// then the order's current state. KeyExpiresAt is when the key's record
// expires (zero without a key).
type Result struct {
	Order        order.Order
	Status       int
	Replayed     bool
	KeyExpiresAt time.Time
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

// Get returns the tenant's order id, or ENotFound.
func (s *Service) Get(ctx context.Context, tenantID, id string) (order.Order, error) {
	o, err := s.store.GetOrder(ctx, tenantID, id)
	return o, notFound(err, id)
}

// List returns the tenant's orders matching f, newest first, and the cursor
// of the next page ("" on the last page). Limit is clamped to [1, 100],
// default 20.
func (s *Service) List(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, string, error) {
	switch {
	case f.Limit <= 0:
		f.Limit = 20
	case f.Limit > 100:
		f.Limit = 100
	}
	if f.State != "" && !f.State.Valid() {
		return nil, "", &order.Error{Code: order.EInvalid, Message: "unknown state filter",
			Fields: []order.FieldError{{Field: "state", Reason: "must be one of RCVD, PAID, FULFILLED, CANCELLED"}}}
	}
	want := f.Limit
	f.Limit++
	os, err := s.store.ListOrders(ctx, tenantID, f)
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
func (s *Service) Create(ctx context.Context, tenantID string, key idempotency.Key, in order.NewOrderInput) (Result, error) {
	now := s.cfg.Now()
	o, err := order.New(tenantID, in, now)
	if err != nil {
		return Result{}, err
	}
	rec := s.record(tenantID, key, now, StatusCreated, o.ID, nil)
	held, err := s.store.CreateOrder(ctx, rec, o)
	if err != nil {
		return Result{}, err
	}
	if held != nil {
		return s.replay(ctx, key, *held, now)
	}
	return Result{Order: o, Status: StatusCreated, KeyExpiresAt: expiry(rec)}, nil
}

// Pay charges the order through the payment gateway and moves it to PAID.
// Paying a PAID or FULFILLED order is a no-op. Errors: ENotFound, EInvalid
// (missing payment method; not stored), EMismatch (amount or currency differ
// from the order's), EDeclined, EInvalidTransition, EKeyReused,
// EKeyExpired, EUnavailable (provider or store failed; not stored).
func (s *Service) Pay(ctx context.Context, tenantID, orderID string, key idempotency.Key, in PayInput) (Result, error) {
	if in.PaymentMethod == "" {
		return Result{}, &order.Error{Code: order.EInvalid, Message: "the payment has invalid fields",
			Fields: []order.FieldError{{Field: "payment_method", Reason: "is required"}}}
	}
	check := func(o order.Order) error {
		if in.Amount != o.Amount || in.Currency != o.Currency {
			return order.Errorf(order.EMismatch,
				"payment of %d %s does not match the order's amount %d %s", in.Amount, in.Currency, o.Amount, o.Currency)
		}
		return nil
	}
	charge := func(ctx context.Context, o order.Order) error {
		_, err := s.gateway.Charge(ctx, payment.ChargeRequest{
			IdempotencyKey: chargeKey(o.ID, o.Version), OrderID: o.ID,
			Amount: o.Amount, Currency: o.Currency, PaymentMethod: in.PaymentMethod,
		})
		var decline *payment.DeclineError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &decline):
			return order.Errorf(order.EDeclined, "the payment was declined: %s", decline.Code)
		case errors.Is(err, payment.ErrIdempotencyKeyReused):
			// Another pay of this order version with other payment details
			// reached the provider first; its outcome decides.
			return order.Errorf(order.EKeyInProgress, "another payment of order %s is in progress; retry", o.ID)
		default:
			return &order.Error{Code: order.EUnavailable, Message: "the payment provider is unavailable: " + err.Error()}
		}
	}
	return s.transition(ctx, tenantID, orderID, key, order.EventPay, check, charge)
}

// Fulfill ships the order through the warehouse and moves it from PAID to
// FULFILLED. Fulfilling a FULFILLED order is a no-op. Errors: ENotFound,
// EInvalidTransition, EFulfillmentRejected, EKeyReused, EKeyExpired,
// EUnavailable.
func (s *Service) Fulfill(ctx context.Context, tenantID, orderID string, key idempotency.Key) (Result, error) {
	ship := func(ctx context.Context, o order.Order) error {
		_, err := s.warehouse.Ship(ctx, fulfillment.ShipmentRequest{
			IdempotencyKey: o.ID + "/fulfill", OrderID: o.ID, Items: o.Items,
		})
		switch {
		case err == nil:
			return nil
		case !fulfillment.IsRetryable(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
			return order.Errorf(order.EFulfillmentRejected, "the warehouse rejected the shipment: %v", err)
		default:
			return &order.Error{Code: order.EUnavailable, Message: "the warehouse is unavailable: " + err.Error()}
		}
	}
	return s.transition(ctx, tenantID, orderID, key, order.EventFulfill, nil, ship)
}

// Cancel moves a RCVD order to CANCELLED. Cancelling a CANCELLED order is a
// no-op. Errors: ENotFound, EInvalidTransition, EKeyReused, EKeyExpired,
// EUnavailable.
func (s *Service) Cancel(ctx context.Context, tenantID, orderID string, key idempotency.Key) (Result, error) {
	return s.transition(ctx, tenantID, orderID, key, order.EventCancel, nil, nil)
}

// transition is the shared shape of Pay, Fulfill and Cancel: replay a held
// key; read; check; decide; act once; compare-and-set; on a lost race read
// and decide again.
func (s *Service) transition(ctx context.Context, tenantID, orderID string, key idempotency.Key, ev order.Event,
	check func(order.Order) error, act func(context.Context, order.Order) error) (Result, error) {
	now := s.cfg.Now()
	if !key.IsZero() {
		held, err := s.store.LookupKey(ctx, tenantID, idempotency.HashKey(key.Value))
		switch {
		case err == nil && !(held.Derived && held.Expired(now)):
			return s.replay(ctx, key, held, now)
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return Result{}, err
		}
	}
	acted := false
	for range maxDecisions {
		o, err := s.store.GetOrder(ctx, tenantID, orderID)
		if err != nil {
			return Result{}, notFound(err, orderID)
		}
		if check != nil {
			if err := check(o); err != nil {
				return s.final(ctx, tenantID, key, now, o.ID, err)
			}
		}
		d, err := statemachine.Decide(o.State, ev)
		if err != nil {
			if ev == order.EventPay && o.State == order.Cancelled {
				// A charge may have been captured by a pay that lost the race
				// to a cancel (this one, or an earlier try); refund it.
				if err := s.refundCancelled(ctx, o); err != nil {
					return Result{}, err
				}
			}
			return s.final(ctx, tenantID, key, now, o.ID, err)
		}
		if d.Outcome == statemachine.NoOp {
			return s.succeed(ctx, tenantID, key, now, o, nil)
		}
		if act != nil && !acted {
			if err := act(ctx, o); err != nil {
				switch order.ErrorCode(err) {
				case order.EUnavailable, order.EKeyInProgress:
					return Result{}, err
				case order.EDeclined:
					return s.declined(ctx, tenantID, key, now, o, err)
				}
				return s.final(ctx, tenantID, key, now, o.ID, err)
			}
			acted = true
		}
		next := o.Apply(d.To, now)
		res, err := s.succeed(ctx, tenantID, key, now, next, &o)
		if errors.Is(err, store.ErrVersionConflict) {
			continue
		}
		return res, err
	}
	return Result{}, order.Errorf(order.EUnavailable, "order %s is changing too fast; retry", orderID)
}

// succeed records a 200 outcome for o: with prev non-nil as the
// compare-and-set from prev to o, else (a no-op) as a key record alone.
func (s *Service) succeed(ctx context.Context, tenantID string, key idempotency.Key, now time.Time, o order.Order, prev *order.Order) (Result, error) {
	rec := s.record(tenantID, key, now, StatusOK, o.ID, nil)
	var held *idempotency.Record
	var err error
	switch {
	case prev != nil:
		held, err = s.store.Transition(ctx, rec, o)
	case rec != nil:
		held, err = s.store.SaveRecord(ctx, *rec)
	}
	if err != nil {
		return Result{}, err
	}
	if held != nil {
		return s.replay(ctx, key, *held, now)
	}
	return Result{Order: o, Status: StatusOK, KeyExpiresAt: expiry(rec)}, nil
}

// declined records a decline: the order stays RCVD but its version moves on
// (compare-and-set, with the 402 claimed in the same transaction), so the
// next pay uses a new provider-side key and another payment method can be
// tried. If the order moved meanwhile, the 402 is recorded alone.
func (s *Service) declined(ctx context.Context, tenantID string, key idempotency.Key, now time.Time, o order.Order, cause error) (Result, error) {
	oe := cause.(*order.Error)
	status := s.cfg.StatusOf(oe.Code)
	rec := s.record(tenantID, key, now, status, o.ID, oe)
	held, err := s.store.Transition(ctx, rec, o.Apply(o.State, now))
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		return s.final(ctx, tenantID, key, now, o.ID, cause)
	case err != nil:
		return Result{}, err
	case held != nil:
		return s.replay(ctx, key, *held, now)
	}
	return Result{Status: status, KeyExpiresAt: expiry(rec)}, cause
}

// chargeKey is the provider-side idempotency key of paying order id at
// version: every pay of one order version is one logical charge. A decline
// moves the version on, so a new payment method gets a new charge.
func chargeKey(id string, version int64) string { return fmt.Sprintf("%s/pay/%d", id, version) }

// final records a final error outcome for the key and returns it.
func (s *Service) final(ctx context.Context, tenantID string, key idempotency.Key, now time.Time, orderID string, cause error) (Result, error) {
	var oe *order.Error
	if !errors.As(cause, &oe) {
		return Result{}, cause
	}
	status := s.cfg.StatusOf(oe.Code)
	rec := s.record(tenantID, key, now, status, orderID, oe)
	if rec == nil {
		return Result{Status: status}, cause
	}
	held, err := s.store.SaveRecord(ctx, *rec)
	if err != nil {
		return Result{}, err
	}
	if held != nil {
		return s.replay(ctx, key, *held, now)
	}
	return Result{Status: status, KeyExpiresAt: rec.ExpiresAt}, cause
}

// replay answers with the outcome held recorded: the same status, the
// order's current state, or the same final error.
func (s *Service) replay(ctx context.Context, key idempotency.Key, held idempotency.Record, now time.Time) (Result, error) {
	if held.Fingerprint != key.Fingerprint {
		return Result{}, order.Errorf(order.EKeyReused,
			"this Idempotency-Key was used with a different request; use a new key for a new request")
	}
	if held.Expired(now) {
		return Result{}, order.Errorf(order.EKeyExpired,
			"this Idempotency-Key expired at %s; retry with a new key", held.ExpiresAt.Format(time.RFC3339))
	}
	res := Result{Status: held.StatusCode, Replayed: true, KeyExpiresAt: held.ExpiresAt}
	if err := held.Err(); err != nil {
		return res, err
	}
	o, err := s.store.GetOrder(ctx, held.TenantID, held.ResourceID)
	if err != nil {
		return Result{}, fmt.Errorf("replay of key for %s: %w", held.ResourceID, err)
	}
	res.Order = o
	return res, nil
}

// refundCancelled refunds the order's charge, if one was captured, with the
// order's provider-side refund key.
func (s *Service) refundCancelled(ctx context.Context, o order.Order) error {
	_, err := s.gateway.Refund(ctx, payment.RefundRequest{
		// Only a cancel at version v+1 can orphan a charge made at version v.
		IdempotencyKey: o.ID + "/refund", ChargeKey: chargeKey(o.ID, o.Version-1), Amount: o.Amount,
	})
	switch {
	case err == nil:
		s.cfg.Logger.Info("a charge captured for a cancelled order is refunded", "order_id", o.ID)
		return nil
	case errors.Is(err, payment.ErrChargeNotFound):
		return nil
	default:
		return &order.Error{Code: order.EUnavailable, Message: "the payment provider is unavailable: " + err.Error()}
	}
}

// record returns the key record to claim for an outcome, or nil without a
// key.
func (s *Service) record(tenantID string, key idempotency.Key, now time.Time, status int, resourceID string, e *order.Error) *idempotency.Record {
	if key.IsZero() {
		return nil
	}
	ttl := s.cfg.KeyTTL
	if key.Derived {
		ttl = s.cfg.DerivedKeyTTL
	}
	now = now.UTC().Truncate(time.Microsecond)
	r := &idempotency.Record{
		TenantID: tenantID, KeyHash: idempotency.HashKey(key.Value), Fingerprint: key.Fingerprint, Derived: key.Derived,
		StatusCode: status, ResourceID: resourceID, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	if e != nil {
		r.ErrorCode, r.ErrorDetail = e.Code, e.Message
	}
	return r
}

func expiry(r *idempotency.Record) time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.ExpiresAt
}

func notFound(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return order.Errorf(order.ENotFound, "order %s not found", id)
	}
	return err
}
