package paysim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly/orderly/paysim/paysimwire"
)

// Headers and error types of the API, package paysimwire's.
const (
	IdempotencyKeyHeader  = paysimwire.IdempotencyKeyHeader
	ReplayedHeader        = paysimwire.ReplayedHeader
	ErrTypeInvalidRequest = paysimwire.ErrTypeInvalidRequest
	ErrTypeIdempotency    = paysimwire.ErrTypeIdempotency
	ErrTypeCard           = paysimwire.ErrTypeCard
	ErrTypeNotFound       = paysimwire.ErrTypeNotFound
	ErrTypeOutOfStock     = paysimwire.ErrTypeOutOfStock
	ErrTypeAPI            = paysimwire.ErrTypeAPI
)

// DefaultMaxBodyBytes is the request body limit when Config.MaxBodyBytes is
// zero.
const DefaultMaxBodyBytes = 1 << 20

// maxKeyLen bounds idempotency keys, as the ledger's CHECK does.
const maxKeyLen = 255

// Config configures a Server. The zero value is usable.
type Config struct {
	// Faults are the initial run-level fault settings.
	Faults Faults
	// Logger receives a line per injected fault and per internal error;
	// nil discards.
	Logger *slog.Logger
	// MaxBodyBytes limits request bodies; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Webhooks configures the signed webhooks sent for every new charge,
	// decline and refund (none when its URL is empty).
	Webhooks WebhookConfig
	// AuthorizationWindow is how long an authorization of a manual-capture
	// intent lasts before it expires uncaptured (DefaultAuthorizationWindow
	// when zero).
	AuthorizationWindow time.Duration
}

// Server is paysim's HTTP API over a Ledger; see the package documentation
// for the routes. It is safe for concurrent use.
type Server struct {
	ledger  *Ledger
	log     *slog.Logger
	maxBody int64
	mux     *http.ServeMux

	mu       sync.Mutex
	faults   Faults
	rng      *rand.Rand
	injected map[FaultKind]int64

	hooks *webhooks

	requests atomic.Int64
	// abandoned counts delays ended by the client going away.
	abandoned atomic.Int64
	stopOnce  sync.Once
	stop      chan struct{}
}

// NewServer returns the API over l. It fails if c.Faults is invalid.
func NewServer(l *Ledger, c Config) (*Server, error) {
	if err := c.Faults.Validate(); err != nil {
		return nil, err
	}
	if err := c.Webhooks.Faults.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		ledger:   l,
		log:      c.Logger,
		maxBody:  c.MaxBodyBytes,
		mux:      http.NewServeMux(),
		injected: make(map[FaultKind]int64),
		stop:     make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	s.setFaults(c.Faults)
	s.hooks = newWebhooks(c.Webhooks, s.log, s.stop)
	s.mux.HandleFunc("POST /v1/charges", post(s, charges))
	s.mux.HandleFunc("POST /v1/refunds", post(s, refunds))
	s.mux.HandleFunc("GET /v1/refunds", s.getRefunds(get(s, refunds)))
	s.mux.HandleFunc("POST /v1/payment_intents", post(s, prepares))
	s.mux.HandleFunc("GET /v1/payment_intents", s.findIntent)
	s.mux.HandleFunc("GET /v1/payment_intents/{id}", s.getIntent)
	window := c.AuthorizationWindow
	if window <= 0 {
		window = DefaultAuthorizationWindow
	}
	s.mux.HandleFunc("POST /v1/payment_intents/{id}/confirm", post(s, confirmOp(l, window)))
	s.mux.HandleFunc("POST /v1/payment_intents/{id}/capture", post(s, captureOp()))
	s.mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", post(s, cancelOp()))
	s.mux.HandleFunc("POST /v1/shipments", post(s, shipments))
	s.mux.HandleFunc("GET /v1/shipments", s.getShipments(get(s, shipments)))
	s.mux.HandleFunc("GET /v1/shipments/{id}", s.getShipment)
	s.mux.HandleFunc("POST /admin/refunds/{id}/fail", s.failRefund)
	s.mux.HandleFunc("GET /admin/ledger", s.getLedger)
	s.mux.HandleFunc("GET /admin/stats", s.getStats)
	s.mux.HandleFunc("GET /admin/faults", s.getFaults)
	s.mux.HandleFunc("PUT /admin/faults", s.putFaults)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: "no route " + r.Method + " " + r.URL.Path})
	})
	return s, nil
}

