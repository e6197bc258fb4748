package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/intake"
	"github.com/orderly/orderly/internal/prefer"
	"github.com/orderly/orderly/internal/requestid"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/webhook"
)

// DefaultMaxBodyBytes is the default request body limit (64 KiB).
const DefaultMaxBodyBytes = 64 << 10

// Config configures the HTTP handler.
type Config struct {
	// APIKeys maps each bearer API key to the tenant it acts for. Required.
	APIKeys map[string]string
	// Policy is what to do with a side-effecting request without an
	// Idempotency-Key (default idempotency.PolicyDerive).
	Policy idempotency.Policy
	// Fingerprinter fingerprints requests; its VolatileFields are the body
	// members ignored (default idempotency.DefaultVolatileFields).
	Fingerprinter idempotency.Fingerprinter
	// MaxBodyBytes limits request bodies (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Logger receives request logs (default slog.Default()).
	Logger *slog.Logger
	// MaxInFlight bounds the API requests served at once; one more is
	// refused at once with a 503 "overloaded" problem and Retry-After,
	// never queued. The health probes /healthz and /readyz are not counted
	// and never refused. Zero means no bound.
	MaxInFlight int
	// TenantMaxInFlight bounds one tenant's API requests served at once
	// (the provider's webhooks count as one tenant of their own); one more
	// is refused at once with a 429 "too_many_requests" problem and
	// Retry-After. Keep it below MaxInFlight, so that one tenant's excess
	// is its own 429, never everyone's 503. Zero means no bound.
	TenantMaxInFlight int
	// Gate, when set, is the admission gate to use in place of one made
	// from MaxInFlight, TenantMaxInFlight, TenantRateLimit and TenantBurst:
	// orderd shares one with its NATS command consumer, so commands count
	// against the same bounds.
	Gate *admission.Gate
	// RequestTimeout is the deadline of each API request's context, from
	// its admission: a request still waiting on the store then is answered
	// with a 503 "unavailable" problem and Retry-After. A provider call the
	// service has started finishes past it, bounded by its lease. Zero
	// means no deadline.
	RequestTimeout time.Duration
	// Events, when set, serves the event feed (/v1/events) and the webhook
	// endpoints (/v1/webhook-endpoints).
	Events *webhook.Endpoints
	// ProviderWebhook, when set, serves POST ProviderWebhookPath: the
	// payment provider's signed webhooks, taken into the inbox.
	ProviderWebhook ProviderWebhook
	// StripeWebhook, when set, serves POST StripeWebhookPath: Stripe's
	// signed webhooks (stripepay.Webhooks), through the same precheck,
	// body bound, provider admission slot and inbox as ProviderWebhook.
	StripeWebhook ProviderWebhook
	// TenantRateLimit is each tenant's sustained rate of API requests, in
	// requests per second, and TenantBurst the requests it may make at
	// once above it (at least 1). Past them a request is answered 429
	// "rate_limited" with Retry-After; every answer to an authenticated
	// request carries the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers. Zero means no limit.
	TenantRateLimit float64
	TenantBurst     int
	// AuthFailuresPerMinute is how many failed authentications (a missing,
	// unknown or repeated Authorization) each client address may make per
	// minute, in a burst of as many. Once they are used, its API requests
	// are answered 429 "rate_limited" with Retry-After, whatever their
	// credentials, until the allowance refills. Zero means no limit.
	AuthFailuresPerMinute int
}

type server struct {
	gate     *admission.Gate
	svc      *service.Service
	cfg      Config
	keys     map[[sha256.Size]byte]string
	log      *slog.Logger
	router   chi.Router
	authFail authFailures
}

// New returns the HTTP handler of the Orderly API over svc.
func New(svc *service.Service, cfg Config) http.Handler {
	return newServer(svc, cfg).routes()
}

