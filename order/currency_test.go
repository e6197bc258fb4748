package order_test

import (
	"testing"

	"github.com/orderly/orderly/order"
)

func TestCurrencyIsCurrentISO4217(t *testing.T) {
	for _, c := range []string{"USD", "EUR", "JPY", "VES", "VED", "SLE", "ZWG", "MRU", "UYW", "XOF", "XAF"} {
		if reason := order.CurrencyReason(c); reason != "" {
			t.Errorf("CurrencyReason(%q) = %q, want current", c, reason)
		}
	}
	for _, c := range []string{"DEM", "FRF", "HRK", "SLL", "VEF", "ZWL", "MRO", "XAU", "XTS", "XXX", "usd", "US", "USDD", ""} {
		if order.CurrencyReason(c) == "" {
			t.Errorf("CurrencyReason(%q) accepts a code that is not a current ISO 4217 currency", c)
		}
	}
}

func TestMinorUnits(t *testing.T) {
	for c, want := range map[string]int{"USD": 2, "JPY": 0, "KWD": 3, "CLF": 4, "VES": 2, "XOF": 0} {
		if got, ok := order.MinorUnits(c); !ok || got != want {
			t.Errorf("MinorUnits(%q) = %d, %v; want %d", c, got, ok, want)
		}
	}
	if _, ok := order.MinorUnits("HRK"); ok {
		t.Error("MinorUnits(HRK) is known; HRK was withdrawn in 2023")
	}
}
