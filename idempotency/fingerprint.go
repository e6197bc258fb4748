package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"

	"github.com/orderly/orderly/apperr"
)

// DefaultVolatileFields lists the JSON member names a zero Fingerprinter
// removes from a request body before fingerprinting it. They carry values a
// client legitimately changes on every retry of the same request (clocks,
// per-attempt and tracing identifiers), so keeping them would make a retry
// look like a different request and turn it into a 422 "key reused" error
// (draft-ietf-httpapi-idempotency-key-header §2.4 leaves the choice of what
// the fingerprint covers to the server).
var DefaultVolatileFields = []string{"client_timestamp", "timestamp", "sent_at", "request_id", "nonce", "trace_id"}

// Request is the part of an HTTP request that its fingerprint covers.
// Route is the route template the request matched, such as
// "/v1/orders/{id}/pay", and PathParams holds the values of the template's
// parameters, such as {"id": "ord_123"}. Body is the raw request body, which
// must be empty or JSON.
type Request struct {
	Method     string
	Route      string
	PathParams map[string]string
	Body       []byte
}

// Fingerprinter computes request fingerprints. VolatileFields names the JSON
// object members removed from the body, at every depth, before it is
// fingerprinted. A nil VolatileFields, as in the zero Fingerprinter, means
// DefaultVolatileFields; an empty non-nil slice means no member is removed.
type Fingerprinter struct {
	VolatileFields []string
}

// fingerprintVersion starts every fingerprint's input, so that a change of
// encoding yields new fingerprints instead of silently colliding with old ones.
const fingerprintVersion = "orderly-fingerprint-v1"

// Fingerprint returns the fingerprint of r: the lowercase hexadecimal SHA-256
// (64 characters) of an unambiguous encoding of
//
//   - the method, upper-cased;
//   - the route template;
//   - the path parameters, sorted by name, each as name and value;
//   - the body in the JSON Canonicalization Scheme (RFC 8785) form, after the
//     volatile members have been removed from every object at every depth.
//
// Each part is written as its length in decimal, a colon and its bytes, and the
// number of path parameters is written before them, so that no two different
// requests share an encoding (("ab", "c") and ("a", "bc") differ).
//
// Canonicalization makes the fingerprint ignore what JSON does not mean: the
// order of object members, insignificant whitespace and the spelling of
// numbers (1000, 1000.0, 1e3 and 10e2 are equal, RFC 8785 §3.2.2.3). It does
// not ignore letter case in strings, array order or types ("1" differs from 1).
// Member names are matched exactly, case included, against VolatileFields.
//
// An empty body, or one of JSON whitespace only, is fingerprinted as the empty
// body, which differs from the empty object {}. A body that is not valid JSON,
// or not valid for RFC 8785 (I-JSON, RFC 7493: duplicate member names, invalid
// Unicode, numbers beyond IEEE 754 double precision such as 1e400), yields an
// *apperr.Error with Code apperr.EInvalid.
func (f Fingerprinter) Fingerprint(r Request) (string, error) {
	body, err := f.canonicalBody(r.Body)
	if err != nil {
		return "", err
	}

	names := make([]string, 0, len(r.PathParams))
	for name := range r.PathParams {
		names = append(names, name)
	}
	sort.Strings(names)

	h := sha256.New()
	writePart(h, []byte(fingerprintVersion))
	writePart(h, []byte(strings.ToUpper(r.Method)))
	writePart(h, []byte(r.Route))
	writePart(h, []byte(strconv.Itoa(len(names))))
	for _, name := range names {
		writePart(h, []byte(name))
		writePart(h, []byte(r.PathParams[name]))
	}
	writePart(h, body)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writePart writes p to w as its decimal length, a colon and its bytes.
// Writes to a hash.Hash never fail.
func writePart(w io.Writer, p []byte) {
	_, _ = io.WriteString(w, strconv.Itoa(len(p)))
	_, _ = io.WriteString(w, ":")
	_, _ = w.Write(p)
}

// DerivedKey returns the idempotency key used for a request that carries no
// Idempotency-Key under PolicyDerive: "derived:" followed by the request's
// fingerprint. Like a client-sent key, the store scopes it by tenant, and it
// is kept for DefaultDerivedKeyTTL only.
func DerivedKey(fingerprint string) string {
	return "derived:" + fingerprint
}

// jsonWhitespace is the insignificant whitespace of JSON (RFC 8259 §2).
const jsonWhitespace = " \t\r\n"

// errBodyNotJSON is the error for a body that cannot be canonicalized.
func errBodyNotJSON() *apperr.Error {
	return &apperr.Error{Code: apperr.EInvalid, Message: "request body is not valid JSON"}
}

// volatileSet returns the set of member names f removes from a body.
func (f Fingerprinter) volatileSet() map[string]struct{} {
	fields := f.VolatileFields
	if fields == nil {
		fields = DefaultVolatileFields
	}
	set := make(map[string]struct{}, len(fields))
	for _, name := range fields {
		set[name] = struct{}{}
	}
	return set
}

// canonicalBody returns the RFC 8785 form of body with the volatile members
// removed, or an empty slice for an empty or whitespace-only body.
//
// The body is first canonicalized as sent, which validates it against RFC
// 8785 (rejecting duplicate member names and invalid Unicode that
// encoding/json would silently accept). When volatile members are to be
// removed, the body is then decoded with encoding/json, keeping numbers as
// their original text (json.Number), the members are deleted, and the result
// is re-encoded and canonicalized again; the canonicalizer normalizes the
// numbers and the string escapes that re-encoding produces.
func (f Fingerprinter) canonicalBody(body []byte) ([]byte, error) {
	body = bytes.Trim(body, jsonWhitespace)
	if len(body) == 0 {
		return []byte{}, nil
	}
	canonical, err := jcs.Transform(body)
	if err != nil {
		return nil, errBodyNotJSON()
	}
	volatile := f.volatileSet()
	if len(volatile) == 0 {
		return canonical, nil
	}

	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errBodyNotJSON()
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errBodyNotJSON()
	}
	if !stripMembers(v, volatile) {
		return canonical, nil
	}
	stripped, err := json.Marshal(v)
	if err != nil {
		return nil, errBodyNotJSON()
	}
	canonical, err = jcs.Transform(stripped)
	if err != nil {
		return nil, errBodyNotJSON()
	}
	return canonical, nil
}

// StripVolatile returns body without the volatile members f's fingerprint
// ignores, removed at every depth exactly as Fingerprint removes them, so a
// strict decoder and the fingerprint agree on what a request is. A body that
// is not valid RFC 8785 input (malformed, duplicate members) or that has
// no volatile member is returned unchanged, for the decoder to judge.
func (f Fingerprinter) StripVolatile(body []byte) []byte {
	volatile := f.volatileSet()
	if len(volatile) == 0 {
		return body
	}
	if _, err := jcs.Transform(bytes.Trim(body, jsonWhitespace)); err != nil {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || !stripMembers(v, volatile) {
		return body
	}
	stripped, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return stripped
}

// stripMembers deletes the members named in names from every object in v, at
// every depth, and reports whether it deleted any.
func stripMembers(v any, names map[string]struct{}) bool {
	removed := false
	switch v := v.(type) {
	case map[string]any:
		for name, child := range v {
			if _, ok := names[name]; ok {
				delete(v, name)
				removed = true
				continue
			}
			if stripMembers(child, names) {
				removed = true
			}
		}
	case []any:
		for _, child := range v {
			if stripMembers(child, names) {
				removed = true
			}
		}
	}
	return removed
}
