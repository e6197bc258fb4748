package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/statemachine"
	"github.com/orderly/orderly/store"
)

// Operator actions, as event.Action.Name records them.
const (
	ActionRecheck        = "attempt.recheck"
	ActionResolve        = "attempt.resolve"
	ActionResendDelivery = "delivery.resend"
	ActionEnableEndpoint = "endpoint.enable"
)

// Finding is an operator's finding about a parked attempt: whether the
// provider acted (a charge captured, a shipment shipped, a refund
// refunded).
type Finding string

// Findings.
const (
	FindingSucceeded    Finding = "succeeded"
	FindingNotSucceeded Finding = "not_succeeded"
)

// ProviderAnswer is what the provider says about an attempt when asked.
type ProviderAnswer string

// Provider answers.
const (
	// ProviderSucceeded: the provider acted (captured, shipped, refunded).
	ProviderSucceeded ProviderAnswer = "succeeded"
	// ProviderNotSucceeded: the provider says it did not act (a decline, a
	// rejection, a charge not refunded).
	ProviderNotSucceeded ProviderAnswer = "not_succeeded"
	// ProviderNothing: the provider has no record under the attempt's key
	// (it may have forgotten it: nothing to say).
	ProviderNothing ProviderAnswer = "nothing"
)

// Operator is who calls an operator action: the operator credential's name
// and role.
type Operator struct {
	Name string
	Role string
}

// OperatorCall is one operator write: who, with which Idempotency-Key and
// request fingerprint, and why (Reason, required, 1–500 characters).
type OperatorCall struct {
	Operator    Operator
	Key         string
	Fingerprint string
	Reason      string
}

// ActionResult is the answer of an operator action; a replay of the same
// Idempotency-Key answers the same one with Replayed set. Order and
// Attempt are as the action left them; Provider is the provider's answer
// when the action asked it; KeysResolved counts the parked idempotency
// keys the action completed (their replays now answer the resolution);
// Requeued counts the deliveries a bulk resend made pending again.
type ActionResult struct {
	Action       event.Action    `json:"action"`
	Provider     ProviderAnswer  `json:"provider_answer,omitempty"`
	Order        *order.Order    `json:"order,omitempty"`
	Attempt      *AttemptView    `json:"attempt,omitempty"`
	KeysResolved int             `json:"keys_resolved,omitempty"`
	Delivery     *event.Delivery `json:"delivery,omitempty"`
	Endpoint     *event.Endpoint `json:"endpoint,omitempty"`
	Requeued     int             `json:"requeued,omitempty"`
	// Secret is a rotated endpoint secret, in the rotation's own answer
	// only (never recorded); SecretShown says a secret was shown then.
	Secret      string `json:"secret,omitempty"`
	SecretShown bool   `json:"secret_shown,omitempty"`
	Replayed    bool   `json:"-"`
}

