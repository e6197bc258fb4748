package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// downRefund is the fixture's gateway with a refund path that fails: while
// lost is set, a Refund's answer is lost (an unknown outcome) after it
// reached the provider (reach set: the refund is made) or before (nothing
// is made); while down is set, FindRefund cannot be asked either, so the
// outcome stays unknown.
type downRefund struct {
	*gateway
	lost, reach, down atomic.Bool
	finds             atomic.Int64 // FindRefund calls
}

func (g *downRefund) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	if !g.lost.Load() {
		return g.gateway.Refund(ctx, req)
	}
	if g.reach.Load() {
		if _, err := g.gateway.Refund(ctx, req); err != nil {
			return payment.Refund{}, err
		}
	}
	return payment.Refund{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

func (g *downRefund) FindRefund(ctx context.Context, intentID string, ref payment.Reference) (payment.Refund, error) {
	g.finds.Add(1)
	if g.down.Load() {
		return payment.Refund{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	return g.gateway.FindRefund(ctx, intentID, ref)
}

// parkedRefund is a paid order of 1500 whose partial refund of 400 under key
// "lost" is parked: its answer was lost (after reaching the provider when
// reached), the provider could not be asked, and past UnresolvedAfter the
// completer parked it. The provider can be asked again afterwards.
type parkedRefund struct {
	f   *fixture
	gw  *downRefund
	svc *service.Service
	ops *service.Operations
	o   order.Order
	a   payment.Attempt // the parked attempt
}

func newParkedRefund(t *testing.T, kind string, reached bool) *parkedRefund {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, kind)
	o := f.paidOrder(t)
	gw := &downRefund{gateway: f.gw}
	gw.lost.Store(true)
	gw.reach.Store(reached)
	gw.down.Store(true)
	svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
		TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second,
		UnresolvedAfter: 30 * time.Minute, Now: f.clk.Now})
	p := &parkedRefund{f: f, gw: gw, svc: svc, o: o}
	if _, err := p.refund(ctx, "lost", 400); apperr.ErrorCode(err) != apperr.EUnavailable {
		t.Fatalf("refund whose answer is lost = %v, want EUnavailable (unknown outcome)", err)
	}
	// Before the window: the completer asks, cannot learn, leaves it unknown.
	f.clk.Advance(time.Minute)
	if _, err := svc.RecoverAbandoned(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if a := p.attempt(t); a.Status != payment.AttemptUnknown {
		t.Fatalf("refund within the unresolved window = %s, want unknown", a.Status)
	}
	f.clk.Advance(31 * time.Minute)
	if n, err := svc.RecoverAbandoned(ctx, 10); err != nil || n != 1 {
		t.Fatalf("completer past the window took %d keys (%v), want 1", n, err)
	}
	p.a = p.attempt(t)
	if p.a.Status != payment.AttemptNeedsAttention || !strings.HasPrefix(p.a.ProviderKey, o.ID+"/refunds/") || p.a.Amount != 400 {
		t.Fatalf("refund past the unresolved window = %+v, want the partial refund of 400 parked", p.a)
	}
	ops, err := svc.Operations()
	if err != nil {
		t.Fatal(err)
	}
	p.ops = ops
	gw.down.Store(false)
	gw.lost.Store(false)
	return p
}

func (p *parkedRefund) refund(ctx context.Context, k string, amount int64) (service.RefundResult, error) {
	return p.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: p.o.ID,
		Key: idempotency.Key{Value: k, Fingerprint: fmt.Sprintf("fp-%s-%d", k, amount)}},
		service.RefundInput{Amount: amount, Currency: "EUR", Reason: "return"})
}

