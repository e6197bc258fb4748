package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/orderly/orderly/observe"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
)

// Payment providers of -payment-provider.
const (
	ProviderAuto      = ""          // paysim when -payment-url is set, else the built-in simulator
	ProviderSimulator = "simulator" // the built-in simulator (no money moves)
	ProviderPaysim    = "paysim"    // paysim's native API at -payment-url
	ProviderStripe    = "stripe"    // Stripe (or paysim -api stripe at -stripe-api-base)
)

// StripeConfig is the Stripe provider's configuration.
type StripeConfig struct {
	// Provider is -payment-provider after ParseConfig: simulator, paysim or
	// stripe (never ProviderAuto).
	Provider string
	// SecretKey is the API key (sk_test_…, sk_live_…, rk_…).
	SecretKey string
	// WebhookSecrets are the endpoint's signing secrets (whsec_…), several
	// while one rotates.
	WebhookSecrets []string
	// APIBase is Stripe's API base URL (stripepay.DefaultAPIBase), or
	// paysim's Stripe mode in tests.
	APIBase string

	keyFile, hookSecret, hookFile string
}

func (s *StripeConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.Provider, "payment-provider", ProviderAuto, "payment provider: simulator, paysim (its native API at -payment-url) or stripe; empty picks paysim when -payment-url is set, else the built-in simulator")
	fs.StringVar(&s.SecretKey, "stripe-secret-key", "", "with -payment-provider stripe: the Stripe secret key (sk_test_… or sk_live_…); prefer -stripe-secret-key-file")
	fs.StringVar(&s.keyFile, "stripe-secret-key-file", "", "with -payment-provider stripe: file holding the Stripe secret key")
	fs.StringVar(&s.hookSecret, "stripe-webhook-secret", "", "with -payment-provider stripe: the webhook endpoint's signing secrets (whsec_…), comma-separated while one rotates")
	fs.StringVar(&s.hookFile, "stripe-webhook-secret-file", "", "with -payment-provider stripe: file with one webhook signing secret per line")
	fs.StringVar(&s.APIBase, "stripe-api-base", stripepay.DefaultAPIBase, "with -payment-provider stripe: Stripe's API base URL; an http:// loopback URL for paysim -api stripe in tests")
}

