package api_test

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/requestid"
	"github.com/orderly/orderly/internal/testenv"
)

// logged returns a logger at debug level and the buffer it writes to.
func logged() (*slog.Logger, *testenv.SyncBuffer) {
	buf := &testenv.SyncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func TestTwoAuthorizationHeadersAre400(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	customer := newCustomer(t)
	for _, second := range []string{"Bearer " + testenv.KeyB, "Bearer sk_test_unknown", "Bearer " + testenv.KeyA} {
		r := exchange(t, env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA, IdemKey: newKey(t),
			Body: orderBody(customer), Header: http.Header{"Authorization": {second}}})
		p := wantProblem(t, r, http.StatusBadRequest, apperr.EInvalid)
		wantFields(t, p, "Authorization")
	}
	wantOrders(t, env, testenv.KeyA, customer)
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	logger, logs := logged()
	env := testenv.New(t, testenv.SQLite, testenv.Options{Logger: logger})
	get := func(ids ...string) reply {
		t.Helper()
		h := http.Header{}
		for _, id := range ids {
			h.Add(requestid.Header, id)
		}
		return exchange(t, env, call{Method: http.MethodGet, Path: "/v1/orders?limit=1", APIKey: testenv.KeyA, Header: h})
	}

	t.Run("a valid id is echoed and logged", func(t *testing.T) {
		r := get("req-abc.123")
		if got := r.Header.Get(requestid.Header); got != "req-abc.123" {
			t.Fatalf("X-Request-Id = %q, want the client's", got)
		}
		if !strings.Contains(logs.String(), `"request_id":"req-abc.123"`) {
			t.Errorf("the request's log line does not carry its id:\n%s", logs)
		}
	})
	t.Run("an absent id is generated", func(t *testing.T) {
		a, b := get().Header.Get(requestid.Header), get().Header.Get(requestid.Header)
		if !requestid.Valid(a) || !requestid.Valid(b) || a == b {
			t.Errorf("generated ids %q and %q, want two different valid ids", a, b)
		}
	})
	for name, ids := range map[string][]string{
		"too long":     {strings.Repeat("x", 500<<10)},
		"bad charset":  {`evil" injected="1`},
		"sent twice":   {"a1", "a2"},
		"one too many": {strings.Repeat("y", requestid.MaxLen+1)},
	} {
		t.Run("an id "+name+" is replaced by a generated one", func(t *testing.T) {
			r := get(ids...)
			got := r.Header.Get(requestid.Header)
			if !requestid.Valid(got) || len(got) != 26 {
				t.Errorf("X-Request-Id = %.40q, want a generated id", got)
			}
			for _, line := range strings.Split(logs.String(), "\n") {
				if len(line) > 4096 {
					t.Fatalf("a log line of %d bytes", len(line))
				}
			}
			if strings.Contains(logs.String(), "injected") {
				t.Errorf("the client's id reached the log:\n%s", logs)
			}
		})
	}
}

func TestMalformedQueryIs400(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	for _, tc := range []struct {
		query  string
		fields []string
	}{
		{"cursor=%%%", nil},
		{"limit=%zz", nil},
		{"limit=1&limit=2", []string{"limit"}},
		{"state=RCVD&cursor=a&state=PAID&cursor=b", []string{"cursor", "state"}},
	} {
		r := do(t, env, http.MethodGet, "/v1/orders?"+tc.query, testenv.KeyA, "", nil)
		p := wantProblem(t, r, http.StatusBadRequest, apperr.EInvalid)
		if tc.fields != nil {
			wantFields(t, p, tc.fields...)
		}
	}
	wantStatus(t, do(t, env, http.MethodGet, "/v1/orders?limit=1&state=RCVD", testenv.KeyA, "", nil), http.StatusOK)
}

