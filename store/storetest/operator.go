package storetest

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// operatorOf returns s as a store.OperatorStore, or fails: every store has
// the operator capability.
func operatorOf(t *testing.T, s *subject) store.OperatorStore {
	t.Helper()
	ops, ok := s.Store.(store.OperatorStore)
	if !ok {
		t.Fatalf("%T does not implement store.OperatorStore", s.Store)
	}
	return ops
}

// parkedOrder creates an order of tenant-a whose charge is parked
// (needs_attention) with key "K" parked on it, as the service parks them.
func parkedOrder(t *testing.T, s *subject) (order.Order, payment.Attempt) {
	t.Helper()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	r := mustAcquire(t, s, newClaim("tenant-a", "K", o.ID, base))
	a := mustRecordAttempt(t, s, r, newAttempt(o, o.ID+"/pay/1", base))
	mustRelease(t, s, r, idempotency.StateNeedsAttention,
		&store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptNeedsAttention, At: base.Add(time.Second)})
	return o, a
}

// testOperator checks the operators' capability: reads across tenants
// that only an explicit TenantFilter widens, the guarded writes of
// operator actions (one winner, ErrVersionConflict for the others,
// ErrNotFound for what does not exist), the action record written once and
// only with its transaction, and the operator.action event in the outbox.
func testOperator(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("TenantFilterIsExplicit", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops := operatorOf(t, s)
		o, a := parkedOrder(t, s)
		for _, c := range []struct {
			name string
			f    store.TenantFilter
			want int
		}{{"any tenant", store.AnyTenant, 1}, {"its tenant", store.OneTenant("tenant-a"), 1},
			{"another tenant", store.OneTenant("tenant-b"), 0}, {"the zero filter", store.TenantFilter{}, 0}} {
			as, err := ops.ParkedAttempts(ctx, store.ParkedFilter{Tenants: c.f, Limit: 10})
			if err != nil || len(as) != c.want {
				t.Errorf("%s: ParkedAttempts = %d, %v; want %d", c.name, len(as), err, c.want)
			}
			if c.want == 1 && (as[0].ProviderKey != a.ProviderKey || as[0].Status != payment.AttemptNeedsAttention) {
				t.Errorf("%s: parked = %+v", c.name, as[0])
			}
			_, err = ops.FindOrder(ctx, c.f, o.ID)
			if (c.want == 1) != (err == nil) || (err != nil && !errors.Is(err, store.ErrNotFound)) {
				t.Errorf("%s: FindOrder = %v", c.name, err)
			}
			ks, err := ops.FindKeys(ctx, c.f, idempotency.HashKey("K"))
			if err != nil || len(ks) != c.want || (c.want == 1 && ks[0].State != idempotency.StateNeedsAttention) {
				t.Errorf("%s: FindKeys = %+v, %v", c.name, ks, err)
			}
		}
		h, err := ops.History(ctx, store.AnyTenant, o.ID)
		if err != nil || h.Order.ID != o.ID || len(h.Events) != 1 || h.Events[0].Type != event.OrderCreated ||
			len(h.Attempts) != 1 || len(h.Keys) != 1 || h.Keys[0].AttemptKey != a.ProviderKey {
			t.Fatalf("History = %+v, %v", h, err)
		}
		if _, err := ops.FindEvent(ctx, store.OneTenant("tenant-b"), h.Events[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("FindEvent with another tenant's filter = %v, want ErrNotFound", err)
		}
		if ev, err := ops.FindEvent(ctx, store.AnyTenant, h.Events[0].ID); err != nil || ev.OrderID != o.ID {
			t.Fatalf("FindEvent = %+v, %v", ev, err)
		}
	})

	t.Run("SettleParkedOnceAndResolveItsKeys", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops := operatorOf(t, s)
		o, a := parkedOrder(t, s)
		var won atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
					if err := tx.SettleParkedAttempt(ctx, store.AttemptUpdate{ProviderKey: a.ProviderKey,
						Status: payment.AttemptSucceeded, ProviderRef: "ch_1", At: base.Add(time.Minute)}); err != nil {
						return err
					}
					n, err := tx.ResolveParkedKeys(ctx, a.ProviderKey, idempotency.Record{ResourceID: o.ID})
					if err == nil && n != 1 {
						t.Errorf("the winner resolved %d keys, want 1", n)
					}
					return err
				})
				switch {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, store.ErrVersionConflict):
					t.Errorf("OperatorTx = %v, want nil or ErrVersionConflict", err)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d settlements of one parked attempt, want 1", won.Load())
		}
		got, err := s.GetAttempt(ctx, a.ProviderKey)
		if err != nil || got.Status != payment.AttemptSucceeded || got.ProviderRef != "ch_1" {
			t.Fatalf("attempt = %+v, %v", got, err)
		}
		k := mustLookup(t, s, "tenant-a", idempotency.HashKey("K"))
		if k.State != idempotency.StateCompleted || k.ResourceID != o.ID || k.ErrorCode != "" {
			t.Fatalf("parked key after resolution = %+v, want completed for %s", k, o.ID)
		}
		// A settled attempt is never settled "from parked" again.
		err = ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
			return tx.SettleParkedAttempt(ctx, store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptDeclined, At: base})
		})
		if !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("settling a settled attempt = %v, want ErrVersionConflict", err)
		}
	})

	t.Run("ActionRecordedOnceWithItsTransaction", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops := operatorOf(t, s)
		act := event.Action{ID: event.NewActionID(), Actor: "olga", Role: "operator", Name: "endpoint.enable",
			TenantID: "tenant-a", Target: "we_x", Reason: "ticket 7", Outcome: "enabled", At: base}
		ev := event.ForAction(act)
		rec := store.OperatorAction{KeyHash: idempotency.HashKey("olga\x00k1"), Fingerprint: "fp", ID: act.ID, Actor: "olga",
			Action: act.Name, TenantID: "tenant-a", Target: "we_x", Reason: "ticket 7", Result: []byte(`{"ok":true}`),
			EventID: ev.ID, CreatedAt: base}
		boom := errors.New("the effect failed")
		err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
			if err := tx.AppendEvent(ctx, ev); err != nil {
				return err
			}
			if ok, err := tx.RecordOperatorAction(ctx, rec); err != nil || !ok {
				t.Errorf("RecordOperatorAction = %v, %v", ok, err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("OperatorTx = %v, want the effect's error", err)
		}
		if _, err := ops.GetOperatorAction(ctx, rec.KeyHash); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a rolled-back action is recorded: %v", err)
		}
		for i, want := range []bool{true, false} {
			err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
				if want {
					if err := tx.AppendEvent(ctx, ev); err != nil {
						return err
					}
				}
				ok, err := tx.RecordOperatorAction(ctx, rec)
				if err == nil && ok != want {
					t.Errorf("try %d: RecordOperatorAction = %v, want %v", i+1, ok, want)
				}
				return err
			})
			if err != nil {
				t.Fatalf("try %d: %v", i+1, err)
			}
		}
		got, err := ops.GetOperatorAction(ctx, rec.KeyHash)
		if err != nil || got.ID != act.ID || got.Actor != "olga" || got.Reason != "ticket 7" || string(got.Result) != `{"ok":true}` ||
			got.EventID != ev.ID || !got.CreatedAt.Equal(base.Truncate(time.Microsecond)) {
			t.Fatalf("GetOperatorAction = %+v, %v", got, err)
		}
		// The feed shows an event once every older transaction of the
		// database has ended (on PostgreSQL, cluster-wide), so read it by id.
		stored, err := ops.FindEvent(ctx, store.OneTenant("tenant-a"), ev.ID)
		if err != nil || stored.Type != event.OperatorAction || stored.OrderID != act.ID || stored.Sequence != 1 ||
			!strings.Contains(string(stored.Body), `"actor":"olga"`) {
			t.Fatalf("operator.action event = %+v, %v; want the one committed", stored, err)
		}
	})

	t.Run("EnableEndpointAndRequeueDeliveryAreGuarded", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops, es := operatorOf(t, s), s.Store.(store.EventStore)
		tx := func(fn func(tx store.OperatorExecutor) error) error { return ops.OperatorTx(ctx, fn) }
		ep := event.Endpoint{ID: "we_" + strings.Repeat("c", 32), TenantID: "tenant-a", URL: "http://127.0.0.1:9/hook",
			Types: []event.Type{event.OrderCreated}, Secret: "whsec_x", Enabled: true, CreatedAt: base}
		if err := es.CreateEndpoint(ctx, ep, 0); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, nil, newOrder(t, "tenant-a", "cust-1", base))
		ds, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10})
		if err != nil || len(ds) != 1 {
			t.Fatalf("ClaimDeliveries = %+v, %v", ds, err)
		}
		d := ds[0]
		requeue := func() error {
			return tx(func(tx store.OperatorExecutor) error {
				tenant, err := tx.RequeueDelivery(ctx, d.EndpointID, d.EventID)
				if err == nil && tenant != "tenant-a" {
					t.Errorf("RequeueDelivery tenant = %q", tenant)
				}
				return err
			})
		}
		enable := func(id string) error {
			return tx(func(tx store.OperatorExecutor) error { _, err := tx.EnableEndpoint(ctx, id); return err })
		}
		if err := requeue(); !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("requeue of a delivery in flight = %v, want ErrVersionConflict", err)
		}
		if err := enable(ep.ID); !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("enable of an enabled endpoint = %v, want ErrVersionConflict", err)
		}
		if err := enable("we_" + strings.Repeat("d", 32)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("enable of a missing endpoint = %v, want ErrNotFound", err)
		}
		if err := tx(func(tx store.OperatorExecutor) error {
			_, err := tx.RequeueDelivery(ctx, ep.ID, event.NewID())
			return err
		}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("requeue of a missing delivery = %v, want ErrNotFound", err)
		}
		if err := es.FinishDelivery(ctx, store.DeliveryOutcome{EndpointID: d.EndpointID, EventID: d.EventID, Attempts: d.Attempts,
			Status: event.DeliveryFailed, LastStatus: 410, DisableEndpoint: "410 Gone"}); err != nil {
			t.Fatal(err)
		}
		if err := enable(ep.ID); err != nil {
			t.Fatalf("enable of a disabled endpoint: %v", err)
		}
		if got, err := ops.FindEndpoint(ctx, store.AnyTenant, ep.ID); err != nil || !got.Enabled || got.DisabledReason != "" {
			t.Fatalf("endpoint after enable = %+v, %v", got, err)
		}
		if err := requeue(); err != nil {
			t.Fatalf("requeue of a failed delivery: %v", err)
		}
		got, err := ops.FindDelivery(ctx, store.OneTenant("tenant-a"), d.EndpointID, d.EventID)
		if err != nil || got.Status != event.DeliveryPending || got.Attempts != d.Attempts || got.NextAttemptAt == nil {
			t.Fatalf("delivery after requeue = %+v, %v; want pending with its attempts kept", got, err)
		}
		if again, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10}); err != nil || len(again) != 1 ||
			again[0].Attempts != d.Attempts+1 {
			t.Fatalf("claim after requeue = %+v, %v; want it again with the next fencing token", again, err)
		}
		if _, err := ops.FindDelivery(ctx, store.OneTenant("tenant-b"), d.EndpointID, d.EventID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("FindDelivery with another tenant's filter = %v", err)
		}
	})
}
