package stripesim

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly/orderly/internal/sqlitefile"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/testmode"
)

// APIVersion is the Stripe API version paysim's Stripe mode speaks and
// stamps on its events: the version stripe-go v85 pins (stripe.APIVersion),
// so that stripe-go's webhook package accepts the events.
const APIVersion = "2026-03-25.dahlia"

// Defaults of Config.
const (
	// DefaultIdempotencyRetention is how long a key's saved answer is kept:
	// Stripe prunes keys once they are at least 24 hours old
	// (docs.stripe.com/api/idempotent_requests).
	DefaultIdempotencyRetention = 24 * time.Hour
	// DefaultAuthorizationWindow is how long the authorization of a
	// manual-capture PaymentIntent lasts before Stripe cancels it
	// uncaptured: 7 days for online card payments
	// (docs.stripe.com/payments/place-a-hold-on-a-payment-method#auth-and-capture).
	DefaultAuthorizationWindow = 7 * 24 * time.Hour
	// DefaultSearchLag is how long a new PaymentIntent stays invisible to
	// search: "under normal operating conditions, data is searchable in
	// under 1 minute" (docs.stripe.com/search#data-freshness).
	DefaultSearchLag = time.Minute
)

// Headers.
const (
	IdempotencyKeyHeader = "Idempotency-Key"
	ReplayedHeader       = "Idempotent-Replayed"
	ShouldRetryHeader    = "Stripe-Should-Retry"
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// SecretKey, when set, is the only API key accepted; otherwise any
	// sk_test_ key is. An sk_live_ key is always refused.
	SecretKey string
	// Faults are the run-level faults, with the native API's meaning
	// adapted to Stripe (see the package documentation).
	Faults paysim.Faults
	// Commit500Rate is the fraction of new requests that commit, save a 500
	// under their key and answer it; LockTimeoutRate the fraction answered
	// 429 lock_timeout before the idempotency layer (nothing saved). They
	// add to the rates of Faults (the sum must be at most 1).
	Commit500Rate, LockTimeoutRate float64
	// IdempotencyRetention is how long saved answers are kept
	// (DefaultIdempotencyRetention when zero).
	IdempotencyRetention time.Duration
	// SearchLag is how long a new PaymentIntent is invisible to search
	// (DefaultSearchLag when zero; negative means none).
	SearchLag time.Duration
	// AuthorizationWindow is how long an uncaptured authorization lasts
	// (DefaultAuthorizationWindow when zero): its charge's
	// payment_method_details.card.capture_before is the confirm's time plus
	// the window, and once that passes the PaymentIntent is canceled with
	// cancellation_reason "automatic", its charge released, and
	// payment_intent.canceled is sent, as Stripe does.
	AuthorizationWindow time.Duration
	// Webhooks configures Stripe-signed event delivery.
	Webhooks WebhookConfig
	// Logger receives fault and error lines; nil discards.
	Logger *slog.Logger
	// MaxBodyBytes limits request bodies (paysim.DefaultMaxBodyBytes when
	// zero).
	MaxBodyBytes int64
	// Now is the clock (time.Now when nil); tests move it to age keys and
	// the search index.
	Now func() time.Time
}

// Server is paysim's Stripe mode: the PaymentIntents subset of Stripe's
// v1 API over the paysim ledger's file, in front of a native paysim
// Server that keeps serving the warehouse (/v1/shipments) and /healthz.
type Server struct {
	db      *sql.DB
	ledger  *paysim.Ledger
	native  *paysim.Server
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	hooks   *webhooks
	stop    chan struct{}
	stopped sync.Once

	mu       sync.Mutex
	faults   paysim.Faults
	extra    [2]float64 // commit500, lockTimeout
	rng      *rand.Rand
	injected map[paysim.FaultKind]int64

	requests atomic.Int64
	claims   atomic.Int64
}

