package payment

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := ChargeRequest{IdempotencyKey: "ord_1/pay", OrderID: "ord_1", Amount: 0, Currency: "USD", PaymentMethod: ""}
	tests := []struct {
		name     string
		validate func() error
		wantErr  bool
	}{
		{"a charge of zero without a payment method", ok.Validate, false},
		{"a charge without an idempotency key", func() error { r := ok; r.IdempotencyKey = ""; return r.Validate() }, true},
		{"a charge without a currency", func() error { r := ok; r.Currency = ""; return r.Validate() }, true},
		{"a charge of a negative amount", func() error { r := ok; r.Amount = -1; return r.Validate() }, true},
		{"a refund", ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 1}.Validate, false},
		{"a refund without an idempotency key", ChargeRefundRequest{ChargeKey: "ord_1/pay"}.Validate, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.validate()
			var pe *ProviderError
			switch {
			case !tt.wantErr && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.wantErr && (!errors.As(err, &pe) || pe.Retryable || IsRetryable(err)):
				t.Errorf("Validate = %v, want a final *ProviderError", err)
			}
		})
	}
}
