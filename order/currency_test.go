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

func TestMajorUnitsAndDescribeAmount(t *testing.T) {
	for _, tc := range []struct {
		minor      int64
		cur, major string
	}{
		{2000, "USD", "20.00"}, {5, "USD", "0.05"}, {0, "USD", "0.00"}, {-5, "USD", "-0.05"},
		{2000, "JPY", "2000"}, {2000, "KWD", "2.000"}, {12345, "CLF", "1.2345"},
		{order.MaxAmount, "USD", "90071992547409.91"},
	} {
		if got, ok := order.MajorUnits(tc.minor, tc.cur); !ok || got != tc.major {
			t.Errorf("MajorUnits(%d, %s) = %q, %v; want %q", tc.minor, tc.cur, got, ok, tc.major)
		}
	}
	if _, ok := order.MajorUnits(2000, "HRK"); ok {
		t.Error("MajorUnits formats HRK, a withdrawn code")
	}
	if got, want := order.DescribeAmount(2000, "USD"), "20.00 USD (2000 minor units)"; got != want {
		t.Errorf("DescribeAmount(2000, USD) = %q, want %q", got, want)
	}
	if got, want := order.DescribeAmount(2000, "JPY"), "2000 JPY (2000 minor units)"; got != want {
		t.Errorf("DescribeAmount(2000, JPY) = %q, want %q", got, want)
	}
	if got, want := order.DescribeAmount(2000, "HRK"), "2000 minor units of HRK"; got != want {
		t.Errorf("DescribeAmount(2000, HRK) = %q, want %q", got, want)
	}
}
