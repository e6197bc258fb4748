package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderly/orderly/observe"
)

// TestAdminServesConsoleBesideAPI: on the admin mux, /operator/ is the
// console (HTML, its CSP) and /operator/v1/ stays the operator API.
func TestAdminServesConsoleBesideAPI(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api") })
	con := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "console") })
	srv := httptest.NewServer(adminHandler(observe.NewMetrics(), nil, api, con))
	t.Cleanup(srv.Close)
	for path, want := range map[string]string{"/operator/": "console", "/operator/login": "console", "/operator/v1/attempts": "api"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s answered %q, want the %s", path, b, want)
		}
	}
}

// TestOperatorBasePath: a trailing slash is dropped; the value is kept.
func TestOperatorBasePath(t *testing.T) {
	c, err := ParseConfig([]string{"-operator-base-path", "/ops/"}, io.Discard)
	if err != nil || c.OperatorBasePath != "/ops" {
		t.Fatalf("ParseConfig = %q, %v; want /ops", c.OperatorBasePath, err)
	}
}
