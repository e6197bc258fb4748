package payment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Test payment methods understood by Simulator. Every other non-empty
// payment method is approved.
const (
	// TestMethodApproved is an ordinary approved card, the README's example.
	TestMethodApproved = "pm_card_visa"
	// TestMethodDeclined is declined with a *DeclineError whose Code is
	// DeclineCardDeclined ("card_declined").
	TestMethodDeclined = "pm_card_declined"
	// TestMethodInsufficientFunds is declined with a *DeclineError whose Code
	// is DeclineInsufficientFunds ("insufficient_funds").
	TestMethodInsufficientFunds = "pm_card_insufficient_funds"
	// TestMethodProviderError fails with a retryable *ProviderError, like a
	// transient 503 from the provider. Nothing is captured and the failure is
	// not remembered under the idempotency key, so a retry is re-evaluated.
	TestMethodProviderError = "pm_card_provider_error"
)

// errProviderUnavailable is the cause inside the ProviderError returned for
// TestMethodProviderError.
var errProviderUnavailable = errors.New("simulated provider unavailable (503)")

// Simulator is an in-memory Gateway that behaves like a real provider with
// idempotency keys. It approves every payment method except the Test*
// methods, keeps a ledger keyed by IdempotencyKey, and remembers both
// captures and declines: a repeated key with the same parameters returns the
// same Charge (same ID) or the same decline and never captures again; a
// repeated key with different parameters fails with a non-retryable
// *ProviderError wrapping ErrIdempotencyKeyReused. Transient failures
// (TestMethodProviderError, a context that ends first) are not remembered.
//
// A Simulator is safe for concurrent use. The zero value is not usable; call
// NewSimulator.
type Simulator struct {
	// Delay, if positive, is how long Charge waits before answering. If the
	// context ends first, nothing is captured and Charge returns a retryable
	// *ProviderError wrapping ctx.Err(). Set Delay before the Simulator is
	// first used and do not change it while calls are in flight.
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
	req     ChargeRequest
	charge  Charge
	decline *DeclineError // nil if captured
}

// refundEntry is the remembered outcome of a refund key.
type refundEntry struct {
	req    RefundRequest
	refund Refund
}

var _ Gateway = (*Simulator)(nil)

// NewSimulator returns an empty Simulator with no delay.
func NewSimulator() *Simulator {
	return &Simulator{
		charges:        make(map[string]*chargeEntry),
		refunds:        make(map[string]*refundEntry),
		refunded:       make(map[string]int64),
		captures:       make(map[string]int),
		refundsByOrder: make(map[string]int),
	}
}

// Charge implements Gateway. It waits Delay first, then, under the
// Simulator's lock, replays the outcome remembered for req.IdempotencyKey or
// evaluates req.PaymentMethod and remembers the outcome. An empty
// PaymentMethod is declined with DeclineInvalidPaymentMethod; an empty
// IdempotencyKey or Currency, or a negative Amount, fails with a
// non-retryable *ProviderError.
func (s *Simulator) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()

	if err := wait(ctx, s.Delay); err != nil {
		return Charge{}, err
	}
	if err := validateCharge(req); err != nil {
		return Charge{}, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Charge{}, cancelled(ctx)
	}
	if e, ok := s.charges[req.IdempotencyKey]; ok {
		if e.req != req {
			return Charge{}, keyReused("charge", req.IdempotencyKey)
		}
		if e.decline != nil {
			d := *e.decline
			return Charge{}, &d
		}
		return e.charge, nil
	}

	var decline *DeclineError
	switch req.PaymentMethod {
	case TestMethodProviderError:
		return Charge{}, &ProviderError{Retryable: true, Err: errProviderUnavailable}
	case "":
		decline = &DeclineError{Code: DeclineInvalidPaymentMethod, Message: "No payment method was given."}
	case TestMethodDeclined:
		decline = &DeclineError{Code: DeclineCardDeclined, Message: "Your card was declined."}
	case TestMethodInsufficientFunds:
		decline = &DeclineError{Code: DeclineInsufficientFunds, Message: "Your card has insufficient funds."}
	}
	if decline != nil {
		s.charges[req.IdempotencyKey] = &chargeEntry{req: req, decline: decline}
		d := *decline
		return Charge{}, &d
	}

	c := Charge{
		ID:             newID("ch_"),
		IdempotencyKey: req.IdempotencyKey,
		OrderID:        req.OrderID,
		Amount:         req.Amount,
		Currency:       req.Currency,
		Status:         ChargeCaptured,
		CreatedAt:      time.Now().UTC(),
	}
	s.charges[req.IdempotencyKey] = &chargeEntry{req: req, charge: c}
	s.chargeOrder = append(s.chargeOrder, req.IdempotencyKey)
	s.captures[req.OrderID]++
	return c, nil
}

