package order

import (
	"fmt"
	"strconv"
	"strings"

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

// MajorUnits formats minor minor units of the current ISO 4217 currency cur
// in its major unit, with as many decimals as the currency has minor-unit
// digits (MinorUnits): 2000 USD is "20.00", 2000 JPY "2000", 2000 KWD
// "2.000", -5 USD "-0.05". It returns false when cur is not a current
// upper-case code.
func MajorUnits(minor int64, cur string) (string, bool) {
	scale, ok := MinorUnits(cur)
	if !ok {
		return "", false
	}
	digits := strconv.FormatInt(minor, 10)
	sign := ""
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	if scale > 0 {
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	return sign + digits, true
}

// DescribeAmount describes minor minor units of cur for a person, in major
// units with the currency and the exact minor units the API speaks in:
// "20.00 USD (2000 minor units)". A code that is not a current ISO 4217
// currency is described as "2000 minor units of XYZ".
func DescribeAmount(minor int64, cur string) string {
	major, ok := MajorUnits(minor, cur)
	if !ok {
		return fmt.Sprintf("%d minor units of %s", minor, cur)
	}
	return fmt.Sprintf("%s %s (%d minor units)", major, cur, minor)
}
