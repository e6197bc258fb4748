package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
)

// readAll reads the whole request body, at most cfg.MaxBodyBytes. Errors:
// 413 payload_too_large past the limit, 408 request_timeout when the body
// did not arrive within the request deadline (the connection's read
// deadline, admission.go), 400 when it could not be read otherwise.
func (s *server) readAll(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err == nil {
		return body, nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, apperr.Errorf(codeTooLarge, "the request body exceeds %d bytes", tooLarge.Limit)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, apperr.Errorf(codeRequestTimeout, "the request body did not arrive within the request deadline")
	}
	return nil, apperr.Errorf(apperr.EInvalid, "the request body could not be read")
}

// readBody reads the request body (at most cfg.MaxBodyBytes, else 413) and
// decodes it strictly into v: application/json only (415), no unknown
// members, no duplicate members, no trailing data (400). The volatile
// members the fingerprint ignores (request_id, trace_id, …) are accepted
// and dropped at every depth before decoding, as the fingerprint drops them. An empty body is a 400 when
// required, and decodes nothing otherwise. It returns the raw body for
// fingerprinting.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, v any, required bool) ([]byte, error) {
	body, err := s.readAll(w, r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return nil, apperr.Errorf(apperr.EInvalid, "a JSON request body is required")
		}
		return nil, nil
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if cs, ok := params["charset"]; err != nil || mt != "application/json" || (ok && !strings.EqualFold(cs, "utf-8")) {
		return nil, apperr.Errorf(codeUnsupportedMedia, "the request body must be application/json in UTF-8")
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, apperr.Errorf(codeUnsupportedMedia, "request bodies must not be content-encoded (got %q)", ce)
	}
	stripped := s.cfg.Fingerprinter.StripVolatile(body)
	if err := json.Unmarshal(stripped, v, json.RejectUnknownMembers(true)); err != nil {
		return nil, apperr.Errorf(apperr.EInvalid, "the request body is not acceptable JSON: %s", jsonReason(err, stripped))
	}
	return body, nil
}

// jsonReason turns the error of decoding body into a client-facing reason,
// naming the member by its JSON Pointer (RFC 6901) and never a Go type. A
// member of the wrong type is shown with the value sent (at most
// maxShownValue bytes of it): `/amount: expected an integer, got the
// string "12.5"`.
func jsonReason(err error, body []byte) string {
	var se *json.SemanticError
	if errors.As(err, &se) {
		at := string(se.JSONPointer)
		switch {
		case errors.Is(se.Err, json.ErrUnknownName):
			return fmt.Sprintf("unknown member %s", at)
		case se.JSONKind != 0 && se.GoType != nil:
			want := map[reflect.Kind]string{reflect.Int64: "an integer", reflect.String: "a string",
				reflect.Slice: "an array", reflect.Struct: "an object", reflect.Pointer: "a value"}[se.GoType.Kind()]
			if want == "" {
				want = "a different type"
			}
			if at == "" {
				at = "the body"
			}
			got := kindName(se.JSONKind)
			if v, ok := valueAt(body, se.JSONPointer); ok && se.JSONKind != 'n' {
				got += " " + shown(v)
			}
			return fmt.Sprintf("%s: expected %s, got %s", at, want, got)
		}
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		msg := strings.TrimPrefix(syn.Error(), "jsontext: ")
		return msg
	}
	return "malformed JSON"
}

// maxShownValue bounds how much of a value a reason repeats, in bytes.
const maxShownValue = 64

