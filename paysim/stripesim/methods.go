package stripesim

// Test payment methods, by the ids Stripe's test mode gives them
// (docs.stripe.com/testing: "pm_card_visa", the decline cards "Declined
// payments", the 3-D Secure cards). A method not listed is refused with
// resource_missing, as Stripe refuses an unknown PaymentMethod id.
const (
	MethodVisa       = "pm_card_visa"
	MethodMastercard = "pm_card_mastercard"
	MethodAmex       = "pm_card_amex"
	// MethodDeclined is declined card_declined / generic_decline.
	MethodDeclined = "pm_card_chargeDeclined"
	// MethodInsufficientFunds is declined card_declined / insufficient_funds.
	MethodInsufficientFunds = "pm_card_chargeDeclinedInsufficientFunds"
	// MethodLostCard is declined card_declined / lost_card.
	MethodLostCard = "pm_card_chargeDeclinedLostCard"
	// MethodStolenCard is declined card_declined / stolen_card.
	MethodStolenCard = "pm_card_chargeDeclinedStolenCard"
	// MethodFraudulent is declined card_declined / fraudulent.
	MethodFraudulent = "pm_card_chargeDeclinedFraudulent"
	// MethodExpiredCard is declined expired_card (no decline_code).
	MethodExpiredCard = "pm_card_chargeDeclinedExpiredCard"
	// MethodIncorrectCvc is declined incorrect_cvc.
	MethodIncorrectCvc = "pm_card_chargeDeclinedIncorrectCvc"
	// MethodProcessingError is declined processing_error.
	MethodProcessingError = "pm_card_chargeDeclinedProcessingError"
	// Method3DS2Required leaves the PaymentIntent in requires_action with a
	// redirect_to_url next_action until POST
	// /admin/stripe/payment_intents/{id}/authenticate completes it.
	Method3DS2Required = "pm_card_threeDSecure2Required"
	// MethodAuthenticationRequired behaves as Method3DS2Required.
	MethodAuthenticationRequired = "pm_card_authenticationRequired"
	// MethodUSBankAccount is a bank debit (ACH): the PaymentIntent goes
	// processing (charge pending) until POST
	// /admin/stripe/payment_intents/{id}/settle. The id is paysim's; Stripe's
	// test mode makes ACH payment methods from test account numbers.
	MethodUSBankAccount = "pm_usBankAccount"
	// MethodSEPADebit is a SEPA Direct Debit, processing like
	// MethodUSBankAccount (paysim's id too).
	MethodSEPADebit = "pm_sepaDebit"
	// MethodRefundFail is Stripe's test card whose charge succeeds and
	// whose refunds begin as succeeded and fail later
	// (docs.stripe.com/testing#refunds): here when POST
	// /admin/stripe/refunds/{id}/fail says so, which sets the refund
	// failed (failure_reason expired_or_canceled_card), gives its amount
	// back to the charge's unrefunded amount and sends
	// charge.refund.updated, refund.updated and refund.failed.
	MethodRefundFail = "pm_card_refundFail"
)

// Paysim-only card methods that succeed like pm_card_visa but inject one
// fault into the FIRST confirmation of a PaymentIntent (remembered on the
// PaymentIntent, so the fault fires once even across restarts), so that a
// client that only passes a payment method along can trigger them.
const (
	// MethodFaultCommit500 commits the payment, saves a 500 under the key
	// and answers it (every replay answers the same 500).
	MethodFaultCommit500 = "pm_card_paysim_commit500"
	// MethodFaultDropAfterCommit commits the payment, saves its answer and
	// closes the connection without answering.
	MethodFaultDropAfterCommit = "pm_card_paysim_dropAfterCommit"
	// MethodFaultError saves and answers a 500 before anything moved.
	MethodFaultError = "pm_card_paysim_error"
	// MethodFaultTimeout holds the request, then closes the connection
	// having committed and saved nothing.
	MethodFaultTimeout = "pm_card_paysim_timeout"
)

