package testmode

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Test payment methods. Every other non-empty payment method is approved.
const (
	// MethodApproved is an ordinary approved card, the README's example.
	MethodApproved = "pm_card_visa"
	// MethodDeclined is declined with DeclineCardDeclined.
	MethodDeclined = "pm_card_declined"
	// MethodInsufficientFunds is declined with DeclineInsufficientFunds.
	MethodInsufficientFunds = "pm_card_insufficient_funds"
	// MethodRefundFail is approved, and its charge's refunds succeed and
	// can fail later (paysim: POST /admin/refunds/{id}/fail), as Stripe's
	// refund_fail test card's do (docs.stripe.com/testing#refunds).
	MethodRefundFail = "pm_card_refund_fail"
)

// SKUOutOfStock is the test SKU that is never in stock: a shipment that
// contains it fails for good, and the failure is remembered under the
// shipment's idempotency key. Every other SKU is in stock.
const SKUOutOfStock = "sku_out_of_stock"

// Decline codes, as a provider reports them with a decline.
const (
	// DeclineCardDeclined is the generic decline, of MethodDeclined.
	DeclineCardDeclined = "card_declined"
	// DeclineInsufficientFunds is the decline of MethodInsufficientFunds.
	DeclineInsufficientFunds = "insufficient_funds"
	// DeclineInvalidPaymentMethod is the decline of an empty payment
	// method.
	DeclineInvalidPaymentMethod = "invalid_payment_method"
)

// Decline returns the decline code and customer-facing message of a charge
// paid with method, or two empty strings if the charge is approved. An empty
// method is declined with DeclineInvalidPaymentMethod.
func Decline(method string) (code, message string) {
	switch method {
	case "":
		return DeclineInvalidPaymentMethod, "No payment method was given."
	case MethodDeclined:
		return DeclineCardDeclined, "Your card was declined."
	case MethodInsufficientFunds:
		return DeclineInsufficientFunds, "Your card has insufficient funds."
	}
	return "", ""
}

// OutOfStock returns the message of the final failure of a shipment that
// contains sku, such as `SKU "sku_out_of_stock" cannot be shipped`, or "" if
// sku is in stock.
func OutOfStock(sku string) string {
	if sku != SKUOutOfStock {
		return ""
	}
	return fmt.Sprintf("SKU %q cannot be shipped", sku)
}

// NewID returns prefix followed by 24 random hex digits, the form of every
// charge ("ch_"), refund ("re_") and shipment ("sh_") id.
func NewID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return prefix + hex.EncodeToString(b[:])
}