// ServeHTTP implements http.Handler. A request that carries a W3C
// traceparent (W3C Trace Context §3.2) is logged with it, so a provider
// call can be found from the caller's trace.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Path) >= 4 && r.URL.Path[:4] == "/v1/" {
		s.requests.Add(1)
	}
	if tp := r.Header.Get("Traceparent"); tp != "" {
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.String("traceparent", tp))
	}
	s.mux.ServeHTTP(w, r)
}

// Faults returns the current run-level fault settings.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetFaults replaces the run-level fault settings and reseeds the source of
// draws with f.Seed. It fails, changing nothing, if f is invalid.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.setFaults(f)
	return nil
}

func (s *Server) setFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
}

// Stats returns the ledger's counts and this Server's request and fault
// counters.
func (s *Server) Stats(ctx context.Context) (Stats, error) {
	c, err := s.ledger.Counts(ctx)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Counts: c, Requests: s.requests.Load(), FaultsInjected: make(map[FaultKind]int64, len(faultKinds)),
		DelaysAbandoned: s.abandoned.Load(), Webhooks: s.hooks.snapshot()}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range faultKinds {
		st.FaultsInjected[k] = s.injected[k]
	}
	return st, nil
}

// StopDelays ends every injected delay, in flight or future: latency is
// skipped and a timeout fault answers 504 at once. Call it when shutting
// down (http.Server.RegisterOnShutdown) so that Shutdown need not wait for
// the delays.
func (s *Server) StopDelays() { s.stopOnce.Do(func() { close(s.stop) }) }

// --- admin

// failRefund serves POST /admin/refunds/{id}/fail: the later failure of a
// succeeded refund of a charge paid with testmode.MethodRefundFail
// (Ledger.FailRefund), then its refund.failed webhook; it answers the
// refund (status failed). An unknown refund is a 404, one that cannot fail
// a 400 (invalid_request_error).
func (s *Server) failRefund(w http.ResponseWriter, r *http.Request) {
	rf, err := s.ledger.FailRefund(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no refund %q", r.PathValue("id"))})
		return
	case errors.Is(err, ErrRefundNotFailable):
		invalid(w, err.Error())
		return
	case err != nil:
		s.fail(w, err)
		return
	}
	s.hooks.emit(EventRefundFailed, WebhookData{ObjectID: rf.ID, IdempotencyKey: rf.IdempotencyKey, ChargeID: rf.ChargeID,
		OrderID: rf.OrderID, Amount: rf.Amount, Currency: rf.Currency})
	writeJSON(w, http.StatusOK, rf)
}

