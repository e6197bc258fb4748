package simulator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/testmode"
)

// IntentGateway is an in-memory payment.Gateway: the seam of issue 15 on
// provider objects (intents), with the semantics of Stripe's PaymentIntents
// (docs.stripe.com/payments/paymentintents/lifecycle) and of its idempotent
// requests (docs.stripe.com/api/idempotent_requests), without a network:
//
//   - Prepare creates an intent in payment.IntentRequiresPaymentMethod and
//     moves no money;
//   - Confirm declines the test payment methods of package testmode as
//     testmode.Decline says (the intent goes back to
//     requires_payment_method with LastDecline set, and may be confirmed
//     again under another key), fails MethodProviderError transiently (not
//     remembered), and otherwise receives the intent's amount once;
//   - every call that changes something remembers its answer under its
//     idempotency key and replays it to a repeat with the same parameters;
//     other parameters are a final *payment.ProviderError wrapping
//     payment.ErrIdempotencyKeyReused;
//   - an intent prepared with payment.CaptureManual only authorizes on
//     Confirm (payment.IntentRequiresCapture, CaptureBefore =
//     AuthorizationWindow after the confirm); Capture receives at most the
//     authorized amount, once, releasing the rest; Cancel voids an
//     authorization; an authorization past CaptureBefore is canceled by
//     the gateway when next read or used, as Stripe does;
//   - Refund never returns more than was received; Cancel refuses an intent
//     that received money.
//
// LoseAnswers makes calls take effect and then lose their answers (an
// unknown outcome), as a connection dropped after the provider committed.
// It is safe for concurrent use; call NewIntentGateway.
type IntentGateway struct {
	// Delay, if positive, is how long every call waits before acting. If
	// the context ends first nothing is done and the call returns a
	// retryable *payment.ProviderError wrapping ctx.Err(). Set it before
	// first use.
	Delay time.Duration
	// AuthorizationWindow is how long an authorization (an intent in
	// payment.IntentRequiresCapture) lasts before the gateway cancels it
	// uncaptured; zero means DefaultAuthorizationWindow (7 days, Stripe's
	// window for online card payments). Set it before first use.
	AuthorizationWindow time.Duration
	// Now, if set, is the gateway's clock (for tests of expiry); default
	// time.Now. Set it before first use.
	Now func() time.Time

	mu       sync.Mutex
	intents  map[string]*payment.Intent // by id
	byRef    map[string]string          // reference key → intent id
	saved    map[string]savedAnswer     // by idempotency key
	refunds  map[string][]payment.Refund
	received map[string]int64 // order id → minor units received, all intents
	moves    map[string]int   // order id → confirms that received money
	auths    map[string]int   // order id → confirms that authorized money
	lose     int              // calls left whose answers are lost
	calls    int              // Confirm calls received
}

// DefaultAuthorizationWindow is how long an authorization lasts when
// IntentGateway.AuthorizationWindow is zero: 7 days, Stripe's window for
// online card payments (docs.stripe.com/payments/place-a-hold-on-a-payment-method#auth-and-capture).
const DefaultAuthorizationWindow = 7 * 24 * time.Hour

func (g *IntentGateway) now() time.Time {
	if g.Now != nil {
		return g.Now().UTC()
	}
	return time.Now().UTC()
}

// expire cancels intent in if it is an authorization past its
// CaptureBefore, as the provider does (cancellation reason "automatic" at
// Stripe). g.mu is held.
func (g *IntentGateway) expire(in *payment.Intent) {
	if in.Status == payment.IntentRequiresCapture && !in.CaptureBefore.IsZero() && !g.now().Before(in.CaptureBefore) {
		in.Status, in.CaptureBefore = payment.IntentCanceled, time.Time{}
	}
}

// Authorizations returns how many confirms of orderID's intents authorized
// money for a later capture (an authorization is not a capture: Captures
// does not count it until it is captured).
func (g *IntentGateway) Authorizations(orderID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.auths[orderID]
}

// savedAnswer is the remembered answer of one idempotency key: the request
// (to compare parameters) and its result.
type savedAnswer struct {
	req    any
	intent payment.Intent
	refund payment.Refund
	err    error
}

var _ payment.Gateway = (*IntentGateway)(nil)

// NewIntentGateway returns an empty IntentGateway.
func NewIntentGateway() *IntentGateway {
	return &IntentGateway{
		intents:  make(map[string]*payment.Intent),
		byRef:    make(map[string]string),
		saved:    make(map[string]savedAnswer),
		refunds:  make(map[string][]payment.Refund),
		received: make(map[string]int64),
		moves:    make(map[string]int),
		auths:    make(map[string]int),
	}
}

