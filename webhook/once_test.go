package webhook_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/webhook"
)

// crashingLedger fails the first CompleteKey, as a process that dies after
// inserting its endpoint and before completing its key would leave it.
type crashingLedger struct {
	webhook.Ledger
	crashed atomic.Bool
}

func (l *crashingLedger) CompleteKey(ctx context.Context, lease store.Lease, o idempotency.Record) error {
	if l.crashed.CompareAndSwap(false, true) {
		return errors.New("simulated crash before the key's completion")
	}
	return l.Ledger.CompleteKey(ctx, lease, o)
}

// TestCreateOnceResumesACrashedRegistration: a registration that inserted
// its endpoint and then died with its key in progress is finished by the
// retry that takes the key over once the lease has lapsed: one endpoint,
// the one the first request inserted, with its secret; never a second.
func TestCreateOnceResumesACrashedRegistration(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, kind)
			f.ep.Ledger = &crashingLedger{Ledger: f.env.Store}
			key := idempotency.Key{Value: "reg-1", Fingerprint: "fp-1"}
			const url = "http://127.0.0.1:9/hook"
			if _, err := f.ep.CreateOnce(t.Context(), testenv.TenantA, key, url, []event.Type{event.OrderPaid}); err == nil {
				t.Fatal("the crashing registration succeeded")
			}
			eps, err := f.es.ListEndpoints(t.Context(), testenv.TenantA)
			if err != nil || len(eps) != 1 {
				t.Fatalf("after the crash: %d endpoints, %v; want the one inserted", len(eps), err)
			}
			// Within the lease the key is held; past it a retry takes over.
			if _, err := f.ep.CreateOnce(t.Context(), testenv.TenantA, key, url, []event.Type{event.OrderPaid}); err == nil {
				t.Fatal("a retry within the crashed request's lease succeeded")
			}
			f.clk.Advance(time.Minute)
			res, err := f.ep.CreateOnce(t.Context(), testenv.TenantA, key, url, []event.Type{event.OrderPaid})
			if err != nil || res.Replayed || res.Endpoint.ID != eps[0].ID || res.Endpoint.Secret == "" {
				t.Fatalf("the retry after the lease: %+v, %v; want endpoint %s with its secret", res, err, eps[0].ID)
			}
			again, err := f.ep.CreateOnce(t.Context(), testenv.TenantA, key, url, []event.Type{event.OrderPaid})
			if err != nil || !again.Replayed || again.Endpoint.ID != eps[0].ID || again.Endpoint.Secret != res.Endpoint.Secret {
				t.Fatalf("the replay: %+v, %v", again, err)
			}
			if eps, _ := f.es.ListEndpoints(t.Context(), testenv.TenantA); len(eps) != 1 {
				t.Fatalf("%d endpoints, want 1", len(eps))
			}
		})
	}
}
