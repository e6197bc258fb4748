// Package testmode is what paysim's HTTP server and the in-process
// simulators of package [github.com/orderly/orderly/paysim/simulator] agree
// on, so that a test passes the same payment method or SKU to either and sees
// the same outcome:
//
//   - the test payment methods (MethodApproved, MethodDeclined,
//     MethodInsufficientFunds) and what Decline says about each, decline
//     code and customer-facing message included;
//   - the test SKU SKUOutOfStock and the message OutOfStock gives for it;
//   - the form of the ids both give (NewID: "ch_", "re_" or "sh_" followed by
//     24 hex digits).
//
// Every other non-empty payment method is approved and every other SKU is in
// stock. Faults that only one side simulates are not here: paysim's one-shot
// fault methods and SKUs (paysim.MethodFault503 and the like) and the
// simulator's MethodProviderError stay with their simulator.
//
// The package has no dependencies beyond the standard library, so both
// sides, and tests, may import it.
package testmode
