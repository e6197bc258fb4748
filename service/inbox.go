package service

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/statemachine"
	"github.com/orderly/orderly/store"
)

// InboxOutcome is what taking in a provider event did.
type InboxOutcome string

// Inbox outcomes. Each is a success for the provider: the event was taken
// in (or had been) and need not be sent again.
const (
	// InboxApplied: the event settled its attempt (and moved the order,
	// when the order was still waiting for it), in the transaction that
	// recorded the event id.
	InboxApplied InboxOutcome = "applied"
	// InboxDuplicate: the event id was already in the inbox; nothing was
	// done.
	InboxDuplicate InboxOutcome = "duplicate"
	// InboxAlreadySettled: the event was recorded, but its attempt had been
	// settled already (the HTTP request or the completer got the answer
	// first): the effect had happened, so nothing else changed.
	InboxAlreadySettled InboxOutcome = "already_settled"
	// InboxUnmatched: the event was recorded, but no attempt of Orderly's
	// recorded its intent or has its provider key (or the attempt is of
	// another kind); nothing else changed.
	InboxUnmatched InboxOutcome = "unmatched"
	// InboxMismatch: the event was recorded, but its amount, currency or
	// order id differs from its attempt's: it moved nothing, and an attempt
	// still open was parked needs_attention for a person (issue 15: a
	// correctly signed event is still not the provider's API).
	InboxMismatch InboxOutcome = "mismatch"
	// InboxIgnored: the event was recorded, but its type moves nothing in
	// this version (payment.canceled, payment.processing,
	// payment.requires_action, refund.failed). The api answers "ignored"
	// also to an event its adapter ignored (payment.ErrIgnoredEvent),
	// which is not recorded.
	InboxIgnored InboxOutcome = "ignored"
)

// ErrorProviderEventMismatch is the error code of an attempt parked because
// a provider event about it named another amount, currency or order.
const ErrorProviderEventMismatch = "provider_event_mismatch"

// ErrorProviderRefundFailed is the error code of a partial refund's
// attempt that the provider reports as failed (its Refund object failed or
// canceled, in its answer or in a refund.failed event), before or after
// it succeeded: nothing of it reached the customer.
const ErrorProviderRefundFailed = "provider_refund_failed"

// TakeProviderEvent takes in a provider event (a webhook whose signature the
// caller verified, parsed by its adapter into a payment.ProviderEvent): in
// one store transaction it records ev in the inbox and applies its effect —
// settles the attempt ev is about (see matchAttempt: a payment event's by
// the intent id the attempt recorded, else by its provider key; a refund
// event's by its provider key, cross-checked by the refunded intent) and,
// if the order is still where that attempt left it, moves the order as the
// state machine decides (payment.succeeded pays it, payment.failed moves
// its version on as a decline does, refund.succeeded cancels it). An event
// whose Amount or Currency differs from its attempt's, or whose
// Reference.OrderID, provider key or intent names another order or
// attempt, moves nothing: it parks an open attempt needs_attention with
// error code ErrorProviderEventMismatch (InboxMismatch; issue 15). The
// order write is the same compare-and-set as phase 3 of a
// request (see finish), allowed only while the attempt is the order's one
// open attempt; a lost race rolls the event back with its effect and
// decides again. So a webhook delivered twice, out of order, late, or while
// a client's retry of the same pay runs takes effect once.
//
// The key of a request left with an unknown outcome keeps its state until
// its next retry or the completer, which then finds the attempt settled and
// completes the key with its outcome without asking the provider again.
//
// Errors: EInvalid (an unknown event type, a missing id, a missing
// provider key and intent id, a missing currency, a negative amount;
// nothing recorded), EUnavailable (retry the delivery).
func (s *Service) TakeProviderEvent(ctx context.Context, ev payment.ProviderEvent) (InboxOutcome, error) {
	if !ev.Type.Valid() || ev.Source == "" || ev.EventID == "" || (ev.Reference.Key == "" && ev.IntentID == "") {
		return "", apperr.Errorf(apperr.EInvalid, "a provider event needs a known type, a source, an id and a provider key or intent id")
	}
	if ev.Currency == "" || ev.Amount < 0 {
		return "", apperr.Errorf(apperr.EInvalid, "a provider event needs a currency and an amount of at least 0 minor units")
	}
	if err := checkInboxEvent(ev); err != nil {
		return "", err
	}
	for range maxDecisions {
		now := s.cfg.Now()
		ev.ReceivedAt = now.UTC().Truncate(time.Microsecond)
		var out InboxOutcome
		err := s.inboxTx(ctx, func(tx store.Executor) error {
			recorded, err := tx.RecordInboxEvent(ctx, ev)
			switch {
			case err != nil:
				return err
			case !recorded:
				out = InboxDuplicate
				return nil
			}
			out, err = s.applyProviderEvent(ctx, tx, ev)
			return err
		})
		if errors.Is(err, store.ErrVersionConflict) || errors.Is(err, store.ErrAttemptInFlight) {
			continue // another writer moved the order: decide again
		}
		if err != nil {
			return "", err
		}
		if out == InboxMismatch {
			s.cfg.Logger.Error("provider event moved nothing: its amount, currency or order differs from its attempt's; "+
				"the attempt, if open, needs attention", "source", ev.Source, "event_id", ev.EventID, "type", string(ev.Type),
				"provider_key", ev.Reference.Key, "intent_id", ev.IntentID, "amount", ev.Amount, "currency", ev.Currency, "order_id", ev.Reference.OrderID)
			return out, nil
		}
		s.cfg.Logger.Info("provider event taken in", "source", ev.Source, "type", string(ev.Type), "outcome", string(out))
		if out == InboxApplied && ev.Type == payment.EventPaymentFailed && ev.IntentID != "" {
			s.cancelDeclinedIntent(ctx, ev.IntentID)
		}
		return out, nil
	}
	return "", apperr.Errorf(apperr.EUnavailable, "the order is changing too fast; deliver the event again")
}

