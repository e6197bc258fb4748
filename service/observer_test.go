package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// recorder is a service.Observer that counts what it is told.
type recorder struct {
	mu     sync.Mutex
	counts map[string]int
	passes []store.WorkBacklog
}

func (r *recorder) add(k string) { r.mu.Lock(); r.counts[k]++; r.mu.Unlock() }

func (r *recorder) count(k string) int { r.mu.Lock(); defer r.mu.Unlock(); return r.counts[k] }

func (r *recorder) StartOperation(ctx context.Context, op idempotency.Operation) (context.Context, func(error)) {
	r.add("start " + string(op))
	return ctx, func(error) { r.add("end " + string(op)) }
}

func (r *recorder) StartProviderCall(ctx context.Context, op service.ProviderOp) (context.Context, func(service.ProviderOutcome)) {
	return ctx, func(out service.ProviderOutcome) { r.add(fmt.Sprintf("provider %s %s", op, out)) }
}

func (r *recorder) KeyEvent(ev service.KeyEvent, op idempotency.Operation) {
	r.add(fmt.Sprintf("key %s %s", ev, op))
}

func (r *recorder) Transition(ev order.Event, from, to order.State) {
	r.add(fmt.Sprintf("transition %s %s→%s", ev, from, to))
}

func (r *recorder) CompleterPass(_ time.Duration, n int, b store.WorkBacklog, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[fmt.Sprintf("completer pass took over %d ok=%t", n, ok)]++
	r.passes = append(r.passes, b)
}

func (r *recorder) SweepPass(res store.SweepResult) { r.add(fmt.Sprintf("sweep %+v", res)) }

// observed returns a service over f's store, gateway and clock that reports
// to a recorder.
func observed(f *fixture) (*service.Service, *recorder) {
	rec := &recorder{counts: map[string]int{}}
	svc := service.New(f.st, f.gw, simulator.NewWarehouse(), service.Config{
		KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 2 * time.Hour,
		LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now, Observer: rec,
	})
	return svc, rec
}

// TestObserverSeesTheProtocol drives the events a scripted HTTP sequence
// cannot reach deterministically — a conflict with a live lease, a wait, a
// lease takeover, a fencing rejection, an unknown outcome the completer
// resolves — and checks the observer was told each exactly once.
func TestObserverSeesTheProtocol(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		svc, rec := observed(f)
		o := f.order(t)

		// A slow charge holds key K; a duplicate conflicts, another waits
		// (and times out, the charge being held), the lease lapses and a
		// retry takes over; the slow worker's write is fenced off.
		release := make(chan struct{})
		f.gw.hold, f.gw.entered = release, make(chan struct{})
		entered := f.gw.entered
		slow := make(chan error, 1)
		go func() {
			_, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}, payIn)
			slow <- err
		}()
		<-entered
		if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}, payIn); apperr.ErrorCode(err) != apperr.EKeyInProgress {
			t.Fatalf("duplicate: %v, want EKeyInProgress", err)
		}
		// The waiter gives up after 1ms, however late it runs: the holder
		// stays in its call until released.
		if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K"), Wait: time.Millisecond}, payIn); apperr.ErrorCode(err) != apperr.EKeyInProgress {
			t.Fatalf("waiting duplicate: %v, want EKeyInProgress", err)
		}
		f.clk.Advance(11 * time.Second)
		if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}, payIn); err != nil {
			t.Fatalf("takeover: %v", err)
		}
		close(release)
		if err := <-slow; apperr.ErrorCode(err) != apperr.EKeyInProgress {
			t.Fatalf("stale worker: %v, want its write fenced off", err)
		}

		// A lost reply leaves an unknown outcome; the completer resolves it.
		lost := f.order(t)
		f.gw.dropNext.Store(true)
		if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: lost.ID, Key: key("L")}, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("lost reply: %v, want EUnavailable", err)
		}
		b, ok, err := svc.Backlog(ctx)
		if err != nil || !ok || b.UnknownOutcomes != 1 || b.Abandoned != 1 {
			t.Fatalf("Backlog = %+v, %t, %v; want 1 unknown outcome, 1 abandoned key", b, ok, err)
		}
		if n, err := svc.RecoverAbandoned(ctx, 10); n != 1 || err != nil {
			t.Fatalf("RecoverAbandoned = %d, %v; want 1", n, err)
		}

		for k, want := range map[string]int{
			"key claimed pay":                    2, // K, L
			"key in_progress_conflict pay":       2, // the duplicate and the waiter
			"key waited pay":                     1,
			"key lease_takeover pay":             2, // the retry of K, the completer's of L
			"key fencing_rejection pay":          1,
			"provider prepare approved":          2, // K's intent, L's intent
			"provider charge approved":           2, // the slow one, and the takeover's with the same confirm key
			"provider charge unknown":            1, // L's lost answer
			"provider charge_lookup approved":    2, // the takeover's read of K's intent, the completer's of L
			"transition pay RCVD→PAID":           2,
			"completer pass took over 1 ok=true": 1,
		} {
			if got := rec.count(k); got != want {
				t.Errorf("%q told %d times, want %d; all: %v", k, got, want, rec.counts)
			}
		}
		if len(rec.passes) != 1 || rec.passes[0].Now.IsZero() || (store.WorkBacklog{Now: rec.passes[0].Now}) != rec.passes[0] {
			t.Errorf("completer passes reported backlogs %+v, want one empty backlog", rec.passes)
		}
		if rec.count("start pay") != rec.count("end pay") || rec.count("start pay") != 5 {
			t.Errorf("pay operations started %d, ended %d; want 5 each", rec.count("start pay"), rec.count("end pay"))
		}
	})
}
