package sqlite

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
)

// TestUnwritableFileIs503 runs the API over an embedded store whose file
// cannot be written, end to end: a create is a retryable 503 with
// Retry-After (never a 500) that stores nothing, and /readyz says the store
// is not ready; once the file is writable again, the same key creates the
// order and /readyz is ready.
func TestUnwritableFileIs503(t *testing.T) {
	for _, fault := range []struct {
		name       string
		on, off    string
		readyzSees bool
	}{
		// A full disk: the file may not grow by a page.
		{"disk full", `PRAGMA max_page_count = %d`, `PRAGMA max_page_count = 1073741823`, false},
		// A file that cannot be written at all (a read-only mount).
		{"read-only", `PRAGMA query_only = 1`, `PRAGMA query_only = 0`, true},
	} {
		t.Run(fault.name, func(t *testing.T) {
			s, err := Open(t.Context(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			s.db.SetMaxOpenConns(1) // the pragmas are per connection
			on := fault.on
			if strings.Contains(on, "%d") {
				var pages int
				if err := s.db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
					t.Fatal(err)
				}
				on = strings.Replace(on, "%d", strconv.Itoa(pages), 1)
			}
			svc := service.New(s, simulator.NewIntentGateway(), simulator.NewWarehouse(), service.Config{})
			srv := httptest.NewServer(api.New(svc, api.Config{APIKeys: map[string]string{"sk_test_key_1": "t1"},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
			t.Cleanup(srv.Close)
			send := func(method, path string) answer {
				t.Helper()
				var body io.Reader
				if method == http.MethodPost {
					body = strings.NewReader(`{"customer_id":"c","currency":"USD","items":[{"sku":"big-` +
						strings.Repeat("x", 60) + `","quantity":1,"unit_price":1}]}`)
				}
				req, _ := http.NewRequest(method, srv.URL+path, body)
				req.Header.Set("Authorization", "Bearer sk_test_key_1")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "k-1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return answer{resp.StatusCode, resp.Header}
			}
			if _, err := s.db.Exec(on); err != nil {
				t.Fatal(err)
			}
			// Fill the last pages so the next create must grow the file.
			var resp answer
			for range 200 {
				if resp = send(http.MethodPost, "/v1/orders"); resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
					break
				}
				// A fresh key for each filler create.
				if _, err := s.db.Exec(`UPDATE idempotency_keys SET key_hash = lower(hex(randomblob(32)))`); err != nil {
					break
				}
			}
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("create on an unwritable file = %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if r := send(http.MethodGet, "/readyz"); fault.readyzSees && r.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("/readyz on an unwritable file = %d, want 503", r.StatusCode)
			}
			if _, err := s.db.Exec(fault.off); err != nil {
				t.Fatal(err)
			}
			if r := send(http.MethodGet, "/readyz"); r.StatusCode != http.StatusOK {
				t.Fatalf("/readyz once writable = %d, want 200", r.StatusCode)
			}
			if r := send(http.MethodPost, "/v1/orders"); r.StatusCode != http.StatusCreated || r.Header.Get("Idempotency-Replayed") != "" {
				t.Fatalf("create once writable = %d (replayed %q), want a fresh 201: the failed one stored nothing",
					r.StatusCode, r.Header.Get("Idempotency-Replayed"))
			}
		})
	}
}

// answer is what a test request got back: its status and headers (the body
// is read and closed by the sender).
type answer struct {
	StatusCode int
	Header     http.Header
}
