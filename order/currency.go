package order

import (
	"github.com/bojanz/currency"
)

// CurrencyDataVersion names the data the currency list comes from: the
// Unicode CLDR release that github.com/bojanz/currency was generated from,
// which tracks the ISO 4217 list of current codes (List One) with each
// code's minor unit.
const CurrencyDataVersion = "CLDR " + currency.CLDRVersion

// CurrencyReason says what is wrong with an ISO 4217 currency code, or ""
// if nothing. A code must be upper case and current in ISO 4217 (List One):
// withdrawn codes (DEM, FRF, HRK, SLL, VEF, ZWL, …) are refused, and codes
// introduced since (VED, SLE, ZWG, …) accepted. Precious metals, the
// testing code XTS and XXX ("no currency") are not currencies an order can
// be in.
func CurrencyReason(c string) string {
	if c == "" {
		return "is required"
	}
	if _, ok := MinorUnits(c); !ok {
		return "must be a current ISO 4217 currency code in upper case, such as USD"
	}
	return ""
}

// MinorUnits returns the minor-unit exponent of the current ISO 4217
// currency c (2 for USD: 2500 minor units are 25.00; 0 for JPY; 3 for KWD),
// and false when c is not a current upper-case code.
func MinorUnits(c string) (int, bool) {
	if len(c) != 3 || c[0] < 'A' || c[0] > 'Z' || c[1] < 'A' || c[1] > 'Z' || c[2] < 'A' || c[2] > 'Z' {
		return 0, false
	}
	d, ok := currency.GetDigits(c)
	if !ok || !currency.IsValid(c) {
		return 0, false
	}
	return int(d), true
}
