// Package order holds Orderly's domain: orders, their line items, states and
// events, and input validation. Invalid input is an *apperr.Error with code
// apperr.EInvalid listing each bad field.
//
// The package imports neither net/http nor any SQL driver. Amounts are int64
// in minor currency units (cents for USD, yen for JPY); currencies are
// ISO 4217 alphabetic codes.
package order
