package payment

import (
	"errors"
	"strings"
	"testing"
)

func TestSeamValidate(t *testing.T) {
	t.Parallel()
	ref := Reference{OrderID: "ord_1", Key: "ord_1/pay/1"}
	prep := PrepareRequest{IdempotencyKey: "ord_1/pay/1/prepare", Reference: ref, Amount: 4200, Currency: "USD"}
	conf := ConfirmRequest{IdempotencyKey: "ord_1/pay/1/confirm", IntentID: "pi_1", PaymentMethod: "pm_card_visa", Reference: ref}
	ref2 := RefundRequest{IdempotencyKey: "ord_1/refund", IntentID: "pi_1", Amount: 4200, Reference: Reference{OrderID: "ord_1", Key: "ord_1/refund"}}
	canc := CancelRequest{IdempotencyKey: "ord_1/cancel", IntentID: "pi_1"}
	capt := CaptureRequest{IdempotencyKey: "ord_1/capture", IntentID: "pi_1", Amount: 4200, Reference: ref}
	long := strings.Repeat("k", MaxIdempotencyKeyLen+1)
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"prepare", prep.Validate(), false},
		{"prepare of zero", func() error { r := prep; r.Amount = 0; return r.Validate() }(), false},
		{"prepare without key", func() error { r := prep; r.IdempotencyKey = ""; return r.Validate() }(), true},
		{"prepare with a key of 256", func() error { r := prep; r.IdempotencyKey = long; return r.Validate() }(), true},
		{"prepare with a key of 255", func() error { r := prep; r.IdempotencyKey = long[1:]; return r.Validate() }(), false},
		{"prepare without reference", func() error { r := prep; r.Reference = Reference{}; return r.Validate() }(), true},
		{"prepare without currency", func() error { r := prep; r.Currency = ""; return r.Validate() }(), true},
		{"prepare of a negative amount", func() error { r := prep; r.Amount = -1; return r.Validate() }(), true},
		{"confirm", conf.Validate(), false},
		{"confirm without intent", func() error { r := conf; r.IntentID = ""; return r.Validate() }(), true},
		{"refund", ref2.Validate(), false},
		{"refund of zero", func() error { r := ref2; r.Amount = 0; return r.Validate() }(), true},
		{"refund without intent", func() error { r := ref2; r.IntentID = ""; return r.Validate() }(), true},
		{"prepare for a manual capture", func() error { r := prep; r.CaptureMode = CaptureManual; return r.Validate() }(), false},
		{"prepare for an automatic capture", func() error { r := prep; r.CaptureMode = CaptureAutomatic; return r.Validate() }(), false},
		{"prepare with another capture mode", func() error { r := prep; r.CaptureMode = "later"; return r.Validate() }(), true},
		{"capture", capt.Validate(), false},
		{"capture of zero (never defaulted)", func() error { r := capt; r.Amount = 0; return r.Validate() }(), true},
		{"capture of a negative amount", func() error { r := capt; r.Amount = -1; return r.Validate() }(), true},
		{"capture without intent", func() error { r := capt; r.IntentID = ""; return r.Validate() }(), true},
		{"capture without key", func() error { r := capt; r.IdempotencyKey = ""; return r.Validate() }(), true},
		{"cancel", canc.Validate(), false},
		{"cancel without key", func() error { r := canc; r.IdempotencyKey = ""; return r.Validate() }(), true},
	}
	for _, tt := range tests {
		var pe *ProviderError
		switch {
		case !tt.wantErr && tt.err != nil:
			t.Errorf("%s: Validate = %v, want nil", tt.name, tt.err)
		case tt.wantErr && (!errors.As(tt.err, &pe) || IsRetryable(tt.err)):
			t.Errorf("%s: Validate = %v, want a final *ProviderError", tt.name, tt.err)
		}
	}
}

func TestSeamEnums(t *testing.T) {
	t.Parallel()
	for _, s := range []IntentStatus{IntentRequiresPaymentMethod, IntentRequiresConfirmation, IntentRequiresAction,
		IntentProcessing, IntentRequiresCapture, IntentSucceeded, IntentCanceled} {
		if !s.Valid() {
			t.Errorf("%q is not Valid", s)
		}
	}
	if IntentStatus("captured").Valid() || ProviderEventType("charge.succeeded").Valid() {
		t.Error("an unknown status or event type is Valid")
	}
	if got := (&ProviderError{Retryable: true, Code: "idempotency_key_in_use"}).Error(); got != "payment: provider error (retryable, idempotency_key_in_use)" {
		t.Errorf("Error() = %q", got)
	}
}
