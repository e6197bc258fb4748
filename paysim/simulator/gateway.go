package simulator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/testmode"
)

// MethodProviderError is the test payment method that Gateway fails with a
// retryable *payment.ProviderError every time, like a transient 503 from the
// provider. Nothing is captured and the failure is not remembered under the
// idempotency key, so a retry is evaluated afresh. It is Gateway's own:
// paysim approves it (its nearest fault, paysim.MethodFault503, fails the
// first request for a key only).
const MethodProviderError = "pm_card_provider_error"

// Test payment methods of IntentGateway that pay asynchronously (issue 16),
// by the names paysim's Stripe mode uses.
const (
	// MethodThreeDSecure leaves the intent in payment.IntentRequiresAction
	// (next action redirect_to_url, a client secret) until
	// IntentGateway.Authenticate.
	MethodThreeDSecure = "pm_card_threeDSecure2Required"
	// MethodBankDebit leaves the intent in payment.IntentProcessing until
	// IntentGateway.Settle.
	MethodBankDebit = "pm_sepaDebit"
)

// errProviderUnavailable is the cause inside the ProviderError returned for
// MethodProviderError.
var errProviderUnavailable = errors.New("simulated provider unavailable (503)")

// Gateway is an in-memory payment.ChargeGateway that behaves like a real provider
// with idempotency keys. It declines the test payment methods of package
// testmode as testmode.Decline says, fails MethodProviderError transiently,
// and approves every other payment method. It keeps a ledger keyed by
// IdempotencyKey and remembers both captures and declines: a repeated key
// with the same parameters returns the same Charge (same ID) or the same
// decline and never captures again; a repeated key with different parameters
// fails with a non-retryable *payment.ProviderError wrapping
// payment.ErrIdempotencyKeyReused. Transient failures (MethodProviderError, a
// context that ends first) are not remembered.
//
// A Gateway is safe for concurrent use. The zero value is not usable; call
// NewGateway.
type Gateway struct {
	// Delay, if positive, is how long Charge waits before answering. If the
	// context ends first, nothing is captured and Charge returns a retryable
	// *payment.ProviderError wrapping ctx.Err(). Set Delay before the
	// Gateway is first used and do not change it while calls are in flight.
	Delay time.Duration

	mu             sync.Mutex
	charges        map[string]*chargeEntry // by charge idempotency key
	chargeOrder    []string                // keys of captured charges, in capture order
	refunds        map[string]*refundEntry // by refund idempotency key
	refunded       map[string]int64        // charge key → total refunded, minor units
	captures       map[string]int          // order id → distinct captures
	refundsByOrder map[string]int          // order id → distinct refunds
	calls          int                     // Charge calls received
}

// chargeEntry is the remembered outcome of a charge key: a capture or a
// decline.
type chargeEntry struct {
	req     payment.ChargeRequest
	charge  payment.Charge
	decline *payment.DeclineError // nil if captured
}

// refundEntry is the remembered outcome of a refund key.
type refundEntry struct {
	req    payment.ChargeRefundRequest
	refund payment.ChargeRefund
}

var _ payment.ChargeGateway = (*Gateway)(nil)

// NewGateway returns an empty Gateway with no delay.
func NewGateway() *Gateway {
	return &Gateway{
		charges:        make(map[string]*chargeEntry),
		refunds:        make(map[string]*refundEntry),
		refunded:       make(map[string]int64),
		captures:       make(map[string]int),
		refundsByOrder: make(map[string]int),
	}
}

// Charge implements payment.ChargeGateway. It waits Delay first, then, under the
// Gateway's lock, replays the outcome remembered for req.IdempotencyKey or
// evaluates req.PaymentMethod and remembers the outcome. An empty
// PaymentMethod is declined with payment.DeclineInvalidPaymentMethod; a
// request that req.Validate refuses fails with its non-retryable
// *payment.ProviderError.
func (g *Gateway) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()

	if err := wait(ctx, g.Delay); err != nil {
		return payment.Charge{}, err
	}
	if err := req.Validate(); err != nil {
		return payment.Charge{}, err
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return payment.Charge{}, cancelled(ctx)
	}
	if e, ok := g.charges[req.IdempotencyKey]; ok {
		if e.req != req {
			return payment.Charge{}, keyReused("charge", req.IdempotencyKey)
		}
		if e.decline != nil {
			d := *e.decline
			return payment.Charge{}, &d
		}
		return e.charge, nil
	}

	if req.PaymentMethod == MethodProviderError {
		return payment.Charge{}, &payment.ProviderError{Retryable: true, Err: errProviderUnavailable}
	}
	if code, msg := testmode.Decline(req.PaymentMethod); code != "" {
		decline := &payment.DeclineError{Code: code, Message: msg}
		g.charges[req.IdempotencyKey] = &chargeEntry{req: req, decline: decline}
		d := *decline
		return payment.Charge{}, &d
	}

	c := payment.Charge{
		ID:             testmode.NewID("ch_"),
		IdempotencyKey: req.IdempotencyKey,
		OrderID:        req.OrderID,
		Amount:         req.Amount,
		Currency:       req.Currency,
		Status:         payment.ChargeCaptured,
		CreatedAt:      time.Now().UTC(),
	}
	g.charges[req.IdempotencyKey] = &chargeEntry{req: req, charge: c}
	g.chargeOrder = append(g.chargeOrder, req.IdempotencyKey)
	g.captures[req.OrderID]++
	return c, nil
}

