package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/intake"
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
// decodes it strictly into v (intake.Decoder.JSON): application/json only
// (415), no unknown members, no duplicate members, no trailing data (400).
// An empty body is a 400 when required, and decodes nothing otherwise. It
// returns the raw body for fingerprinting.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, v any, required bool) ([]byte, error) {
	body, err := s.readAll(w, r)
	if err != nil {
		return nil, err
	}
	if err := checkMedia(r, body); err != nil {
		return nil, err
	}
	if err := s.decoder().JSON(body, v, required); err != nil {
		return nil, err
	}
	return body, nil
}

// checkMedia refuses a non-empty body that is not application/json in
// UTF-8, or that is content-encoded (415).
func checkMedia(r *http.Request, body []byte) error {
	if intake.Empty(body) {
		return nil
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if cs, ok := params["charset"]; err != nil || mt != "application/json" || (ok && !strings.EqualFold(cs, "utf-8")) {
		return apperr.Errorf(codeUnsupportedMedia, "the request body must be application/json in UTF-8")
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return apperr.Errorf(codeUnsupportedMedia, "request bodies must not be content-encoded (got %q)", ce)
	}
	return nil
}

// decoder is the request decoder of the server's policy and fingerprinter.
func (s *server) decoder() intake.Decoder {
	return intake.Decoder{Policy: s.cfg.Policy, Fingerprinter: s.cfg.Fingerprinter}
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

// keyValues returns every value of the key header and its alias.
func keyValues(r *http.Request) []string {
	return append(r.Header.Values(headerKey), r.Header.Values(headerKeyAlias)...)
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
