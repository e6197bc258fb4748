package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// testOperatorLists checks the operators' list reads (store.OperatorLister)
// and the bulk requeue: every read honours its TenantFilter (the zero
// filter matches nothing) and its other filters, in the documented order.
func testOperatorLists(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("SearchOrders", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops := operatorOf(t, s)
		a1 := newOrder(t, "tenant-a", "cust-1", base)
		a2 := newOrder(t, "tenant-a", "cust-2", base.Add(time.Second))
		b1 := newOrder(t, "tenant-b", "cust-1", base.Add(2*time.Second))
		for _, o := range []order.Order{a1, a2, b1} {
			mustCreate(t, s, nil, o)
		}
		ids := func(os []order.Order) string {
			var out []string
			for _, o := range os {
				out = append(out, o.ID)
			}
			return strings.Join(out, ",")
		}
		for _, c := range []struct {
			name string
			q    store.OrderSearch
			want []order.Order
		}{
			{"every tenant, newest first", store.OrderSearch{Tenants: store.AnyTenant, Limit: 10}, []order.Order{b1, a2, a1}},
			{"limit", store.OrderSearch{Tenants: store.AnyTenant, Limit: 2}, []order.Order{b1, a2}},
			{"one tenant", store.OrderSearch{Tenants: store.OneTenant("tenant-a"), Limit: 10}, []order.Order{a2, a1}},
			{"customer across tenants", store.OrderSearch{Tenants: store.AnyTenant, CustomerID: "cust-1", Limit: 10}, []order.Order{b1, a1}},
			{"state", store.OrderSearch{Tenants: store.AnyTenant, State: order.Received, Limit: 10}, []order.Order{b1, a2, a1}},
			{"another state", store.OrderSearch{Tenants: store.AnyTenant, State: order.Paid, Limit: 10}, nil},
			{"zero filter", store.OrderSearch{Limit: 10}, nil},
		} {
			got, err := ops.SearchOrders(ctx, c.q)
			if err != nil || ids(got) != ids(c.want) {
				t.Errorf("%s: SearchOrders = %s, %v; want %s", c.name, ids(got), err, ids(c.want))
			}
		}
	})

	t.Run("AttemptsByProviderRef", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops := operatorOf(t, s)
		_, a := parkedOrder(t, s)
		if err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
			return tx.SettleParkedAttempt(ctx, store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded,
				ProviderRef: "ch_ref_1", At: base.Add(time.Minute)})
		}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			f    store.TenantFilter
			ref  string
			want int
		}{{store.AnyTenant, "ch_ref_1", 1}, {store.OneTenant("tenant-a"), "ch_ref_1", 1},
			{store.OneTenant("tenant-b"), "ch_ref_1", 0}, {store.AnyTenant, "ch_other", 0}, {store.TenantFilter{}, "ch_ref_1", 0}} {
			got, err := ops.AttemptsByProviderRef(ctx, c.f, c.ref)
			if err != nil || len(got) != c.want || (c.want == 1 && got[0].ProviderKey != a.ProviderKey) {
				t.Errorf("AttemptsByProviderRef(%+v, %s) = %+v, %v; want %d", c.f, c.ref, got, err, c.want)
			}
		}
	})

	t.Run("DeliveriesEndpointsAndBulkRequeue", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops, es := operatorOf(t, s), s.Store.(store.EventStore)
		epA := event.Endpoint{ID: "we_" + strings.Repeat("a", 32), TenantID: "tenant-a", URL: "http://127.0.0.1:9/a",
			Types: []event.Type{event.OrderCreated}, Secret: "whsec_a", Enabled: true, CreatedAt: base}
		epB := event.Endpoint{ID: "we_" + strings.Repeat("b", 32), TenantID: "tenant-b", URL: "http://127.0.0.1:9/b",
			Types: []event.Type{event.OrderCreated}, Secret: "whsec_b", Enabled: true, CreatedAt: base}
		for _, ep := range []event.Endpoint{epA, epB} {
			if err := es.CreateEndpoint(ctx, ep, 0); err != nil {
				t.Fatal(err)
			}
		}
		eps, err := ops.AllEndpoints(ctx, store.AnyTenant)
		if err != nil || len(eps) != 2 || eps[0].ID != epA.ID || eps[1].ID != epB.ID || eps[0].Secret != "" {
			t.Fatalf("AllEndpoints = %+v, %v; want both, by tenant, without secrets", eps, err)
		}
		if eps, err := ops.AllEndpoints(ctx, store.OneTenant("tenant-b")); err != nil || len(eps) != 1 || eps[0].ID != epB.ID {
			t.Fatalf("AllEndpoints(tenant-b) = %+v, %v", eps, err)
		}
		if eps, err := ops.AllEndpoints(ctx, store.TenantFilter{}); err != nil || len(eps) != 0 {
			t.Fatalf("AllEndpoints(zero filter) = %+v, %v", eps, err)
		}
		mustCreate(t, s, nil, newOrder(t, "tenant-a", "cust-1", base))
		mustCreate(t, s, nil, newOrder(t, "tenant-a", "cust-2", base.Add(time.Second)))
		mustCreate(t, s, nil, newOrder(t, "tenant-b", "cust-3", base.Add(2*time.Second)))
		b, err := ops.DeliveryBacklog(ctx)
		if err != nil || b.Pending != 3 || b.Failed != 0 || b.OldestPending.IsZero() || b.Now.IsZero() {
			t.Fatalf("DeliveryBacklog = %+v, %v; want 3 pending", b, err)
		}
		ds, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10})
		if err != nil || len(ds) != 3 {
			t.Fatalf("ClaimDeliveries = %+v, %v", ds, err)
		}
		for _, d := range ds {
			if err := es.FinishDelivery(ctx, store.DeliveryOutcome{EndpointID: d.EndpointID, EventID: d.EventID, Attempts: d.Attempts,
				Status: event.DeliveryFailed, LastStatus: 500}); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := ops.DeliveryBacklog(ctx); err != nil || b.Pending != 0 || b.Failed != 3 || !b.OldestPending.IsZero() {
			t.Fatalf("DeliveryBacklog after failures = %+v, %v; want 3 failed", b, err)
		}
		for _, c := range []struct {
			q    store.DeliverySearch
			want int
		}{{store.DeliverySearch{Tenants: store.AnyTenant, Limit: 10}, 3},
			{store.DeliverySearch{Tenants: store.AnyTenant, Status: event.DeliveryFailed, Limit: 10}, 3},
			{store.DeliverySearch{Tenants: store.AnyTenant, Status: event.DeliveryFailed, Limit: 1}, 1},
			{store.DeliverySearch{Tenants: store.AnyTenant, Status: event.DeliveryPending, Limit: 10}, 0},
			{store.DeliverySearch{Tenants: store.AnyTenant, EndpointID: epA.ID, Limit: 10}, 2},
			{store.DeliverySearch{Tenants: store.OneTenant("tenant-b"), Limit: 10}, 1},
			{store.DeliverySearch{Limit: 10}, 0}} {
			got, err := ops.SearchDeliveries(ctx, c.q)
			if err != nil || len(got) != c.want {
				t.Errorf("SearchDeliveries(%+v) = %d, %v; want %d", c.q, len(got), err, c.want)
			}
			for _, d := range got {
				if d.Secret != "" || len(d.Body) != 0 {
					t.Errorf("SearchDeliveries read a secret or a body: %+v", d)
				}
			}
		}
		requeue := func(id string, since time.Time) (string, int, error) {
			var tenant string
			var n int
			err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
				var err error
				tenant, n, err = tx.RequeueFailedDeliveries(ctx, id, since)
				return err
			})
			return tenant, n, err
		}
		if _, _, err := requeue("we_"+strings.Repeat("f", 32), time.Time{}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("bulk requeue of a missing endpoint = %v, want ErrNotFound", err)
		}
		if tenant, n, err := requeue(epA.ID, time.Now().Add(24*time.Hour)); err != nil || n != 0 || tenant != "tenant-a" {
			t.Fatalf("bulk requeue since tomorrow = %s, %d, %v; want none", tenant, n, err)
		}
		if tenant, n, err := requeue(epA.ID, time.Time{}); err != nil || n != 2 || tenant != "tenant-a" {
			t.Fatalf("bulk requeue = %s, %d, %v; want endpoint a's 2", tenant, n, err)
		}
		if _, n, err := requeue(epA.ID, time.Time{}); err != nil || n != 0 {
			t.Fatalf("second bulk requeue = %d, %v; want 0", n, err)
		}
		if b, err := ops.DeliveryBacklog(ctx); err != nil || b.Pending != 2 || b.Failed != 1 {
			t.Fatalf("DeliveryBacklog after requeue = %+v, %v; want 2 pending, b's 1 failed", b, err)
		}
		again, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10})
		if err != nil || len(again) != 2 || again[0].EndpointID != epA.ID || again[0].Attempts != 2 {
			t.Fatalf("claim after bulk requeue = %+v, %v; want a's 2 with their next fencing token", again, err)
		}
	})

	t.Run("RotateEndpointSecret", func(t *testing.T) { testRotateEndpointSecret(t, open) })

	t.Run("ListOperatorActions", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		ops := operatorOf(t, s)
		var ids []string
		for i, tenant := range []string{"tenant-a", "tenant-b", "tenant-a"} {
			act := event.Action{ID: event.NewActionID(), Actor: "olga", Role: "operator", Name: "endpoint.enable",
				TenantID: tenant, Target: "we_x", Reason: "ticket", Outcome: "enabled", At: base.Add(time.Duration(i) * time.Second)}
			ev := event.ForAction(act)
			ids = append(ids, act.ID)
			if err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
				if err := tx.AppendEvent(ctx, ev); err != nil {
					return err
				}
				_, err := tx.RecordOperatorAction(ctx, store.OperatorAction{KeyHash: idempotency.HashKey("olga\x00" + act.ID),
					Fingerprint: "fp", ID: act.ID, Actor: "olga", Action: act.Name, TenantID: tenant, Target: "we_x",
					Reason: "ticket", Result: []byte(`{}`), EventID: ev.ID, CreatedAt: act.At})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		got := func(q store.ActionSearch) string {
			as, err := ops.ListOperatorActions(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range as {
				out = append(out, a.ID)
			}
			return strings.Join(out, ",")
		}
		if g, w := got(store.ActionSearch{Tenants: store.AnyTenant, Limit: 10}), ids[2]+","+ids[1]+","+ids[0]; g != w {
			t.Fatalf("ListOperatorActions = %s, want newest first %s", g, w)
		}
		if g, w := got(store.ActionSearch{Tenants: store.OneTenant("tenant-a"), Limit: 1}), ids[2]; g != w {
			t.Fatalf("ListOperatorActions(tenant-a, 1) = %s, want %s", g, w)
		}
		if g := got(store.ActionSearch{Limit: 10}); g != "" {
			t.Fatalf("ListOperatorActions(zero filter) = %s, want none", g)
		}
	})
}

