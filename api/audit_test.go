package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/testmode"
)

// TestMalformedIDsNeverReachTheStore sends path ids that no store holds
// (NUL, invalid UTF-8, another resource's prefix) to every route that
// takes one. Each is a 404 on both stores. Regression: on PostgreSQL a NUL
// or an invalid UTF-8 byte in a webhook endpoint id was a 500 (SQLSTATE
// 22021), on SQLite a 404.
func TestMalformedIDsNeverReachTheStore(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{})
		for _, id := range []string{"%00", "%FF", "we_%00", "we_%FFx", "ord_0123456789abcdef0123456789abcdef", "evt_0123456789abcdef0123456789abcdef", "we_0123456789ABCDEF0123456789ABCDEF"} {
			for _, c := range []struct{ method, path string }{
				{http.MethodGet, "/v1/webhook-endpoints/" + id},
				{http.MethodDelete, "/v1/webhook-endpoints/" + id},
				{http.MethodGet, "/v1/webhook-endpoints/" + id + "/deliveries"},
				{http.MethodGet, "/v1/events/" + id},
				{http.MethodGet, "/v1/orders/" + id},
				{http.MethodPost, "/v1/orders/" + id + "/cancel"},
			} {
				r := doMalformed(t, env, c.method, c.path, testenv.KeyA, "", nil)
				if r.Status != http.StatusNotFound {
					t.Errorf("%s %s = %s, want 404", c.method, c.path, r)
				}
			}
		}
	})
}

// TestProviderEventIDsAreText sends signed provider webhooks whose event
// id or provider key is no identifier: a 400 naming the member on both
// stores, nothing recorded. Regression: "e\u0000x" was a 500 on
// PostgreSQL, which the provider resends forever.
func TestProviderEventIDsAreText(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{ProviderWebhook: paysimclient.Webhooks{Secret: webhookSecret}})
		now := time.Now()
		for _, tc := range []struct{ id, key, field string }{
			{"e\x00x", "ord_x/pay/1", "id"},
			{"evt_\u202eok", "ord_x/pay/1", "id"},
			{"evt_ok_1", "ord_x/pay/1\x00", "provider_key"},
		} {
			p := wantProblem(t, webhook(t, env, tc.id, paysim.EventChargeSucceeded, tc.key, webhookSecret, now), http.StatusBadRequest, apperr.EInvalid)
			wantFields(t, p, tc.field)
		}
		// A well-formed id is still taken in (unmatched: no such attempt).
		r := webhook(t, env, "evt_ok_2", paysim.EventChargeSucceeded, "ord_x/pay/1", webhookSecret, now)
		wantStatus(t, r, http.StatusOK)
	})
}

// TestIdentifiersRefuseFormatCharacters creates orders whose customer id or
// SKU holds characters that make one identifier display as another: each
// is a 400 whose reason names the kind of character and its code point.
// Regression: BiDi overrides, zero-width and tag characters were accepted,
// and U+0085 or U+2028 alone were refused as "is required".
func TestIdentifiersRefuseFormatCharacters(t *testing.T) {
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	for _, tc := range []struct {
		customer, sku, field, reason string
	}{
		{"cus_\u202egnp.exe", "sku_1", "customer_id", "format characters"}, // RIGHT-TO-LEFT OVERRIDE
		{"cus_\u2066x\u2069", "sku_1", "customer_id", "U+2066"},            // LEFT-TO-RIGHT ISOLATE
		{"cus_a\u200bb", "sku_1", "customer_id", "U+200B"},                 // ZERO WIDTH SPACE
		{"cus_a\ufeff", "sku_1", "customer_id", "U+FEFF"},                  // ZERO WIDTH NO-BREAK SPACE
		{"cus_a", "sku_\U000E0041", "items[0].sku", "U+E0041"},             // TAG LATIN CAPITAL LETTER A
		{"cus_a", "sku\u200d1", "items[0].sku", "format characters"},       // ZERO WIDTH JOINER
		{"\u0085", "sku_1", "customer_id", "control characters (found U+0085)"},
		{"\u2028", "sku_1", "customer_id", "line or paragraph separators (found U+2028)"},
		{"   ", "sku_1", "customer_id", "only whitespace"},
	} {
		body := map[string]any{"customer_id": tc.customer, "currency": "USD",
			"items": []map[string]any{{"sku": tc.sku, "quantity": 1, "unit_price": 100}}}
		p := wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), body), http.StatusBadRequest, apperr.EInvalid)
		wantFields(t, p, tc.field)
		if !strings.Contains(p.Errors[0].Reason, tc.reason) || strings.Contains(p.Errors[0].Reason, "required") {
			t.Errorf("customer %q sku %q: reason %q, want one naming %q", tc.customer, tc.sku, p.Errors[0].Reason, tc.reason)
		}
	}
	// Letters of any script stay identifiers.
	body := map[string]any{"customer_id": "cus_Łódź_東京_عربي", "currency": "USD",
		"items": []map[string]any{{"sku": "sku_é", "quantity": 1, "unit_price": 100}}}
	wantStatus(t, do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), body), http.StatusCreated)
}

// TestPaymentMethodRefusesFormatCharacters pays with payment methods that
// hold characters which make one identifier display as another, or only
// whitespace: each is a 400 naming payment_method, nothing is stored under
// the key, and the same key with a clean method then pays. Regression: a
// BiDi override or a whitespace-only method reached the provider and the
// stored attempt (200 PAID).
func TestPaymentMethodRefusesFormatCharacters(t *testing.T) {
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
	key := newKey(t)
	for _, tc := range []struct{ method, reason string }{
		{"pm\u202ex", "U+202E"},
		{"pm_card_visa\u200b", "U+200B"},
		{"   ", "only whitespace"},
	} {
		body := map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": tc.method}
		p := wantProblem(t, doMalformed(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, body), http.StatusBadRequest, apperr.EInvalid)
		wantFields(t, p, "payment_method")
		if !strings.Contains(p.Errors[0].Reason, tc.reason) {
			t.Errorf("payment_method %q: reason %q, want one naming %q", tc.method, p.Errors[0].Reason, tc.reason)
		}
	}
	wantStatus(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, payBody(o, testmode.MethodApproved)), http.StatusOK)
}

// TestPayAmountBeyondTheDocumentedBound pays with an amount outside
// 0–2^53−1 (README "Limits"): a 400 naming amount, on both stores, and no
// stored outcome (the same key with the right amount then pays).
// Regression: 2^53 was a stored 422 mismatch.
func TestPayAmountBeyondTheDocumentedBound(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{})
		o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		key := newKey(t)
		for _, amount := range []int64{order.MaxAmount + 1, -1} {
			body := map[string]any{"amount": amount, "currency": o.Currency, "payment_method": testmode.MethodApproved}
			p := wantProblem(t, doMalformed(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, body), http.StatusBadRequest, apperr.EInvalid)
			wantFields(t, p, "amount")
		}
		r := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, payBody(o, testmode.MethodApproved))
		wantStatus(t, r, http.StatusOK)
	})
}
