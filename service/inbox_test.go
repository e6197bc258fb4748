package service_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// chargeEvent is the provider event about the charge of o at its version.
func chargeEvent(id string, typ payment.ProviderEventType, o order.Order) payment.ProviderEvent {
	return payment.ProviderEvent{Source: "paysim", EventID: id, Type: typ,
		Reference: payment.Reference{OrderID: o.ID, Key: fmt.Sprintf("%s/pay/%d", o.ID, o.Version)}, Amount: o.Amount, Currency: o.Currency}
}

// payWithLostReply pays o with method through a provider that decides and
// then loses its answer: the pay ends with an unknown outcome.
func (f *fixture) payWithLostReply(t *testing.T, o order.Order, k string, in service.PayInput) {
	t.Helper()
	f.gw.dropNext.Store(true)
	_, err := f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)}, in)
	if apperr.ErrorCode(err) != apperr.EUnavailable {
		t.Fatalf("pay with a lost reply: %v, want unavailable", err)
	}
}

// TestProviderEventResolvesUnknownOutcome: a pay whose answer was lost
// leaves the order RCVD and its attempt unknown; charge.succeeded pays the
// order at once (no completer, no retry), a second delivery is a duplicate,
// and the client's retry then completes its key from the settled attempt
// without a second capture.
func TestProviderEventResolvesUnknownOutcome(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		f.payWithLostReply(t, o, "pay-1", payIn)
		ev := chargeEvent("evt_ok", payment.EventPaymentSucceeded, o)
		for i, want := range []service.InboxOutcome{service.InboxApplied, service.InboxDuplicate} {
			got, err := f.svc.TakeProviderEvent(ctx, ev)
			if err != nil || got != want {
				t.Fatalf("delivery %d = %q, %v; want %q", i+1, got, err, want)
			}
		}
		got, err := f.svc.Get(ctx, "t1", o.ID)
		if err != nil || got.State != order.Paid || got.Version != o.Version+1 {
			t.Fatalf("after the webhook: %+v, %v; want PAID at version %d", got, err, o.Version+1)
		}
		a, err := f.st.GetAttempt(ctx, ev.Reference.Key)
		if err != nil || a.Status != payment.AttemptSucceeded {
			t.Fatalf("attempt = %+v, %v; want succeeded", a, err)
		}
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay-1")}, payIn)
		if err != nil || res.Order.State != order.Paid || res.Order.Version != o.Version+1 {
			t.Fatalf("retry = %+v, %v; want PAID, unchanged", res.Order, err)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("captures = %d, want 1", n)
		}
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid)
	})
}

// TestProviderEventDecline: charge.failed for a pay left unknown declines
// it as the answer would have: the order stays RCVD with its version moved
// on, and the retry of the pay replays the decline.
func TestProviderEventDecline(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		declined := payIn
		declined.PaymentMethod = testmode.MethodDeclined
		f.payWithLostReply(t, o, "pay-d", declined)
		if got, err := f.svc.TakeProviderEvent(ctx, chargeEvent("evt_no", payment.EventPaymentFailed, o)); err != nil || got != service.InboxApplied {
			t.Fatalf("charge.failed = %q, %v", got, err)
		}
		got, _ := f.svc.Get(ctx, "t1", o.ID)
		if got.State != order.Received || got.Version != o.Version+1 {
			t.Fatalf("after the decline: %s v%d, want RCVD v%d", got.State, got.Version, o.Version+1)
		}
		_, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay-d")}, declined)
		if apperr.ErrorCode(err) != apperr.EDeclined {
			t.Fatalf("retry = %v, want the decline replayed", err)
		}
	})
}

// TestProviderEventLateAndUnmatched: a webhook after the pay finished is
// recorded and changes nothing; one about a charge Orderly never made is
// recorded as unmatched.
func TestProviderEventLateAndUnmatched(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay-l")}, payIn)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			ev   payment.ProviderEvent
			want service.InboxOutcome
		}{
			{chargeEvent("evt_late", payment.EventPaymentSucceeded, o), service.InboxAlreadySettled},
			{chargeEvent("evt_late_fail", payment.EventPaymentFailed, o), service.InboxAlreadySettled},
			{payment.ProviderEvent{Source: "paysim", EventID: "evt_x", Type: payment.EventPaymentSucceeded, Reference: payment.Reference{Key: "ord_nope/pay/1"}, Amount: 1, Currency: "USD"}, service.InboxUnmatched},
		} {
			if got, err := f.svc.TakeProviderEvent(ctx, tc.ev); err != nil || got != tc.want {
				t.Fatalf("%s = %q, %v; want %q", tc.ev.EventID, got, err, tc.want)
			}
		}
		got, _ := f.svc.Get(ctx, "t1", o.ID)
		if got.Version != res.Order.Version || got.State != order.Paid {
			t.Fatalf("a late webhook changed the order: %+v", got)
		}
		if _, err := f.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: "e", Type: "charge.exploded", Reference: payment.Reference{Key: "k"}, Amount: 1, Currency: "USD"}); apperr.ErrorCode(err) != apperr.EInvalid {
			t.Fatalf("unknown type: %v, want invalid", err)
		}
	})
}

