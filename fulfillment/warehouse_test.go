package fulfillment

import (
	"errors"
	"strings"
	"testing"

	"github.com/orderly/orderly/order"
)

func TestShipmentRequestValidate(t *testing.T) {
	t.Parallel()
	items := []order.Item{{SKU: "sku_mug", Quantity: 1, UnitPrice: 1500}}
	ref := Reference{OrderID: "ord_1", Key: "ord_1/fulfill"}
	tests := []struct {
		name    string
		req     ShipmentRequest
		wantErr bool
	}{
		{"a shipment", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Reference: ref, Items: items}, false},
		{"no idempotency key", ShipmentRequest{OrderID: "ord_1", Reference: ref, Items: items}, true},
		{"idempotency key too long", ShipmentRequest{IdempotencyKey: strings.Repeat("k", MaxKeyLen+1), OrderID: "ord_1", Reference: ref, Items: items}, true},
		{"no order id", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", Reference: Reference{Key: ref.Key}, Items: items}, true},
		{"no reference", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Items: items}, true},
		{"reference key too long", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1",
			Reference: Reference{OrderID: "ord_1", Key: strings.Repeat("k", MaxKeyLen+1)}, Items: items}, true},
		{"reference of another order", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1",
			Reference: Reference{OrderID: "ord_2", Key: ref.Key}, Items: items}, true},
		{"no items", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Reference: ref}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.req.Validate()
			var we *WarehouseError
			switch {
			case !tt.wantErr && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.wantErr && (!errors.As(err, &we) || we.Retryable || IsRetryable(err)):
				t.Errorf("Validate = %v, want a final *WarehouseError", err)
			}
		})
	}
}

func TestReference(t *testing.T) {
	t.Parallel()
	r := Reference{OrderID: "ord_1", Key: "ord_1/fulfill"}
	if r.IsZero() || !(Reference{}).IsZero() {
		t.Errorf("IsZero: %v for %v, %v for the zero Reference", r.IsZero(), r, (Reference{}).IsZero())
	}
	if got, want := r.String(), "ord_1/fulfill (order ord_1)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