// AttemptView is a provider attempt as the operator API shows it. Amount
// is in minor units of Currency.
type AttemptView struct {
	ProviderKey   string    `json:"provider_key"`
	TenantID      string    `json:"tenant"`
	OrderID       string    `json:"order_id"`
	Kind          string    `json:"kind"`
	Status        string    `json:"status"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	PaymentMethod string    `json:"payment_method,omitempty"`
	ProviderRef   string    `json:"provider_ref,omitempty"`
	ErrorCode     string    `json:"error_code,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// ViewAttempt returns a's AttemptView.
func ViewAttempt(a payment.Attempt) AttemptView {
	return AttemptView{ProviderKey: a.ProviderKey, TenantID: a.TenantID, OrderID: a.OrderID, Kind: string(a.Kind),
		Status: string(a.Status), Amount: a.Amount, Currency: a.Currency, PaymentMethod: a.PaymentMethod,
		ProviderRef: a.ProviderRef, ErrorCode: a.ErrorCode, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

// MaxReasonLen bounds an operator action's reason and note, in bytes.
const MaxReasonLen = 500

// Operations runs the operators' use cases over a store that has the
// operator capability. It is safe for concurrent use.
type Operations struct {
	s  *Service
	st store.OperatorStore
}

// Operations returns the operators' use cases, or an error when the
// service's store lacks store.OperatorStore.
func (s *Service) Operations() (*Operations, error) {
	st, ok := s.store.(store.OperatorStore)
	if !ok {
		return nil, fmt.Errorf("service: store %T has no operator capability (store.OperatorStore)", s.store)
	}
	return &Operations{s: s, st: st}, nil
}

// Store returns the operator store, for the operators' reads.
func (p *Operations) Store() store.OperatorStore { return p.st }

func checkCall(c OperatorCall, note string) error {
	var fe []apperr.FieldError
	if c.Key == "" {
		return apperr.Errorf(apperr.EKeyRequired, "every operator action needs an Idempotency-Key header")
	}
	if c.Reason == "" {
		fe = append(fe, apperr.FieldError{Field: "reason", Reason: "is required: say why you act"})
	} else if r := order.TextReason(c.Reason, MaxReasonLen); r != "" {
		fe = append(fe, apperr.FieldError{Field: "reason", Reason: r})
	}
	if note != "" {
		if r := order.TextReason(note, MaxReasonLen); r != "" {
			fe = append(fe, apperr.FieldError{Field: "note", Reason: r})
		}
	}
	if len(fe) > 0 {
		return &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields", Fields: fe}
	}
	return nil
}

// keyHash is the operators' idempotency key: scoped to the operator, so
// two operators' keys never meet.
func (c OperatorCall) keyHash() string { return idempotency.HashKey(c.Operator.Name + "\x00" + c.Key) }

// prior answers a call whose key is already recorded: a replay of the same
// request, or EKeyReused for another one (draft-ietf-httpapi-idempotency-
// key-header §2.7). ok is false when the key is not recorded.
func (p *Operations) prior(ctx context.Context, c OperatorCall) (ActionResult, bool, error) {
	a, err := p.st.GetOperatorAction(ctx, c.keyHash())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ActionResult{}, false, nil
	case err != nil:
		return ActionResult{}, true, err
	case a.Fingerprint != c.Fingerprint:
		return ActionResult{}, true, apperr.Errorf(apperr.EKeyReused,
			"this Idempotency-Key was used for another operator action; use a new key for a new action")
	}
	var res ActionResult
	if err := json.Unmarshal(a.Result, &res); err != nil {
		return ActionResult{}, true, fmt.Errorf("operator action %s: stored result: %w", a.ID, err)
	}
	res.Replayed = true
	return res, true, nil
}

// record writes, in tx, the audit event of res.Action and the action's
// record (the idempotency key and the answer). It returns errReplay when
// the key was recorded meanwhile (the caller rolls back and replays).
func (p *Operations) record(ctx context.Context, tx store.OperatorExecutor, c OperatorCall, res ActionResult) error {
	ev := event.ForAction(res.Action)
	if err := tx.AppendEvent(ctx, ev); err != nil {
		return err
	}
	//nolint:gosec // G117: res never holds a secret here: RotateSecret adds the rotated secret to its own answer after this record is written
	body, err := json.Marshal(res)
	if err != nil {
		return err
	}
	ok, err := tx.RecordOperatorAction(ctx, store.OperatorAction{KeyHash: c.keyHash(), Fingerprint: c.Fingerprint,
		ID: res.Action.ID, Actor: c.Operator.Name, Action: res.Action.Name, TenantID: res.Action.TenantID,
		Target: res.Action.Target, Reason: c.Reason, Result: body, EventID: ev.ID, CreatedAt: res.Action.At})
	if err == nil && !ok {
		return errReplay
	}
	return err
}

var errReplay = errors.New("service: operator action recorded meanwhile")

// act runs do (which builds the result and writes the effect in tx) with
// the action's record, answering a replay when the key is already
// recorded, before or during the transaction.
func (p *Operations) act(ctx context.Context, c OperatorCall, do func(tx store.OperatorExecutor) (ActionResult, error)) (ActionResult, error) {
	if res, ok, err := p.prior(ctx, c); ok {
		return res, err
	}
	var res ActionResult
	err := p.st.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
		var err error
		if res, err = do(tx); err != nil {
			return err
		}
		return p.record(ctx, tx, c, res)
	})
	if err != nil {
		// A concurrent call with the same key may have won: its record
		// answers (errReplay, or a guard it tripped first).
		if prior, ok, perr := p.prior(ctx, c); ok {
			return prior, perr
		}
		return ActionResult{}, err
	}
	return res, nil
}

