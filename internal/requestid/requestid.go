// Package requestid carries the X-Request-Id of an API request from the
// HTTP layer to the provider calls it causes, so that one id names a request
// in orderd's logs and in the provider's. The id is bounded: 1 to MaxLen
// characters of a small charset, so a client cannot put arbitrary bytes, or
// half a megabyte, into a log line.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/base32"
)

// Header is the HTTP header field that carries a request id, both ways.
const Header = "X-Request-Id"

// MaxLen is the longest request id accepted from a client, in bytes.
const MaxLen = 128

// Valid reports whether id may be used as a request id: 1 to MaxLen
// characters, each an ASCII letter or digit or one of "-_.:/+=@". These
// cover UUIDs, ULIDs, W3C trace ids and the ids common proxies generate.
func Valid(id string) bool {
	if len(id) == 0 || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/', c == '+', c == '=', c == '@':
		default:
			return false
		}
	}
	return true
}

// New returns a fresh random request id: 26 characters of base32 (130 bits
// of crypto/rand), lower case.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return enc.EncodeToString(b[:])
}

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

type ctxKey struct{}

// NewContext returns ctx carrying the request id id.
func NewContext(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the request id ctx carries, "" if none.
func FromContext(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}