// cancelDeclinedIntent cancels intent id after a payment.failed event
// declined its attempt (see declineIntent: a declined PaymentIntent stays
// confirmable with its client secret). It runs after the event's
// transaction, best effort: a cancel that fails is logged, and the intent
// can then only take money the customer confirms anew, which a
// payment.succeeded about an attempt already declined reports
// (InboxAlreadySettled, logged as an error).
func (s *Service) cancelDeclinedIntent(ctx context.Context, id string) {
	a, err := s.store.GetAttemptByIntent(ctx, id)
	if err != nil || a.Status != payment.AttemptDeclined {
		return
	}
	if r := s.cancelIntent(ctx, a, id); r.class != declined {
		s.cfg.Logger.Warn("could not cancel the intent of a declined payment; a later confirm by the customer could take money",
			"order_id", a.OrderID, "provider_key", a.ProviderKey, "intent_id", id)
	}
}

// MaxProviderEventIDLen bounds a provider event's source, id and provider
// key, in bytes.
const MaxProviderEventIDLen = 255

// checkInboxEvent checks the identifiers of a provider event before the
// store sees them: each is text order.TextReason accepts (valid UTF-8 of at
// most MaxProviderEventIDLen bytes, no NUL, control or format character),
// or the event is EInvalid with a reason per member. PostgreSQL refuses NUL
// and invalid UTF-8 in text (SQLSTATE 22021), which would otherwise be a
// 500 that the provider resends forever.
func checkInboxEvent(ev payment.ProviderEvent) error {
	var fe []apperr.FieldError
	for _, f := range []struct{ name, v string }{{"source", ev.Source}, {"id", ev.EventID}, {"provider_key", ev.Reference.Key},
		{"provider_type", ev.ProviderType}, {"object_id", ev.ObjectID}, {"intent_id", ev.IntentID},
		{"order_id", ev.Reference.OrderID}, {"currency", ev.Currency}} {
		if f.v == "" && f.name != "source" && f.name != "id" && f.name != "currency" {
			continue // optional
		}
		if reason := order.TextReason(f.v, MaxProviderEventIDLen); reason != "" {
			fe = append(fe, apperr.FieldError{Field: f.name, Reason: reason})
		}
	}
	if len(fe) > 0 {
		return &apperr.Error{Code: apperr.EInvalid, Message: "the provider event has invalid identifiers", Fields: fe}
	}
	return nil
}

