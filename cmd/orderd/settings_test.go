package main

import (
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/orderly/orderly/internal/configdoc"
)

// TestConfigErrorsNameTheSetting: a configuration error names the setting
// to change both as a flag and as an environment variable, however the
// setting was given, so a newcomer who set ORDERD_LEASE finds it as quickly
// as one who passed -lease.
func TestConfigErrorsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string // each must appear in the error
	}{
		{"bad duration from a flag", []string{"-lease", "soon"}, nil, []string{"-lease", "ORDERD_LEASE"}},
		{"bad duration from the environment", nil, map[string]string{"ORDERD_LEASE": "soon"}, []string{"ORDERD_LEASE"}},
		{"bad integer", []string{"-max-in-flight", "many"}, nil, []string{"-max-in-flight", "ORDERD_MAX_IN_FLIGHT"}},
		{"TTL too short", []string{"-idempotency-derived-ttl", "1ms"}, nil,
			[]string{"-idempotency-derived-ttl (ORDERD_IDEMPOTENCY_DERIVED_TTL)"}},
		{"lease against provider timeout", []string{"-lease", "10s"}, nil, []string{"ORDERD_LEASE", "ORDERD_PROVIDER_TIMEOUT"}},
		{"webhook durations", []string{"-webhook-timeout", "0s"}, nil, []string{"-webhook-timeout (ORDERD_WEBHOOK_TIMEOUT)"}},
		{"log level", []string{"-log-level", "loud"}, nil, []string{"-log-level (ORDERD_LOG_LEVEL)"}},
		{"malformed API keys", []string{"-api-keys", "acme:short"}, nil, []string{"-api-keys (ORDERD_API_KEYS)"}},
		{"lock timeout", []string{"-db-lock-timeout", "10s"}, nil,
			[]string{"-db-lock-timeout (ORDERD_DB_LOCK_TIMEOUT)", "-db-statement-timeout (ORDERD_DB_STATEMENT_TIMEOUT)"}},
		{"development setup on a public address", []string{"-addr", "0.0.0.0:8080"}, nil,
			[]string{"ORDERD_API_KEYS", "ORDERD_PAYMENT_URL", "ORDERD_DEV_MODE=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := ParseConfig(tc.args, io.Discard)
			if err == nil {
				t.Fatalf("ParseConfig(%q) succeeded, want an error", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestPrivateWebhookRefusalNamesTheSetting: registering a loopback receiver
// with orderd's defaults is a 400 whose reason names the setting that
// allows it, ORDERD_WEBHOOK_ALLOW_PRIVATE.
func TestPrivateWebhookRefusalNamesTheSetting(t *testing.T) {
	p := start(t, "ORDERD_DATA_DIR="+t.TempDir())
	defer p.stop(t)
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/v1/webhook-endpoints",
		strings.NewReader(`{"url":"http://127.0.0.1:9999/hook","events":["order.paid"]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "ORDERD_WEBHOOK_ALLOW_PRIVATE=true") {
		t.Errorf("POST /v1/webhook-endpoints with a loopback URL = %d %s, want a 400 naming ORDERD_WEBHOOK_ALLOW_PRIVATE=true", resp.StatusCode, body)
	}
}

// TestREADMEConfigurationTableIsComplete: every flag of orderd has a row in
// the README's configuration table with its default, and every row is a
// flag.
func TestREADMEConfigurationTableIsComplete(t *testing.T) {
	var usage strings.Builder
	if _, err := ParseConfig([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseConfig(-h) = %v, want flag.ErrHelp", err)
	}
	flags := configdoc.ParseUsage(usage.String())
	if len(flags) < 40 {
		t.Fatalf("found %d flags in orderd -h; the parse of its usage is broken:\n%s", len(flags), usage.String())
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range configdoc.Check(flags, string(readme), "ORDERD") {
		t.Error(p)
	}
}