func (p *parkedRefund) attempt(t *testing.T) payment.Attempt {
	t.Helper()
	r, err := p.f.st.LookupKey(context.Background(), "t1", idempotency.HashKey("lost"))
	if err != nil || r.AttemptKey == "" {
		t.Fatalf("key lost = %+v, %v; want one with its refund attempt", r, err)
	}
	a, err := p.f.st.GetAttempt(context.Background(), r.AttemptKey)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (p *parkedRefund) totals(t *testing.T) store.RefundTotals {
	t.Helper()
	tt, err := p.f.st.(store.RefundStore).RefundTotals(context.Background(), "t1", p.o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

func opCall(k string) service.OperatorCall {
	return service.OperatorCall{Operator: service.Operator{Name: "ops", Role: "admin"}, Key: k, Fingerprint: "fp-" + k, Reason: "issue 16"}
}

// TestPartialRefundParkedPastUnresolvedWindow (issue 16): a partial refund
// whose outcome stays unknown past UnresolvedAfter is parked
// (needs_attention) instead of being asked about for ever; its amount
// stays reserved; the client's retry and a cancel answer needs_attention
// (not order_busy: nothing will change until an operator acts); another
// partial refund within what is left still runs.
func TestPartialRefundParkedPastUnresolvedWindow(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, true)
			p.gw.down.Store(true) // the provider still cannot be asked
			p.gw.lost.Store(true)
			if tt := p.totals(t); tt.Reserved != 400 || tt.Refunded != 0 {
				t.Fatalf("totals with the refund parked = %+v, want 400 reserved, 0 refunded", tt)
			}
			finds := p.gw.finds.Load()
			if n, err := p.svc.RecoverAbandoned(ctx, 10); err != nil || n != 0 || p.gw.finds.Load() != finds {
				t.Fatalf("completer after parking took %d keys, asked %d times (%v); want none", n, p.gw.finds.Load()-finds, err)
			}
			if _, err := p.refund(ctx, "lost", 400); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("client retry of the parked refund = %v, want needs_attention", err)
			}
			if _, err := p.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: p.o.ID, Key: key("cancel")}); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("cancel with a parked partial refund = %v, want needs_attention", err)
			}
			p.gw.lost.Store(false)
			p.gw.down.Store(false)
			if res, err := p.refund(ctx, "more", 1100); err != nil || res.Totals.Reserved != 1500 || res.Totals.Refunded != 1100 {
				t.Fatalf("a refund of what is left = %+v, %v; want 1100 refunded, 1500 reserved", res.Totals, err)
			}
			if got, err := p.f.st.GetOrder(ctx, "t1", p.o.ID); err != nil || got.State != order.Paid {
				t.Fatalf("order = %s, %v; want PAID", got.State, err)
			}
		})
	}
}

// TestResolveParkedPartialRefundSucceeded (issue 16): the parked refund had
// reached the provider; the operator's resolve asks the provider
// (FindRefund by reference), which found it: a finding of not_succeeded is
// contradicted (nothing changes); succeeded adds 400 to the refunded total,
// moves the order's version on, appends one order.refunded and completes
// the client's key, whose retry replays the refund. The provider refunded
// 400 once; the order stays PAID.
func TestResolveParkedPartialRefundSucceeded(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, true)
			before, err := p.f.st.GetOrder(ctx, "t1", p.o.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.ops.Resolve(ctx, opCall("wrong"), p.a.ProviderKey, service.FindingNotSucceeded, "no refund in the dashboard"); apperr.ErrorCode(err) != apperr.EFindingContradicted {
				t.Fatalf("resolve not_succeeded of a refund the provider made = %v, want finding_contradicted", err)
			}
			if tt := p.totals(t); tt.Reserved != 400 || tt.Refunded != 0 {
				t.Fatalf("totals after the contradicted finding = %+v, want unchanged", tt)
			}
			res, err := p.ops.Resolve(ctx, opCall("right"), p.a.ProviderKey, service.FindingSucceeded, "refund re_… in the dashboard")
			if err != nil || res.Action.Outcome != string(service.FindingSucceeded) || res.Provider != service.ProviderSucceeded ||
				res.KeysResolved != 1 || res.Attempt == nil || res.Attempt.Status != string(payment.AttemptSucceeded) || res.Attempt.ProviderRef == "" {
				t.Fatalf("resolve succeeded = %+v, %v; want the refund settled, its key resolved", res, err)
			}
			if res.Order == nil || res.Order.State != order.Paid || res.Order.Version != before.Version+1 {
				t.Fatalf("order after the resolve = %+v; want PAID at version %d", res.Order, before.Version+1)
			}
			if tt := p.totals(t); tt.Reserved != 400 || tt.Refunded != 400 || tt.Captured != 1500 {
				t.Fatalf("totals after the resolve = %+v, want 400 refunded of 1500", tt)
			}
			if again, err := p.ops.Resolve(ctx, opCall("right"), p.a.ProviderKey, service.FindingSucceeded, "refund re_… in the dashboard"); err != nil || !again.Replayed {
				t.Fatalf("the operator's retry = %+v, %v; want a replay", again, err)
			}
			if _, err := p.ops.Resolve(ctx, opCall("late"), p.a.ProviderKey, service.FindingSucceeded, "again"); apperr.ErrorCode(err) != apperr.EAttemptNotParked {
				t.Fatalf("resolve of a settled refund = %v, want attempt_not_parked", err)
			}
			r, err := p.refund(ctx, "lost", 400)
			if err != nil || !r.Replayed || r.Refund.Status != payment.AttemptSucceeded || r.Refund.Amount != 400 || r.Totals.Refunded != 400 {
				t.Fatalf("client retry after the resolve = %+v, %v; want the refund replayed", r, err)
			}
			if got := p.f.refundedAtProvider(t, p.o); got != 400 {
				t.Fatalf("provider refunded %d, want 400 once", got)
			}
			evs := assertHistory(t, p.f, p.o.ID, event.OrderCreated, event.OrderPaid, event.OrderRefunded)
			if rf := evs[2].Refund; rf == nil || rf.Amount != 400 || rf.AmountRefunded != 400 || rf.ID != p.a.ProviderKey {
				t.Fatalf("order.refunded = %+v, want 400 of %s", rf, p.a.ProviderKey)
			}
			// The order accepts work again: a cancel refunds what is left.
			c, err := p.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: p.o.ID, Key: key("cancel")})
			if err != nil || c.Order.State != order.Cancelled {
				t.Fatalf("cancel after the resolve = %+v, %v; want CANCELLED", c.Order, err)
			}
			if got := p.f.refundedAtProvider(t, p.o); got != 1500 {
				t.Fatalf("provider refunded %d after the cancel, want 1500", got)
			}
		})
	}
}