func (s *Server) getLedger(w http.ResponseWriter, r *http.Request) {
	snap, err := s.ledger.Snapshot(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.Stats(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) getFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if !s.decode(w, r, &f) {
		return
	}
	if err := s.SetFaults(f); err != nil {
		invalid(w, err.Error())
		return
	}
	s.log.Info("faults set", "faults", f)
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.ledger.Ping(r.Context()); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// --- faults

// decide picks the fault of a new POST: the header's, else the one-shot
// fault of a test payment method or SKU if this is the first request for
// the key, else a draw from the run-level rates. A decline applies only
// where declines is set (charges).
func (s *Server) decide(ctx context.Context, endpoint, key string, rf requestFaults, trigger FaultKind, declines bool) (FaultKind, error) {
	if rf.kind == FaultDecline && !declines {
		rf.kind = ""
	}
	if rf.kind != "" {
		return rf.kind, nil
	}
	if trigger != "" {
		first, err := s.ledger.ClaimFault(context.WithoutCancel(ctx), endpoint, key, trigger)
		if err != nil || first {
			return trigger, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	if f.ErrorRate+f.TimeoutRate+f.DropRate+f.DeclineRate == 0 {
		return "", nil
	}
	x := s.rng.Float64()
	for _, c := range []struct {
		kind FaultKind
		rate float64
	}{{FaultError, f.ErrorRate}, {FaultTimeout, f.TimeoutRate}, {FaultDrop, f.DropRate}, {FaultDecline, f.DeclineRate}} {
		if x < c.rate {
			if c.kind == FaultDecline && !declines {
				return "", nil
			}
			return c.kind, nil
		}
		x -= c.rate
	}
	return "", nil
}

// answerFault answers the request for the faults that commit nothing
// (error, timeout), counting them, and reports whether it did. The caller
// applies (and counts) drop and decline where they take effect.
func (s *Server) answerFault(w http.ResponseWriter, r *http.Request, fault FaultKind) bool {
	switch fault {
	case FaultError:
		s.fired(r, fault)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apiError{Type: ErrTypeAPI, Code: "service_unavailable",
			Message: "injected error: nothing was committed"})
		return true
	case FaultTimeout:
		s.fired(r, fault)
		if s.sleep(r.Context(), s.Faults().timeoutDelay()) {
			writeError(w, http.StatusGatewayTimeout, apiError{Type: ErrTypeAPI, Code: "timeout",
				Message: "injected timeout: nothing was committed"})
		}
		return true
	}
	return false
}

// lookupPrelude reads a lookup's key and applies the run-level latency and
// the request's FaultHeader. It reports false if the request was answered
// (or dropped).
func (s *Server) lookupPrelude(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.URL.Query().Get("idempotency_key")
	if key == "" {
		invalid(w, "the idempotency_key query parameter is required")
		return "", false
	}
	return key, s.readFaults(w, r)
}

// readFaults applies a read's FaultHeader and latency; it reports false
// if it answered (or dropped) the request.
func (s *Server) readFaults(w http.ResponseWriter, r *http.Request) bool {
	rf, ok := faultHeader(w, r)
	if !ok || !s.delay(r.Context(), rf.latency) {
		return false
	}
	switch rf.kind {
	case FaultError, FaultTimeout:
		return !s.answerFault(w, r, rf.kind)
	case FaultDrop:
		s.fired(r, FaultDrop)
		drop(w)
		return false
	}
	return true
}

// getShipments is GET /v1/shipments: ?reference=R&order_id=O finds the
// first shipment request of order O that set reference R (the warehouse
// seam's Find; the index never lags); ?idempotency_key=K looks one up by
// key (paysim's own lookup, which the warehouse seam no longer uses). A
// remembered out-of-stock failure answers 409 out_of_stock.
func (s *Server) getShipments(byKey http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ref, orderID := q.Get("reference"), q.Get("order_id")
		if ref == "" && orderID == "" {
			byKey(w, r)
			return
		}
		if ref == "" || orderID == "" {
			invalid(w, "the reference and order_id query parameters are required together")
			return
		}
		if !s.readFaults(w, r) {
			return
		}
		sh, err := s.ledger.ShipmentByReference(r.Context(), ref, orderID)
		if errors.Is(err, ErrNotFound) {
			writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound,
				Message: fmt.Sprintf("no shipment of order %q has reference %q", orderID, ref)})
			return
		}
		if err != nil {
			s.fail(w, err)
			return
		}
		writeShipment(w, sh, http.StatusOK, false)
	}
}

