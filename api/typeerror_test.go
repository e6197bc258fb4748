package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// TestTypeErrorsShowTheValue: a member of the wrong type is a 400 whose
// detail names the member, the type it must have and the value sent, so a
// client sees at once that "12.5" went as a string.
func TestTypeErrorsShowTheValue(t *testing.T) {
	t.Parallel()
	const valid = `{"customer_id":"cus_1","currency":"USD","items":[{"sku":"sku_book","quantity":2,"unit_price":1250}]}`
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	o := orderIn(t, env, order.Received)
	long := strings.Repeat("9", 100)
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"a string amount", eventPath(o.ID, order.EventPay),
			`{"amount":"12.5","currency":"USD","payment_method":"` + testmode.MethodApproved + `"}`,
			`/amount: expected an integer, got the string "12.5"`},
		{"a fractional amount", eventPath(o.ID, order.EventPay),
			`{"amount":12.5,"currency":"USD","payment_method":"` + testmode.MethodApproved + `"}`,
			`/amount: expected an integer, got the number 12.5`},
		{"a string quantity in an item", "/v1/orders", strings.Replace(valid, `"quantity":2`, `"quantity":"2"`, 1),
			`/items/0/quantity: expected an integer, got the string "2"`},
		{"a numeric currency", "/v1/orders", strings.Replace(valid, `"USD"`, `840`, 1),
			`/currency: expected a string, got the number 840`},
		{"a boolean unit price", "/v1/orders", strings.Replace(valid, `1250`, `true`, 1),
			`/items/0/unit_price: expected an integer, got the boolean true`},
		{"an object for items", "/v1/orders", strings.Replace(valid, `[{"sku":"sku_book","quantity":2,"unit_price":1250}]`, `{"sku":"x"}`, 1),
			`/items: expected an array, got the object {"sku":"x"}`},
		{"a long value is cut", "/v1/orders", strings.Replace(valid, `"quantity":2`, `"quantity":"`+long+`"`, 1),
			`/items/0/quantity: expected an integer, got the string "` + long[:63] + `…`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, doMalformed(t, env, http.MethodPost, tc.path, testenv.KeyA, newKey(t), tc.body),
				http.StatusBadRequest, apperr.EInvalid)
			if !strings.Contains(p.Detail, tc.want) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tc.want)
			}
		})
	}
}