func (p *Operations) newAction(c OperatorCall, name, tenantID, target string) event.Action {
	return event.Action{ID: event.NewActionID(), Actor: c.Operator.Name, Role: c.Operator.Role, Name: name,
		TenantID: tenantID, Target: target, Reason: c.Reason, At: p.s.cfg.Now().UTC().Truncate(time.Microsecond)}
}

// Recheck asks the provider again, now, about the parked attempt
// providerKey. When the provider answers (it acted, or it did not), the
// attempt is resolved with that answer as Resolve does; when it has
// nothing to say, nothing changes (Action.Outcome "still_parked") and an
// operator's finding is needed. Either way the action is recorded.
// Errors: EKeyRequired, EInvalid, ENotFound, EAttemptNotParked,
// EKeyReused, EUnavailable (the provider could not be asked).
func (p *Operations) Recheck(ctx context.Context, c OperatorCall, providerKey string) (ActionResult, error) {
	return p.resolve(ctx, c, ActionRecheck, providerKey, "", "")
}

// Resolve records the operator's finding about the parked attempt
// providerKey, with a note, after asking the provider: it is accepted only
// when the provider's answer agrees or the provider has nothing to say
// (EFindingContradicted otherwise: nothing changes). Then, in one
// transaction with the action's audit event, the attempt is settled, the
// order moves as the state machine allows — a charge that succeeded pays a
// RCVD order, one that did not moves its version on (as a decline does,
// so it can be paid again); a shipment ships a PAID order (or is rejected);
// a refund cancels a PAID order (or is rejected) — and the parked
// idempotency keys of the attempt are completed with that outcome, so the
// order accepts requests again. A resolution races a late provider webhook
// and the completer safely: the attempt is settled by a guarded write, so
// one of them takes effect. A parked partial refund (provider key
// "<order id>/refunds/<keyhash16>", issue 16) leaves the order's state as
// it is: succeeded adds its amount to the order's refunded total (an
// order.refunded event), not_succeeded releases its reservation
// (resolvePartialRefund). Errors: those of Recheck and
// EFindingContradicted.
func (p *Operations) Resolve(ctx context.Context, c OperatorCall, providerKey string, f Finding, note string) (ActionResult, error) {
	if f != FindingSucceeded && f != FindingNotSucceeded {
		return ActionResult{}, &apperr.Error{Code: apperr.EInvalid, Message: "the finding is invalid",
			Fields: []apperr.FieldError{{Field: "outcome", Reason: "must be succeeded or not_succeeded"}}}
	}
	return p.resolve(ctx, c, ActionResolve, providerKey, f, note)
}

func (p *Operations) resolve(ctx context.Context, c OperatorCall, name, providerKey string, f Finding, note string) (ActionResult, error) {
	if err := checkCall(c, note); err != nil {
		return ActionResult{}, err
	}
	if res, ok, err := p.prior(ctx, c); ok {
		return res, err
	}
	for range maxDecisions {
		a, err := p.s.store.GetAttempt(ctx, providerKey)
		if errors.Is(err, store.ErrNotFound) {
			return ActionResult{}, apperr.Errorf(apperr.ENotFound, "no provider attempt has the key %q", providerKey)
		}
		if err != nil {
			return ActionResult{}, err
		}
		if a.Status != payment.AttemptNeedsAttention {
			// A concurrent call with the same key may be what settled it:
			// then its answer is this call's.
			if res, ok, err := p.prior(ctx, c); ok {
				return res, err
			}
			return ActionResult{}, notParked(a)
		}
		if a.Kind == payment.AttemptRefund && isPartialRefundKey(a.ProviderKey) {
			res, err := p.resolvePartialRefund(ctx, c, name, a, f, note)
			if errors.Is(err, store.ErrVersionConflict) {
				continue // settled meanwhile: read again
			}
			return res, err
		}
		o, err := p.s.store.GetOrder(ctx, a.TenantID, a.OrderID)
		if err != nil {
			return ActionResult{}, err
		}
		answer, ref, err := p.ask(ctx, a, o)
		if err != nil {
			return ActionResult{}, err
		}
		outcome, err := agreed(a, answer, f)
		if err != nil {
			return ActionResult{}, err
		}
		res, err := p.act(ctx, c, func(tx store.OperatorExecutor) (ActionResult, error) {
			act := p.newAction(c, name, a.TenantID, a.ProviderKey)
			act.OrderID, act.Note = a.OrderID, note
			res := ActionResult{Action: act, Provider: answer}
			if outcome == "" {
				res.Action.Outcome = "still_parked"
				view := ViewAttempt(a)
				res.Attempt, res.Order = &view, &o
				return res, nil
			}
			return p.settleParked(ctx, tx, res, a, outcome, ref)
		})
		if errors.Is(err, store.ErrVersionConflict) || errors.Is(err, store.ErrAttemptInFlight) {
			continue // the order moved, or the attempt was settled: read again
		}
		return res, err
	}
	return ActionResult{}, apperr.Errorf(apperr.EUnavailable, "the order is changing too fast; retry with the same Idempotency-Key")
}

