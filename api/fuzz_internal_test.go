package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
)

// FuzzReadBody: whatever the body, the strict decoder either accepts it or
// answers a 4xx problem; it never panics and never yields a 500.
func FuzzReadBody(f *testing.F) {
	for _, seed := range []string{
		`{"customer_id":"c","currency":"USD","items":[{"sku":"a","quantity":1,"unit_price":100}]}`,
		`{"customer_id":"c","customer_id":"d"}`,
		`{"items":[{"sku":"a","quantity":1e3}]}`,
		`{"request_id":"x","nonce":1,"currency":"EUR"} {}`,
		`{"amount":9007199254740993}`,
		`[]`, `null`, ``, `{`, "\xff", `{"items":[{"sku":"\u0000"}]}`,
	} {
		f.Add([]byte(seed), "application/json")
	}
	f.Add([]byte(`{}`), "text/plain")
	s := &server{cfg: Config{MaxBodyBytes: 4 << 10}, log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", bytes.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		var in order.NewOrderInput
		_, err := s.readBody(httptest.NewRecorder(), r, &in, true)
		if err == nil {
			return
		}
		oe, ok := err.(*apperr.Error)
		if !ok {
			t.Fatalf("readBody error %T %v, want an *apperr.Error", err, err)
		}
		if st := statusOf(oe.Code); st < 400 || st > 499 {
			t.Fatalf("readBody error %v has status %d, want a 4xx", err, st)
		}
	})
}

// FuzzPreferWait: the Prefer parser never panics and returns a wait from 0
// to an hour; a plain "wait=N" within that range is N seconds.
func FuzzPreferWait(f *testing.F) {
	for _, seed := range []string{"wait=5", "respond-async, wait=10", `wait="3"`, "wait=5;x=y", "wait=-1",
		"wait=99999999999999999999", "WAIT = 7", "wait", "wait=", "handling=lenient"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := preferWait([]string{v})
		if d < 0 || d > time.Hour {
			t.Fatalf("preferWait(%q) = %s, want 0 to 1h", v, d)
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(v, "wait=")); err == nil && strings.HasPrefix(v, "wait=") &&
			strings.Trim(v[len("wait="):], "0123456789") == "" && n <= 3600 {
			if d != time.Duration(n)*time.Second {
				t.Fatalf("preferWait(%q) = %s, want %ds", v, d, n)
			}
		}
	})
}