// TestResolveParkedPartialRefundNotSucceeded (issue 16): the parked refund
// never reached the provider; FindRefund finds nothing, so succeeded is
// contradicted and not_succeeded rejects the attempt and releases its 400:
// the client's retry replays refund_rejected, a new refund of the whole
// 1500 fits, and nothing was refunded by the parked one.
func TestResolveParkedPartialRefundNotSucceeded(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, false)
			if _, err := p.ops.Resolve(ctx, opCall("wrong"), p.a.ProviderKey, service.FindingSucceeded, "looks refunded"); apperr.ErrorCode(err) != apperr.EFindingContradicted {
				t.Fatalf("resolve succeeded of a refund the provider never made = %v, want finding_contradicted", err)
			}
			res, err := p.ops.Resolve(ctx, opCall("right"), p.a.ProviderKey, service.FindingNotSucceeded, "no refund at the provider")
			if err != nil || res.Action.Outcome != string(service.FindingNotSucceeded) || res.KeysResolved != 1 ||
				res.Attempt == nil || res.Attempt.Status != string(payment.AttemptRejected) {
				t.Fatalf("resolve not_succeeded = %+v, %v; want the refund rejected, its key resolved", res, err)
			}
			if tt := p.totals(t); tt.Reserved != 0 || tt.Refunded != 0 {
				t.Fatalf("totals after the resolve = %+v, want the 400 released", tt)
			}
			if _, err := p.refund(ctx, "lost", 400); apperr.ErrorCode(err) != apperr.ERefundRejected {
				t.Fatalf("client retry after the resolve = %v, want refund_rejected", err)
			}
			if r, err := p.refund(ctx, "whole", 1500); err != nil || r.Totals.Refunded != 1500 {
				t.Fatalf("a refund of the whole amount after the release = %+v, %v; want 1500 refunded", r.Totals, err)
			}
			if got := p.f.refundedAtProvider(t, p.o); got != 1500 {
				t.Fatalf("provider refunded %d, want 1500 (the parked refund never)", got)
			}
			assertHistory(t, p.f, p.o.ID, event.OrderCreated, event.OrderPaid, event.OrderRefunded)
		})
	}
}