// methodKind is what a payment method does on confirmation.
type methodKind int

const (
	kindCard methodKind = iota
	kindDecline
	kind3DS
	kindBankDebit
)

type method struct {
	kind        methodKind
	code        string // error.code of a decline
	declineCode string // error.decline_code of a decline ("" for none)
	message     string
	fault       faultKind // one-shot fault of the first confirmation
	typ         string    // payment_method_types member
}

var methods = map[string]method{
	MethodVisa:                            {kind: kindCard, typ: "card"},
	MethodRefundFail:                      {kind: kindCard, typ: "card"},
	MethodMastercard:                      {kind: kindCard, typ: "card"},
	MethodAmex:                            {kind: kindCard, typ: "card"},
	"pm_card_visa_debit":                  {kind: kindCard, typ: "card"},
	MethodDeclined:                        {kind: kindDecline, code: "card_declined", declineCode: "generic_decline", message: "Your card was declined.", typ: "card"},
	MethodInsufficientFunds:               {kind: kindDecline, code: "card_declined", declineCode: "insufficient_funds", message: "Your card has insufficient funds.", typ: "card"},
	MethodLostCard:                        {kind: kindDecline, code: "card_declined", declineCode: "lost_card", message: "Your card was declined.", typ: "card"},
	"pm_card_visa_chargeDeclinedLostCard": {kind: kindDecline, code: "card_declined", declineCode: "lost_card", message: "Your card was declined.", typ: "card"},
	MethodStolenCard:                      {kind: kindDecline, code: "card_declined", declineCode: "stolen_card", message: "Your card was declined.", typ: "card"},
	MethodFraudulent:                      {kind: kindDecline, code: "card_declined", declineCode: "fraudulent", message: "Your card was declined.", typ: "card"},
	MethodExpiredCard:                     {kind: kindDecline, code: "expired_card", message: "Your card has expired.", typ: "card"},
	MethodIncorrectCvc:                    {kind: kindDecline, code: "incorrect_cvc", message: "Your card's security code is incorrect.", typ: "card"},
	MethodProcessingError:                 {kind: kindDecline, code: "processing_error", message: "An error occurred while processing your card. Try again in a little bit.", typ: "card"},
	Method3DS2Required:                    {kind: kind3DS, typ: "card"},
	MethodAuthenticationRequired:          {kind: kind3DS, typ: "card"},
	MethodUSBankAccount:                   {kind: kindBankDebit, typ: "us_bank_account"},
	MethodSEPADebit:                       {kind: kindBankDebit, typ: "sepa_debit"},
	MethodFaultCommit500:                  {kind: kindCard, fault: faultCommit500, typ: "card"},
	MethodFaultDropAfterCommit:            {kind: kindCard, fault: faultDrop, typ: "card"},
	MethodFaultError:                      {kind: kindCard, fault: faultError, typ: "card"},
	MethodFaultTimeout:                    {kind: kindCard, fault: faultTimeout, typ: "card"},
	// paysim's native test names (paysim/testmode, paysim.MethodFault*),
	// so that harnesses written for the native API (orderstorm) run
	// unchanged in Stripe mode.
	"pm_card_declined":           {kind: kindDecline, code: "card_declined", declineCode: "generic_decline", message: "Your card was declined.", typ: "card"},
	"pm_card_insufficient_funds": {kind: kindDecline, code: "card_declined", declineCode: "insufficient_funds", message: "Your card has insufficient funds.", typ: "card"},
	"pm_fault_drop_after_commit": {kind: kindCard, fault: faultDrop, typ: "card"},
	"pm_fault_503":               {kind: kindCard, fault: faultError, typ: "card"},
	"pm_fault_timeout":           {kind: kindCard, fault: faultTimeout, typ: "card"},
	"pm_fault_latency":           {kind: kindCard, typ: "card"},
}
