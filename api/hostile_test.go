package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
)

// TestHostileInput: what a fuzzing or careless client sends is a clear 4xx
// on both stores, never a 500, and changes nothing.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		o := orderIn(t, env, order.Received)

		bodies := []struct {
			name   string
			body   string
			fields []string
		}{
			{"a NUL in a string", `{"customer_id":"c\u0000x","currency":"USD","items":[{"sku":"a\u0000","quantity":1,"unit_price":1}]}`,
				[]string{"customer_id", "items[0].sku"}},
			{"control characters", `{"customer_id":"c\u0007","currency":"USD","items":[{"sku":"a","quantity":1,"unit_price":1}]}`,
				[]string{"customer_id"}},
			{"a unit price past 2^53-1", `{"customer_id":"c","currency":"USD","items":[{"sku":"a","quantity":1,"unit_price":9007199254740993}]}`,
				[]string{"items[0].unit_price"}},
			{"a testing currency", `{"customer_id":"c","currency":"XXX","items":[{"sku":"a","quantity":1,"unit_price":1}]}`,
				[]string{"currency"}},
		}
		for _, b := range bodies {
			t.Run("create with "+b.name+" is a 400", func(t *testing.T) {
				p := wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), b.body),
					http.StatusBadRequest, apperr.EInvalid)
				wantFields(t, p, b.fields...)
			})
		}

		t.Run("odd order ids are 404s, without reaching the store", func(t *testing.T) {
			for _, id := range []string{"ord%00x", "ord_%ff", "nope", "ord_" + strings.Repeat("z", 32)} {
				wantProblem(t, doMalformed(t, env, http.MethodGet, "/v1/orders/"+id, testenv.KeyA, "", nil), http.StatusNotFound, apperr.ENotFound)
				wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders/"+id+"/cancel", testenv.KeyA, newKey(t), nil),
					http.StatusNotFound, apperr.ENotFound)
			}
		})

		t.Run("odd list filters are 400s", func(t *testing.T) {
			for _, q := range []string{"customer_id=%00", "customer_id=%ff", "cursor=b3JkXwA"} {
				wantProblem(t, doMalformed(t, env, http.MethodGet, "/v1/orders?"+q, testenv.KeyA, "", nil), http.StatusBadRequest, apperr.EInvalid)
			}
		})

		t.Run("a pay without amount or currency is a 400, not a stored mismatch", func(t *testing.T) {
			key := newKey(t)
			p := wantProblem(t, doMalformed(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key,
				`{"payment_method":"pm_card_visa"}`), http.StatusBadRequest, apperr.EInvalid)
			wantFields(t, p, "amount", "currency")
			p = wantProblem(t, doMalformed(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key,
				`{"amount":2500,"currency":"US\u0000","payment_method":"pm_card_visa"}`), http.StatusBadRequest, apperr.EInvalid)
			wantFields(t, p, "currency")
			wantStatus(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, payBody(o, "pm_card_visa")), http.StatusOK)
		})

		t.Run("keys in the server's namespaces are refused", func(t *testing.T) {
			for _, k := range []string{"derived:abc", "anon:abc"} {
				wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, k, orderBody(newCustomer(t))),
					http.StatusBadRequest, apperr.EInvalid)
			}
		})

		t.Run("encoded or non-UTF-8 bodies are 415s", func(t *testing.T) {
			for _, c := range []call{
				{Header: http.Header{"Content-Encoding": {"gzip"}}},
				{ContentType: "application/json; charset=iso-8859-1"},
			} {
				c.Method, c.Path, c.APIKey, c.IdemKey, c.Body, c.Malformed = http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), orderBody(newCustomer(t)), true
				r, err := send(env, c)
				if err != nil {
					t.Fatal(err)
				}
				wantProblem(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
			}
		})

		t.Run("HEAD is served on GET routes", func(t *testing.T) {
			wantStatus(t, do(t, env, http.MethodHead, "/v1/orders/"+o.ID, testenv.KeyA, "", nil), http.StatusOK)
			wantStatus(t, do(t, env, http.MethodHead, "/healthz", "", "", nil), http.StatusOK)
		})

		t.Run("no body, {} and null are the same fulfil or cancel", func(t *testing.T) {
			c := orderIn(t, env, order.Received)
			key := newKey(t)
			wantStatus(t, do(t, env, http.MethodPost, eventPath(c.ID, order.EventCancel), testenv.KeyA, key, nil), http.StatusOK)
			wantReplayOf(t, do(t, env, http.MethodPost, eventPath(c.ID, order.EventCancel), testenv.KeyA, key, `{}`), http.StatusOK)
			wantReplayOf(t, do(t, env, http.MethodPost, eventPath(c.ID, order.EventCancel), testenv.KeyA, key, `null`), http.StatusOK)
		})

		if got := list(t, env, testenv.KeyA, nil); len(got.Data) != 2 {
			t.Fatalf("%d orders after the hostile requests, want the 2 made on purpose", len(got.Data))
		}
	})
}