// check resolves the provider and validates the Stripe settings, failing
// closed: a Stripe provider needs a secret key; a live key (sk_live_,
// rk_live_) is refused in a development setup (-dev-mode, or no API keys
// configured) and to any API base but Stripe's; an http:// API base must be
// loopback. Call after the API keys are loaded.
func (s *StripeConfig) check(c *Config) error {
	if s.keyFile != "" {
		if s.SecretKey != "" {
			return errors.New("-stripe-secret-key (ORDERD_STRIPE_SECRET_KEY) and -stripe-secret-key-file (ORDERD_STRIPE_SECRET_KEY_FILE) are exclusive")
		}
		b, err := os.ReadFile(s.keyFile)
		if err != nil {
			return fmt.Errorf("-stripe-secret-key-file (ORDERD_STRIPE_SECRET_KEY_FILE): %w", err)
		}
		s.SecretKey = strings.TrimSpace(string(b))
	}
	secrets := strings.Split(s.hookSecret, ",")
	if s.hookFile != "" {
		b, err := os.ReadFile(s.hookFile)
		if err != nil {
			return fmt.Errorf("-stripe-webhook-secret-file (ORDERD_STRIPE_WEBHOOK_SECRET_FILE): %w", err)
		}
		secrets = append(secrets, strings.Fields(string(b))...)
	}
	s.WebhookSecrets = nil
	for _, w := range secrets {
		if w = strings.TrimSpace(w); w != "" {
			s.WebhookSecrets = append(s.WebhookSecrets, w)
		}
	}
	if strings.TrimSpace(s.hookSecret) != "" && len(s.WebhookSecrets) == 0 {
		// Set, but only separators: a typo, not "no endpoint" (fail closed).
		return errors.New("-stripe-webhook-secret (ORDERD_STRIPE_WEBHOOK_SECRET) is set but names no secret")
	}
	switch s.Provider {
	case ProviderAuto:
		s.Provider = ProviderSimulator
		if c.PaymentURL != "" {
			s.Provider = ProviderPaysim
		}
	case ProviderSimulator:
		if c.PaymentURL != "" {
			return errors.New("-payment-provider (ORDERD_PAYMENT_PROVIDER) simulator contradicts -payment-url (ORDERD_PAYMENT_URL)")
		}
	case ProviderPaysim:
		if c.PaymentURL == "" {
			return errors.New("-payment-provider (ORDERD_PAYMENT_PROVIDER) paysim needs -payment-url (ORDERD_PAYMENT_URL)")
		}
	case ProviderStripe:
		if c.PaymentURL != "" {
			// -payment-url names paysim's native payments; with Stripe the
			// warehouse is named by -warehouse-url.
			return errors.New("-payment-provider (ORDERD_PAYMENT_PROVIDER) stripe: set -warehouse-url (ORDERD_WAREHOUSE_URL) for the warehouse instead of -payment-url (ORDERD_PAYMENT_URL)")
		}
	default:
		return fmt.Errorf("-payment-provider (ORDERD_PAYMENT_PROVIDER) must be simulator, paysim or stripe, not %q", s.Provider)
	}
	if s.Provider != ProviderStripe {
		var set []string
		if s.SecretKey != "" {
			set = append(set, "-stripe-secret-key (ORDERD_STRIPE_SECRET_KEY)")
		}
		if len(s.WebhookSecrets) > 0 {
			set = append(set, "-stripe-webhook-secret (ORDERD_STRIPE_WEBHOOK_SECRET)")
		}
		if len(set) > 0 {
			return fmt.Errorf("%s set but -payment-provider (ORDERD_PAYMENT_PROVIDER) is not stripe", strings.Join(set, " and "))
		}
		return nil
	}
	key := s.SecretKey
	live := strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
	switch {
	case key == "":
		return errors.New("-payment-provider stripe needs -stripe-secret-key-file (ORDERD_STRIPE_SECRET_KEY_FILE) or -stripe-secret-key (ORDERD_STRIPE_SECRET_KEY)")
	case !live && !strings.HasPrefix(key, "sk_test_") && !strings.HasPrefix(key, "rk_test_"):
		return errors.New("-stripe-secret-key (ORDERD_STRIPE_SECRET_KEY) is not a Stripe secret key (sk_test_…, sk_live_…, rk_test_…, rk_live_…); a publishable pk_ key cannot take payments")
	case live && (c.DevMode || c.usingDevelopmentKey):
		return errors.New("refusing a live Stripe key (sk_live_…) in a development setup (-dev-mode, or no -api-keys configured): configure ORDERD_API_KEYS and leave ORDERD_DEV_MODE off, or use an sk_test_ key")
	}
	u, err := url.Parse(s.APIBase)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("-stripe-api-base (ORDERD_STRIPE_API_BASE) %q is not an http(s) URL", s.APIBase)
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Errorf("-stripe-api-base (ORDERD_STRIPE_API_BASE) %q: plain http only to a loopback host (paysim in tests); the secret key would travel in the clear", s.APIBase)
	}
	if live && strings.TrimSuffix(s.APIBase, "/") != stripepay.DefaultAPIBase {
		return fmt.Errorf("refusing to send a live Stripe key to %s: -stripe-api-base (ORDERD_STRIPE_API_BASE) must be %s with a live key", s.APIBase, stripepay.DefaultAPIBase)
	}
	for _, w := range s.WebhookSecrets {
		if !strings.HasPrefix(w, "whsec_") || len(w) < 16 {
			return errors.New("-stripe-webhook-secret (ORDERD_STRIPE_WEBHOOK_SECRET): each secret must be a signing secret whsec_… of at least 16 characters")
		}
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// logStripe warns of a test key and of a missing webhook secret.
func (s StripeConfig) logStripe(log *slog.Logger) {
	if s.Provider != ProviderStripe {
		return
	}
	if !strings.HasPrefix(s.SecretKey, "sk_live_") && !strings.HasPrefix(s.SecretKey, "rk_live_") {
		log.Warn("STRIPE TEST KEY IN USE: payments go to Stripe's test mode and no real money moves", "api_base", s.APIBase)
	}
	if len(s.WebhookSecrets) == 0 {
		log.Warn("no Stripe webhook signing secret configured (ORDERD_STRIPE_WEBHOOK_SECRET): Stripe's events are not taken in")
	}
}

// stripeGateway returns the Stripe adapter (a payment.Gateway on
// PaymentIntents).
func stripeGateway(s StripeConfig, c Config, tel *telemetry) (payment.Gateway, error) {
	hc := *observe.ProviderClient(tel.tp)
	hc.Timeout = c.ProviderTimeout
	g, err := stripepay.New(stripepay.Options{SecretKey: s.SecretKey, APIBase: s.APIBase, HTTPClient: &hc})
	if err != nil {
		return nil, fmt.Errorf("-payment-provider stripe: %w", err)
	}
	return g, nil
}