// newServer returns a server over svc with cfg's defaults filled in.
func newServer(svc *service.Service, cfg Config) *server {
	if cfg.Policy == "" {
		cfg.Policy = idempotency.PolicyDerive
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &server{svc: svc, cfg: cfg, log: cfg.Logger, keys: map[[sha256.Size]byte]string{}}
	for k, tenant := range cfg.APIKeys {
		s.keys[sha256.Sum256([]byte(k))] = tenant
	}
	s.gate = cfg.Gate
	if s.gate == nil {
		s.gate = NewGate(cfg)
	}
	if cfg.AuthFailuresPerMinute > 0 {
		s.authFail = authFailures{admission.NewLimiters("auth", float64(cfg.AuthFailuresPerMinute)/60, cfg.AuthFailuresPerMinute)}
	}
	return s
}

// NewGate returns the admission gate of cfg's bounds (MaxInFlight,
// TenantMaxInFlight, TenantRateLimit, TenantBurst), for a caller that
// shares it between the API (Config.Gate) and another transport.
func NewGate(cfg Config) *admission.Gate {
	return admission.New(admission.Config{MaxInFlight: cfg.MaxInFlight, TenantMaxInFlight: cfg.TenantMaxInFlight,
		TenantRate: cfg.TenantRateLimit, TenantBurst: cfg.TenantBurst})
}

// routes returns the router of the API.
func (s *server) routes() http.Handler {
	cfg := s.cfg
	r := chi.NewRouter()
	r.Use(s.requestID, s.logRequests, s.recoverer, middleware.GetHead)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, apperr.Errorf(apperr.ENotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// RFC 9110 §15.5.6: a 405 lists the allowed methods in Allow.
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			if s.router.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, r, s.log, apperr.Errorf(codeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.ready)
	r.Get("/openapi.yaml", s.serveOpenAPIYAML)
	r.Get("/openapi.json", s.serveOpenAPIJSON)
	for _, pw := range []struct {
		path string
		hook ProviderWebhook
	}{{ProviderWebhookPath, cfg.ProviderWebhook}, {StripeWebhookPath, cfg.StripeWebhook}} {
		if pw.hook == nil {
			continue
		}
		r.Group(func(r chi.Router) {
			// The signature header's shape and timestamp are checked
			// before the body is read; the body is read, bounded in size
			// and time, before a slot is taken.
			if cfg.RequestTimeout > 0 {
				r.Use(readDeadline(cfg.RequestTimeout))
			}
			r.Use(s.precheckProviderWebhook(pw.hook), s.bufferBody, s.admitTenant(providerSlot))
			if cfg.RequestTimeout > 0 {
				r.Use(deadline(cfg.RequestTimeout))
			}
			r.Post(pw.path, s.providerWebhook(pw.hook))
		})
	}
	r.Route("/v1", func(r chi.Router) {
		// Authenticate, rate-limit and read the bounded body first; only
		// then take a slot of the tenant's and one of the server's, and
		// start the request's deadline.
		if cfg.RequestTimeout > 0 {
			r.Use(readDeadline(cfg.RequestTimeout))
		}
		r.Use(strictQuery, s.authenticate, s.limitTenant, s.bufferBody, s.admitTenant(tenantSlot))
		if cfg.RequestTimeout > 0 {
			r.Use(deadline(cfg.RequestTimeout))
		}
		r.Post("/orders", s.createOrder)
		r.Get("/orders", s.listOrders)
		r.Get("/orders/{id}", s.getOrder)
		r.Post("/orders/{id}/pay", s.payOrder)
		r.Post("/orders/{id}/fulfill", s.fulfillOrder)
		r.Post("/orders/{id}/cancel", s.cancelOrder)
		r.Post("/orders/{id}/refunds", s.refundOrder)
		r.Get("/idempotency-keys/{key}", s.getKeyStatus)
		r.Get("/attempts", s.listAttempts)
		if cfg.Events != nil {
			s.mountEvents(r, cfg.Events)
		}
	})
	s.router = r
	return r
}

type tenantKey struct{}

func tenantOf(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }

// authenticate maps "Authorization: Bearer <api key>" to a tenant (RFC 6750).
// A request with several Authorization fields is a 400, never "the first
// one wins" (RFC 9110 §5.3: the field is not a list). Each failure counts
// against the client address's allowance (Config.AuthFailuresPerMinute); an
// address without one left is answered 429 first.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.authFail.refused(s, w, r) {
			return
		}
		if vs := r.Header.Values("Authorization"); len(vs) > 1 {
			s.authFail.failed(r)
			writeError(w, r, s.log, &apperr.Error{Code: apperr.EInvalid, Message: "send exactly one Authorization header",
				Fields: []apperr.FieldError{{Field: "Authorization", Reason: "must appear once"}}})
			return
		}
		h := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(h, " ")
		tenant, known := s.keys[sha256.Sum256([]byte(strings.TrimSpace(token)))]
		if !ok || !strings.EqualFold(scheme, "Bearer") || !known {
			s.authFail.failed(r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderly"`)
			writeError(w, r, s.log, apperr.Errorf(codeUnauthorized, "a valid API key is required: Authorization: Bearer <api key>"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// requestID gives each request an id: the client's X-Request-Id if it is
// valid (requestid.Valid: at most requestid.MaxLen characters of a small
// charset, sent once), else a new one. The id is echoed in the answer's
// X-Request-Id, logged with the request, and carried in the context to the
// provider calls (package internal/requestid), so one id names the request
// everywhere. It is also stored where chi's middleware.GetReqID finds it.
func (s *server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs := r.Header.Values(requestid.Header)
		id := ""
		if len(vs) == 1 && requestid.Valid(vs[0]) {
			id = vs[0]
		} else {
			id = requestid.New()
		}
		w.Header().Set(requestid.Header, id)
		ctx := context.WithValue(requestid.NewContext(r.Context(), id), middleware.RequestIDKey, id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// strictQuery answers 400 for a query string that is not valid
// percent-encoding (cursor=%%%) or that repeats a parameter (limit=1&limit=2):
// either would otherwise be read as something the client did not mean.
func strictQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, r, nil, apperr.Errorf(apperr.EInvalid, "the query string is not valid percent-encoding"))
			return
		}
		var fe []apperr.FieldError
		for name, vs := range q {
			if len(vs) > 1 {
				fe = append(fe, apperr.FieldError{Field: name, Reason: "must appear once"})
			}
		}
		if len(fe) > 0 {
			slices.SortFunc(fe, func(a, b apperr.FieldError) int { return strings.Compare(a.Field, b.Field) })
			writeError(w, r, nil, &apperr.Error{Code: apperr.EInvalid, Message: "a query parameter is repeated", Fields: fe})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic", "value", v, "method", r.Method, "route", routeOf(r))
				writeError(w, r, s.log, errors.New("panic"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// logRequests logs one structured line per request. It never logs API keys
// or idempotency keys, only whether a key was sent.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.Int("status", ww.Status()),
			slog.Duration("duration", time.Since(start)),
			slog.String("request_id", requestid.FromContext(r.Context())),
			slog.Bool("idempotency_key_sent", idempotencyHeader(r) != ""),
			slog.Bool("replayed", ww.Header().Get("Idempotency-Replayed") == "true"),
		)
	})
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.svc.Ping(ctx); err != nil {
		writeError(w, r, s.log, &apperr.Error{Code: apperr.EUnavailable, Message: "the store cannot be reached or written"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *server) createOrder(w http.ResponseWriter, r *http.Request) {
	body, err := s.readAll(w, r)
	if err == nil {
		err = checkMedia(r, body)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	key, in, err := s.decoder().Create(keyValues(r), body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := s.svc.Create(r.Context(), tenantOf(r.Context()), key, in)
	s.respond(w, r, true, res, err)
}

func (s *server) getOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.svc.Get(readContext(r), tenantOf(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := s.svc.PendingPayment(r.Context(), o)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if p != nil {
		// A pay of this version waits for the customer or the bank: the
		// order shows it (without the client secret, which only the pay's
		// answer and its replays carry).
		writeJSON(w, http.StatusOK, pendingOrderView{Order: o, Payment: pendingPaymentOf(p)})
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// orderList is the body of GET /v1/orders.
type orderList struct {
	Data       []order.Order `json:"data"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

func (s *server) listOrders(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := order.Filter{State: order.State(q.Get("state")), CustomerID: q.Get("customer_id")}
	var fe []apperr.FieldError
	if !order.ValidFilterText(f.CustomerID) {
		fe = append(fe, apperr.FieldError{Field: "customer_id", Reason: "must be UTF-8 text without control characters"})
	}
	f.Limit, fe = queryLimit(q, 0, fe)
	if v := q.Get("cursor"); v != "" {
		id, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || !order.ValidID(string(id)) {
			fe = append(fe, apperr.FieldError{Field: "cursor", Reason: "is not a cursor this API returned"})
		}
		f.After = string(id)
	}
	if len(fe) > 0 {
		writeError(w, r, s.log, &apperr.Error{Code: apperr.EInvalid, Message: "invalid query parameters", Fields: fe})
		return
	}
	os, next, err := s.svc.List(readContext(r), tenantOf(r.Context()), f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := orderList{Data: os}
	if out.Data == nil {
		out.Data = []order.Order{}
	}
	if next != "" {
		out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) payOrder(w http.ResponseWriter, r *http.Request) {
	s.transition(w, r, intake.OpPay)
}

func (s *server) fulfillOrder(w http.ResponseWriter, r *http.Request) {
	s.transition(w, r, intake.OpFulfill)
}

func (s *server) cancelOrder(w http.ResponseWriter, r *http.Request) {
	s.transition(w, r, intake.OpCancel)
}

// transition serves POST /v1/orders/{id}/<op>: the body read (bounded), its
// media type checked, then decoded, validated and fingerprinted by
// package intake, as a command is, and run.
func (s *server) transition(w http.ResponseWriter, r *http.Request, op intake.Op) {
	body, err := s.readAll(w, r)
	if err == nil {
		err = checkMedia(r, body)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	t, err := s.decoder().Transition(tenantOf(r.Context()), op, chi.URLParam(r, "id"), keyValues(r), body,
		prefer.Wait(r.Header.Values("Prefer")))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := t.Run(r.Context(), s.svc)
	s.respond(w, r, false, res, err)
}

// getKeyStatus answers GET /v1/idempotency-keys/{key}: the key's state, its
// expiry, and the outcome's resource and status.
//
// The key is taken from the escaped path and percent-decoded once, so a key
// containing "%" (sent as "%25") is found whatever form net/http and chi
// keep the path in.
func (s *server) getKeyStatus(w http.ResponseWriter, r *http.Request) {
	escaped, ok := strings.CutPrefix(r.URL.EscapedPath(), keyStatusPrefix)
	if !ok {
		escaped = chi.URLParam(r, "key")
	}
	raw, err := url.PathUnescape(escaped)
	if err != nil {
		writeError(w, r, s.log, apperr.Errorf(apperr.EInvalid, "the key in the path is not valid percent-encoding"))
		return
	}
	key, err := idempotency.ParseKey(raw)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	info, err := s.svc.KeyStatus(r.Context(), tenantOf(r.Context()), key)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, keyStatus{
		Key: key, State: string(info.State), ExpiresAt: info.ExpiresAt,
		ResourceID: info.ResourceID, StatusCode: outcomeStatus(info),
	})
}

// attemptView is one provider attempt as GET /v1/attempts lists it. Amount
// is in minor units of Currency.
type attemptView struct {
	ProviderKey string    `json:"provider_key"`
	OrderID     string    `json:"order_id"`
	Kind        string    `json:"kind"`
	Status      string    `json:"status"`
	Amount      int64     `json:"amount"`
	Currency    string    `json:"currency"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// listAttempts answers GET /v1/attempts?status=needs_attention&limit=N: the
// tenant's provider attempts parked for a person, oldest first (limit
// 1–100, default 100). needs_attention is the only status listed.
func (s *server) listAttempts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var fe []apperr.FieldError
	if st := q.Get("status"); st != "" && st != "needs_attention" {
		fe = append(fe, apperr.FieldError{Field: "status", Reason: "must be needs_attention"})
	}
	limit, fe := queryLimit(q, 100, fe)
	if len(fe) > 0 {
		writeError(w, r, s.log, &apperr.Error{Code: apperr.EInvalid, Message: "invalid query parameters", Fields: fe})
		return
	}
	as, err := s.svc.AttemptsNeedingAttention(r.Context(), tenantOf(r.Context()), limit)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := struct {
		Data []attemptView `json:"data"`
	}{Data: []attemptView{}}
	for _, a := range as {
		out.Data = append(out.Data, attemptView{ProviderKey: a.ProviderKey, OrderID: a.OrderID, Kind: string(a.Kind),
			Status: string(a.Status), Amount: a.Amount, Currency: a.Currency, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}

// queryLimit returns the "limit" query parameter (1–100), def when absent,
// and fe with a field error added when it is not such an integer.
func queryLimit(q url.Values, def int, fe []apperr.FieldError) (int, []apperr.FieldError) {
	v := q.Get("limit")
	if v == "" {
		return def, fe
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		fe = append(fe, apperr.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"})
	}
	return n, fe
}

// pendingOrderView is the body of a pay answered 202 Accepted (issue 16):
// the order (still RCVD) and its pending payment (OpenAPI PendingOrder).
type pendingOrderView struct {
	order.Order
	Payment pendingPaymentView `json:"payment"`
}

// pendingPaymentView is a pending payment as the api shows it: status
// requires_action (the customer must complete next_action with
// client_secret, Stripe's shapes, docs.stripe.com/api/payment_intents/
// object#payment_intent_object-next_action) or processing (a bank debit).
type pendingPaymentView struct {
	Status       string          `json:"status"`
	IntentID     string          `json:"intent_id"`
	ClientSecret string          `json:"client_secret,omitempty"`
	NextAction   *nextActionView `json:"next_action"`
}

type nextActionView struct {
	Type          string         `json:"type"`
	RedirectToURL *redirectToURL `json:"redirect_to_url,omitempty"`
}

type redirectToURL struct {
	URL       string `json:"url"`
	ReturnURL string `json:"return_url,omitempty"`
}

func pendingPaymentOf(p *service.PendingPayment) pendingPaymentView {
	v := pendingPaymentView{Status: string(p.Status), IntentID: p.IntentID, ClientSecret: p.ClientSecret}
	if na := p.NextAction; na != nil {
		v.NextAction = &nextActionView{Type: na.Type}
		if na.RedirectURL != "" {
			v.NextAction.RedirectToURL = &redirectToURL{URL: na.RedirectURL, ReturnURL: na.ReturnURL}
		}
	}
	return v
}

// keyStatusPrefix is the path of GET /v1/idempotency-keys/{key} before the
// key.
const keyStatusPrefix = "/v1/idempotency-keys/"

// keyStatus is the body of GET /v1/idempotency-keys/{key}.
type keyStatus struct {
	Key        string    `json:"key"`
	State      string    `json:"state"`
	ExpiresAt  time.Time `json:"expires_at"`
	ResourceID string    `json:"resource_id,omitempty"`
	StatusCode int       `json:"status_code,omitempty"`
}

// respond writes a use case's result: the order (201 with Location for a
// create, 200 for a transition), or the problem; with Idempotency-Replayed
// and Idempotency-Key-Expires where they apply.
func (s *server) respond(w http.ResponseWriter, r *http.Request, create bool, res service.Result, err error) {
	if res.Replayed {
		w.Header().Set("Idempotency-Replayed", "true")
	}
	if !res.KeyExpiresAt.IsZero() {
		w.Header().Set("Idempotency-Key-Expires", res.KeyExpiresAt.UTC().Format(http.TimeFormat))
	}
	s.setConsistencyToken(w, r, res, err)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if res.Payment != nil {
		writeJSON(w, http.StatusAccepted, pendingOrderView{Order: res.Order, Payment: pendingPaymentOf(res.Payment)})
		return
	}
	if !create {
		writeJSON(w, http.StatusOK, res.Order)
		return
	}
	w.Header().Set("Location", "/v1/orders/"+res.Order.ID)
	writeJSON(w, http.StatusCreated, res.Order)
}
