package operator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/time/rate"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// Prefix is the path under which the operator API is served.
const Prefix = "/operator/v1/"

// Defaults of Config.
const (
	DefaultAuthFailuresPerMinute = 10
	DefaultMaxBodyBytes          = 16 << 10
)

// ReplayedHeader is set to "true" on the answer of a replayed write.
const ReplayedHeader = "Idempotency-Replayed"

// Config configures the handler.
type Config struct {
	// Credentials are the operators allowed in (ParseCredentials).
	Credentials []Credential
	// AuthFailuresPerMinute is how many failed authentications one client
	// address may make per minute (its burst too) before it is answered
	// 429 with Retry-After (default DefaultAuthFailuresPerMinute).
	AuthFailuresPerMinute int
	// MaxBodyBytes bounds a write's body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Logger receives internal errors (default slog.Default()).
	Logger *slog.Logger
	// Now is the limiter's clock (default time.Now).
	Now func() time.Time
}

type handler struct {
	ops    *service.Operations
	cfg    Config
	log    *slog.Logger
	creds  map[[32]byte]Credential
	failed *limiters
}

// New returns the operator API over ops, routed under Prefix.
func New(ops *service.Operations, cfg Config) http.Handler {
	if cfg.AuthFailuresPerMinute <= 0 {
		cfg.AuthFailuresPerMinute = DefaultAuthFailuresPerMinute
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &handler{ops: ops, cfg: cfg, log: cfg.Logger, creds: map[[32]byte]Credential{},
		failed: &limiters{limit: rate.Limit(float64(cfg.AuthFailuresPerMinute) / 60), burst: cfg.AuthFailuresPerMinute,
			m: map[string]*rate.Limiter{}}}
	for _, c := range cfg.Credentials {
		h.creds[sha256.Sum256([]byte(c.Token))] = c
	}
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.ENotFound, "no operator API route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.ENotFound, "no operator API route %s %s", r.Method, r.URL.Path))
	})
	r.Route(strings.TrimSuffix(Prefix, "/"), func(r chi.Router) {
		r.Use(h.authenticate)
		r.Get("/attempts", h.listParked)
		r.Get("/orders/{id}", h.getOrder)
		r.Get("/idempotency-keys/{key}", h.getKeys)
		r.Get("/events/{id}", h.getEvent)
		r.Get("/actions", h.listActions)
		r.Get("/provider-objects/{ref}", h.getProviderObject)
		r.Group(func(r chi.Router) {
			r.Use(requireRole(RoleOperator))
			r.Post("/attempts/recheck", h.recheck)
			r.Post("/attempts/resolve", h.resolve)
			r.Post("/webhook-deliveries/resend", h.resend)
			r.Post("/webhook-endpoints/{id}/enable", h.enable)
			r.Post("/webhook-endpoints/{id}/resend-failed", h.resendFailed)
			r.Post("/webhook-endpoints/{id}/rotate-secret", h.rotateSecret)
			r.Post("/orders/{id}/cancel", h.cancelOrder)
		})
	})
	return r
}

type operatorKey struct{}

func operatorOf(ctx context.Context) Credential {
	c, _ := ctx.Value(operatorKey{}).(Credential)
	return c
}

// authenticate maps "Authorization: Bearer <token>" to an operator. A
// client address past its allowance of failures is answered 429 with
// Retry-After before its credential is looked at; each failure costs one.
func (h *handler) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddr(r)
		now := h.cfg.Now()
		if wait, refused := h.failed.refused(addr, now); refused {
			w.Header().Set("Retry-After", strconv.Itoa(wait))
			api.WriteError(w, r, nil, apperr.Errorf(api.CodeRateLimited,
				"too many failed operator logins from this address; retry after Retry-After seconds"))
			return
		}
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		c, known := h.creds[sha256.Sum256([]byte(strings.TrimSpace(token)))]
		if len(r.Header.Values("Authorization")) != 1 || !ok || !strings.EqualFold(scheme, "Bearer") || !known {
			h.failed.fail(addr, now)
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderly-operator"`)
			api.WriteError(w, r, nil, apperr.Errorf(api.CodeUnauthorized,
				"send Authorization: Bearer <operator token>; tenant API keys are not operator credentials"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, c)))
	})
}