// getShipment is GET /v1/shipments/{id}: the shipment (or remembered
// out-of-stock failure, 409) with that id, or 404.
func (s *Server) getShipment(w http.ResponseWriter, r *http.Request) {
	if !s.readFaults(w, r) {
		return
	}
	sh, err := s.ledger.ShipmentByID(r.Context(), r.PathValue("id"))
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no shipment %q", r.PathValue("id"))})
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeShipment(w, sh, http.StatusOK, false)
}

func (s *Server) lookupFailed(w http.ResponseWriter, err error, what, key string) {
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, apiError{Type: ErrTypeNotFound, Message: fmt.Sprintf("no %s has idempotency key %q", what, key)})
		return
	}
	s.fail(w, err)
}

// delay waits the run-level latency plus extra, counting a latency fault if
// there is any. It reports false if the client went away first.
func (s *Server) delay(ctx context.Context, extra time.Duration) bool {
	d := s.Faults().Latency + extra
	if d <= 0 {
		return true
	}
	s.count(FaultLatency)
	return s.sleep(ctx, d)
}

// sleep waits d. It reports false if ctx ended first; StopDelays ends the
// wait early, reporting true.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stop:
		return ctx.Err() == nil
	case <-ctx.Done():
		s.abandoned.Add(1)
		return false
	}
}

func (s *Server) count(k FaultKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injected[k]++
}

// fired counts and logs a fault injected into r.
func (s *Server) fired(r *http.Request, k FaultKind) {
	s.count(k)
	key := r.Header.Get(IdempotencyKeyHeader)
	if r.Method == http.MethodGet {
		key = r.URL.Query().Get("idempotency_key")
	}
	s.log.Info("fault injected", "kind", string(k), "method", r.Method, "path", r.URL.Path, "idempotency_key", key)
}

// drop closes the connection without answering, after the outcome was
// committed: the client sees the connection end (EOF or a reset) and
// cannot tell whether anything happened.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the response instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// --- input and output

func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get(IdempotencyKeyHeader)
	switch {
	case key == "":
		invalid(w, "the "+IdempotencyKeyHeader+" header is required")
		return "", false
	case len(key) > maxKeyLen:
		invalid(w, fmt.Sprintf("the %s header is longer than %d bytes", IdempotencyKeyHeader, maxKeyLen))
		return "", false
	}
	return key, true
}

func faultHeader(w http.ResponseWriter, r *http.Request) (requestFaults, bool) {
	rf, err := parseFaultHeader(r.Header.Get(FaultHeader))
	if err != nil {
		invalid(w, err.Error())
		return rf, false
	}
	return rf, true
}

// decode reads one JSON value into v, rejecting unknown members, trailing
// data and bodies over the limit.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("trailing data after the JSON body")
	}
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, apiError{Type: ErrTypeInvalidRequest,
			Message: fmt.Sprintf("the body is larger than %d bytes", mbe.Limit)})
	default:
		invalid(w, "malformed JSON body: "+err.Error())
	}
	return false
}

// apiError is the member of an error body, {"error": apiError}.
type apiError struct {
	Type     string `json:"type"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	Charge   string `json:"charge,omitempty"`
	Shipment string `json:"shipment,omitempty"`
}

func invalid(w http.ResponseWriter, msg string) {
	writeError(w, http.StatusBadRequest, apiError{Type: ErrTypeInvalidRequest, Message: msg})
}

func keyReused(w http.ResponseWriter, what, key string) {
	writeError(w, http.StatusUnprocessableEntity, apiError{Type: ErrTypeIdempotency,
		Message: fmt.Sprintf("%s key %q was used before with different parameters", what, key)})
}

// fail answers an unexpected error: 503 if the ledger was busy, else 500.
// Either way nothing was committed.
func (s *Server) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apiError{Type: ErrTypeAPI, Code: "busy", Message: "the ledger is busy"})
		return
	}
	s.log.Error("internal error", "err", err)
	writeError(w, http.StatusInternalServerError, apiError{Type: ErrTypeAPI, Message: "internal error"})
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
