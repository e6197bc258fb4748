package testmode_test

import (
	"regexp"
	"testing"

	"github.com/orderly/orderly/paysim/testmode"
)

func TestDecline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, wantCode, wantMessage string
	}{
		{testmode.MethodApproved, "", ""},
		{"pm_card_mastercard", "", ""},
		{testmode.MethodDeclined, testmode.DeclineCardDeclined, "Your card was declined."},
		{testmode.MethodInsufficientFunds, testmode.DeclineInsufficientFunds, "Your card has insufficient funds."},
		{"", testmode.DeclineInvalidPaymentMethod, "No payment method was given."},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			t.Parallel()
			code, msg := testmode.Decline(tt.method)
			if code != tt.wantCode || msg != tt.wantMessage {
				t.Errorf("Decline(%q) = %q, %q; want %q, %q", tt.method, code, msg, tt.wantCode, tt.wantMessage)
			}
		})
	}
}

func TestOutOfStock(t *testing.T) {
	t.Parallel()
	if got, want := testmode.OutOfStock(testmode.SKUOutOfStock), `SKU "sku_out_of_stock" cannot be shipped`; got != want {
		t.Errorf("OutOfStock(SKUOutOfStock) = %q, want %q", got, want)
	}
	for _, sku := range []string{"sku_mug", "", "sku_out_of_stock_not"} {
		if got := testmode.OutOfStock(sku); got != "" {
			t.Errorf("OutOfStock(%q) = %q, want in stock", sku, got)
		}
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	form := regexp.MustCompile(`^ch_[0-9a-f]{24}$`)
	a, b := testmode.NewID("ch_"), testmode.NewID("ch_")
	if !form.MatchString(a) || !form.MatchString(b) {
		t.Errorf("NewID = %q, %q; want ch_ and 24 hex digits", a, b)
	}
	if a == b {
		t.Errorf("two NewID calls gave the same id %q", a)
	}
}
