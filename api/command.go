package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/service"
)

// Command is one operation that arrives by another way than HTTP (a message
// bus): the tenant it acts for (already authenticated by the caller), the
// order, the operation ("pay", "fulfill" or "cancel"), the idempotency key
// and the body the HTTP request would carry.
type Command struct {
	TenantID string
	OrderID  string
	Op       string
	Key      string
	Body     []byte
}

// CommandResult is what running a Command answered: the HTTP status the
// same request would get, the problem when it failed, and Retry-After in
// seconds (0: none).
type CommandResult struct {
	Status     int
	Problem    *Problem
	RetryAfter int
}

// Commands runs Commands through the same handlers as the HTTP API: the same
// strict decoding, validation and problem codes, and the same fingerprint —
// a command and an HTTP request with one key and one body are one request
// to the idempotency ledger.
type Commands struct {
	router chi.Router
}

// NewCommands returns a Commands runner over svc with cfg (its APIKeys are
// not used: the caller authenticated the tenant).
func NewCommands(svc *service.Service, cfg Config) *Commands {
	s := newServer(svc, cfg)
	r := chi.NewRouter()
	r.Post("/v1/orders/{id}/pay", s.payOrder)
	r.Post("/v1/orders/{id}/fulfill", s.fulfillOrder)
	r.Post("/v1/orders/{id}/cancel", s.cancelOrder)
	return &Commands{router: r}
}

// Run runs c and returns the result. An operation other than pay, fulfill
// or cancel is a 404.
func (cs *Commands) Run(ctx context.Context, c Command) CommandResult {
	ctx = context.WithValue(ctx, tenantKey{}, c.TenantID)
	path := "/v1/orders/" + c.OrderID + "/" + c.Op
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", bytes.NewReader(c.Body))
	if err != nil {
		return CommandResult{Status: http.StatusBadRequest, Problem: &Problem{Type: ProblemBaseURI + string(apperr.EInvalid),
			Status: http.StatusBadRequest, Detail: "the command cannot be expressed as a request"}}
	}
	req.URL.Path = path
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerKey, c.Key)
	w := &recorder{header: http.Header{}}
	cs.router.ServeHTTP(w, req)
	res := CommandResult{Status: w.status}
	if res.Status == 0 {
		res.Status = http.StatusOK
	}
	if res.Status >= 400 {
		var p Problem
		if json.Unmarshal(w.body.Bytes(), &p) == nil {
			res.Problem = &p
		}
		res.RetryAfter, _ = strconv.Atoi(w.header.Get("Retry-After"))
	}
	return res
}

// recorder is the http.ResponseWriter Commands.Run answers into.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
