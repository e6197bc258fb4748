package fulfillment

import (
	"errors"
	"testing"

	"github.com/orderly/orderly/order"
)

func TestShipmentRequestValidate(t *testing.T) {
	t.Parallel()
	items := []order.Item{{SKU: "sku_mug", Quantity: 1, UnitPrice: 1500}}
	tests := []struct {
		name    string
		req     ShipmentRequest
		wantErr bool
	}{
		{"a shipment", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Items: items}, false},
		{"no idempotency key", ShipmentRequest{OrderID: "ord_1", Items: items}, true},
		{"no items", ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1"}, true},
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