// applyProviderEvent is the effect of a provider event inside the inbox's
// transaction.
func (s *Service) applyProviderEvent(ctx context.Context, tx store.Executor, ev payment.ProviderEvent) (InboxOutcome, error) {
	var want payment.AttemptKind
	var ev2 order.Event
	switch ev.Type {
	case payment.EventPaymentSucceeded, payment.EventPaymentFailed:
		want, ev2 = payment.AttemptCharge, order.EventPay
	case payment.EventRefundSucceeded, payment.EventRefundFailed:
		want, ev2 = payment.AttemptRefund, order.EventCancel
	default:
		return InboxIgnored, nil
	}
	a, m, err := matchAttempt(ctx, tx, ev, want)
	switch {
	case err != nil:
		return "", err
	case m == InboxUnmatched:
		return InboxUnmatched, nil
	}
	if ev.Type == payment.EventRefundFailed && !isPartialRefundKey(a.ProviderKey) {
		// A cancel's refund that failed: the order stays CANCELLED
		// (refunded, as Orderly was told); a person returns the money
		// another way. Nothing is recorded.
		s.cfg.Logger.Error("a provider reports a cancelled order's refund failed: the customer has not received it; return it another way",
			"order_id", a.OrderID, "provider_key", a.ProviderKey, "refund_id", ev.ObjectID, "amount", ev.Amount,
			"currency", ev.Currency, "event_id", ev.EventID)
		return InboxIgnored, nil
	}
	if m == InboxMismatch || ev.Amount != a.Amount || ev.Currency != a.Currency || (ev.Reference.OrderID != "" && ev.Reference.OrderID != a.OrderID) {
		// What the event says is not what Orderly asked for: it moves
		// nothing. An open attempt is parked for a person; a settled one
		// keeps its outcome (the provider's API answer).
		if a.Status.Open() && a.Status != payment.AttemptNeedsAttention {
			err := tx.SettleAttempt(ctx, store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptNeedsAttention,
				ProviderRef: a.ProviderRef, ErrorCode: ErrorProviderEventMismatch, At: s.cfg.Now()})
			if err != nil {
				return "", err
			}
		}
		return InboxMismatch, nil
	}
	if a.Kind == payment.AttemptRefund && isPartialRefundKey(a.ProviderKey) && ev.Type == payment.EventRefundFailed {
		return s.applyPartialRefundFailed(ctx, tx, a, ev)
	}
	if a.Kind == payment.AttemptRefund && isPartialRefundKey(a.ProviderKey) {
		return s.applyPartialRefundEvent(ctx, tx, a, ev)
	}
	parked, _ := tx.(store.OperatorExecutor)
	if a.Status != payment.AttemptNeedsAttention {
		parked = nil
	}
	if s.settled(a).class != 0 && parked == nil {
		if ev.Type == payment.EventPaymentSucceeded && a.Status == payment.AttemptDeclined && ev.Amount > 0 {
			// Money on the intent of an attempt Orderly declined (and
			// whose intent it cancels): a person must refund it.
			s.cfg.Logger.Error("a provider reports money received on the intent of a declined payment; refund it",
				"order_id", a.OrderID, "provider_key", a.ProviderKey, "intent_id", ev.IntentID, "amount", ev.Amount,
				"currency", ev.Currency, "event_id", ev.EventID)
		}
		return InboxAlreadySettled, nil
	}
	o, err := tx.GetOrder(ctx, a.TenantID, a.OrderID)
	if err != nil {
		return "", err
	}
	now := s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, At: now}
	// The attempt is where the order waits only if it is the attempt this
	// order version would make (a charge belongs to one version).
	waiting := a.Kind == payment.AttemptRefund || a.ProviderKey == chargeKey(o.ID, o.Version)
	var next *order.Order
	switch {
	case ev.Type == payment.EventPaymentFailed:
		upd.Status, upd.ErrorCode = payment.AttemptDeclined, string(apperr.EDeclined)
		if waiting && o.State == order.Received {
			// As a decline answered to the request: the version moves on,
			// so the next pay is a new logical charge.
			bumped := o.Apply(o.State, now)
			next = &bumped
		}
	case waiting:
		if d, err := statemachine.Decide(o.State, ev2); err == nil && d.Outcome != statemachine.NoOp {
			moved := o.Apply(d.To, now)
			next = &moved
		}
	}
	if next != nil {
		if err := tx.CompareAndSetOrder(ctx, *next, a.ProviderKey); err != nil {
			return "", err
		}
		// The change's event, in the change's transaction (the outbox).
		ev, err := s.changeEvent(ctx, tx, *next, upd.ProviderRef, nil, now)
		if err != nil {
			return "", err
		}
		if err := tx.AppendEvent(ctx, ev); err != nil {
			return "", err
		}
	}
	if parked == nil {
		return InboxApplied, tx.SettleAttempt(ctx, upd)
	}
	// The provider has spoken about an attempt parked for a person: it
	// settles it as an operator's resolution would (guarded on
	// needs_attention, so one of them takes effect), and the keys parked on
	// it replay that outcome.
	if err := parked.SettleParkedAttempt(ctx, upd); err != nil {
		return "", err
	}
	settled := a
	settled.Status, settled.ErrorCode = upd.Status, upd.ErrorCode
	out := idempotency.Record{ResourceID: a.OrderID}
	if r := s.settled(settled); r.err != nil {
		out.ErrorCode, out.ErrorDetail = r.err.Code, r.err.Message
	}
	if _, err := parked.ResolveParkedKeys(ctx, a.ProviderKey, out); err != nil {
		return "", err
	}
	return InboxApplied, nil
}

