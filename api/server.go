package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
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
	// RequestTimeout is the deadline of each API request's context, from
	// its admission: a request still waiting on the store then is answered
	// with a 503 "unavailable" problem and Retry-After. A provider call the
	// service has started finishes past it, bounded by its lease. Zero
	// means no deadline.
	RequestTimeout time.Duration
}

type server struct {
	svc    *service.Service
	cfg    Config
	keys   map[[sha256.Size]byte]string
	log    *slog.Logger
	router chi.Router
}

// New returns the HTTP handler of the Orderly API over svc.
func New(svc *service.Service, cfg Config) http.Handler {
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
	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.logRequests, s.recoverer, middleware.GetHead)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, apperr.Errorf(apperr.ENotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// RFC 9110 §15.5.6: a 405 lists the allowed methods in Allow.
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
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
	r.Route("/v1", func(r chi.Router) {
		if cfg.MaxInFlight > 0 {
			r.Use(s.admit(cfg.MaxInFlight))
		}
		if cfg.RequestTimeout > 0 {
			r.Use(deadline(cfg.RequestTimeout))
		}
		r.Use(s.authenticate)
		r.Post("/orders", s.createOrder)
		r.Get("/orders", s.listOrders)
		r.Get("/orders/{id}", s.getOrder)
		r.Post("/orders/{id}/pay", s.payOrder)
		r.Post("/orders/{id}/fulfill", s.fulfillOrder)
		r.Post("/orders/{id}/cancel", s.cancelOrder)
		r.Get("/idempotency-keys/{key}", s.getKeyStatus)
	})
	s.router = r
	return r
}

type tenantKey struct{}

func tenantOf(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }

// authenticate maps "Authorization: Bearer <api key>" to a tenant (RFC 6750).
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(h, " ")
		tenant, known := s.keys[sha256.Sum256([]byte(strings.TrimSpace(token)))]
		if !ok || !strings.EqualFold(scheme, "Bearer") || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderly"`)
			writeError(w, r, s.log, apperr.Errorf(codeUnauthorized, "a valid API key is required: Authorization: Bearer <api key>"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic", "value", v, "path", r.URL.Path)
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
			slog.String("request_id", middleware.GetReqID(r.Context())),
			slog.Bool("idempotency_key_sent", idempotencyHeader(r) != ""),
			slog.Bool("replayed", ww.Header().Get("Idempotency-Replayed") == "true"),
		)
	})
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.svc.Ping(ctx); err != nil {
		writeError(w, r, s.log, &apperr.Error{Code: apperr.EUnavailable, Message: "the store is not reachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *server) createOrder(w http.ResponseWriter, r *http.Request) {
	var in order.NewOrderInput
	body, err := s.readBody(w, r, &in, true)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	key, err := s.idempotencyKey(r, "/v1/orders", nil, body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := s.svc.Create(r.Context(), tenantOf(r.Context()), key, in)
	s.respond(w, r, true, res, err)
}

func (s *server) getOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.svc.Get(r.Context(), tenantOf(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, s.log, err)
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
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			fe = append(fe, apperr.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"})
		}
		f.Limit = n
	}
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
	os, next, err := s.svc.List(r.Context(), tenantOf(r.Context()), f)
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

// payBody is the body of a pay request; pointers tell a missing member
// (400) from a wrong one (422 mismatch).
type payBody struct {
	Amount        *int64  `json:"amount"`
	Currency      *string `json:"currency"`
	PaymentMethod string  `json:"payment_method"`
}

func (s *server) payOrder(w http.ResponseWriter, r *http.Request) {
	var pb payBody
	body, err := s.readBody(w, r, &pb, true)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var fe []apperr.FieldError
	if pb.Amount == nil {
		fe = append(fe, apperr.FieldError{Field: "amount", Reason: "is required (minor currency units)"})
	}
	if pb.Currency == nil {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: "is required"})
	} else if reason := order.CurrencyReason(*pb.Currency); reason != "" {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: reason})
	}
	if reason := paymentMethodReason(pb.PaymentMethod); reason != "" {
		fe = append(fe, apperr.FieldError{Field: "payment_method", Reason: reason})
	}
	if len(fe) > 0 {
		writeError(w, r, s.log, &apperr.Error{Code: apperr.EInvalid, Message: "the payment has invalid fields", Fields: fe})
		return
	}
	in := service.PayInput{Amount: *pb.Amount, Currency: *pb.Currency, PaymentMethod: pb.PaymentMethod}
	id := chi.URLParam(r, "id")
	key, err := s.idempotencyKey(r, "/v1/orders/{id}/pay", map[string]string{"id": id}, body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := s.svc.Pay(r.Context(), s.call(r, id, key), in)
	s.respond(w, r, false, res, err)
}

func (s *server) fulfillOrder(w http.ResponseWriter, r *http.Request) {
	s.emptyBodyEvent(w, r, "/v1/orders/{id}/fulfill", s.svc.Fulfill)
}

func (s *server) cancelOrder(w http.ResponseWriter, r *http.Request) {
	s.emptyBodyEvent(w, r, "/v1/orders/{id}/cancel", s.svc.Cancel)
}

// emptyBody is the body fulfil and cancel accept: nothing, or {}.
type emptyBody struct{}

func (s *server) emptyBodyEvent(w http.ResponseWriter, r *http.Request, route string,
	do func(context.Context, service.Call) (service.Result, error)) {
	body, err := s.readBody(w, r, &emptyBody{}, false)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body == nil {
		body = []byte("{}") // no body and {} are the same request
	}
	id := chi.URLParam(r, "id")
	key, err := s.idempotencyKey(r, route, map[string]string{"id": id}, body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := do(r.Context(), s.call(r, id, key))
	s.respond(w, r, false, res, err)
}

// paymentMethodReason says what is wrong with a payment method id, or "".
func paymentMethodReason(pm string) string {
	switch {
	case pm == "":
		return "is required"
	case len(pm) > 255:
		return "must be at most 255 bytes"
	case !order.ValidFilterText(pm):
		return "must be UTF-8 text without control characters"
	}
	return ""
}

// call assembles a service call on order id from the request.
func (s *server) call(r *http.Request, id string, key idempotency.Key) service.Call {
	return service.Call{TenantID: tenantOf(r.Context()), OrderID: id, Key: key, Wait: preferWait(r.Header.Values("Prefer"))}
}

// getKeyStatus answers GET /v1/idempotency-keys/{key}: the key's state, its
// expiry, and the outcome's resource and status.
func (s *server) getKeyStatus(w http.ResponseWriter, r *http.Request) {
	raw, err := url.PathUnescape(chi.URLParam(r, "key"))
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
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if !create {
		writeJSON(w, http.StatusOK, res.Order)
		return
	}
	w.Header().Set("Location", "/v1/orders/"+res.Order.ID)
	writeJSON(w, http.StatusCreated, res.Order)
}
