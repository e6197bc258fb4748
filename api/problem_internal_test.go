package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/intake"
)

// TestWriteErrorPastTheRequestDeadline: an error that is the request's own
// deadline (or cancellation), however wrapped, is a 503 with Retry-After,
// never a 500; the same error on a live request is still an internal error.
func TestWriteErrorPastTheRequestDeadline(t *testing.T) {
	t.Parallel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := fmt.Errorf("waiting for the holder: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name       string
		ctx        context.Context
		status     int
		code       apperr.Code
		retryAfter bool
	}{
		{"past its deadline", expired, http.StatusServiceUnavailable, apperr.EUnavailable, true},
		{"within its deadline", context.Background(), http.StatusInternalServerError, apperr.EInternal, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequestWithContext(tc.ctx, http.MethodGet, "/v1/orders", nil)
			writeError(w, r, slog.New(slog.NewTextHandler(io.Discard, nil)), err)
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status || p.Type != ProblemBaseURI+string(tc.code) {
				t.Errorf("answer = %d %s, want %d %s", w.Code, p.Type, tc.status, tc.code)
			}
			if got := w.Header().Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("Retry-After present = %v, want %v", got, tc.retryAfter)
			}
		})
	}
}

// TestRetryAfterIsSpread: a row's Retry-After is its seconds plus up to as
// many again, so refused clients do not all return in the same second.
func TestRetryAfterIsSpread(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		seen[retryAfter(2)] = true
	}
	for v := range seen {
		if v != "2" && v != "3" && v != "4" {
			t.Fatalf("retryAfter(2) = %q, want 2, 3 or 4", v)
		}
	}
	if len(seen) < 2 {
		t.Errorf("retryAfter(2) gave only %v in 200 draws, want a spread", seen)
	}
}

// TestRetryAfterFromTheServer: a Retry-After the server computed (the time
// left on a lease) is sent rounded up and bounded, instead of the table's.
func TestRetryAfterFromTheServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{{29*time.Second + time.Millisecond, "30"}, {10 * time.Minute, "60"}, {time.Millisecond, "1"}} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/orders/x/pay", nil)
		err := &apperr.Error{Code: apperr.EKeyInProgress, Message: "busy", RetryAfter: tc.after}
		writeError(w, r, slog.New(slog.NewTextHandler(io.Discard, nil)), err)
		if got := w.Header().Get("Retry-After"); got != tc.want {
			t.Errorf("Retry-After for %s = %q, want %q", tc.after, got, tc.want)
		}
	}
}

// TestIntakeCodesAreClientErrors: every code the intake refuses a request
// with (intake.Codes, fuzzed by intake's FuzzDecode) is answered with a 4xx,
// so no body, key or operation a client sends is a 500.
func TestIntakeCodesAreClientErrors(t *testing.T) {
	t.Parallel()
	for _, c := range intake.Codes {
		if st := statusOf(c); st < 400 || st > 499 {
			t.Errorf("intake code %q is answered %d, want a 4xx", c, st)
		}
	}
}
