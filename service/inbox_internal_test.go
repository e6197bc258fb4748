package service

import "testing"

// TestAttemptKeyOf: every provider key the service derives maps back to its
// attempt's key, so a provider event carrying it finds its attempt.
func TestAttemptKeyOf(t *testing.T) {
	for in, want := range map[string]string{
		"ord_1/pay/3":                               "ord_1/pay/3",
		"ord_1/pay/3/prepare":                       "ord_1/pay/3",
		"ord_1/pay/3/confirm":                       "ord_1/pay/3",
		"ord_1/pay/3/confirm/ab12cd34.7":            "ord_1/pay/3",
		"ord_1/pay/3/prepare/ab12cd34.2":            "ord_1/pay/3",
		"ord_1/refund":                              "ord_1/refund",
		"ord_1/refund/ab12cd34.4":                   "ord_1/refund",
		"ord_1/fulfill":                             "ord_1/fulfill",
		"ord_1/refunds/0123456789abcdef":            "ord_1/refunds/0123456789abcdef",
		"ord_1/refunds/0123456789abcdef/ab12cd34.3": "ord_1/refunds/0123456789abcdef",
	} {
		if got := attemptKeyOf(in); got != want {
			t.Errorf("attemptKeyOf(%q) = %q, want %q", in, got, want)
		}
	}
}
