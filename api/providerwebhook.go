package api

import (
	"errors"
	"net/http"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/payment"
)

// ProviderWebhookPath is where the payment provider delivers its webhooks.
// It is authenticated by the provider's signature, not by an API key.
const ProviderWebhookPath = "/provider/webhooks"

// StripeWebhookPath is where Stripe (or paysim's Stripe mode) delivers its
// webhooks, authenticated by their Stripe-Signature only (README "Connect
// Stripe").
const StripeWebhookPath = "/provider/stripe/webhooks"

// ProviderWebhook authenticates and parses a payment provider's webhooks
// (an adapter such as paysimclient.Webhooks implements it).
type ProviderWebhook interface {
	// CheckHeader checks what can be checked of the signature before the
	// body is read (its header's shape, its timestamp's age); an error is
	// a 401 and the body is never read.
	CheckHeader(h http.Header) error
	// Authenticate verifies the delivery's signature over its raw body;
	// an error means the sender is not the provider, or the delivery is a
	// stale replay (401).
	Authenticate(h http.Header, body []byte) error
	// Parse turns an authenticated body into the payment domain's provider
	// event (its ReceivedAt is set by the service); an error wrapping
	// payment.ErrIgnoredEvent means the event verified but means nothing
	// to Orderly (200 "ignored", nothing recorded); any other error means
	// the body is malformed (400).
	Parse(body []byte) (payment.ProviderEvent, error)
}

// precheckProviderWebhook answers 401 to a delivery whose signature header
// is malformed or stale, before its body is read or a slot taken: an
// unauthenticated client cannot make the server read (or wait for) a body.
func (s *server) precheckProviderWebhook(pw ProviderWebhook) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return s.precheck(pw, next)
	}
}

func (s *server) precheck(pw ProviderWebhook, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := pw.CheckHeader(r.Header); err != nil {
			s.log.WarnContext(r.Context(), "provider webhook refused before its body", "err", err)
			writeError(w, r, s.log, apperr.Errorf(codeUnauthorized, "the webhook signature header is missing, malformed or stale"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// providerWebhook takes in one provider webhook: signature first, then the
// event, recorded in the inbox with its effect. It answers 200 with what
// happened (applied, duplicate, already_settled, unmatched, mismatch,
// ignored) — all of them tell the provider to stop resending — or a
// retryable 503 with Retry-After, so the provider resends. An event that
// verified but means nothing to Orderly is a 200 "ignored" and is not
// recorded: a 4xx would be resent for days (docs.stripe.com/webhooks#retries).
func (s *server) providerWebhook(pw ProviderWebhook) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.takeProviderWebhook(w, r, pw) }
}

func (s *server) takeProviderWebhook(w http.ResponseWriter, r *http.Request, pw ProviderWebhook) {
	body, err := s.readAll(w, r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := pw.Authenticate(r.Header, body); err != nil {
		s.log.WarnContext(r.Context(), "provider webhook refused", "err", err)
		writeError(w, r, s.log, apperr.Errorf(codeUnauthorized, "the webhook signature does not verify"))
		return
	}
	ev, err := pw.Parse(body)
	if errors.Is(err, payment.ErrIgnoredEvent) {
		s.log.InfoContext(r.Context(), "provider event ignored", "reason", err.Error())
		writeJSON(w, http.StatusOK, map[string]string{"outcome": "ignored"})
		return
	}
	if err != nil {
		writeError(w, r, s.log, apperr.Errorf(apperr.EInvalid, "the webhook is malformed: %v", err))
		return
	}
	out, err := s.svc.TakeProviderEvent(r.Context(), ev)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"outcome": string(out)})
}
