package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// silentRefund is the fixture's gateway whose refunds never answer: Refund
// is an unknown outcome (it never reaches the provider) and every lookup
// of it fails the same way: its outcome stays unknown.
type silentRefund struct{ *gateway }

func (g *silentRefund) Refund(context.Context, payment.RefundRequest) (payment.Refund, error) {
	return payment.Refund{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

func (g *silentRefund) FindRefund(context.Context, string, payment.Reference) (payment.Refund, error) {
	return payment.Refund{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

// TestResolveParkedPartialRefundRefused (issue 16): a partial refund whose
// outcome never becomes known is parked (needs_attention); resolving it,
// with either finding, is refused with invalid_transition and changes
// nothing: the order stays PAID at its version, its refund totals are as
// they were, and no order.cancelled is appended.
func TestResolveParkedPartialRefundRefused(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			ctx := context.Background()
			o := f.paidOrder(t)
			gw := &silentRefund{gateway: f.gw}
			svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
				TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second,
				Now: f.clk.Now})
			call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("silent")}
			if _, err := svc.Refund(ctx, call, service.RefundInput{Amount: 400, Currency: "EUR"}); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("refund that never answers = %v, want EUnavailable", err)
			}
			ops, err := svc.Operations()
			if err != nil {
				t.Fatal(err)
			}
			// The completer has no path that parks a partial refund (it drives
			// it as its request would: an unknown outcome stays unknown), so it
			// is parked here as driveRefund's attention case would park it: the
			// key taken over, the refund finished needs_attention under its lease.
			rs := f.st.(store.RefundStore)
			recs, err := f.st.TakeOverAbandoned(ctx, store.TakeOver{Lease: time.Minute, Limit: 10})
			if err != nil || len(recs) != 1 || recs[0].ResourceID != o.ID || recs[0].AttemptKey == "" {
				t.Fatalf("take over the refund's key = %+v, %v; want the one key of %s", recs, err, o.ID)
			}
			if _, err := rs.FinishRefund(ctx, store.LeaseOf(recs[0]), store.RefundFinish{ReleaseTo: idempotency.StateNeedsAttention,
				Update: store.AttemptUpdate{ProviderKey: recs[0].AttemptKey, Status: payment.AttemptNeedsAttention, At: f.clk.Now()}}); err != nil {
				t.Fatalf("park the partial refund: %v", err)
			}
			parked, err := f.st.GetAttempt(ctx, recs[0].AttemptKey)
			if err != nil || parked.Status != payment.AttemptNeedsAttention {
				t.Fatalf("the parked refund = %+v, %v; want needs_attention", parked, err)
			}
			if parked.Kind != payment.AttemptRefund || !strings.HasPrefix(parked.ProviderKey, o.ID+"/refunds/") {
				t.Fatalf("parked attempt = %+v, want the partial refund of %s", parked, o.ID)
			}
			before, err := f.st.GetOrder(ctx, "t1", o.ID)
			if err != nil || before.State != order.Paid {
				t.Fatalf("order with the refund parked = %+v, %v; want PAID", before, err)
			}
			totals, err := rs.RefundTotals(ctx, "t1", o.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, finding := range []service.Finding{service.FindingSucceeded, service.FindingNotSucceeded} {
				c := service.OperatorCall{Operator: service.Operator{Name: "ops", Role: "admin"},
					Key: "resolve-" + string(finding), Fingerprint: "fp-" + string(finding), Reason: "issue 16"}
				res, err := ops.Resolve(ctx, c, parked.ProviderKey, finding, "checked the provider")
				if apperr.ErrorCode(err) != apperr.EInvalidTransition {
					t.Errorf("resolve %s of the parked partial refund = %+v, %v; want invalid_transition", finding, res, err)
				}
				if got, err := f.st.GetOrder(ctx, "t1", o.ID); err != nil || got.State != order.Paid || got.Version != before.Version {
					t.Errorf("order after the refused %s = %s v%d, %v; want PAID v%d", finding, got.State, got.Version, err, before.Version)
				}
				if got, err := rs.RefundTotals(ctx, "t1", o.ID); err != nil || got != totals {
					t.Errorf("totals after the refused %s = %+v, %v; want %+v", finding, got, err, totals)
				}
				if a, err := f.st.GetAttempt(ctx, parked.ProviderKey); err != nil || a.Status != payment.AttemptNeedsAttention {
					t.Errorf("attempt after the refused %s = %+v, %v; want still parked", finding, a, err)
				}
			}
			assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid)
		})
	}
}