// shown is v's JSON text as sent, cut to maxShownValue bytes (on a rune
// boundary) with "…" when longer.
func shown(v jsontext.Value) string {
	s := string(v)
	if len(s) <= maxShownValue {
		return s
	}
	cut := maxShownValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// valueAt returns the JSON value at ptr in the document body, exactly as
// written, and false when body has no value there.
func valueAt(body []byte, ptr jsontext.Pointer) (jsontext.Value, bool) {
	v := jsontext.Value(body)
	for tok := range ptr.Tokens() {
		switch v.Kind() {
		case '{':
			var members map[string]jsontext.Value
			if json.Unmarshal(v, &members) != nil {
				return nil, false
			}
			m, ok := members[tok]
			if !ok {
				return nil, false
			}
			v = m
		case '[':
			var elems []jsontext.Value
			i, err := strconv.Atoi(tok)
			if json.Unmarshal(v, &elems) != nil || err != nil || i < 0 || i >= len(elems) {
				return nil, false
			}
			v = elems[i]
		default:
			return nil, false
		}
	}
	v = bytes.TrimSpace(v)
	return v, len(v) > 0
}

// kindName names the kind of a JSON value for a reason: "the string".
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "the string"
	case '0':
		return "the number"
	case '{':
		return "the object"
	case '[':
		return "the array"
	case 't', 'f':
		return "the boolean"
	case 'n':
		return "null"
	}
	return "a value"
}

// Header field names of the idempotency protocol.
const (
	headerKey      = "Idempotency-Key"
	headerKeyAlias = "X-Idempotency-Key"
)

// idempotencyHeader returns the raw key header (or its alias), "" if none.
func idempotencyHeader(r *http.Request) string {
	if v := r.Header.Get(headerKey); v != "" {
		return v
	}
	return r.Header.Get(headerKeyAlias)
}

// idempotencyKey returns the request's idempotency key: the parsed header,
// or one derived from the fingerprint under PolicyDerive. Errors: EInvalid
// for a malformed or repeated header, EKeyRequired under PolicyRequire.
func (s *server) idempotencyKey(r *http.Request, route string, params map[string]string, body []byte) (idempotency.Key, error) {
	values := append(r.Header.Values(headerKey), r.Header.Values(headerKeyAlias)...)
	if len(values) > 1 {
		return idempotency.Key{}, &apperr.Error{Code: apperr.EInvalid, Message: "send exactly one Idempotency-Key",
			Fields: []apperr.FieldError{{Field: headerKey, Reason: "must appear once"}}}
	}
	if len(values) == 0 && s.cfg.Policy == idempotency.PolicyOff {
		return idempotency.Key{}, nil
	}
	if len(values) == 0 && s.cfg.Policy == idempotency.PolicyRequire {
		return idempotency.Key{}, apperr.Errorf(apperr.EKeyRequired,
			"this server requires an Idempotency-Key header on %s %s", r.Method, route)
	}
	fp, err := s.cfg.Fingerprinter.Fingerprint(idempotency.Request{
		Method: r.Method, Route: route, PathParams: params, Body: body,
	})
	if err != nil {
		return idempotency.Key{}, err
	}
	if len(values) == 0 {
		return idempotency.Key{Value: idempotency.DerivedKey(fp), Derived: true, Fingerprint: fp}, nil
	}
	k, err := idempotency.ParseKey(values[0])
	if err != nil {
		return idempotency.Key{}, err
	}
	if strings.HasPrefix(k, "derived:") || strings.HasPrefix(k, "anon:") {
		// These namespaces are the server's own keys (derived from a
		// fingerprint, or private); a client key there could shadow them.
		return idempotency.Key{}, &apperr.Error{Code: apperr.EInvalid, Message: "Idempotency-Key must not start with derived: or anon:",
			Fields: []apperr.FieldError{{Field: headerKey, Reason: "uses a namespace reserved by the server"}}}
	}
	return idempotency.Key{Value: k, Fingerprint: fp}, nil
}

// preferWait returns the wait preference of Prefer header fields (RFC 7240
// §4.3, "wait=<delta-seconds>"), 0 if absent or malformed.
func preferWait(values []string) time.Duration {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			// RFC 7240 §2: a preference may carry parameters after ";".
			val, _, _ = strings.Cut(val, ";")
			val = strings.Trim(strings.TrimSpace(val), `"`)
			if val == "" || strings.Trim(val, "0123456789") != "" {
				return 0 // not delta-seconds (RFC 9110 §5.6.7: digits only)
			}
			n, err := strconv.Atoi(val)
			if err != nil || n > 3600 {
				n = 3600 // larger than any cap; the service applies its own
			}
			return time.Duration(n) * time.Second
		}
	}
	return 0
}
