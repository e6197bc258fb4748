package order_test

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func TestNewComputesAmountAndInitialState(t *testing.T) {
	o, err := order.New("t1", order.NewOrderInput{
		CustomerID: "cus_1", Currency: "EUR",
		Items: []order.Item{{SKU: "a", Quantity: 2, UnitPrice: 1250}, {SKU: "b", Quantity: 1, UnitPrice: 0}},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	if o.Amount != 2500 || o.State != order.Received || o.Version != 1 || o.TenantID != "t1" {
		t.Errorf("got amount %d state %s version %d tenant %s", o.Amount, o.State, o.Version, o.TenantID)
	}
	if !strings.HasPrefix(o.ID, order.IDPrefix) || len(o.ID) != len(order.IDPrefix)+32 {
		t.Errorf("id %q is not ord_ + 32 hex digits", o.ID)
	}
	if !o.CreatedAt.Equal(now.Truncate(time.Microsecond)) {
		t.Errorf("created_at %v not truncated to µs", o.CreatedAt)
	}
}

func TestNewIDsSortByCreation(t *testing.T) {
	prev := order.NewID()
	for range 1000 {
		id := order.NewID()
		if id <= prev {
			t.Fatalf("%s sorts before the earlier %s", id, prev)
		}
		prev = id
	}
}

func TestNewListsEveryInvalidField(t *testing.T) {
	tests := []struct {
		name string
		in   order.NewOrderInput
		want []string
	}{
		{"empty", order.NewOrderInput{}, []string{"customer_id", "currency", "items"}},
		{"lower-case currency", order.NewOrderInput{CustomerID: "c", Currency: "usd", Items: []order.Item{{SKU: "a", Quantity: 1}}}, []string{"currency"}},
		{"unknown currency", order.NewOrderInput{CustomerID: "c", Currency: "XYZ", Items: []order.Item{{SKU: "a", Quantity: 1}}}, []string{"currency"}},
		{"bad items", order.NewOrderInput{CustomerID: "c", Currency: "USD", Items: []order.Item{{Quantity: 0, UnitPrice: -1}}},
			[]string{"items[0].sku", "items[0].quantity", "items[0].unit_price"}},
		{"amount over 2^53-1", order.NewOrderInput{CustomerID: "c", Currency: "USD", Items: []order.Item{
			{SKU: "a", Quantity: 2, UnitPrice: order.MaxAmount / 2}, {SKU: "b", Quantity: 1, UnitPrice: 2}}}, []string{"amount"}},
		{"line overflows int64", order.NewOrderInput{CustomerID: "c", Currency: "USD", Items: []order.Item{
			{SKU: "a", Quantity: order.MaxQuantity, UnitPrice: order.MaxAmount}}}, []string{"amount"}},
		{"unit price over 2^53-1", order.NewOrderInput{CustomerID: "c", Currency: "USD", Items: []order.Item{
			{SKU: "a", Quantity: 1, UnitPrice: math.MaxInt64}}}, []string{"items[0].unit_price"}},
		{"NUL and invalid UTF-8", order.NewOrderInput{CustomerID: "c\x00x", Currency: "USD", Items: []order.Item{
			{SKU: "a\xff", Quantity: 1}}}, []string{"customer_id", "items[0].sku"}},
		{"blank text", order.NewOrderInput{CustomerID: "  ", Currency: "USD", Items: []order.Item{
			{SKU: "\t", Quantity: 1}}}, []string{"customer_id", "items[0].sku"}},
		{"testing currency", order.NewOrderInput{CustomerID: "c", Currency: "XTS", Items: []order.Item{{SKU: "a", Quantity: 1}}}, []string{"currency"}},
		{"too many items", order.NewOrderInput{CustomerID: "c", Currency: "USD", Items: make([]order.Item, order.MaxItems+1)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := order.New("t", tt.in, now)
			if apperr.ErrorCode(err) != apperr.EInvalid {
				t.Fatalf("err = %v, want EInvalid", err)
			}
			if tt.want == nil {
				return
			}
			var got []string
			for _, f := range err.(*apperr.Error).Fields {
				got = append(got, f.Field)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("fields = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestApplySetsTimestampAndVersion(t *testing.T) {
	o, _ := order.New("t", order.NewOrderInput{CustomerID: "c", Currency: "JPY", Items: []order.Item{{SKU: "a", Quantity: 1, UnitPrice: 500}}}, now)
	p := o.Apply(order.Paid, now.Add(time.Second))
	if p.State != order.Paid || p.Version != 2 || p.PaidAt == nil || o.PaidAt != nil {
		t.Errorf("Apply(PAID) = %+v (original %+v)", p, o)
	}
	f := p.Apply(order.Fulfilled, now.Add(2*time.Second))
	if f.FulfilledAt == nil || f.PaidAt == nil || f.Version != 3 {
		t.Errorf("Apply(FULFILLED) = %+v", f)
	}
}
