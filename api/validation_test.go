package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

func TestBadInputNeverMutates(t *testing.T) {
	t.Parallel()
	const valid = `{"customer_id":"cus_1","currency":"USD","items":[{"sku":"sku_book","quantity":2,"unit_price":1250}]}`
	cases := []struct {
		name        string
		body        string
		contentType string
		status      int
		code        apperr.Code
		fields      []string // invalid fields the problem must list, if any
	}{
		{name: "a body over the size limit", status: http.StatusRequestEntityTooLarge,
			body: `{"customer_id":"` + strings.Repeat("x", api.DefaultMaxBodyBytes) + `"}`, code: "payload_too_large"},
		{name: "a text/plain body", body: valid, contentType: "text/plain", status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "a body without Content-Type", body: valid, contentType: "-", status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "an empty body", body: "", status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "malformed JSON", body: `{"customer_id":"cus_1",`, status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "a JSON array", body: `[` + valid + `]`, status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "an unknown member", body: strings.Replace(valid, `{`, `{"colour":"red",`, 1), status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "a duplicate member", body: strings.Replace(valid, `{`, `{"customer_id":"cus_2",`, 1), status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "trailing data", body: valid + ` {}`, status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "a quantity of the wrong type", body: strings.Replace(valid, `"quantity":2`, `"quantity":"2"`, 1), status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "a fractional quantity", body: strings.Replace(valid, `"quantity":2`, `"quantity":2.5`, 1), status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "a numeric customer id", body: strings.Replace(valid, `"cus_1"`, `42`, 1), status: http.StatusBadRequest, code: apperr.EInvalid},
		{name: "no fields at all", body: `{}`, status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"customer_id", "currency", "items"}},
		{name: "a quantity of zero", body: strings.Replace(valid, `"quantity":2`, `"quantity":0`, 1), status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"items[0].quantity"}},
		{name: "a negative unit price", body: strings.Replace(valid, `"unit_price":1250`, `"unit_price":-1`, 1), status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"items[0].unit_price"}},
		{name: "a lower-case currency", body: strings.Replace(valid, `"USD"`, `"usd"`, 1), status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"currency"}},
		{name: "an unknown currency", body: strings.Replace(valid, `"USD"`, `"ABC"`, 1), status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"currency"}},
		{name: "no items", body: `{"customer_id":"cus_1","currency":"USD","items":[]}`, status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"items"}},
		{name: "an empty sku", body: strings.Replace(valid, `"sku_book"`, `""`, 1), status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"items[0].sku"}},
		{name: "no unit price (never defaulted to 0)", body: strings.Replace(valid, `,"unit_price":1250`, ``, 1), status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items[0].unit_price"}},
		{name: "a null unit price", body: strings.Replace(valid, `"unit_price":1250`, `"unit_price":null`, 1), status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items[0].unit_price"}},
		{name: "a null quantity", body: strings.Replace(valid, `"quantity":2`, `"quantity":null`, 1), status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items[0].quantity"}},
		{name: "no quantity", body: strings.Replace(valid, `"quantity":2,`, ``, 1), status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items[0].quantity"}},
		{name: "a null sku", body: strings.Replace(valid, `"sku_book"`, `null`, 1), status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items[0].sku"}},
		{name: "a null item", body: `{"customer_id":"cus_1","currency":"USD","items":[null]}`, status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items[0].sku", "items[0].quantity", "items[0].unit_price"}},
		{name: "null items", body: `{"customer_id":"cus_1","currency":"USD","items":null}`, status: http.StatusBadRequest,
			code: apperr.EInvalid, fields: []string{"items"}},
		{name: "a null currency and customer", body: `{"customer_id":null,"currency":null,"items":[{"sku":"a","quantity":1,"unit_price":1}]}`,
			status: http.StatusBadRequest, code: apperr.EInvalid, fields: []string{"customer_id", "currency"}},
		{name: "a withdrawn currency (HRK)", body: strings.Replace(valid, `"USD"`, `"HRK"`, 1), status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"currency"}},
		{name: "an amount that overflows int64", status: http.StatusBadRequest, code: apperr.EInvalid, fields: []string{"amount"},
			body: `{"customer_id":"cus_1","currency":"USD","items":[` +
				`{"sku":"a","quantity":1000000,"unit_price":5000000000000},` +
				`{"sku":"b","quantity":1000000,"unit_price":5000000000000}]}`},
		{name: "several bad fields at once", status: http.StatusBadRequest, code: apperr.EInvalid,
			fields: []string{"currency", "items[0].quantity", "items[1].unit_price"},
			body: `{"customer_id":"cus_1","currency":"usd","items":[` +
				`{"sku":"a","quantity":0,"unit_price":1},{"sku":"b","quantity":1,"unit_price":-5}]}`},
	}
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		for _, tc := range cases {
			t.Run("create with "+tc.name+" is rejected and not stored", func(t *testing.T) {
				before := len(ordersOf(t, env, testenv.KeyA, ""))
				key := newKey(t)
				r := exchange(t, env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA,
					IdemKey: key, Body: tc.body, ContentType: tc.contentType, Malformed: true})
				p := wantProblem(t, r, tc.status, tc.code)
				if tc.fields != nil {
					wantFields(t, p, tc.fields...)
				}
				if n := len(ordersOf(t, env, testenv.KeyA, "")); n != before {
					t.Fatalf("the tenant has %d orders after a rejected create, want %d", n, before)
				}

				create(t, env, testenv.KeyA, key, newCustomer(t)) // a fresh 201, not a replay
			})
		}

		t.Run("pay with bad input neither charges nor is stored", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			for _, bad := range []struct {
				name   string
				body   any
				fields []string
			}{
				{"an unknown member", `{"amount":2500,"currency":"USD","payment_method":"pm_card_visa","tip":1}`, nil},
				{"no payment method", map[string]any{"amount": o.Amount, "currency": o.Currency}, []string{"payment_method"}},
				{"a null amount", map[string]any{"amount": nil, "currency": o.Currency, "payment_method": "pm_card_visa"}, []string{"amount"}},
				{"no amount", map[string]any{"currency": o.Currency, "payment_method": "pm_card_visa"}, []string{"amount"}},
				{"a null currency", map[string]any{"amount": o.Amount, "currency": nil, "payment_method": "pm_card_visa"}, []string{"currency"}},
				{"a null payment method", map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": nil}, []string{"payment_method"}},

				{"no body", nil, nil},
			} {
				key, calls := newKey(t), env.Gateway.Calls()
				before := get(t, env, testenv.KeyA, o.ID)
				r := doMalformed(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, bad.body)
				p := wantProblem(t, r, http.StatusBadRequest, apperr.EInvalid)
				if bad.fields != nil {
					wantFields(t, p, bad.fields...)
				}
				if env.Gateway.Calls() != calls {
					t.Fatalf("pay with %s reached the payment provider", bad.name)
				}
				if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || got.Version != before.Version {
					t.Fatalf("pay with %s changed the order to %s v%d (was v%d)", bad.name, got.State, got.Version, before.Version)
				}
				// The key was not stored: the same key with a (declined) valid
				// body runs afresh. A decline moves the version on.
				r = do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, payBody(o, testmode.MethodDeclined))
				if wantProblem(t, r, http.StatusPaymentRequired, apperr.EDeclined); r.replayed() {
					t.Fatalf("the key of a pay with %s was stored", bad.name)
				}
			}
		})

		t.Run("fulfil and cancel with a body other than {} are rejected", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			for _, ev := range []order.Event{order.EventFulfill, order.EventCancel} {
				r := doMalformed(t, env, http.MethodPost, eventPath(o.ID, ev), testenv.KeyA, newKey(t), `{"reason":"changed my mind"}`)
				wantProblem(t, r, http.StatusBadRequest, apperr.EInvalid)
			}
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received {
				t.Fatalf("order is %s, want RCVD", got.State)
			}
			wantStatus(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventCancel), testenv.KeyA, newKey(t), `{}`), http.StatusOK)
		})
	})
}

// TestOversizedBodyWithExpectContinue: a request whose Content-Length is
// past the body limit and that waits for 100 Continue (curl's default
// above 1 MiB) is answered 413 payload_too_large problem+json at once,
// never 100 Continue (found by a new-user trial: the client got a 100,
// sent its body, and the server's close reset the connection before any
// answer).
func TestOversizedBodyWithExpectContinue(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	for _, path := range []string{"/v1/orders", "/v1/orders/ord_00000000000000000000000000000000/refunds"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(env.Server.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIdempotency-Key: big-1\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, testenv.KeyA, api.DefaultMaxBodyBytes+1)
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // a hang becomes a failure
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer to an oversized body's headers: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(b), "payload_too_large") {
			t.Fatalf("%s: oversized body with Expect: 100-continue answered %d %s %s, want a 413 payload_too_large problem",
				path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
}
