package api_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
)

func TestListPagination(t *testing.T) {
	t.Parallel()
	const total = 25
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		even, odd := newCustomer(t), newCustomer(t)
		var created, paid, odds []string // oldest first
		for i := range total {
			customer := even
			if i%2 == 1 {
				customer = odd
			}
			o := create(t, env, testenv.KeyA, newKey(t), customer)
			created = append(created, o.ID)
			if customer == odd {
				odds = append(odds, o.ID)
			}
			if i%5 == 0 {
				wantStatus(t, fire(t, env, o, order.EventPay, newKey(t)), http.StatusOK)
				paid = append(paid, o.ID)
			}
		}
		newestFirst := func(ids []string) []string { r := slices.Clone(ids); slices.Reverse(r); return r }

		t.Run("pages of 10 walk every order once, newest first", func(t *testing.T) {
			var got []string
			var sizes []int
			q := url.Values{"limit": {"10"}}
			for {
				p := list(t, env, testenv.KeyA, q)
				sizes = append(sizes, len(p.Data))
				for _, o := range p.Data {
					got = append(got, o.ID)
				}
				if p.NextCursor == "" {
					break
				}
				if len(sizes) > total {
					t.Fatal("pagination does not end")
				}
				q.Set("cursor", p.NextCursor)
			}
			if !slices.Equal(sizes, []int{10, 10, 5}) {
				t.Fatalf("page sizes %v, want [10 10 5] with no cursor after the last", sizes)
			}
			if !slices.Equal(got, newestFirst(created)) {
				t.Fatalf("paged ids\n%v\nwant newest first\n%v", got, newestFirst(created))
			}
		})

		t.Run("the default page holds 20 orders and a cursor", func(t *testing.T) {
			p := list(t, env, testenv.KeyA, nil)
			if len(p.Data) != 20 || p.NextCursor == "" {
				t.Fatalf("default page has %d orders, cursor %q; want 20 and a cursor", len(p.Data), p.NextCursor)
			}
		})

		t.Run("filters select by state and by customer", func(t *testing.T) {
			byState := list(t, env, testenv.KeyA, url.Values{"state": {string(order.Paid)}})
			var got []string
			for _, o := range byState.Data {
				if o.State != order.Paid {
					t.Fatalf("state=PAID listed %s in state %s", o.ID, o.State)
				}
				got = append(got, o.ID)
			}
			if !slices.Equal(got, newestFirst(paid)) {
				t.Fatalf("state=PAID listed %v, want %v", got, newestFirst(paid))
			}
			if ids := ordersOf(t, env, testenv.KeyA, odd); !slices.Equal(ids, newestFirst(odds)) {
				t.Fatalf("customer_id=%s listed %v, want %v", odd, ids, newestFirst(odds))
			}
			both := list(t, env, testenv.KeyA, url.Values{"state": {string(order.Paid)}, "customer_id": {odd}})
			for _, o := range both.Data {
				if o.State != order.Paid || o.CustomerID != odd {
					t.Fatalf("state=PAID&customer_id=%s listed %s (%s, %s)", odd, o.ID, o.State, o.CustomerID)
				}
			}
			want := 0
			for _, id := range paid {
				if slices.Contains(odds, id) {
					want++
				}
			}
			if want == 0 || len(both.Data) != want {
				t.Fatalf("state=PAID&customer_id=%s listed %d orders, want %d", odd, len(both.Data), want)
			}
		})

		t.Run("bad query parameters are a 400 naming them", func(t *testing.T) {
			for _, tc := range []struct {
				query string
				field string
			}{
				{"limit=0", "limit"},
				{"limit=101", "limit"},
				{"limit=ten", "limit"},
				{"cursor=%21%21%21", "cursor"},
				{"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("not_an_order")), "cursor"},
				{"state=SHIPPED", "state"},
			} {
				r := doMalformed(t, env, http.MethodGet, "/v1/orders?"+tc.query, testenv.KeyA, "", nil)
				p := wantProblem(t, r, http.StatusBadRequest, apperr.EInvalid)
				wantFields(t, p, tc.field)
			}
		})
	})
}