// settleParked settles parked attempt a with outcome in tx: the attempt
// (guarded on needs_attention), the order's move and its event, the parked
// keys.
func (p *Operations) settleParked(ctx context.Context, tx store.OperatorExecutor, res ActionResult, a payment.Attempt, outcome Finding, ref string) (ActionResult, error) {
	o, err := tx.GetOrder(ctx, a.TenantID, a.OrderID)
	if err != nil {
		return res, err
	}
	now := p.s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: ref, At: now}
	ev, waiting := order.EventPay, a.ProviderKey == chargeKey(o.ID, o.Version)
	switch a.Kind {
	case payment.AttemptShipment:
		ev, waiting = order.EventFulfill, true
	case payment.AttemptRefund:
		ev, waiting = order.EventCancel, true
	}
	var next *order.Order
	switch {
	case outcome == FindingSucceeded && waiting:
		if d, err := statemachine.Decide(o.State, ev); err == nil && d.Outcome != statemachine.NoOp {
			moved := o.Apply(d.To, now)
			next = &moved
		}
	case outcome == FindingNotSucceeded && a.Kind == payment.AttemptCharge:
		upd.Status, upd.ErrorCode = payment.AttemptDeclined, "not_captured"
		if waiting && o.State == order.Received {
			bumped := o.Apply(o.State, now) // as a decline: the next pay is a new charge
			next = &bumped
		}
	case outcome == FindingNotSucceeded:
		upd.Status, upd.ErrorCode = payment.AttemptRejected, string(apperr.EFulfillmentRejected)
		if a.Kind == payment.AttemptRefund {
			upd.ErrorCode = string(apperr.ERefundRejected)
		}
	}
	// The order's row first, then the attempt's: the lock order of every
	// writer that moves an order and settles its attempt in one
	// transaction (the inbox, phase 3 of a request), so two of them racing
	// wait for each other instead of deadlocking (PostgreSQL 40P01, seen
	// when a resolve raced a provider webhook and the completer).
	if next != nil {
		if err := tx.CompareAndSetOrder(ctx, *next, a.ProviderKey); err != nil {
			return res, err
		}
		ev, err := p.s.changeEvent(ctx, tx, *next, upd.ProviderRef, nil, now)
		if err != nil {
			return res, err
		}
		if err := tx.AppendEvent(ctx, ev); err != nil {
			return res, err
		}
		o = *next
	}
	if err := tx.SettleParkedAttempt(ctx, upd); err != nil {
		return res, err
	}
	settled := a
	settled.Status, settled.ErrorCode, settled.UpdatedAt = upd.Status, upd.ErrorCode, now.UTC().Truncate(time.Microsecond)
	if ref != "" {
		settled.ProviderRef = ref
	}
	out := idempotency.Record{ResourceID: o.ID}
	if r := p.s.settled(settled); r.err != nil {
		out.ErrorCode, out.ErrorDetail = r.err.Code, r.err.Message
	}
	n, err := tx.ResolveParkedKeys(ctx, a.ProviderKey, out)
	if err != nil {
		return res, err
	}
	view := ViewAttempt(settled)
	res.Order, res.Attempt, res.KeysResolved = &o, &view, n
	res.Action.Outcome = string(outcome)
	return res, nil
}

// agreed is the outcome of finding f about attempt a once the provider
// answered: the provider's answer when it has one (EFindingContradicted
// when f says otherwise: nothing may change), f when the provider has
// nothing to say, and "" (still parked) for a recheck (f "") then.
func agreed(a payment.Attempt, answer ProviderAnswer, f Finding) (Finding, error) {
	switch {
	case answer == ProviderSucceeded && f == FindingNotSucceeded, answer == ProviderNotSucceeded && f == FindingSucceeded:
		return "", apperr.Errorf(apperr.EFindingContradicted,
			"the provider says the %s %s, which contradicts the finding %q; nothing was changed — "+
				"recheck with the provider or record the finding it agrees with", a.Kind, answerText(answer), f)
	case answer == ProviderSucceeded:
		return FindingSucceeded, nil
	case answer == ProviderNotSucceeded:
		return FindingNotSucceeded, nil
	}
	return f, nil
}

