// Package apperr is Orderly's application error vocabulary: one error type,
// Error, carrying a stable Code, a human-readable message and, for invalid
// input, the list of invalid fields.
//
// The domain (package order), the service and the stores speak these codes;
// only the api package turns a Code into an HTTP status and an RFC 9457
// problem type, in one table. The package imports nothing but the standard
// library.
package apperr