// LoseAnswers makes the next n calls that change something (Prepare,
// Confirm, Capture, Refund, Cancel) take effect and then return an error wrapping
// payment.ErrUnknownOutcome instead of their answer. A repeat of such a
// call replays the saved answer.
func (g *IntentGateway) LoseAnswers(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lose = n
}

// Received returns how many minor units the intents of orderID received
// (before refunds), from the gateway's own books.
func (g *IntentGateway) Received(orderID string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.received[orderID]
}

// Moves returns how many confirms of orderID's intents received money.
func (g *IntentGateway) Moves(orderID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.moves[orderID]
}

// Calls returns how many Confirm calls the gateway received, whatever
// their outcome.
func (g *IntentGateway) Calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// Captures returns how many confirms of orderID's intents received money
// (Moves; paysim's GET /admin/stats calls them captures).
func (g *IntentGateway) Captures(orderID string) int { return g.Moves(orderID) }

// TotalCaptures returns how many confirms of every order received money.
func (g *IntentGateway) TotalCaptures() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, m := range g.moves {
		n += m
	}
	return n
}

// Refunds returns how many refunds were made of orderID's intents.
func (g *IntentGateway) Refunds(orderID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for id, rs := range g.refunds {
		if g.intents[id].Reference.OrderID == orderID {
			n += len(rs)
		}
	}
	return n
}

// Intents returns a copy of every intent, in no particular order.
func (g *IntentGateway) Intents() []payment.Intent {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]payment.Intent, 0, len(g.intents))
	for _, in := range g.intents {
		out = append(out, *in)
	}
	return out
}

// begin waits Delay, validates, and locks the gateway; the caller unlocks.
func (g *IntentGateway) begin(ctx context.Context, validate func() error) error {
	if err := wait(ctx, g.Delay); err != nil {
		return err
	}
	if err := validate(); err != nil {
		return err
	}
	g.mu.Lock()
	if ctx.Err() != nil {
		g.mu.Unlock()
		return cancelled(ctx)
	}
	return nil
}

// replay returns the answer saved under key, if any: ok false when none.
func (g *IntentGateway) replay(kind, key string, req any) (savedAnswer, bool, error) {
	s, ok := g.saved[key]
	if !ok {
		return savedAnswer{}, false, nil
	}
	if s.req != req {
		return savedAnswer{}, true, keyReused(kind, key)
	}
	return s, true, s.err
}

// answer saves a under key and returns its result, or a lost answer.
func (g *IntentGateway) answer(key string, a savedAnswer) (savedAnswer, error) {
	g.saved[key] = a
	if g.lose > 0 {
		g.lose--
		return savedAnswer{}, &payment.ProviderError{Err: fmt.Errorf("%w: the answer was lost (simulated)", payment.ErrUnknownOutcome)}
	}
	return a, a.err
}

func notFound(what, id string) error {
	return fmt.Errorf("%w: no %s %q", payment.ErrNotFound, what, id)
}

func unexpectedState(in *payment.Intent, what string) error {
	return &payment.ProviderError{Code: "payment_intent_unexpected_state",
		Err: fmt.Errorf("cannot %s intent %s in status %s", what, in.ID, in.Status)}
}

// Prepare implements payment.Gateway.
func (g *IntentGateway) Prepare(ctx context.Context, req payment.PrepareRequest) (payment.Intent, error) {
	if err := g.begin(ctx, req.Validate); err != nil {
		return payment.Intent{}, err
	}
	defer g.mu.Unlock()
	if s, ok, err := g.replay("prepare", req.IdempotencyKey, req); ok {
		return s.intent, err
	}
	mode := req.CaptureMode
	if mode == "" {
		mode = payment.CaptureAutomatic
	}
	in := &payment.Intent{ID: testmode.NewID("pi_"), Reference: req.Reference, Amount: req.Amount,
		Currency: req.Currency, Status: payment.IntentRequiresPaymentMethod, CaptureMode: mode, CreatedAt: g.now()}
	g.intents[in.ID] = in
	g.byRef[req.Reference.Key] = in.ID
	s, err := g.answer(req.IdempotencyKey, savedAnswer{req: req, intent: *in})
	return s.intent, err
}

