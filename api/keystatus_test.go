package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

func TestKeyStatus(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		key := newKey(t)
		o := create(t, env, testenv.KeyA, key, newCustomer(t))

		r := do(t, env, http.MethodGet, "/v1/idempotency-keys/"+url.PathEscape(key), testenv.KeyA, "", nil)
		wantStatus(t, r, http.StatusOK)
		var st struct {
			Key        string    `json:"key"`
			State      string    `json:"state"`
			ExpiresAt  time.Time `json:"expires_at"`
			ResourceID string    `json:"resource_id"`
			StatusCode int       `json:"status_code"`
		}
		if err := json.Unmarshal(r.Body, &st); err != nil {
			t.Fatal(err)
		}
		if st.Key != key || st.State != "completed" || st.ResourceID != o.ID || st.StatusCode != http.StatusCreated {
			t.Fatalf("key status = %+v, want completed 201 for %s", st, o.ID)
		}
		if d := time.Until(st.ExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
			t.Fatalf("expires_at %v is not about 24h away", st.ExpiresAt)
		}

		t.Run("a key with reserved characters is found percent-encoded", func(t *testing.T) {
			odd := "a/b+c " + newKey(t)[:8]
			odd = odd[:5] + "_" + odd[6:] // keys are visible ASCII: no space
			o := create(t, env, testenv.KeyA, odd, newCustomer(t))
			r := do(t, env, http.MethodGet, "/v1/idempotency-keys/"+url.PathEscape(odd), testenv.KeyA, "", nil)
			wantStatus(t, r, http.StatusOK)
			var got struct {
				Key        string `json:"key"`
				ResourceID string `json:"resource_id"`
			}
			if err := json.Unmarshal(r.Body, &got); err != nil || got.Key != odd || got.ResourceID != o.ID {
				t.Fatalf("status of %q = %+v (%v), want its order %s", odd, got, err, o.ID)
			}
		})
		t.Run("another tenant's key is not found", func(t *testing.T) {
			wantProblem(t, do(t, env, http.MethodGet, "/v1/idempotency-keys/"+url.PathEscape(key), testenv.KeyB, "", nil),
				http.StatusNotFound, apperr.ENotFound)
		})
		t.Run("an unknown key is not found", func(t *testing.T) {
			wantProblem(t, do(t, env, http.MethodGet, "/v1/idempotency-keys/never-used", testenv.KeyA, "", nil),
				http.StatusNotFound, apperr.ENotFound)
		})
	})
}

// TestPreferWaitIsParsed: a duplicate sent with "Prefer: wait=N" while the
// first is still running gets the replay; the header is accepted among
// other preferences. Synchronised by events, not sleeps: the first pay is
// held inside the provider call until the service reports that the
// duplicate waits for it (service.KeyWaited), which it does only when it
// parsed the wait; then the first completes and the duplicate replays it.
func TestPreferWaitIsParsed(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{})
	var once sync.Once
	obs := &keyEventObserver{on: func(ev service.KeyEvent) {
		if ev == service.KeyWaited {
			once.Do(func() { close(waiting) })
		}
	}}
	inCall, release := make(chan struct{}), make(chan struct{})
	env := testenv.New(t, testenv.SQLite, testenv.Options{Observer: obs, WrapGateway: func(g payment.Gateway) payment.Gateway {
		return &heldCharge{Gateway: g, entered: inCall, release: release}
	}})
	o := orderIn(t, env, order.Received)
	key := newKey(t)
	first := make(chan reply, 1)
	go func() { first <- fire(t, env, o, order.EventPay, key) }()
	waitFor(t, inCall, "the first pay to reach the provider")
	second := make(chan reply, 1)
	go func() {
		r, err := send(env, call{Method: http.MethodPost, Path: eventPath(o.ID, order.EventPay), APIKey: testenv.KeyA,
			IdemKey: key, Body: payBody(o, "pm_card_visa"), Header: http.Header{"Prefer": {"respond-async, wait=60"}}})
		if err != nil {
			t.Error(err)
		}
		second <- r
	}()
	waitFor(t, waiting, "the duplicate to wait for the first (Prefer: wait parsed)")
	close(release)
	wantStatus(t, <-first, http.StatusOK)
	wantReplayOf(t, <-second, http.StatusOK)
	if n := env.Gateway.Captures(o.ID); n != 1 {
		t.Fatalf("%d captures, want 1", n)
	}
}

// heldCharge holds every Charge until release is closed, after closing
// entered (once) to say a charge has reached the provider.
type heldCharge struct {
	payment.Gateway
	entered, release chan struct{}
	once             sync.Once
}

func (g *heldCharge) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return payment.Intent{}, ctx.Err()
	}
	return g.Gateway.Confirm(ctx, req)
}

// keyEventObserver is a service.Observer that reports each key event to
// on and observes nothing else.
type keyEventObserver struct{ on func(service.KeyEvent) }

func (o *keyEventObserver) StartOperation(ctx context.Context, _ idempotency.Operation) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (o *keyEventObserver) StartProviderCall(ctx context.Context, _ service.ProviderOp) (context.Context, func(service.ProviderOutcome)) {
	return ctx, func(service.ProviderOutcome) {}
}
func (o *keyEventObserver) KeyEvent(ev service.KeyEvent, _ idempotency.Operation)     { o.on(ev) }
func (o *keyEventObserver) Transition(order.Event, order.State, order.State)          {}
func (o *keyEventObserver) CompleterPass(time.Duration, int, store.WorkBacklog, bool) {}
func (o *keyEventObserver) SweepPass(store.SweepResult)                               {}

// waitFor waits for ch to close, up to two minutes (a loaded machine is
// slow, never this slow), and fails the test naming what did not happen.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}