// TestProviderEventRacesRetries: every webhook of a charge delivered many
// times, shuffled, concurrently with the client's retries of the pay and the
// completer: one capture, one transition, and every retry answers PAID.
func TestProviderEventRacesRetries(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		f.payWithLostReply(t, o, "pay-r", payIn)
		var jobs []func() error
		for range 20 {
			jobs = append(jobs, func() error {
				_, err := f.svc.TakeProviderEvent(ctx, chargeEvent("evt_r", payment.EventPaymentSucceeded, o))
				return err
			}, func() error {
				res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay-r")}, payIn)
				if err == nil && res.Order.State != order.Paid {
					return fmt.Errorf("retry answered %s", res.Order.State)
				}
				return err
			})
		}
		jobs = append(jobs, func() error { _, err := f.svc.RecoverAbandoned(ctx, 10); return err })
		rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		var wg sync.WaitGroup
		errs := make(chan error, len(jobs))
		for _, job := range jobs {
			wg.Go(func() { errs <- job() })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			// A retry may meet the key held by another retry (409) or a
			// busy store; both are retryable and change nothing.
			if c := apperr.ErrorCode(err); err != nil && c != apperr.EKeyInProgress && c != apperr.EOrderBusy && !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("job: %v", err)
			}
		}
		got, _ := f.svc.Get(ctx, "t1", o.ID)
		if got.State != order.Paid || got.Version != o.Version+1 {
			t.Fatalf("order %s v%d, want PAID v%d (one transition)", got.State, got.Version, o.Version+1)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("captures = %d, want 1", n)
		}
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid)
	})
}

// TestProviderEventMatchedByIntent (issue 15): an event is matched to its
// attempt by the intent id the attempt recorded, without a provider key
// (as a Stripe event whose metadata was lost would be); one whose provider
// key names another attempt than its intent's is a mismatch that parks the
// attempt and moves nothing; an intent no attempt recorded, without a key,
// is unmatched, and with the key of an attempt that recorded another
// intent, a mismatch.
func TestProviderEventMatchedByIntent(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		take := func(ev payment.ProviderEvent, want service.InboxOutcome) {
			t.Helper()
			if got, err := f.svc.TakeProviderEvent(ctx, ev); err != nil || got != want {
				t.Fatalf("TakeProviderEvent(%s) = %q, %v; want %q", ev.EventID, got, err, want)
			}
		}
		intentOf := func(o order.Order) string {
			t.Helper()
			a, err := f.st.GetAttempt(ctx, fmt.Sprintf("%s/pay/%d", o.ID, o.Version))
			if err != nil || a.IntentID == "" {
				t.Fatalf("attempt = %+v, %v; want its intent recorded", a, err)
			}
			return a.IntentID
		}

		o := f.order(t)
		f.payWithLostReply(t, o, "pay-a", payIn)
		ev := chargeEvent("evt_by_intent", payment.EventPaymentSucceeded, o)
		ev.IntentID, ev.ObjectID, ev.Reference = intentOf(o), intentOf(o), payment.Reference{}
		take(ev, service.InboxApplied)
		if got, err := f.svc.Get(ctx, "t1", o.ID); err != nil || got.State != order.Paid {
			t.Fatalf("after the event: %+v, %v; want PAID", got, err)
		}

		other := f.order(t)
		f.payWithLostReply(t, other, "pay-b", payIn)
		crossed := chargeEvent("evt_crossed", payment.EventPaymentSucceeded, other)
		crossed.IntentID = intentOf(other)
		crossed.Reference.Key = fmt.Sprintf("%s/pay/%d", o.ID, o.Version) // another attempt's key
		crossed.Reference.OrderID = ""
		take(crossed, service.InboxMismatch)
		a, err := f.st.GetAttempt(ctx, fmt.Sprintf("%s/pay/%d", other.ID, other.Version))
		if err != nil || a.Status != payment.AttemptNeedsAttention || a.ErrorCode != service.ErrorProviderEventMismatch {
			t.Fatalf("attempt = %+v, %v; want needs_attention %s", a, err, service.ErrorProviderEventMismatch)
		}
		if got, err := f.svc.Get(ctx, "t1", other.ID); err != nil || got.State != order.Received || got.Version != other.Version {
			t.Fatalf("a crossed event moved the order: %+v, %v", got, err)
		}

		nobody := chargeEvent("evt_nobody", payment.EventPaymentSucceeded, o)
		nobody.IntentID, nobody.Reference = "pi_nobody", payment.Reference{}
		take(nobody, service.InboxUnmatched)

		// An intent no attempt recorded, with the reference of an attempt
		// that recorded another (a correctly signed event about money on an
		// intent Orderly never confirmed): a mismatch, and the order stays.
		third := f.order(t)
		f.payWithLostReply(t, third, "pay-c", payIn)
		stranger := chargeEvent("evt_stranger", payment.EventPaymentSucceeded, third)
		stranger.IntentID, stranger.ObjectID = "pi_never_recorded", "pi_never_recorded"
		take(stranger, service.InboxMismatch)
		if got, err := f.svc.Get(ctx, "t1", third.ID); err != nil || got.State != order.Received || got.Version != third.Version {
			t.Fatalf("an event about an intent the attempt never recorded moved the order: %+v, %v", got, err)
		}
		if n := f.gw.Captures(o.ID) + f.gw.Captures(other.ID); n != 2 {
			t.Fatalf("captures = %d, want 2 (one per pay)", n)
		}
	})
}