// New returns the Stripe mode over ledger's file, passing every route it
// does not serve to native. It clears the keys of requests that were still
// executing when the process last stopped (their work rolled back with
// them: a request's effect and its saved answer commit together).
func New(ctx context.Context, ledger *paysim.Ledger, native *paysim.Server, c Config) (*Server, error) {
	if err := validateFaults(c.Faults, c.Commit500Rate, c.LockTimeoutRate); err != nil {
		return nil, err
	}
	if err := c.Webhooks.Faults.Validate(); err != nil {
		return nil, err
	}
	if c.IdempotencyRetention <= 0 {
		c.IdempotencyRetention = DefaultIdempotencyRetention
	}
	if c.SearchLag == 0 {
		c.SearchLag = DefaultSearchLag
	}
	if c.AuthorizationWindow <= 0 {
		c.AuthorizationWindow = DefaultAuthorizationWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = paysim.DefaultMaxBodyBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{db: ledger.DB(), ledger: ledger, native: native, cfg: c, log: c.Logger, mux: http.NewServeMux(),
		stop: make(chan struct{}), injected: map[paysim.FaultKind]int64{}}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM stripe_idempotency WHERE status IS NULL`); err != nil {
		return nil, fmt.Errorf("stripesim: %w", err)
	}
	s.setFaults(c.Faults, c.Commit500Rate, c.LockTimeoutRate)
	s.hooks = newWebhooks(c.Webhooks, s.log, s.stop)
	m := s.mux
	m.HandleFunc("POST /v1/payment_intents", s.post("payment_intents.create", createParams, s.createIntent))
	m.HandleFunc("GET /v1/payment_intents", s.get(listIntentParams, s.listIntents))
	m.HandleFunc("GET /v1/payment_intents/search", s.get(searchParams, s.searchIntents))
	m.HandleFunc("GET /v1/payment_intents/{id}", s.get(retrieveParams, s.retrieveIntent))
	m.HandleFunc("POST /v1/payment_intents/{id}/confirm", s.post("payment_intents.confirm", confirmParams, s.confirmIntent))
	m.HandleFunc("POST /v1/payment_intents/{id}/capture", s.post("payment_intents.capture", captureParams, s.captureIntent))
	m.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.post("payment_intents.cancel", cancelParams, s.cancelIntent))
	m.HandleFunc("POST /v1/refunds", s.post("refunds.create", refundParams, s.createRefund))
	m.HandleFunc("GET /v1/refunds", s.get(listRefundParams, s.listRefunds))
	m.HandleFunc("GET /v1/refunds/{id}", s.get(retrieveParams, s.retrieveRefund))
	m.HandleFunc("/v1/charges", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, stripeError{Type: typeInvalidRequest,
			Message: "paysim in Stripe mode does not serve the native /v1/charges; use /v1/payment_intents"})
	})
	m.HandleFunc("GET /admin/ledger", s.adminLedger)
	m.HandleFunc("GET /admin/stats", s.adminStats)
	m.HandleFunc("GET /admin/faults", s.adminGetFaults)
	m.HandleFunc("PUT /admin/faults", s.adminPutFaults)
	m.HandleFunc("GET /admin/stripe/faults", s.adminGetStripeFaults)
	m.HandleFunc("PUT /admin/stripe/faults", s.adminPutStripeFaults)
	m.HandleFunc("GET /admin/stripe/ledger", s.adminStripeLedger)
	m.HandleFunc("POST /admin/stripe/payment_intents/{id}/authenticate", s.adminComplete(kind3DS))
	m.HandleFunc("POST /admin/stripe/payment_intents/{id}/settle", s.adminComplete(kindBankDebit))
	m.HandleFunc("POST /admin/stripe/refunds/{id}/fail", s.adminFailRefund)
	m.Handle("/", native)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		s.requests.Add(1)
		if err := s.ExpireAuthorizations(r.Context()); err != nil && r.Context().Err() == nil {
			// The request is served anyway (a capture checks capture_before
			// itself); the next request sweeps again.
			s.log.Warn("stripesim: expiring authorizations", "err", err)
		}
	}
	s.mux.ServeHTTP(w, r)
}

// ExpireAuthorizations cancels every PaymentIntent in requires_capture
// whose charge's capture_before has passed (by Config.Now), as Stripe
// cancels an authorization left uncaptured past its window
// (docs.stripe.com/payments/place-a-hold-on-a-payment-method): status
// canceled, cancellation_reason "automatic", amount_capturable 0, nothing
// received, and a payment_intent.canceled event each. It runs before every
// /v1/ request, so a read never shows an expired authorization as
// capturable (should it fail, the request is served and the failure
// logged; a capture still refuses an authorization past capture_before);
// it returns the first error.
func (s *Server) ExpireAuthorizations(ctx context.Context) error {
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	var ids []string
	rows, err := s.db.QueryContext(ctx, `SELECT payment_intent FROM stripe_charges
		WHERE capture_before IS NOT NULL AND captured = 0 AND capture_before <= ?`, micros(now))
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(ids) == 0 {
		return err
	}
	c := &call{ctx: ctx, form: url.Values{}, now: now}
	err = sqlitefile.InTx(ctx, s.db, func(tx *sql.Tx) error {
		c.tx, c.events = tx, nil
		for _, id := range ids {
			pi, err := loadIntent(c, id)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE stripe_charges SET capture_before = NULL WHERE payment_intent = ? AND captured = 0`, id); err != nil {
				return err
			}
			if pi.Status != "requires_capture" {
				continue
			}
			pi.Status, pi.CanceledAt, pi.CancellationReason, pi.AmountCapturable = "canceled", now, "automatic", 0
			if err := saveIntent(c, pi); err != nil {
				return err
			}
			c.emit("payment_intent.canceled", pi.json(nil))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ev := range c.events {
		s.hooks.emit(ev)
	}
	return nil
}

