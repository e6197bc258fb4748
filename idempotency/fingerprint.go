package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
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
	return f.Parse(r.Body).Fingerprint(r.Method, r.Route, r.PathParams)
}

// Fingerprint returns the fingerprint of the request (method, route, params)
// with body b, exactly as Fingerprinter.Fingerprint computes it for the body
// b was parsed from, without parsing it again. Errors: those of
// Fingerprinter.Fingerprint.
func (b Body) Fingerprint(method, route string, params map[string]string) (string, error) {
	if !b.valid {
		return "", errBodyNotJSON()
	}
	body := b.canonical

	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)

	h := sha256.New()
	writePart(h, []byte(fingerprintVersion))
	writePart(h, []byte(strings.ToUpper(method)))
	writePart(h, []byte(route))
	writePart(h, []byte(strconv.Itoa(len(names))))
	for _, name := range names {
		writePart(h, []byte(name))
		writePart(h, []byte(params[name]))
	}
	writePart(h, body)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])), nil
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

// canonicalBody returns the RFC 8785 form of body with the volatile members
// removed, or an empty slice for an empty or whitespace-only body; errors:
// errBodyNotJSON (see Fingerprint).
func (f Fingerprinter) canonicalBody(body []byte) ([]byte, error) {
	b := f.Parse(body)
	if !b.valid {
		return nil, errBodyNotJSON()
	}
	return b.canonical, nil
}

// StripVolatile returns body without the volatile members f's fingerprint
// ignores, removed at every depth exactly as Fingerprint removes them, so a
// strict decoder and the fingerprint agree on what a request is. A body that
// is not valid RFC 8785 input (malformed, duplicate members) or that has
// no volatile member is returned unchanged, for the decoder to judge.
func (f Fingerprinter) StripVolatile(body []byte) []byte { return f.Parse(body).Decode }

// Body is a request body parsed once, for both its strict decoder and its
// fingerprint (Fingerprinter.Parse).
type Body struct {
	// Decode is what a strict decoder reads: the body without its
	// volatile members (numbers and strings as sent), or the body itself
	// when it has none or is not valid RFC 8785 input (the decoder then
	// reports what is wrong with it).
	Decode []byte
	// canonical is the RFC 8785 form of Decode (empty for an empty body);
	// valid reports whether the body is valid RFC 8785 input, volatile
	// members included.
	canonical []byte
	valid     bool
}

// Parse parses body once: it removes the volatile members at every depth
// (Body.Decode) and canonicalizes the rest (RFC 8785) for Body.Fingerprint.
// Validity is what it was when the whole body was canonicalized: the body
// is one JSON value (RFC 8259) with nothing after it, without duplicate
// member names or invalid Unicode, and every part, the removed members'
// values included, is valid for RFC 8785 (numbers within IEEE 754 double
// precision). Parse never fails; an invalid body's Fingerprint is
// errBodyNotJSON and its Decode the body as sent.
//
// It reads the body once with a streaming tokenizer (jsontext), copying the
// members that stay, and canonicalizes what is left once, with jsontext's
// RFC 8785 canonicalizer (jcs.Transform when f removes no member). The
// result is byte for byte what canonicalizing the body, removing the
// members from a decoded tree, re-encoding and canonicalizing again with
// jcs produced before (both are the RFC 8785 form of the same JSON value):
// fingerprints stored before stay valid (TestFingerprintsStoredBefore,
// FuzzParse against the former implementation).
func (f Fingerprinter) Parse(body []byte) Body {
	trimmed := bytes.Trim(body, jsonWhitespace)
	if len(trimmed) == 0 {
		return Body{Decode: body, canonical: []byte{}, valid: true}
	}
	out := body
	removed, stripped := false, false
	if names := f.VolatileFields; names == nil || len(names) > 0 {
		stripped = true
		s := stripper{names: names, out: make([]byte, 0, len(trimmed))}
		s.dec.Reset(bytes.NewReader(trimmed))
		if err := s.value(); err != nil {
			return Body{Decode: body}
		}
		if _, err := s.dec.ReadToken(); !errors.Is(err, io.EOF) {
			return Body{Decode: body} // trailing data
		}
		if s.removed {
			out, removed = s.out, true
		}
	}
	src := trimmed
	if removed {
		src = out
	}
	var canonical []byte
	if stripped {
		// Every number of src was checked by the stripper, which read
		// all of it; jsontext's canonical form is RFC 8785's.
		v := jsontext.Value(slices.Clone(src))
		if err := v.Canonicalize(); err != nil {
			return Body{Decode: body}
		}
		canonical = v
	} else {
		var err error
		if canonical, err = jcs.Transform(src); err != nil {
			return Body{Decode: body}
		}
	}
	return Body{Decode: out, canonical: canonical, valid: true}
}

// stripper copies a JSON value token by token, leaving out the members
// named in names (DefaultVolatileFields when nil) at every depth.
type stripper struct {
	names   []string
	dec     jsontext.Decoder
	out     []byte
	removed bool
}

// volatile reports whether name is one of s's member names.
func (s *stripper) volatile(name string) bool {
	names := s.names
	if names == nil {
		names = DefaultVolatileFields
	}
	return slices.Contains(names, name)
}

// value copies the next value to s.out, without the volatile members of
// its objects. A removed member's value must be valid for RFC 8785 too.
func (s *stripper) value() error {
	switch s.dec.PeekKind() {
	case '{':
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		s.out = append(s.out, '{')
		first := true
		for s.dec.PeekKind() != '}' {
			tok, err := s.dec.ReadToken()
			if err != nil {
				return err
			}
			name := tok.String()
			if s.volatile(name) {
				v, err := s.dec.ReadValue()
				if err != nil {
					return err
				}
				if _, err := jcs.Transform(v); err != nil {
					return err
				}
				s.removed = true
				continue
			}
			if !first {
				s.out = append(s.out, ',')
			}
			first = false
			if s.out, err = jsontext.AppendQuote(s.out, name); err != nil {
				return err
			}
			s.out = append(s.out, ':')
			if err := s.value(); err != nil {
				return err
			}
		}
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		s.out = append(s.out, '}')
		return nil
	case '[':
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		s.out = append(s.out, '[')
		for i := 0; s.dec.PeekKind() != ']'; i++ {
			if i > 0 {
				s.out = append(s.out, ',')
			}
			if err := s.value(); err != nil {
				return err
			}
		}
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		s.out = append(s.out, ']')
		return nil
	default:
		v, err := s.dec.ReadValue()
		if err != nil {
			return err
		}
		if v.Kind() == '0' {
			// RFC 8785 §3.2.2.3 (I-JSON, RFC 7493 §2.2): a number must
			// be an IEEE 754 double; 1e400 is not valid input.
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				return err
			}
		}
		s.out = append(s.out, v...)
		return nil
	}
}