// requireRole answers 403 unless the operator has role.
func requireRole(role Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c := operatorOf(r.Context()); c.Role != role {
				api.WriteError(w, r, nil, apperr.Errorf(apperr.EForbidden,
					"operator %s has role %s, which may only read; acting needs role %s", c.Name, c.Role, role))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// limiters is one token bucket of failed logins per client address.
type limiters struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

const maxLimiters = 10_000

func (l *limiters) get(addr string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.m[addr]
	if !ok {
		if len(l.m) >= maxLimiters {
			for k, v := range l.m {
				if v.TokensAt(now) >= float64(l.burst) {
					delete(l.m, k) // a full bucket is a new one
				}
			}
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[addr] = lim
	}
	return lim
}

// refused reports whether addr has no failure left, and the whole seconds
// (at least 1) until it has one.
func (l *limiters) refused(addr string, now time.Time) (int, bool) {
	tokens := l.get(addr, now).TokensAt(now)
	if tokens >= 1 {
		return 0, false
	}
	return max(1, int(math.Ceil((1-tokens)/float64(l.limit)))), true
}

func (l *limiters) fail(addr string, now time.Time) { l.get(addr, now).AllowN(now, 1) }

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// tenants reads the optional "tenant" query parameter: absent, every
// tenant.
func tenants(r *http.Request) store.TenantFilter {
	if t, ok := r.URL.Query()["tenant"]; ok && len(t) > 0 {
		return store.OneTenant(t[0])
	}
	return store.AnyTenant
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, store.ErrNotFound) {
		err = apperr.Errorf(apperr.ENotFound, "not found")
	}
	api.WriteError(w, r, h.log, err)
}

// listParked answers GET /attempts?tenant=&limit=: attempts parked as
// needs_attention, oldest first (limit 1–100, default 100).
func (h *handler) listParked(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			api.WriteError(w, r, nil, &apperr.Error{Code: apperr.EInvalid, Message: "invalid query parameters",
				Fields: []apperr.FieldError{{Field: "limit", Reason: "must be an integer from 1 to 100"}}})
			return
		}
		limit = n
	}
	as, err := h.ops.Store().ParkedAttempts(r.Context(), store.ParkedFilter{Tenants: tenants(r), Limit: limit})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := struct {
		Data []service.AttemptView `json:"data"`
	}{Data: []service.AttemptView{}}
	for _, a := range as {
		out.Data = append(out.Data, service.ViewAttempt(a))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// keyView is an idempotency key as operators see it (never the key itself:
// only its hash is stored).
type keyView struct {
	TenantID    string    `json:"tenant"`
	KeyHash     string    `json:"key_hash"`
	Derived     bool      `json:"derived"`
	State       string    `json:"state"`
	Operation   string    `json:"operation,omitempty"`
	ResourceID  string    `json:"resource_id,omitempty"`
	ErrorCode   string    `json:"error_code,omitempty"`
	ErrorDetail string    `json:"error_detail,omitempty"`
	AttemptKey  string    `json:"attempt_key,omitempty"`
	Fencing     int64     `json:"fencing_token"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

func viewKey(k idempotency.Record) keyView {
	return keyView{TenantID: k.TenantID, KeyHash: k.KeyHash, Derived: k.Derived, State: string(k.State),
		Operation: string(k.Operation), ResourceID: k.ResourceID, ErrorCode: string(k.ErrorCode), ErrorDetail: k.ErrorDetail,
		AttemptKey: k.AttemptKey, Fencing: k.FencingToken, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt}
}

// eventView is a stored event with its body as sent.
type eventView struct {
	ID       string          `json:"id"`
	TenantID string          `json:"tenant"`
	Type     event.Type      `json:"type"`
	OrderID  string          `json:"order_id"`
	Sequence int64           `json:"sequence"`
	Body     json.RawMessage `json:"body"`
}

func viewEvent(e event.Stored) eventView {
	return eventView{ID: e.ID, TenantID: e.TenantID, Type: e.Type, OrderID: e.OrderID, Sequence: e.Sequence, Body: e.Body}
}

// getOrder answers GET /orders/{id}?tenant=: the order with its events,
// attempts, deliveries and keys.
func (h *handler) getOrder(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !order.ValidID(id) {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.ENotFound, "order %s not found", id))
		return
	}
	hist, err := h.ops.Store().History(r.Context(), tenants(r), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := struct {
		Order      order.Order           `json:"order"`
		Events     []eventView           `json:"events"`
		Attempts   []service.AttemptView `json:"attempts"`
		Deliveries []event.Delivery      `json:"deliveries"`
		Keys       []keyView             `json:"idempotency_keys"`
	}{Order: hist.Order, Events: []eventView{}, Attempts: []service.AttemptView{}, Deliveries: hist.Deliveries,
		Keys: []keyView{}}
	if out.Deliveries == nil {
		out.Deliveries = []event.Delivery{}
	}
	for _, e := range hist.Events {
		out.Events = append(out.Events, viewEvent(e))
	}
	for _, a := range hist.Attempts {
		out.Attempts = append(out.Attempts, service.ViewAttempt(a))
	}
	for _, k := range hist.Keys {
		out.Keys = append(out.Keys, viewKey(k))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// getKeys answers GET /idempotency-keys/{key}?tenant=: the key's record
// in every selected tenant (a key is a tenant's: several may share one).
func (h *handler) getKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := h.ops.Store().FindKeys(r.Context(), tenants(r), idempotency.HashKey(chi.URLParam(r, "key")))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := struct {
		Data []keyView `json:"data"`
	}{Data: []keyView{}}
	for _, k := range ks {
		out.Data = append(out.Data, viewKey(k))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// getEvent answers GET /events/{id}?tenant=.
func (h *handler) getEvent(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !event.ValidID(id) {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.ENotFound, "event %s not found", id))
		return
	}
	e, err := h.ops.Store().FindEvent(r.Context(), tenants(r), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, viewEvent(e))
}

// write reads a write's body into v (strict JSON) and returns the call:
// the operator, the Idempotency-Key and the request's fingerprint (method,
// path and canonical body, RFC 8785). ok is false when it answered.
func (h *handler) write(w http.ResponseWriter, r *http.Request, v any, reason *string) (service.OperatorCall, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			api.WriteError(w, r, nil, apperr.Errorf(apperr.EInvalid, "send the body as application/json"))
			return service.OperatorCall{}, false
		}
	}
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) != 1 {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.EKeyRequired, "every operator action needs one Idempotency-Key header"))
		return service.OperatorCall{}, false
	}
	key, err := idempotency.ParseKey(keys[0])
	if err != nil {
		api.WriteError(w, r, nil, &apperr.Error{Code: apperr.EInvalid, Message: "the Idempotency-Key is invalid",
			Fields: []apperr.FieldError{{Field: "Idempotency-Key", Reason: err.Error()}}})
		return service.OperatorCall{}, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.EInvalid, "the body could not be read (at most %d bytes)", h.cfg.MaxBodyBytes))
		return service.OperatorCall{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		api.WriteError(w, r, nil, apperr.Errorf(apperr.EInvalid, "the body must be one JSON object with the documented members"))
		return service.OperatorCall{}, false
	}
	fp, err := idempotency.Fingerprinter{VolatileFields: []string{}}.Fingerprint(idempotency.Request{
		Method: r.Method, Route: r.URL.Path, Body: body})
	if err != nil {
		api.WriteError(w, r, nil, err)
		return service.OperatorCall{}, false
	}
	c := operatorOf(r.Context())
	return service.OperatorCall{Operator: service.Operator{Name: c.Name, Role: string(c.Role)}, Key: key,
		Fingerprint: fp, Reason: *reason}, true
}

// answer writes an action's result (200), marked when replayed.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, res service.ActionResult, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if res.Replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	api.WriteJSON(w, http.StatusOK, res)
}

func missing(field string) error {
	return &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields",
		Fields: []apperr.FieldError{{Field: field, Reason: "is required"}}}
}

// recheck answers POST /attempts/recheck {provider_key, reason}.
func (h *handler) recheck(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ProviderKey string `json:"provider_key"`
		Reason      string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	if in.ProviderKey == "" {
		h.fail(w, r, missing("provider_key"))
		return
	}
	res, err := h.ops.Recheck(r.Context(), c, in.ProviderKey)
	h.answer(w, r, res, err)
}

// resolve answers POST /attempts/resolve {provider_key, outcome, note,
// reason}.
func (h *handler) resolve(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ProviderKey string `json:"provider_key"`
		Outcome     string `json:"outcome"`
		Note        string `json:"note"`
		Reason      string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	if in.ProviderKey == "" {
		h.fail(w, r, missing("provider_key"))
		return
	}
	res, err := h.ops.Resolve(r.Context(), c, in.ProviderKey, service.Finding(in.Outcome), in.Note)
	h.answer(w, r, res, err)
}

// resend answers POST /webhook-deliveries/resend {endpoint_id, event_id,
// reason}.
func (h *handler) resend(w http.ResponseWriter, r *http.Request) {
	var in struct {
		EndpointID string `json:"endpoint_id"`
		EventID    string `json:"event_id"`
		Reason     string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	var fe []apperr.FieldError
	if !event.ValidEndpointID(in.EndpointID) {
		fe = append(fe, apperr.FieldError{Field: "endpoint_id", Reason: "must be an endpoint id (we_ and 32 hex digits)"})
	}
	if !event.ValidID(in.EventID) {
		fe = append(fe, apperr.FieldError{Field: "event_id", Reason: "must be an event id (evt_ and 32 hex digits)"})
	}
	if len(fe) > 0 {
		h.fail(w, r, &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields", Fields: fe})
		return
	}
	res, err := h.ops.ResendDelivery(r.Context(), c, in.EndpointID, in.EventID)
	h.answer(w, r, res, err)
}

// enable answers POST /webhook-endpoints/{id}/enable {reason}.
func (h *handler) enable(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Reason string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	id, ok := h.endpointParam(w, r)
	if !ok {
		return
	}
	res, err := h.ops.EnableEndpoint(r.Context(), c, id)
	h.answer(w, r, res, err)
}