// Confirm implements payment.Gateway.
func (g *IntentGateway) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	if err := g.begin(ctx, req.Validate); err != nil {
		return payment.Intent{}, err
	}
	defer g.mu.Unlock()
	if s, ok, err := g.replay("confirm", req.IdempotencyKey, req); ok {
		return s.intent, err
	}
	in, ok := g.intents[req.IntentID]
	if !ok {
		return payment.Intent{}, notFound("intent", req.IntentID)
	}
	if req.PaymentMethod == MethodProviderError {
		return payment.Intent{}, &payment.ProviderError{Retryable: true, Err: errProviderUnavailable}
	}
	g.expire(in)
	a := savedAnswer{req: req}
	switch {
	case in.Status.Final() || in.Status == payment.IntentProcessing || in.Status == payment.IntentRequiresCapture:
		a.err = unexpectedState(in, "confirm")
	default:
		if code, msg := testmode.Decline(req.PaymentMethod); code != "" {
			in.Status, in.LastDecline = payment.IntentRequiresPaymentMethod, &payment.DeclineError{Code: code, Message: msg}
			d := *in.LastDecline
			a.err = &d
		} else if req.PaymentMethod == MethodThreeDSecure {
			in.Status, in.LastDecline = payment.IntentRequiresAction, nil
			in.ClientSecret = in.ID + "_secret_sim"
			in.NextAction = &payment.NextAction{Type: "redirect_to_url", RedirectURL: "sim://authenticate/" + in.ID}
		} else if req.PaymentMethod == MethodBankDebit {
			in.Status, in.LastDecline = payment.IntentProcessing, nil
		} else {
			g.receive(in)
		}
	}
	a.intent = *in
	if a.err != nil {
		a.intent = payment.Intent{}
	}
	s, err := g.answer(req.IdempotencyKey, a)
	return s.intent, err
}

// receive moves intent in to IntentSucceeded with its whole amount
// received or, for a manual capture, to IntentRequiresCapture with it
// authorized until AuthorizationWindow from now. g.mu is held.
func (g *IntentGateway) receive(in *payment.Intent) {
	if in.CaptureMode.Manual() {
		window := g.AuthorizationWindow
		if window <= 0 {
			window = DefaultAuthorizationWindow
		}
		in.Status, in.LastDecline, in.NextAction = payment.IntentRequiresCapture, nil, nil
		in.CaptureBefore = g.now().Add(window)
		g.auths[in.Reference.OrderID]++
		return
	}
	in.Status, in.LastDecline, in.NextAction, in.AmountReceived = payment.IntentSucceeded, nil, nil, in.Amount
	g.received[in.Reference.OrderID] += in.Amount
	g.moves[in.Reference.OrderID]++
}

// Authenticate completes the 3-D Secure of intent id, confirmed with
// MethodThreeDSecure and waiting in payment.IntentRequiresAction, as the
// customer would: success receives its amount (IntentSucceeded); failure
// returns it to IntentRequiresPaymentMethod with LastDecline code
// "payment_intent_authentication_failure" (Stripe's code). It is what
// paysim's POST /admin/stripe/payment_intents/{id}/authenticate does.
// Errors: ErrNotFound for an unknown id, a *payment.ProviderError
// (payment_intent_unexpected_state) for an intent in another status.
func (g *IntentGateway) Authenticate(id string, success bool) error {
	return g.complete(id, payment.IntentRequiresAction, success, "payment_intent_authentication_failure",
		"The provided PaymentMethod has failed authentication.")
}

// Settle completes the bank debit of intent id, confirmed with
// MethodBankDebit and in payment.IntentProcessing: success receives its
// amount; failure returns it to IntentRequiresPaymentMethod with LastDecline
// code "insufficient_funds" (paysim's /settle?outcome=failure). Errors as
// Authenticate's.
func (g *IntentGateway) Settle(id string, success bool) error {
	return g.complete(id, payment.IntentProcessing, success, testmode.DeclineInsufficientFunds,
		"The customer's account has insufficient funds to cover this payment.")
}

func (g *IntentGateway) complete(id string, want payment.IntentStatus, success bool, code, msg string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	in, ok := g.intents[id]
	switch {
	case !ok:
		return notFound("intent", id)
	case in.Status != want:
		return unexpectedState(in, "complete")
	case success:
		g.receive(in)
	default:
		in.Status, in.NextAction = payment.IntentRequiresPaymentMethod, nil
		in.LastDecline = &payment.DeclineError{Code: code, Message: msg}
	}
	return nil
}

// Retrieve implements payment.Gateway.
func (g *IntentGateway) Retrieve(ctx context.Context, intentID string) (payment.Intent, error) {
	if err := g.begin(ctx, func() error { return nil }); err != nil {
		return payment.Intent{}, err
	}
	defer g.mu.Unlock()
	in, ok := g.intents[intentID]
	if !ok {
		return payment.Intent{}, notFound("intent", intentID)
	}
	g.expire(in)
	return *in, nil
}