// applyPartialRefundEvent applies a refund.succeeded about partial refund
// a (issue 16), which matched it in amount, currency and order. A partial
// refund's event is not a cancel's: it never moves the order's state. An
// open refund (its amount reserved) is settled as its request's phase 3
// would: succeeded with the provider's refund id ev.ObjectID, the order's
// refunded total grown by its amount, its version moved on and its
// order.refunded event appended, one compare-and-set guarded on the
// attempt being open (store.OpenRefundSettler), so of the event, its
// request and the completer exactly one settles it; the keys parked on a
// needs_attention refund then replay the refund. A settled refund is
// InboxAlreadySettled. Errors: the store's.
func (s *Service) applyPartialRefundEvent(ctx context.Context, tx store.Executor, a payment.Attempt, ev payment.ProviderEvent) (InboxOutcome, error) {
	rs, ok := tx.(store.OpenRefundSettler)
	if !ok {
		return InboxIgnored, nil
	}
	if a.Status == payment.AttemptFailed {
		// Failed: its reservation was released and its key is retryable;
		// the retry under the same key re-reserves it and finds this
		// refund (FindRefund by its reference) before sending anything.
		s.cfg.Logger.Error("a provider reports a partial refund succeeded that Orderly recorded as failed; a retry under its Idempotency-Key settles it",
			"order_id", a.OrderID, "provider_key", a.ProviderKey, "refund_id", ev.ObjectID, "amount", ev.Amount,
			"currency", ev.Currency, "event_id", ev.EventID)
		return InboxAlreadySettled, nil
	}
	if !a.Status.Open() {
		return InboxAlreadySettled, nil
	}
	now := s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: ev.ObjectID, At: now}
	_, err := rs.SettleOpenRefund(ctx, upd, func(after order.Order, t store.RefundTotals) event.Event {
		return event.ForRefund(after, event.Refund{ID: a.ProviderKey, ProviderRef: ev.ObjectID, Amount: a.Amount,
			Currency: a.Currency, AmountCaptured: t.Captured, AmountRefunded: t.Refunded}, now)
	})
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		return InboxAlreadySettled, nil
	case err != nil:
		return "", err
	}
	if op, ok := tx.(store.OperatorExecutor); ok && a.Status == payment.AttemptNeedsAttention {
		if _, err := op.ResolveParkedKeys(ctx, a.ProviderKey, idempotency.Record{ResourceID: a.OrderID}); err != nil {
			return "", err
		}
	}
	return InboxApplied, nil
}