// StopDelays ends injected delays and pending webhook deliveries (call at
// shutdown, with the native server's).
func (s *Server) StopDelays() {
	s.stopped.Do(func() { close(s.stop) })
	s.native.StopDelays()
}

// SetFaults replaces the run-level faults.
func (s *Server) SetFaults(f paysim.Faults, commit500, lockTimeout float64) error {
	if err := validateFaults(f, commit500, lockTimeout); err != nil {
		return err
	}
	s.setFaults(f, commit500, lockTimeout)
	return nil
}

func validateFaults(f paysim.Faults, commit500, lockTimeout float64) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if !(commit500 >= 0 && commit500 <= 1 && lockTimeout >= 0 && lockTimeout <= 1) {
		return errors.New("stripesim: commit-500 and lock-timeout rates must be in [0, 1]")
	}
	if f.ErrorRate+f.TimeoutRate+f.DropRate+f.DeclineRate+commit500+lockTimeout > 1+1e-9 {
		return errors.New("stripesim: the fault rates must sum to at most 1")
	}
	return nil
}

func (s *Server) setFaults(f paysim.Faults, commit500, lockTimeout float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.extra = f, [2]float64{commit500, lockTimeout}
	s.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x5354524950450000))
}

// --- faults

type faultKind string

const (
	faultNone        faultKind = ""
	faultError       faultKind = "error"        // save and answer a 500 before executing
	faultCommit500   faultKind = "commit_500"   // execute, save and answer a 500
	faultDrop        faultKind = "drop"         // execute, save the answer, close the connection
	faultTimeout     faultKind = "timeout"      // hold, save nothing, close the connection
	faultLockTimeout faultKind = "lock_timeout" // 429 lock_timeout before the idempotency layer
	faultDecline     faultKind = "decline"      // decline a confirmation card_declined/generic_decline
)