// resolvePartialRefund resolves parked partial refund a (provider key
// "<order id>/refunds/<keyhash16>", issue 16) as resolve does other
// attempts, after asking the provider (askRefund): succeeded adds its
// amount to the order's refunded total, moves the order's version on and
// appends order.refunded; not_succeeded releases its reservation (the
// amount can be refunded again) and rejects it; either way the order's
// state stays and the parked keys are completed, so their replays answer
// the refund or refund_rejected. Errors: those of askRefund,
// EFindingContradicted, store.ErrVersionConflict (settled meanwhile).
func (p *Operations) resolvePartialRefund(ctx context.Context, c OperatorCall, name string, a payment.Attempt, f Finding, note string) (ActionResult, error) {
	answer, ref, err := p.askRefund(ctx, a)
	if err != nil {
		return ActionResult{}, err
	}
	outcome, err := agreed(a, answer, f)
	if err != nil {
		return ActionResult{}, err
	}
	now := p.s.cfg.Now()
	return p.act(ctx, c, func(tx store.OperatorExecutor) (ActionResult, error) {
		act := p.newAction(c, name, a.TenantID, a.ProviderKey)
		act.OrderID, act.Note = a.OrderID, note
		res := ActionResult{Action: act, Provider: answer}
		if outcome == "" {
			o, err := tx.GetOrder(ctx, a.TenantID, a.OrderID)
			if err != nil {
				return res, err
			}
			res.Action.Outcome = "still_parked"
			view := ViewAttempt(a)
			res.Attempt, res.Order = &view, &o
			return res, nil
		}
		ps, ok := tx.(store.ParkedRefundSettler)
		if !ok {
			return res, apperr.Errorf(apperr.EUnavailable, "this store cannot settle a parked partial refund")
		}
		upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: ref, At: now}
		out := idempotency.Record{ResourceID: a.OrderID}
		var ev func(order.Order, store.RefundTotals) event.Event
		if outcome == FindingSucceeded {
			ev = func(after order.Order, t store.RefundTotals) event.Event {
				return event.ForRefund(after, event.Refund{ID: a.ProviderKey, ProviderRef: ref, Amount: a.Amount,
					Currency: a.Currency, AmountCaptured: t.Captured, AmountRefunded: t.Refunded}, now)
			}
		} else {
			rej := apperr.Errorf(apperr.ERefundRejected,
				"the payment provider made no refund under this request (an operator found it did not succeed); nothing was refunded, "+
					"and its amount can be refunded again under a new Idempotency-Key")
			upd.Status, upd.ErrorCode = payment.AttemptRejected, string(rej.Code)
			out.ErrorCode, out.ErrorDetail = rej.Code, rej.Message
		}
		if _, err := ps.SettleParkedRefund(ctx, upd, ev); err != nil {
			return res, err
		}
		n, err := tx.ResolveParkedKeys(ctx, a.ProviderKey, out)
		if err != nil {
			return res, err
		}
		o, err := tx.GetOrder(ctx, a.TenantID, a.OrderID)
		if err != nil {
			return res, err
		}
		settled := a
		settled.Status, settled.ErrorCode, settled.UpdatedAt = upd.Status, upd.ErrorCode, now.UTC().Truncate(time.Microsecond)
		if ref != "" {
			settled.ProviderRef = ref
		}
		view := ViewAttempt(settled)
		res.Order, res.Attempt, res.KeysResolved = &o, &view, n
		res.Action.Outcome = string(outcome)
		return res, nil
	})
}