// matchAttempt finds the attempt of kind want that ev is about (issue 15):
//
//   - a payment event (want AttemptCharge) by the intent id the attempt
//     recorded (store GetAttemptByIntent of ev.IntentID); when no attempt
//     recorded it, by the attempt its provider key names (attemptKeyOf),
//     which must then have recorded no intent (else a mismatch: the event
//     is about an intent that attempt never confirmed). paysim's native
//     events, about charges, carry no intent id and are matched by key. A
//     provider key naming another attempt than the intent's is a mismatch.
//   - a refund event (want AttemptRefund) by the attempt its provider key
//     names (Stripe: the refund's metadata orderly_reference); when a
//     charge attempt recorded the refunded intent ev.IntentID, it must be
//     of the same order, or the event is a mismatch.
//
// It returns the attempt with "" (matched) or InboxMismatch, or
// InboxUnmatched when none is found or the attempt is of another kind.
func matchAttempt(ctx context.Context, tx store.Executor, ev payment.ProviderEvent, want payment.AttemptKind) (payment.Attempt, InboxOutcome, error) {
	byKey := func() (payment.Attempt, InboxOutcome, error) {
		if ev.Reference.Key == "" {
			return payment.Attempt{}, InboxUnmatched, nil
		}
		a, err := tx.GetAttempt(ctx, attemptKeyOf(ev.Reference.Key))
		switch {
		case errors.Is(err, store.ErrNotFound):
			return a, InboxUnmatched, nil
		case err != nil:
			return a, "", err
		case a.Kind != want:
			return a, InboxUnmatched, nil
		}
		return a, "", nil
	}
	if want == payment.AttemptRefund {
		a, out, err := byKey()
		if err != nil || out != "" || ev.IntentID == "" {
			return a, out, err
		}
		charge, err := tx.GetAttemptByIntent(ctx, ev.IntentID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return a, "", nil // paysim's native refunds name the charge, not the intent
		case err != nil:
			return a, "", err
		case charge.OrderID != a.OrderID:
			return a, InboxMismatch, nil
		}
		return a, "", nil
	}
	if ev.IntentID == "" {
		return byKey()
	}
	a, err := tx.GetAttemptByIntent(ctx, ev.IntentID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// No attempt recorded this intent. The attempt its reference
		// names may not have recorded one yet (its prepare's answer was
		// lost); one that recorded another intent did not ask for this
		// one, and money on an intent Orderly never confirmed moves
		// nothing here.
		a, out, err := byKey()
		if err == nil && out == "" && a.IntentID != "" {
			return a, InboxMismatch, nil
		}
		return a, out, err
	case err != nil:
		return a, "", err
	case a.Kind != want:
		return a, InboxUnmatched, nil
	case ev.Reference.Key != "" && attemptKeyOf(ev.Reference.Key) != a.ProviderKey:
		return a, InboxMismatch, nil
	}
	return a, "", nil
}

// inboxTx runs fn in one transaction: an OperatorTx when the store has the
// operator capability (so a provider event may settle a parked attempt and
// its keys), InTx otherwise.
func (s *Service) inboxTx(ctx context.Context, fn func(tx store.Executor) error) error {
	if ops, ok := s.store.(store.OperatorStore); ok {
		return ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error { return fn(tx) })
	}
	return s.store.InTx(ctx, fn)
}

// attemptKeyOf returns the attempt key a provider key belongs to: the
// provider keys of a charge attempt "<order id>/pay/<version>" are its
// prepare and confirm keys "<attempt>/prepare", "<attempt>/confirm" and
// their lease-scoped forms "<attempt>/confirm/<keyhash8>.<token>"; those
// of a refund "<order id>/refund" are it and "<attempt>/<keyhash8>.<token>",
// and those of a partial refund "<order id>/refunds/<keyhash16>" likewise.
// A provider event (paysim's carries the request's key) is matched to the
// attempt by it; any other key is returned unchanged.
func attemptKeyOf(key string) string {
	if i := strings.Index(key, "/pay/"); i >= 0 {
		if j := strings.IndexByte(key[i+len("/pay/"):], '/'); j >= 0 {
			return key[:i+len("/pay/")+j]
		}
		return key
	}
	if i := strings.Index(key, "/refunds/"); i >= 0 {
		// A partial refund's "<order id>/refunds/<keyhash16>", resent
		// as "…/<keyhash8>.<fencing token>" (issue 16).
		if j := strings.IndexByte(key[i+len("/refunds/"):], '/'); j >= 0 {
			return key[:i+len("/refunds/")+j]
		}
		return key
	}
	if i := strings.Index(key, "/refund/"); i >= 0 {
		return key[:i+len("/refund")]
	}
	return key
}