// parseFaultHeader reads paysim.FaultHeader in Stripe mode: at most one of
// error, commit-500, drop-after-commit, timeout, lock-timeout, decline, and
// latency=<duration>.
func parseFaultHeader(v string) (faultKind, time.Duration, error) {
	kind, lat := faultNone, time.Duration(0)
	for tok := range strings.SplitSeq(v, ",") {
		tok = strings.TrimSpace(tok)
		var k faultKind
		switch {
		case tok == "":
			continue
		case strings.HasPrefix(tok, "latency="):
			d, err := time.ParseDuration(strings.TrimPrefix(tok, "latency="))
			if err != nil || d < 0 || d > paysim.MaxDelay {
				return kind, lat, fmt.Errorf("%s: %q is not a duration in [0, %s]", paysim.FaultHeader, tok, paysim.MaxDelay)
			}
			lat += d
			continue
		case tok == "error" || tok == "500":
			k = faultError
		case tok == "commit-500":
			k = faultCommit500
		case tok == "drop-after-commit" || tok == "drop":
			k = faultDrop
		case tok == "timeout":
			k = faultTimeout
		case tok == "lock-timeout" || tok == "429":
			k = faultLockTimeout
		case tok == "decline":
			k = faultDecline
		default:
			return kind, lat, fmt.Errorf("%s: unknown fault %q; want error, commit-500, drop-after-commit, timeout, lock-timeout, decline or latency=<duration>", paysim.FaultHeader, tok)
		}
		if kind != faultNone && kind != k {
			return kind, lat, errors.New(paysim.FaultHeader + ": at most one fault besides latency")
		}
		kind = k
	}
	return kind, lat, nil
}

// draw picks the run-level fault of a new POST.
func (s *Server) draw() faultKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	rates := []struct {
		k faultKind
		r float64
	}{{faultError, f.ErrorRate}, {faultTimeout, f.TimeoutRate}, {faultDrop, f.DropRate}, {faultDecline, f.DeclineRate},
		{faultCommit500, s.extra[0]}, {faultLockTimeout, s.extra[1]}}
	sum := 0.0
	for _, r := range rates {
		sum += r.r
	}
	if sum == 0 {
		return faultNone
	}
	x := s.rng.Float64()
	for _, r := range rates {
		if x < r.r {
			return r.k
		}
		x -= r.r
	}
	return faultNone
}

// statKind maps a fault to its key in Stats.FaultsInjected.
func statKind(k faultKind) paysim.FaultKind {
	if k == faultTimeout {
		return paysim.FaultTimeout
	}
	return paysim.FaultKind(k)
}

func (s *Server) fired(r *http.Request, k faultKind) {
	s.mu.Lock()
	s.injected[statKind(k)]++
	s.mu.Unlock()
	s.log.Info("fault injected", "kind", string(k), "method", r.Method, "path", r.URL.Path,
		"idempotency_key", r.Header.Get(IdempotencyKeyHeader))
}

// sleep waits d; false if ctx ended first. StopDelays ends it early (true).
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stop:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

func (s *Server) latency(r *http.Request, extra time.Duration) bool {
	d := s.currentFaults().Latency + extra
	if d > 0 {
		s.mu.Lock()
		s.injected[paysim.FaultLatency]++
		s.mu.Unlock()
	}
	return s.sleep(r.Context(), d)
}

func (s *Server) currentFaults() paysim.Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// --- the request pipeline

// call is one executing request.
type call struct {
	ctx    context.Context
	tx     *sql.Tx
	r      *http.Request
	form   url.Values
	now    time.Time
	key    string
	events []event
	// window is how long an authorization (a manual capture's confirmed
	// charge) lasts: Config.AuthorizationWindow.
	window time.Duration
	// fault is set by an operation whose payment method triggers a one-shot
	// fault (faultError and faultTimeout: the operation changed nothing but
	// the fired mark).
	fault faultKind
	// injectDecline asks the operation to decline a confirmation
	// (card_declined/generic_decline) whatever the payment method;
	// declined reports that it did.
	injectDecline, declined bool
}

type opFunc func(c *call) (int, any, error)

// errAnswered wraps an answer an operation gives: an error status and
// body. The operation's writes roll back; the answer is saved.
type answered struct {
	status int
	body   stripeError
}

func (a *answered) Error() string { return a.body.Message }