// TestRecheckParkedPartialRefund (issue 16): a recheck while the provider
// cannot be asked fails as unavailable and changes nothing; once it can,
// the recheck settles the parked refund by the provider's answer alone.
func TestRecheckParkedPartialRefund(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, true)
			p.gw.down.Store(true)
			if _, err := p.ops.Recheck(ctx, opCall("r1"), p.a.ProviderKey); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("recheck while the provider cannot be asked = %v, want unavailable", err)
			}
			if a := p.attempt(t); a.Status != payment.AttemptNeedsAttention {
				t.Fatalf("attempt after the failed recheck = %s, want still parked", a.Status)
			}
			p.gw.down.Store(false)
			res, err := p.ops.Recheck(ctx, opCall("r2"), p.a.ProviderKey)
			if err != nil || res.Action.Outcome != string(service.FindingSucceeded) || res.KeysResolved != 1 {
				t.Fatalf("recheck = %+v, %v; want succeeded", res, err)
			}
			if tt := p.totals(t); tt.Refunded != 400 {
				t.Fatalf("totals after the recheck = %+v, want 400 refunded", tt)
			}
		})
	}
}

// TestParkedRefundSettlementIsGuarded (issue 16): eight operators resolving
// the same parked refund at once (each with its own key) settle it once:
// one succeeds, the others answer attempt_not_parked; the order has one
// order.refunded and 400 refunded. The store's guarded write itself
// refuses a second settlement (ErrVersionConflict).
func TestParkedRefundSettlementIsGuarded(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, true)
			var wg sync.WaitGroup
			var won, notParked atomic.Int64
			errs := make([]error, 8)
			for i := range 8 {
				wg.Go(func() {
					_, err := p.ops.Resolve(ctx, opCall(fmt.Sprintf("op%d", i)), p.a.ProviderKey, service.FindingSucceeded, "racing")
					switch {
					case err == nil:
						won.Add(1)
					case apperr.ErrorCode(err) == apperr.EAttemptNotParked:
						notParked.Add(1)
					default:
						errs[i] = err
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if won.Load() != 1 || notParked.Load() != 7 {
				t.Fatalf("racing resolves: %d won, %d not parked; want 1 and 7", won.Load(), notParked.Load())
			}
			if tt := p.totals(t); tt.Refunded != 400 || tt.Reserved != 400 {
				t.Fatalf("totals = %+v, want 400 refunded once", tt)
			}
			assertHistory(t, p.f, p.o.ID, event.OrderCreated, event.OrderPaid, event.OrderRefunded)
			err := p.f.st.(store.OperatorStore).OperatorTx(ctx, func(tx store.OperatorExecutor) error {
				_, err := tx.(store.ParkedRefundSettler).SettleParkedRefund(ctx, store.AttemptUpdate{ProviderKey: p.a.ProviderKey,
					Status: payment.AttemptSucceeded, At: p.f.clk.Now()}, nil)
				return err
			})
			if !errors.Is(err, store.ErrVersionConflict) {
				t.Fatalf("a second settlement of the refund = %v, want ErrVersionConflict", err)
			}
			if tt := p.totals(t); tt.Refunded != 400 {
				t.Fatalf("totals after the refused settlement = %+v, want 400 refunded", tt)
			}
		})
	}
}