func TestKeyStatusOfAKeyWithPercent(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		for _, key := range []string{"100%-sure-" + newKey(t), "a%2Fb-" + newKey(t), "x%25y-" + newKey(t)} {
			o := create(t, env, testenv.KeyA, key, newCustomer(t))
			escaped := strings.ReplaceAll(key, "%", "%25")
			r := do(t, env, http.MethodGet, "/v1/idempotency-keys/"+escaped, testenv.KeyA, "", nil)
			wantStatus(t, r, http.StatusOK)
			got := decode[struct {
				Key        string `json:"key"`
				ResourceID string `json:"resource_id"`
			}](t, r)
			if got.Key != key || got.ResourceID != o.ID {
				t.Errorf("status of %q = %+v, want key %q and order %s", key, got, key, o.ID)
			}
		}
	})
}

func TestKeysNeverInLogs(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		logger, logs := logged()
		env := testenv.New(t, kind, testenv.Options{Logger: logger})
		key := "secret-key-" + newKey(t)
		create(t, env, testenv.KeyA, key, newCustomer(t))
		wantStatus(t, do(t, env, http.MethodGet, "/v1/idempotency-keys/"+key, testenv.KeyA, "", nil), http.StatusOK)
		if err := env.Store.Close(); err != nil { // every later store call fails
			t.Fatal(err)
		}
		r := do(t, env, http.MethodGet, "/v1/idempotency-keys/"+key, testenv.KeyA, "", nil)
		if r.Status < 500 {
			t.Fatalf("lookup on a closed store = %s, want a 5xx", r)
		}
		if !strings.Contains(logs.String(), `"route":"/v1/idempotency-keys/{key}"`) {
			t.Errorf("the 5xx was not logged with its route:\n%s", logs)
		}
		if strings.Contains(logs.String(), key) {
			t.Errorf("the idempotency key is in the log:\n%s", logs)
		}
	})
}

func TestTenantRateLimit(t *testing.T) {
	t.Parallel()
	// A rate so low that no token comes back during the test: the test
	// depends on no clock.
	env := testenv.New(t, testenv.SQLite, testenv.Options{TenantRateLimit: 0.001, TenantBurst: 2})
	for i := range 2 {
		r := do(t, env, http.MethodGet, "/v1/orders", testenv.KeyA, "", nil)
		wantStatus(t, r, http.StatusOK)
		if got, want := r.Header.Get("RateLimit-Policy"), `"tenant";q=2;w=2000`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		if got, want := r.Header.Get("RateLimit"), `"tenant";r=`+strconv.Itoa(1-i)+`;t=`; !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit = %q, want %q…", i+1, got, want)
		}
	}
	r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), orderBody(newCustomer(t)))
	wantProblem(t, r, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 900 || s > 1000 {
		t.Errorf("Retry-After = %q, want about 1000 seconds (one token at 0.001/s)", r.Header.Get("Retry-After"))
	}
	if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, `"tenant";r=0;t=`) {
		t.Errorf("RateLimit = %q, want r=0", got)
	}
	// Another tenant has its own bucket.
	wantStatus(t, do(t, env, http.MethodGet, "/v1/orders", testenv.KeyB, "", nil), http.StatusOK)
	wantProblem(t, do(t, env, http.MethodGet, "/v1/orders", testenv.KeyA, "", nil), http.StatusTooManyRequests, "rate_limited")
}

func TestFailedAuthenticationsAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{AuthFailuresPerMinute: 3})
	// Successes cost nothing.
	for range 5 {
		wantStatus(t, do(t, env, http.MethodGet, "/v1/orders", testenv.KeyA, "", nil), http.StatusOK)
	}
	for range 3 {
		wantProblem(t, do(t, env, http.MethodGet, "/v1/orders", "sk_test_guess", "", nil), http.StatusUnauthorized, "unauthorized")
	}
	// The address has no failure left: even a valid key waits.
	for _, key := range []string{"sk_test_guess", testenv.KeyA} {
		r := do(t, env, http.MethodGet, "/v1/orders", key, "", nil)
		wantProblem(t, r, http.StatusTooManyRequests, "rate_limited")
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 20 {
			t.Errorf("Retry-After = %q, want 1–20 seconds (one failure back at 3 a minute)", r.Header.Get("Retry-After"))
		}
	}
	// The health probes are not behind authentication.
	wantStatus(t, do(t, env, http.MethodGet, "/healthz", "", "", nil), http.StatusOK)
}