// Refund implements Gateway. A repeated req.IdempotencyKey with the same
// parameters returns the original Refund; with different parameters it fails
// with a non-retryable *ProviderError wrapping ErrIdempotencyKeyReused. A
// ChargeKey with no capture (unknown, or declined) yields an error wrapping
// ErrChargeNotFound. An Amount that is negative or exceeds what is left
// unrefunded fails with a non-retryable *ProviderError. A successful refund
// marks the charge ChargeRefunded.
func (s *Simulator) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	if req.IdempotencyKey == "" {
		return Refund{}, &ProviderError{Err: errors.New("idempotency key is required")}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Refund{}, cancelled(ctx)
	}
	if e, ok := s.refunds[req.IdempotencyKey]; ok {
		if e.req != req {
			return Refund{}, keyReused("refund", req.IdempotencyKey)
		}
		return e.refund, nil
	}
	ce, ok := s.charges[req.ChargeKey]
	if !ok || ce.decline != nil {
		return Refund{}, fmt.Errorf("%w: no captured charge has key %q", ErrChargeNotFound, req.ChargeKey)
	}
	left := ce.charge.Amount - s.refunded[req.ChargeKey]
	if req.Amount < 0 || req.Amount > left {
		return Refund{}, &ProviderError{Err: fmt.Errorf("refund amount %d is outside [0, %d], the unrefunded remainder of charge %s", req.Amount, left, ce.charge.ID)}
	}
	r := Refund{
		ID:        newID("re_"),
		ChargeID:  ce.charge.ID,
		Amount:    req.Amount,
		CreatedAt: time.Now().UTC(),
	}
	s.refunds[req.IdempotencyKey] = &refundEntry{req: req, refund: r}
	s.refunded[req.ChargeKey] += req.Amount
	ce.charge.Status = ChargeRefunded
	s.refundsByOrder[ce.charge.OrderID]++
	return r, nil
}

// Captures returns the number of distinct captures ever made for orderID. It
// stays 1 however often a charge is repeated under the same idempotency key.
func (s *Simulator) Captures(orderID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.captures[orderID]
}

// TotalCaptures returns the number of distinct captures made for all orders.
func (s *Simulator) TotalCaptures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chargeOrder)
}

// Refunds returns the number of distinct refunds made for orderID's charges.
func (s *Simulator) Refunds(orderID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refundsByOrder[orderID]
}

// Calls returns the number of Charge calls received, including repeats and
// calls that failed.
func (s *Simulator) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Charges returns a copy of every captured Charge, in capture order, with its
// current Status.
func (s *Simulator) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Charge, 0, len(s.chargeOrder))
	for _, k := range s.chargeOrder {
		out = append(out, s.charges[k].charge)
	}
	return out
}

// validateCharge rejects requests a provider would answer with a 400.
func validateCharge(req ChargeRequest) error {
	switch {
	case req.IdempotencyKey == "":
		return &ProviderError{Err: errors.New("idempotency key is required")}
	case req.Currency == "":
		return &ProviderError{Err: errors.New("currency is required")}
	case req.Amount < 0:
		return &ProviderError{Err: fmt.Errorf("amount %d is negative", req.Amount)}
	}
	return nil
}

// keyReused returns the non-retryable error for an idempotency key reused
// with different parameters.
func keyReused(kind, key string) error {
	return &ProviderError{Err: fmt.Errorf("%s key %q: %w", kind, key, ErrIdempotencyKeyReused)}
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

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return prefix + hex.EncodeToString(b[:])
}