// TestPartialRefundEventSettlesParked (issue 16): the provider's
// refund.succeeded about a parked partial refund settles it as an
// operator's resolve would: 400 refunded, one order.refunded, the parked
// key replays the refund; an operator's resolve afterwards finds nothing
// parked. An event about another open refund that disagrees with it (its
// amount) moves nothing and parks that refund.
func TestPartialRefundEventSettlesParked(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, true)
			out, err := p.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: "evt_parked",
				Type: payment.EventRefundSucceeded, ObjectID: "re_parked", Reference: payment.Reference{OrderID: p.o.ID, Key: p.a.ProviderKey},
				Amount: 400, Currency: "EUR"})
			if err != nil || out != service.InboxApplied {
				t.Fatalf("event about the parked refund = %q, %v; want applied", out, err)
			}
			if a := p.attempt(t); a.Status != payment.AttemptSucceeded || a.ProviderRef != "re_parked" {
				t.Fatalf("attempt = %+v; want succeeded as re_parked", a)
			}
			if tt := p.totals(t); tt.Reserved != 400 || tt.Refunded != 400 {
				t.Fatalf("totals = %+v; want 400 reserved and refunded", tt)
			}
			res, err := p.refund(ctx, "lost", 400)
			if err != nil || !res.Replayed || res.Totals.Refunded != 400 || res.Refund.ProviderRef != "re_parked" {
				t.Fatalf("the parked key's retry = %+v, %v; want a replay of the refund re_parked", res, err)
			}
			if ts := p.f.eventsOf(t, p.o); countType(ts, event.OrderRefunded) != 1 {
				t.Fatalf("events %v; want one order.refunded", ts)
			}
			if _, err := p.ops.Resolve(ctx, opCall("late"), p.a.ProviderKey, service.FindingSucceeded, ""); err == nil {
				t.Fatalf("an operator's resolve after the event succeeded; want it refused (nothing parked)")
			}

			// Another refund, its answer lost, then an event with another amount.
			p.gw.lost.Store(true)
			p.gw.down.Store(true)
			if _, err := p.refund(ctx, "other", 200); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("second refund with a lost answer = %v, want EUnavailable", err)
			}
			pk := p.o.ID + "/refunds/" + idempotency.HashKey("other")[:16]
			out, err = p.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: "evt_wrong",
				Type: payment.EventRefundSucceeded, ObjectID: "re_wrong", Reference: payment.Reference{OrderID: p.o.ID, Key: pk},
				Amount: 999, Currency: "EUR"})
			if err != nil || out != service.InboxMismatch {
				t.Fatalf("event of another amount = %q, %v; want mismatch", out, err)
			}
			if a, err := p.f.st.GetAttempt(ctx, pk); err != nil || a.Status != payment.AttemptNeedsAttention {
				t.Fatalf("attempt after the mismatch = %+v, %v; want needs_attention", a, err)
			}
			if tt := p.totals(t); tt.Reserved != 600 || tt.Refunded != 400 {
				t.Fatalf("totals after the mismatch = %+v; want 600 reserved, 400 refunded", tt)
			}
		})
	}
}

// TestPartialRefundFailedEventSettlesParked (issue 16): a provider's
// refund.failed about a parked partial refund settles it rejected in the
// inbox's transaction: its reservation is released, its parked key now
// replays refund_rejected ("failed"), no order.refunded is written, a
// second delivery is already_settled and an operator's resolve finds
// nothing parked.
func TestPartialRefundFailedEventSettlesParked(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := newParkedRefund(t, kind, true)
			for i, want := range []service.InboxOutcome{service.InboxApplied, service.InboxAlreadySettled} {
				out, err := p.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: fmt.Sprintf("evt_parked_failed%d", i),
					Type: payment.EventRefundFailed, ObjectID: "re_parked", Reference: payment.Reference{OrderID: p.o.ID, Key: p.a.ProviderKey},
					Amount: 400, Currency: "EUR"})
				if err != nil || out != want {
					t.Fatalf("refund.failed %d about the parked refund = %q, %v; want %q", i, out, err, want)
				}
			}
			if a := p.attempt(t); a.Status != payment.AttemptRejected || a.ErrorCode != service.ErrorProviderRefundFailed {
				t.Fatalf("attempt = %+v; want rejected %s", a, service.ErrorProviderRefundFailed)
			}
			if tt := p.totals(t); tt.Reserved != 0 || tt.Refunded != 0 {
				t.Fatalf("totals = %+v; want nothing reserved or refunded", tt)
			}
			for i := range 2 {
				if _, err := p.refund(ctx, "lost", 400); apperr.ErrorCode(err) != apperr.ERefundRejected || !strings.Contains(err.Error(), "failed") {
					t.Fatalf("the parked key's retry %d = %v; want refund_rejected (failed)", i, err)
				}
			}
			if ts := p.f.eventsOf(t, p.o); countType(ts, event.OrderRefunded) != 0 {
				t.Fatalf("events %v; want no order.refunded", ts)
			}
			if _, err := p.ops.Resolve(ctx, opCall("late"), p.a.ProviderKey, service.FindingSucceeded, ""); err == nil {
				t.Fatalf("an operator's resolve after the event succeeded; want it refused (nothing parked)")
			}
		})
	}
}
