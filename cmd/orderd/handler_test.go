package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store/sqlite"
)

// productionHandler builds the API handler the way Run does (apiHandler,
// with the telemetry startTelemetry sets up) over an embedded store, and
// serves it on loopback. logs receives orderd's log.
func productionHandler(t *testing.T, logs io.Writer) *httptest.Server {
	t.Helper()
	ctx := context.Background()
	c, err := ParseConfig([]string{"-api-keys", "tenant_p:" + testKey}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := startTelemetry(ctx, c, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.shutdown(context.Background()) })
	st, err := sqlite.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := service.New(st, simulator.NewIntentGateway(), simulator.NewWarehouse(), service.Config{Logger: tel.log})
	t.Cleanup(svc.Close)
	ts := httptest.NewServer(apiHandler(svc, api.Config{APIKeys: c.APIKeys, Logger: tel.log, MaxInFlight: c.MaxInFlight}, tel))
	t.Cleanup(ts.Close)
	return ts
}

// TestHeadThroughTheProductionHandler sends HEAD requests through every
// wrapper orderd puts around the API. Regression: observe.HTTP put an empty
// chi routing context before the router, chi's GetHead dereferenced its nil
// Routes, and every HEAD was a 500 with a logged panic.
func TestHeadThroughTheProductionHandler(t *testing.T) {
	logs := &syncBuffer{}
	ts := productionHandler(t, logs)
	for _, tc := range []struct {
		path   string
		auth   bool
		status int
	}{
		{"/healthz", false, http.StatusOK},
		{"/readyz", false, http.StatusOK},
		{"/openapi.yaml", false, http.StatusOK},
		{"/v1/orders", true, http.StatusOK},
		{"/v1/orders", false, http.StatusUnauthorized},
		{"/v1/orders/ord_doesnotexist", true, http.StatusNotFound},
		{"/no/such/route", false, http.StatusNotFound},
	} {
		req, err := http.NewRequest(http.MethodHead, ts.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth {
			req.Header.Set("Authorization", "Bearer "+testKey)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || len(b) != 0 {
			t.Errorf("HEAD %s (auth %v) = %d with %d body bytes, want %d and no body", tc.path, tc.auth, resp.StatusCode, len(b), tc.status)
		}
	}
	if l := logs.String(); strings.Contains(l, "panic") {
		t.Errorf("a HEAD request panicked:\n%s", l)
	}
}
