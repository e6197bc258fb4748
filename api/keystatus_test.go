package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
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
// other preferences.
func TestPreferWaitIsParsed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	env.Gateway.Delay = 300 * time.Millisecond
	o := orderIn(t, env, order.Received)
	key := newKey(t)
	first := make(chan reply, 1)
	go func() { first <- fire(t, env, o, order.EventPay, key) }()
	time.Sleep(100 * time.Millisecond) // the first request is inside the provider call
	r, err := send(env, call{Method: http.MethodPost, Path: eventPath(o.ID, order.EventPay), APIKey: testenv.KeyA,
		IdemKey: key, Body: payBody(o, "pm_card_visa"), Header: http.Header{"Prefer": {"respond-async, wait=5"}}})
	if err != nil {
		t.Fatal(err)
	}
	wantReplayOf(t, r, http.StatusOK)
	wantStatus(t, <-first, http.StatusOK)
	if n := env.Gateway.Captures(o.ID); n != 1 {
		t.Fatalf("%d captures, want 1", n)
	}
}