// applyPartialRefundFailed applies a refund.failed about partial refund
// attempt a (matched, amount and currency checked) in the inbox's
// transaction tx (issue 16; Stripe sends it when a refund's status moves
// to failed: docs.stripe.com/refunds "Failed refunds"):
//
//   - a succeeded, another ObjectID than its provider ref: "mismatch".
//   - a succeeded, its order CANCELLED: logged for a person (the cancel
//     refunded what the provider said was left), "ignored".
//   - a succeeded while the cancel's refund is in flight: EUnavailable
//     (503; the provider delivers it again).
//   - a succeeded: the refund failed after it succeeded. It is reversed
//     (store.RefundReverser: attempt rejected with
//     ErrorProviderRefundFailed, its amount off the order's refunded and
//     reserved totals, order.refund_failed appended); its keys keep
//     replaying their first answer. "applied".
//   - a open (pending, unknown, parked): settled rejected with
//     ErrorProviderRefundFailed, its reservation released; an unknown key's
//     retry (or the completer) then answers ERefundRejected, parked keys
//     are resolved to that answer. "applied".
//   - a settled otherwise, or settled first by a racing writer:
//     "already_settled".
func (s *Service) applyPartialRefundFailed(ctx context.Context, tx store.Executor, a payment.Attempt, ev payment.ProviderEvent) (InboxOutcome, error) {
	now := s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptRejected, ProviderRef: ev.ObjectID,
		ErrorCode: ErrorProviderRefundFailed, At: now}
	var err error
	switch {
	case a.Status == payment.AttemptSucceeded:
		rr, ok := tx.(store.RefundReverser)
		if !ok {
			return InboxIgnored, nil
		}
		ref := a.ProviderRef
		if ref == "" {
			ref = ev.ObjectID
		} else if ev.ObjectID != ref {
			return InboxMismatch, nil // another provider refund under its reference: not the one counted
		}
		o, oerr := tx.GetOrder(ctx, a.TenantID, a.OrderID)
		if oerr != nil {
			return "", oerr
		}
		if o.State == order.Cancelled {
			// The cancel refunded what the provider said was left when it
			// asked, and closed the totals: whether that included this
			// refund's amount depends on when the provider failed it, so
			// a person compares the provider's refunds with the order's.
			s.cfg.Logger.Error("a provider reports a partial refund of a cancelled order failed after it succeeded; "+
				"compare the provider's refunds of the order with its cancel's refund: the customer may be owed this amount",
				"order_id", a.OrderID, "provider_key", a.ProviderKey, "refund_id", ref, "amount", a.Amount,
				"currency", a.Currency, "event_id", ev.EventID)
			return InboxIgnored, nil
		}
		if c, cerr := tx.GetAttempt(ctx, refundKey(o.ID)); cerr == nil && c.Status.Open() {
			// The cancel's refund is in flight: it refunds what the
			// provider says is left and records captured − refunded, so
			// the totals stay as they are until it has finished; the
			// provider delivers the event again.
			return "", apperr.Errorf(apperr.EUnavailable, "order %s is being cancelled; deliver the event again once it is", o.ID)
		} else if cerr != nil && !errors.Is(cerr, store.ErrNotFound) {
			return "", cerr
		}
		upd.ProviderRef = ref
		_, err = rr.ReverseRefund(ctx, upd, func(after order.Order, t store.RefundTotals) event.Event {
			return event.ForRefundFailed(after, event.Refund{ID: a.ProviderKey, ProviderRef: ref, Amount: a.Amount,
				Currency: a.Currency, AmountCaptured: t.Captured, AmountRefunded: t.Refunded}, now)
		})
		if err == nil {
			s.cfg.Logger.Warn("a partial refund failed at the provider after it succeeded: its amount is no longer counted as refunded "+
				"and the customer has not received it (order.refund_failed)",
				"order_id", a.OrderID, "provider_key", a.ProviderKey, "refund_id", ref, "amount", a.Amount,
				"currency", a.Currency, "event_id", ev.EventID)
		}
	case a.Status.Open():
		rs, ok := tx.(store.OpenRefundSettler)
		if !ok {
			return InboxIgnored, nil
		}
		_, err = rs.SettleOpenRefund(ctx, upd, nil)
		if op, ok := tx.(store.OperatorExecutor); ok && err == nil && a.Status == payment.AttemptNeedsAttention {
			f := refundFailed()
			_, err = op.ResolveParkedKeys(ctx, a.ProviderKey, idempotency.Record{ResourceID: a.OrderID, ErrorCode: f.Code, ErrorDetail: f.Message})
		}
	default:
		return InboxAlreadySettled, nil
	}
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		return InboxAlreadySettled, nil
	case err != nil:
		return "", err
	}
	return InboxApplied, nil
}