// post serves a POST: authentication, parameter validation (neither saves
// anything), the rate limiter (lock_timeout), then Stripe's idempotency
// layer: the first request that begins executing under a key saves its
// status and body, replayed with Idempotent-Replayed: true to every later
// request with the same key and parameters (500s included); other
// parameters or another endpoint → 400 idempotency_error; a key whose first
// request still executes → 409 idempotency_key_in_use; a key older than the
// retention is pruned and starts a new request.
// docs.stripe.com/api/idempotent_requests, docs.stripe.com/error-low-level.
func (s *Server) post(endpoint string, spec paramSpec, op opFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.auth(w, r) {
			return
		}
		form, ok := s.form(w, r, spec)
		if !ok {
			return
		}
		kind, lat, err := parseFaultHeader(r.Header.Get(paysim.FaultHeader))
		if err != nil {
			invalid(w, "", err.Error())
			return
		}
		if !s.latency(r, lat) {
			return
		}
		key := strings.TrimSpace(r.Header.Get(IdempotencyKeyHeader))
		if len(key) > 255 {
			invalid(w, "", "Idempotency-Key must be at most 255 characters long")
			return
		}
		if kind == faultNone {
			kind = s.draw()
		}
		if kind == faultLockTimeout {
			s.fired(r, kind)
			w.Header().Set(ShouldRetryHeader, "true")
			writeError(w, http.StatusTooManyRequests, stripeError{Type: typeInvalidRequest, Code: "lock_timeout",
				Message: "This object cannot be accessed right now because another API request or Stripe process is currently accessing it. If you see this error intermittently, retry the request. (paysim: injected)"})
			return
		}
		now := s.cfg.Now().UTC().Truncate(time.Microsecond)
		fp := fingerprint(r.URL.Path, form)
		if key != "" {
			saved, err := s.claim(r.Context(), key, endpoint+" "+r.URL.Path, fp, now)
			var a *answered
			switch {
			case errors.As(err, &a):
				if a.status == http.StatusConflict {
					w.Header().Set(ShouldRetryHeader, "true")
				}
				writeError(w, a.status, a.body)
				return
			case err != nil:
				s.internal(w, err)
				return
			case saved != nil:
				w.Header().Set(ReplayedHeader, "true")
				if saved.status >= 500 {
					w.Header().Set(ShouldRetryHeader, "false")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(saved.status)
				_, _ = w.Write(saved.body)
				return
			}
		}
		s.execute(w, r, key, form, now, kind, op)
	}
}

type savedAnswer struct {
	status int
	body   []byte
}