// Refund implements payment.ChargeGateway. A repeated req.IdempotencyKey with the
// same parameters returns the original Refund; with different parameters it
// fails with a non-retryable *payment.ProviderError wrapping
// payment.ErrIdempotencyKeyReused. A ChargeKey with no capture (unknown, or
// declined) yields an error wrapping payment.ErrChargeNotFound. An Amount
// that is negative or exceeds what is left unrefunded fails with a
// non-retryable *payment.ProviderError. A successful refund marks the charge
// payment.ChargeRefunded.
func (g *Gateway) Refund(ctx context.Context, req payment.ChargeRefundRequest) (payment.ChargeRefund, error) {
	if err := req.Validate(); err != nil {
		return payment.ChargeRefund{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return payment.ChargeRefund{}, cancelled(ctx)
	}
	if e, ok := g.refunds[req.IdempotencyKey]; ok {
		if e.req != req {
			return payment.ChargeRefund{}, keyReused("refund", req.IdempotencyKey)
		}
		return e.refund, nil
	}
	ce, ok := g.charges[req.ChargeKey]
	if !ok || ce.decline != nil {
		return payment.ChargeRefund{}, fmt.Errorf("%w: no captured charge has key %q", payment.ErrChargeNotFound, req.ChargeKey)
	}
	left := ce.charge.Amount - g.refunded[req.ChargeKey]
	if req.Amount < 0 || req.Amount > left {
		return payment.ChargeRefund{}, &payment.ProviderError{Err: fmt.Errorf("refund amount %d is outside [0, %d], the unrefunded remainder of charge %s", req.Amount, left, ce.charge.ID)}
	}
	r := payment.ChargeRefund{
		ID:        testmode.NewID("re_"),
		ChargeID:  ce.charge.ID,
		Amount:    req.Amount,
		CreatedAt: time.Now().UTC(),
	}
	g.refunds[req.IdempotencyKey] = &refundEntry{req: req, refund: r}
	g.refunded[req.ChargeKey] += req.Amount
	ce.charge.Status = payment.ChargeRefunded
	g.refundsByOrder[ce.charge.OrderID]++
	return r, nil
}

// Lookup implements payment.ChargeGateway: it returns the Charge remembered under
// key (with its current Status), a copy of the remembered
// *payment.DeclineError, or an error wrapping payment.ErrChargeNotFound.
// Transient failures are never remembered, so a key whose only calls failed
// transiently is not found. A context that has ended yields a retryable
// *payment.ProviderError.
func (g *Gateway) Lookup(ctx context.Context, key string) (payment.Charge, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ctx.Err() != nil {
		return payment.Charge{}, cancelled(ctx)
	}
	e, ok := g.charges[key]
	switch {
	case !ok:
		return payment.Charge{}, fmt.Errorf("%w: no charge has key %q", payment.ErrChargeNotFound, key)
	case e.decline != nil:
		d := *e.decline
		return payment.Charge{}, &d
	}
	return e.charge, nil
}

// Captures returns the number of distinct captures ever made for orderID. It
// stays 1 however often a charge is repeated under the same idempotency key.
func (g *Gateway) Captures(orderID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.captures[orderID]
}

// TotalCaptures returns the number of distinct captures made for all orders.
func (g *Gateway) TotalCaptures() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.chargeOrder)
}

// Refunds returns the number of distinct refunds made for orderID's charges.
func (g *Gateway) Refunds(orderID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refundsByOrder[orderID]
}

// Calls returns the number of Charge calls received, including repeats and
// calls that failed.
func (g *Gateway) Calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// Charges returns a copy of every captured Charge, in capture order, with its
// current Status.
func (g *Gateway) Charges() []payment.Charge {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]payment.Charge, 0, len(g.chargeOrder))
	for _, k := range g.chargeOrder {
		out = append(out, g.charges[k].charge)
	}
	return out
}

// cancelled returns the retryable ProviderError for a call whose context
// ended before the provider acted.
func cancelled(ctx context.Context) error {
	return &payment.ProviderError{Retryable: true, Err: ctx.Err()}
}

// keyReused returns the non-retryable error for an idempotency key reused
// with different parameters.
func keyReused(kind, key string) error {
	return &payment.ProviderError{Err: fmt.Errorf("%s key %q: %w", kind, key, payment.ErrIdempotencyKeyReused)}
}

// wait sleeps for d, or returns a retryable ProviderError if ctx ends first
// (or has already ended).
func wait(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return cancelled(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return cancelled(ctx)
	case <-t.C:
		return nil
	}
}