// Find implements payment.Gateway. Its index never lags.
func (g *IntentGateway) Find(ctx context.Context, ref payment.Reference) (payment.Intent, error) {
	if err := g.begin(ctx, func() error { return nil }); err != nil {
		return payment.Intent{}, err
	}
	defer g.mu.Unlock()
	id, ok := g.byRef[ref.Key]
	if !ok || g.intents[id].Reference != ref {
		return payment.Intent{}, notFound("intent with reference", ref.String())
	}
	g.expire(g.intents[id])
	return *g.intents[id], nil
}

// Capture implements payment.Gateway.
func (g *IntentGateway) Capture(ctx context.Context, req payment.CaptureRequest) (payment.Intent, error) {
	if err := g.begin(ctx, req.Validate); err != nil {
		return payment.Intent{}, err
	}
	defer g.mu.Unlock()
	if s, ok, err := g.replay("capture", req.IdempotencyKey, req); ok {
		return s.intent, err
	}
	in, ok := g.intents[req.IntentID]
	if !ok {
		return payment.Intent{}, notFound("intent", req.IntentID)
	}
	g.expire(in)
	a := savedAnswer{req: req}
	switch {
	case in.Status != payment.IntentRequiresCapture:
		a.err = unexpectedState(in, "capture")
	case req.Amount > in.Amount:
		a.err = &payment.ProviderError{Code: "amount_too_large",
			Err: fmt.Errorf("capture amount %d is above %d, what intent %s authorized", req.Amount, in.Amount, in.ID)}
	default:
		in.Status, in.AmountReceived, in.CaptureBefore = payment.IntentSucceeded, req.Amount, time.Time{}
		g.received[in.Reference.OrderID] += req.Amount
		g.moves[in.Reference.OrderID]++
		a.intent = *in
	}
	s, err := g.answer(req.IdempotencyKey, a)
	return s.intent, err
}

// Refund implements payment.Gateway.
func (g *IntentGateway) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	if err := g.begin(ctx, req.Validate); err != nil {
		return payment.Refund{}, err
	}
	defer g.mu.Unlock()
	if s, ok, err := g.replay("refund", req.IdempotencyKey, req); ok {
		return s.refund, err
	}
	in, ok := g.intents[req.IntentID]
	if !ok {
		return payment.Refund{}, notFound("intent", req.IntentID)
	}
	a := savedAnswer{req: req}
	if left := in.AmountReceived - in.AmountRefunded; req.Amount > left {
		a.err = &payment.ProviderError{Code: "amount_too_large",
			Err: fmt.Errorf("refund amount %d is above %d, what intent %s has left unrefunded", req.Amount, left, in.ID)}
	} else {
		r := payment.Refund{ID: testmode.NewID("re_"), IntentID: in.ID, Reference: req.Reference, Amount: req.Amount,
			Status: payment.RefundSucceeded, CreatedAt: time.Now().UTC()}
		in.AmountRefunded += req.Amount
		g.refunds[in.ID] = append(g.refunds[in.ID], r)
		a.refund = r
	}
	s, err := g.answer(req.IdempotencyKey, a)
	return s.refund, err
}

// FindRefund implements payment.Gateway.
func (g *IntentGateway) FindRefund(ctx context.Context, intentID string, ref payment.Reference) (payment.Refund, error) {
	if err := g.begin(ctx, func() error { return nil }); err != nil {
		return payment.Refund{}, err
	}
	defer g.mu.Unlock()
	if _, ok := g.intents[intentID]; !ok {
		return payment.Refund{}, notFound("intent", intentID)
	}
	for _, r := range g.refunds[intentID] {
		if r.Reference == ref {
			return r, nil
		}
	}
	return payment.Refund{}, notFound("refund with reference", ref.String())
}

// Cancel implements payment.Gateway.
func (g *IntentGateway) Cancel(ctx context.Context, req payment.CancelRequest) (payment.Intent, error) {
	if err := g.begin(ctx, req.Validate); err != nil {
		return payment.Intent{}, err
	}
	defer g.mu.Unlock()
	if s, ok, err := g.replay("cancel", req.IdempotencyKey, req); ok {
		return s.intent, err
	}
	in, ok := g.intents[req.IntentID]
	if !ok {
		return payment.Intent{}, notFound("intent", req.IntentID)
	}
	g.expire(in)
	a := savedAnswer{req: req}
	switch in.Status {
	case payment.IntentCanceled:
	case payment.IntentSucceeded, payment.IntentProcessing:
		a.err = unexpectedState(in, "cancel")
	default: // an authorization (requires_capture) is voided: nothing received
		in.Status, in.NextAction, in.CaptureBefore = payment.IntentCanceled, nil, time.Time{}
	}
	if a.err == nil {
		a.intent = *in
	}
	s, err := g.answer(req.IdempotencyKey, a)
	return s.intent, err
}