// askRefund asks the provider about parked partial refund a, never asking
// it to act: FindRefund on the charge's intent by the refund's reference
// {order id, provider key} (every send of it, under its key or a lease's
// resend key, carries it). Found: succeeded, ref the refund's id; not
// found: not succeeded (a provider's refunds of an intent are listed for
// good, not forgotten with its keys). Errors: EUnavailable.
func (p *Operations) askRefund(ctx context.Context, a payment.Attempt) (ProviderAnswer, string, error) {
	s := p.s
	rs, ok := s.store.(store.RefundStore)
	if !ok {
		return "", "", apperr.Errorf(apperr.EUnavailable, "this store keeps no partial refunds")
	}
	r, _, err := rs.GetRefund(ctx, a.ProviderKey)
	if err != nil {
		return "", "", err
	}
	intentID := r.IntentID
	if intentID == "" {
		in, err := s.chargeIntent(ctx, r.OrderID, r.ChargeKey)
		switch {
		case errors.Is(err, payment.ErrNotFound):
			return ProviderNotSucceeded, "", nil // no charge: nothing was refunded
		case err != nil:
			return "", "", s.unavailable("payment provider", err)
		}
		intentID = in.ID
	}
	rf, err := s.gateway.FindRefund(ctx, intentID, payment.Reference{OrderID: r.OrderID, Key: r.ProviderKey})
	switch {
	case err == nil:
		return ProviderSucceeded, rf.ID, nil
	case errors.Is(err, payment.ErrNotFound):
		return ProviderNotSucceeded, "", nil
	}
	return "", "", s.unavailable("payment provider", err)
}

func answerText(a ProviderAnswer) string {
	if a == ProviderSucceeded {
		return "succeeded"
	}
	return "did not succeed"
}

func notParked(a payment.Attempt) error {
	return apperr.Errorf(apperr.EAttemptNotParked,
		"the attempt %s is %s, not needs_attention: there is nothing to resolve", a.ProviderKey, a.Status)
}

// ask asks the provider about attempt a of order o, never calling it to
// act: a lookup of the charge, the shipment (Find by its reference), or
// (for a refund) the charge it refunds. ref is the provider's id when it
// acted.
func (p *Operations) ask(ctx context.Context, a payment.Attempt, o order.Order) (ProviderAnswer, string, error) {
	s := p.s
	switch a.Kind {
	case payment.AttemptShipment:
		sh, err := s.warehouse.Find(ctx, shipmentRef(a))
		switch {
		case err == nil:
			return ProviderSucceeded, sh.ID, nil
		case errors.Is(err, fulfillment.ErrShipmentNotFound):
			return ProviderNothing, "", nil
		}
		if r := s.classifyShipment(sh, err); r.class == rejected {
			return ProviderNotSucceeded, "", nil
		}
		return "", "", s.unavailable("warehouse", err)
	case payment.AttemptRefund:
		in, err := s.chargeIntent(ctx, o.ID, chargeKey(o.ID, o.Version-1))
		switch {
		case err == nil && in.AmountReceived > 0 && in.AmountRefunded >= in.AmountReceived:
			return ProviderSucceeded, "", nil
		case err == nil, errors.Is(err, payment.ErrNotFound):
			return ProviderNotSucceeded, "", nil
		}
		return "", "", s.unavailable("payment provider", err)
	}
	in, err := s.chargeIntent(ctx, o.ID, a.ProviderKey)
	switch {
	case err == nil && in.Status == payment.IntentSucceeded:
		return ProviderSucceeded, in.ID, nil
	case errors.Is(err, payment.ErrNotFound):
		return ProviderNothing, "", nil
	case err == nil && (in.LastDecline != nil || in.Status == payment.IntentCanceled):
		return ProviderNotSucceeded, "", nil
	case err == nil && (in.Status == payment.IntentRequiresPaymentMethod || in.Status == payment.IntentRequiresConfirmation):
		return ProviderNothing, "", nil
	case err == nil:
		return "", "", s.unavailable("payment provider", fmt.Errorf("intent %s is %s", in.ID, in.Status))
	}
	return "", "", s.unavailable("payment provider", err)
}