// claim looks key up: a saved answer to replay, an answered error (400
// idempotency_error, 409 idempotency_key_in_use), or nil, nil when this
// request claimed the key (status NULL: executing).
func (s *Server) claim(ctx context.Context, key, endpoint, fp string, now time.Time) (*savedAnswer, error) {
	if s.claims.Add(1)%256 == 0 {
		_, _ = s.db.ExecContext(ctx, `DELETE FROM stripe_idempotency WHERE status IS NOT NULL AND created_at < ?`,
			micros(now.Add(-s.cfg.IdempotencyRetention)))
	}
	var out *savedAnswer
	err := sqlitefile.InTx(ctx, s.db, func(tx *sql.Tx) error {
		var ep, f string
		var status sql.NullInt64
		var body []byte
		var created int64
		err := tx.QueryRowContext(ctx, `SELECT endpoint, fingerprint, status, body, created_at FROM stripe_idempotency
			WHERE idempotency_key = ?`, key).Scan(&ep, &f, &status, &body, &created)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case status.Valid && fromMicros(created).Before(now.Add(-s.cfg.IdempotencyRetention)):
			// Pruned: the key starts a new request.
			if _, err := tx.ExecContext(ctx, `DELETE FROM stripe_idempotency WHERE idempotency_key = ?`, key); err != nil {
				return err
			}
		case ep != endpoint:
			return &answered{http.StatusBadRequest, stripeError{Type: typeIdempotency, Code: "idempotency_key_in_use",
				Message: fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", endpointPath(ep), endpointPath(endpoint), key)}}
		case f != fp:
			return &answered{http.StatusBadRequest, stripeError{Type: typeIdempotency,
				Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)}}
		case !status.Valid:
			return &answered{http.StatusConflict, stripeError{Type: typeInvalidRequest, Code: "idempotency_key_in_use",
				Message: "There is currently another in-progress request using this Idempotency Key (that probably means you submitted twice, and the other request is still going through): " + key + ". Please try again later."}}
		default:
			out = &savedAnswer{status: int(status.Int64), body: body}
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO stripe_idempotency (idempotency_key, endpoint, fingerprint, created_at)
			VALUES (?, ?, ?, ?)`, key, endpoint, fp, micros(now))
		return err
	})
	return out, err
}

func endpointPath(ep string) string {
	_, p, _ := strings.Cut(ep, " ")
	return p
}

// release forgets a claimed key whose request saved nothing.
func (s *Server) release(key string) {
	if key == "" {
		return
	}
	if _, err := s.db.ExecContext(context.Background(), `DELETE FROM stripe_idempotency WHERE idempotency_key = ? AND status IS NULL`, key); err != nil {
		s.log.Error("release idempotency key", "key", key, "err", err)
	}
}

// execute runs op and saves its answer under key in one transaction, then
// applies the fault and answers.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, key string, form url.Values, now time.Time, kind faultKind, op opFunc) {
	ctx := context.WithoutCancel(r.Context())
	switch kind {
	case faultTimeout:
		s.fired(r, kind)
		s.sleep(r.Context(), timeoutDelay(s.currentFaults()))
		s.release(key)
		drop(w)
		return
	case faultError:
		s.fired(r, kind)
		s.answerSaved(w, key, http.StatusInternalServerError, errorBody(apiErrorNothing), true)
		return
	}
	var status int
	var body []byte
	c := &call{ctx: ctx, r: r, form: form, now: now, key: key, injectDecline: kind == faultDecline, window: s.cfg.AuthorizationWindow}
	err := sqlitefile.InTx(ctx, s.db, func(tx *sql.Tx) error {
		c.tx, c.events, c.fault, c.declined = tx, nil, faultNone, false
		st, v, err := op(c)
		var a *answered
		switch {
		case errors.As(err, &a):
			// The operation's own writes are kept only for a decline
			// (answered by the op with a nil error); an answered error
			// rolls back but is saved, so save it in this transaction
			// after undoing nothing: ops return answered only before
			// writing.
			st, v = a.status, struct {
				Error stripeError `json:"error"`
			}{a.body}
		case err != nil:
			return err
		}
		if c.fault == faultTimeout {
			return nil // only the fired mark is written
		}
		if c.fault == faultError {
			st, v = http.StatusInternalServerError, errorBody(apiErrorNothing)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		status, body = st, b
		if c.fault == faultCommit500 || (kind == faultCommit500 && st < 300) {
			status, body = http.StatusInternalServerError, mustJSON(errorBody(apiErrorCommitted))
		}
		if key != "" {
			_, err = tx.ExecContext(ctx, `UPDATE stripe_idempotency SET status = ?, body = ? WHERE idempotency_key = ?`, status, body, key)
		}
		return err
	})
	if err != nil {
		s.release(key)
		s.internal(w, err)
		return
	}
	for _, ev := range c.events {
		s.hooks.emit(ev)
	}
	switch {
	case c.fault == faultTimeout:
		s.fired(r, faultTimeout)
		s.sleep(r.Context(), timeoutDelay(s.currentFaults()))
		s.release(key)
		drop(w)
		return
	case c.fault == faultError:
		s.fired(r, faultError)
	case c.fault == faultCommit500 || (kind == faultCommit500 && status == http.StatusInternalServerError):
		s.fired(r, faultCommit500)
	case c.fault == faultDrop || kind == faultDrop:
		s.fired(r, faultDrop)
		drop(w)
		return
	case c.declined:
		s.fired(r, faultDecline)
	}
	if status >= 500 {
		w.Header().Set(ShouldRetryHeader, "false")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// answerSaved saves status and body under key (when there is one) and
// answers them.
func (s *Server) answerSaved(w http.ResponseWriter, key string, status int, v any, shouldRetryFalse bool) {
	b := mustJSON(v)
	if key != "" {
		if _, err := s.db.ExecContext(context.Background(), `UPDATE stripe_idempotency SET status = ?, body = ? WHERE idempotency_key = ?`, status, b, key); err != nil {
			s.release(key)
			s.internal(w, err)
			return
		}
	}
	if shouldRetryFalse {
		w.Header().Set(ShouldRetryHeader, "false")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// get serves a GET: authentication, parameters, latency.
func (s *Server) get(spec paramSpec, op func(w http.ResponseWriter, r *http.Request, q url.Values)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.auth(w, r) {
			return
		}
		q, ok := s.form(w, r, spec)
		if !ok {
			return
		}
		_, lat, err := parseFaultHeader(r.Header.Get(paysim.FaultHeader))
		if err != nil {
			invalid(w, "", err.Error())
			return
		}
		if !s.latency(r, lat) {
			return
		}
		op(w, r, q)
	}
}

// auth checks the API key: Authorization: Bearer <key>, or HTTP Basic with
// the key as user name (curl -u sk_test_…:). docs.stripe.com/api/authentication.
func (s *Server) auth(w http.ResponseWriter, r *http.Request) bool {
	key := ""
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		key = strings.TrimSpace(v)
	} else if u, _, ok := r.BasicAuth(); ok {
		key = u
	}
	switch {
	case key == "":
		writeError(w, http.StatusUnauthorized, stripeError{Type: typeInvalidRequest,
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."})
		return false
	case !strings.HasPrefix(key, "sk_test_") || (s.cfg.SecretKey != "" && key != s.cfg.SecretKey):
		writeError(w, http.StatusUnauthorized, stripeError{Type: typeInvalidRequest, Code: "api_key_invalid",
			Message: "Invalid API Key provided: " + redact(key) + " (paysim accepts sk_test_ keys only)"})
		return false
	}
	return true
}

func redact(k string) string {
	if len(k) <= 12 {
		return strings.Repeat("*", len(k))
	}
	return k[:8] + strings.Repeat("*", len(k)-12) + k[len(k)-4:]
}

// fingerprint is the hash of the path and the canonical form parameters.
func fingerprint(path string, form url.Values) string {
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write([]byte(form.Encode())) // Encode sorts by key
	return hex.EncodeToString(h.Sum(nil))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// --- errors (docs.stripe.com/api/errors)

const (
	typeAPI            = "api_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeInvalidRequest = "invalid_request_error"
)

type stripeError struct {
	Type          string  `json:"type"`
	Code          string  `json:"code,omitempty"`
	DeclineCode   string  `json:"decline_code,omitempty"`
	Message       string  `json:"message,omitempty"`
	Param         string  `json:"param,omitempty"`
	Charge        string  `json:"charge,omitempty"`
	PaymentIntent *piJSON `json:"payment_intent,omitempty"`
	PaymentMethod any     `json:"payment_method,omitempty"`
	DocURL        string  `json:"doc_url,omitempty"`
}

const (
	apiErrorNothing   = "An unknown error occurred (paysim: injected before anything moved)"
	apiErrorCommitted = "An unknown error occurred (paysim: injected after the request committed)"
)

func errorBody(msg string) any {
	return struct {
		Error stripeError `json:"error"`
	}{stripeError{Type: typeAPI, Message: msg}}
}

func writeError(w http.ResponseWriter, status int, e stripeError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(struct {
		Error stripeError `json:"error"`
	}{e}))
}

func invalid(w http.ResponseWriter, param, msg string) {
	writeError(w, http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Param: param, Message: msg})
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("internal error", "err", err)
	writeError(w, http.StatusInternalServerError, stripeError{Type: typeAPI, Message: "internal error; nothing was saved under the key"})
}

// newID returns a Stripe-shaped id: prefix, "_" and 24 hex digits.
func newID(prefix string) string { return testmode.NewID(prefix + "_") }

// timeoutDelay is how long a timeout fault holds a request.
func timeoutDelay(f paysim.Faults) time.Duration {
	if f.TimeoutDelay == 0 {
		return paysim.DefaultTimeoutDelay
	}
	return f.TimeoutDelay
}
