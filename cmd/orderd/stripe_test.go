package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim/stripesim"
)

// TestStripeConfigFailsClosed: how -payment-provider stripe is validated at
// start.
func TestStripeConfigFailsClosed(t *testing.T) {
	keys := []string{"-api-keys", "acme:orderly_key_acme_123"}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "stripe.key")
	if err := os.WriteFile(keyFile, []byte("sk_test_fromfile_123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hookFile := filepath.Join(dir, "whsec")
	if err := os.WriteFile(hookFile, []byte("whsec_old_0123456789\nwhsec_new_0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" for success, else a part of the error
	}{
		{"test key", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_123"}, ""},
		{"key from a file, rotating webhook secrets", []string{"-payment-provider", "stripe", "-stripe-secret-key-file", keyFile, "-stripe-webhook-secret-file", hookFile}, ""},
		{"no key", []string{"-payment-provider", "stripe"}, "ORDERD_STRIPE_SECRET_KEY_FILE"},
		{"publishable key", []string{"-payment-provider", "stripe", "-stripe-secret-key", "pk_test_123"}, "not a Stripe secret key"},
		{"both key settings", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1", "-stripe-secret-key-file", keyFile}, "exclusive"},
		{"live key with the development API key", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_live_123"}, "development setup"},
		{"live key in dev mode", append([]string{"-dev-mode", "-payment-provider", "stripe", "-stripe-secret-key", "sk_live_123"}, keys...), "development setup"},
		{"live key, configured", append([]string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_live_123"}, keys...), ""},
		{"live key to another API base", append([]string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_live_123", "-stripe-api-base", "https://example.com"}, keys...), "refusing to send a live Stripe key"},
		{"plain http to another host", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1", "-stripe-api-base", "http://example.com"}, "loopback"},
		{"paysim's Stripe mode on loopback", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1", "-stripe-api-base", "http://127.0.0.1:8090"}, ""},
		{"bad webhook secret", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1", "-stripe-webhook-secret", "short"}, "whsec_"},
		{"with -payment-url", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1", "-payment-url", "http://127.0.0.1:8090"}, "ORDERD_WAREHOUSE_URL"},
		{"stripe key without the provider", []string{"-stripe-secret-key", "sk_test_1"}, "-stripe-secret-key (ORDERD_STRIPE_SECRET_KEY) set but"},
		{"webhook secret without the provider", []string{"-stripe-webhook-secret", "whsec_local_0123456789"}, "-stripe-webhook-secret (ORDERD_STRIPE_WEBHOOK_SECRET) set but"},
		{"webhook secret of separators only", []string{"-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1", "-stripe-webhook-secret", " , "}, "names no secret"},
		{"unknown provider", []string{"-payment-provider", "adyen"}, "simulator, paysim or stripe"},
		{"paysim without a URL", []string{"-payment-provider", "paysim"}, "ORDERD_PAYMENT_URL"},
		{"public address with stripe and keys", append([]string{"-addr", "0.0.0.0:8080", "-warehouse-url", "http://127.0.0.1:8090", "-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1"}, keys...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.args, io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ParseConfig: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ParseConfig = %v, want an error naming %q", err, tc.want)
			case tc.want == "" && c.Stripe.Provider != ProviderStripe:
				t.Fatalf("provider %q", c.Stripe.Provider)
			}
			if tc.name == "key from a file, rotating webhook secrets" && (c.Stripe.SecretKey != "sk_test_fromfile_123" || len(c.Stripe.WebhookSecrets) != 2) {
				t.Fatalf("from files: %+v", c.Stripe)
			}
		})
	}
	t.Run("environment and the test-key warning", func(t *testing.T) {
		t.Setenv("ORDERD_PAYMENT_PROVIDER", "stripe")
		t.Setenv("ORDERD_STRIPE_SECRET_KEY", "sk_test_env")
		c, err := ParseConfig(nil, io.Discard)
		if err != nil || c.Stripe.SecretKey != "sk_test_env" {
			t.Fatalf("%+v, %v", c.Stripe, err)
		}
		var buf bytes.Buffer
		c.Stripe.logStripe(slog.New(slog.NewJSONHandler(&buf, nil)))
		if !strings.Contains(buf.String(), "STRIPE TEST KEY") || !strings.Contains(buf.String(), "no Stripe webhook signing secret") {
			t.Fatalf("log: %s", buf.String())
		}
	})
	t.Run("default provider", func(t *testing.T) {
		c, err := ParseConfig(nil, io.Discard)
		if err != nil || c.Stripe.Provider != ProviderSimulator {
			t.Fatalf("%q, %v", c.Stripe.Provider, err)
		}
		c, err = ParseConfig([]string{"-payment-url", "http://127.0.0.1:8090"}, io.Discard)
		if err != nil || c.Stripe.Provider != ProviderPaysim {
			t.Fatalf("%q, %v", c.Stripe.Provider, err)
		}
	})
}

// TestStripeWebhookEndpoint: orderd serves POST /provider/stripe/webhooks
// only with -payment-provider stripe and a webhook signing secret; a
// delivery signed with any of the rotating secrets verifies, an unsigned
// one is a 401, and an event that means nothing to Orderly a 200
// "ignored".
func TestStripeWebhookEndpoint(t *testing.T) {
	const oldSecret, newSecret = "whsec_old_0123456789", "whsec_new_0123456789"
	handler := func(t *testing.T, extra ...string) http.Handler {
		t.Helper()
		args := append([]string{"-data-dir", t.TempDir(), "-payment-provider", "stripe", "-stripe-secret-key", "sk_test_1",
			"-stripe-api-base", "http://127.0.0.1:1"}, extra...)
		c, err := ParseConfig(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tel, err := startTelemetry(ctx, c, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tel.shutdown(context.Background()) })
		a, err := build(ctx, c, tel)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.close)
		return a.handler
	}
	body := []byte(`{"id":"evt_1","object":"event","api_version":"` + stripesim.APIVersion + `","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
	post := func(h http.Handler, sig string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/provider/stripe/webhooks", bytes.NewReader(body))
		if sig != "" {
			r.Header.Set("Stripe-Signature", sig)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	h := handler(t, "-stripe-webhook-secret", oldSecret+","+newSecret)
	if w := post(h, ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d %s, want 401", w.Code, w.Body)
	}
	for _, secret := range []string{oldSecret, newSecret} {
		w := post(h, stripesim.Sign([]string{secret}, time.Now(), body))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"ignored"`) {
			t.Fatalf("signed with %s: %d %s, want 200 ignored", secret, w.Code, w.Body)
		}
	}
	if w := post(h, stripesim.Sign([]string{"whsec_other_0123456789"}, time.Now(), body)); w.Code != http.StatusUnauthorized {
		t.Fatalf("another secret: %d %s, want 401", w.Code, w.Body)
	}
	if w := post(handler(t), stripesim.Sign([]string{newSecret}, time.Now(), body)); w.Code != http.StatusNotFound {
		t.Fatalf("without a webhook secret: %d %s, want 404 (no endpoint)", w.Code, w.Body)
	}
}
