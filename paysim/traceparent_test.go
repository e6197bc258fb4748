package paysim_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderly/orderly/paysim"
)

// TestLogsTraceparent checks that a request carrying a W3C traceparent is
// logged with it, and one without is not logged.
func TestLogsTraceparent(t *testing.T) {
	l, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var logs bytes.Buffer
	srv, err := paysim.NewServer(l, paysim.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest(http.MethodGet, "/v1/shipments?idempotency_key=none", nil)
	req.Header.Set("traceparent", tp)
	srv.ServeHTTP(httptest.NewRecorder(), req)
	if !strings.Contains(logs.String(), `"traceparent":"`+tp+`"`) {
		t.Errorf("the log lacks the request's traceparent:\n%s", logs.String())
	}
	logs.Reset()
	srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/shipments?idempotency_key=none", nil))
	if strings.Contains(logs.String(), "traceparent") {
		t.Errorf("a request without traceparent was logged with one:\n%s", logs.String())
	}
}