// testRotateEndpointSecret: a rotation with a grace period makes claims
// carry the former secret beside the new one until the grace ends on the
// store's clock; one without a grace drops it at once; a missing
// endpoint is ErrNotFound.
func testRotateEndpointSecret(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	s.at(base)
	ops, es := operatorOf(t, s), s.Store.(store.EventStore)
	ep := event.Endpoint{ID: "we_" + strings.Repeat("e", 32), TenantID: "tenant-a", URL: "http://127.0.0.1:9/e",
		Types: []event.Type{event.OrderCreated}, Secret: "whsec_old", Enabled: true, CreatedAt: base}
	if err := es.CreateEndpoint(ctx, ep, 0); err != nil {
		t.Fatal(err)
	}
	rotate := func(id, secret string, grace time.Duration) (string, error) {
		var tenant string
		err := ops.OperatorTx(ctx, func(tx store.OperatorExecutor) error {
			var err error
			tenant, err = tx.RotateEndpointSecret(ctx, id, secret, grace)
			return err
		})
		return tenant, err
	}
	claim := func(at time.Time) event.Delivery {
		t.Helper()
		s.at(at)
		mustCreate(t, s, nil, newOrder(t, "tenant-a", "cust-r", at))
		ds, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10})
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim at %s = %+v, %v; want one", at, ds, err)
		}
		if err := es.FinishDelivery(ctx, store.DeliveryOutcome{EndpointID: ds[0].EndpointID, EventID: ds[0].EventID,
			Attempts: ds[0].Attempts, Status: event.DeliverySucceeded, LastStatus: 200}); err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	if _, err := rotate("we_"+strings.Repeat("f", 32), "whsec_x", time.Hour); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotating a missing endpoint = %v, want ErrNotFound", err)
	}
	if d := claim(base); d.Secret != "whsec_old" || d.PreviousSecret != "" {
		t.Fatalf("before the rotation: secret %q, previous %q", d.Secret, d.PreviousSecret)
	}
	if tenant, err := rotate(ep.ID, "whsec_new", time.Hour); err != nil || tenant != "tenant-a" {
		t.Fatalf("rotate = %q, %v", tenant, err)
	}
	if d := claim(base.Add(59 * time.Minute)); d.Secret != "whsec_new" || d.PreviousSecret != "whsec_old" {
		t.Fatalf("within the grace: secret %q, previous %q; want both", d.Secret, d.PreviousSecret)
	}
	if d := claim(base.Add(61 * time.Minute)); d.Secret != "whsec_new" || d.PreviousSecret != "" {
		t.Fatalf("past the grace: secret %q, previous %q; want the new one alone", d.Secret, d.PreviousSecret)
	}
	if _, err := rotate(ep.ID, "whsec_newer", 0); err != nil {
		t.Fatal(err)
	}
	if d := claim(base.Add(62 * time.Minute)); d.Secret != "whsec_newer" || d.PreviousSecret != "" {
		t.Fatalf("after a rotation without grace: secret %q, previous %q", d.Secret, d.PreviousSecret)
	}
	if got, err := es.EndpointSecret(ctx, "tenant-a", ep.ID); err != nil || got != "whsec_newer" {
		t.Fatalf("EndpointSecret = %q, %v", got, err)
	}
}