// ResendDelivery makes the failed delivery of event eventID to endpoint
// endpointID pending again, due at once: the dispatcher sends it on its
// next pass, signed afresh. Errors: EKeyRequired, EInvalid, ENotFound,
// EDeliveryNotFailed, EKeyReused.
func (p *Operations) ResendDelivery(ctx context.Context, c OperatorCall, endpointID, eventID string) (ActionResult, error) {
	if err := checkCall(c, ""); err != nil {
		return ActionResult{}, err
	}
	res, err := p.act(ctx, c, func(tx store.OperatorExecutor) (ActionResult, error) {
		tenant, err := tx.RequeueDelivery(ctx, endpointID, eventID)
		if err != nil {
			return ActionResult{}, err
		}
		act := p.newAction(c, ActionResendDelivery, tenant, endpointID+"/"+eventID)
		act.Outcome = "requeued"
		return ActionResult{Action: act}, nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return res, apperr.Errorf(apperr.ENotFound, "no delivery of event %s to endpoint %s", eventID, endpointID)
	case errors.Is(err, store.ErrVersionConflict):
		return res, apperr.Errorf(apperr.EDeliveryNotFailed,
			"the delivery of event %s to endpoint %s has not failed (it is pending, being delivered, or delivered): nothing to resend", eventID, endpointID)
	case err != nil:
		return res, err
	}
	if d, err := p.st.FindDelivery(ctx, store.AnyTenant, endpointID, eventID); err == nil && !res.Replayed {
		res.Delivery = &d
	}
	return res, nil
}

// EnableEndpoint re-enables endpoint id, disabled by a 410 Gone (or
// another reason): events from now on are delivered to it again.
// Deliveries that failed while it was disabled stay failed; resend them
// one by one. Errors: EKeyRequired, EInvalid, ENotFound,
// EEndpointEnabled, EKeyReused.
func (p *Operations) EnableEndpoint(ctx context.Context, c OperatorCall, id string) (ActionResult, error) {
	if err := checkCall(c, ""); err != nil {
		return ActionResult{}, err
	}
	res, err := p.act(ctx, c, func(tx store.OperatorExecutor) (ActionResult, error) {
		tenant, err := tx.EnableEndpoint(ctx, id)
		if err != nil {
			return ActionResult{}, err
		}
		act := p.newAction(c, ActionEnableEndpoint, tenant, id)
		act.Outcome = "enabled"
		return ActionResult{Action: act}, nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return res, apperr.Errorf(apperr.ENotFound, "no webhook endpoint %s", id)
	case errors.Is(err, store.ErrVersionConflict):
		return res, apperr.Errorf(apperr.EEndpointEnabled, "the webhook endpoint %s is enabled: nothing to do", id)
	case err != nil:
		return res, err
	}
	if e, err := p.st.FindEndpoint(ctx, store.AnyTenant, id); err == nil && !res.Replayed {
		res.Endpoint = &e
	}
	return res, nil
}

// parked returns the needs_attention error of a request on order o that
// found another provider attempt open, when that attempt is parked, and
// nil otherwise (the attempt is in flight: order busy). An order's open
// attempt is its charge at its version, its shipment, its refund or one of
// its partial refunds (a parked one keeps its amount reserved, so a cancel,
// which refunds what is left, cannot run before it is resolved).
func (s *Service) parked(ctx context.Context, o order.Order) *apperr.Error {
	for _, k := range []string{chargeKey(o.ID, o.Version), shipmentKey(o.ID), refundKey(o.ID)} {
		if a, err := s.store.GetAttempt(ctx, k); err == nil && a.Status == payment.AttemptNeedsAttention {
			return orderParked(a)
		}
	}
	if ps, ok := s.store.(store.ParkedRefunds); ok {
		if a, err := ps.ParkedRefund(ctx, o.TenantID, o.ID); err == nil {
			return orderParked(a)
		}
	}
	return nil
}

// orderParked is the answer of any request on an order whose attempt a is
// parked: distinct, final until an operator acts, with no Retry-After.
func orderParked(a payment.Attempt) *apperr.Error {
	why := "the provider's answer to its %s (provider key %s) stayed unknown past the provider's key retention"
	if a.ErrorCode == ErrorProviderEventMismatch {
		why = "a provider event about its %s (provider key %s) did not match it (amount, currency, order or object)"
	}
	return apperr.Errorf(apperr.ENeedsAttention, "order %s is blocked: "+why+", so it is parked as needs_attention and nothing on the order "+
		"runs until an operator resolves it or the provider's matching event settles it (POST /operator/v1/attempts/recheck or "+
		"/operator/v1/attempts/resolve with its provider_key); do not retry before then", a.OrderID, a.Kind, a.ProviderKey)
}

// busyOrParked is the error of a request that found another attempt on o
// open: needs_attention when it is parked, order busy otherwise.
func (s *Service) busyOrParked(ctx context.Context, o order.Order) error {
	if e := s.parked(ctx, o); e != nil {
		return e
	}
	return busy(o)
}
