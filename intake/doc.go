// Package intake turns what a transport received — a tenant, an operation,
// an order id, the idempotency key values and the raw body — into a service
// call: strict JSON decoding, validation of every member, and the request's
// fingerprint. It is the one place both transports call: the HTTP API
// (package api) and the NATS command consumer (package natsbus). A command
// and an HTTP request with one key and one body are therefore one request
// to the idempotency ledger, decoded and refused with the same reasons.
//
// Errors are *apperr.Error (EInvalid naming the member, EKeyRequired); the
// transport maps them (package api's one table).
package intake

import "github.com/orderly/orderly/apperr"

// Codes are the codes of the errors the intake refuses a request with: the
// transports answer each as a client error (package api maps them to 400
// and 404; its tests check that each is a 4xx).
var Codes = []apperr.Code{apperr.EInvalid, apperr.EKeyRequired, apperr.ENotFound}
