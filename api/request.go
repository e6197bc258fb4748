package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/intake"
)

// readAll reads the whole request body, at most cfg.MaxBodyBytes. Errors:
// 413 payload_too_large past the limit, 408 request_timeout when the body
// did not arrive within the request deadline (the connection's read
// deadline, admission.go), 400 when it could not be read otherwise. A
// Content-Length past the limit is a 413 before anything is read, so a
// client that sent Expect: 100-continue (RFC 9110 §10.1.1; curl does for
// bodies over 1 MiB) gets the 413 instead of a 100 Continue, and never
// sends the body into a connection the server then closes.
func (s *server) readAll(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		w.Header().Set("Connection", "close")
		return nil, apperr.Errorf(codeTooLarge, "the request body exceeds %d bytes", s.cfg.MaxBodyBytes)
	}
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
