package fulfillment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/orderly/orderly/internal/provhttp"
	"github.com/orderly/orderly/order"
)

// DefaultHTTPTimeout is the per-call timeout of an HTTPWarehouse without
// WithTimeout.
const DefaultHTTPTimeout = 5 * time.Second

// HTTPWarehouse is a Warehouse that talks to a warehouse over HTTP, such as
// paysim: POST /v1/shipments with an Idempotency-Key header, GET
// /v1/shipments?idempotency_key=K for Lookup.
//
// Its errors, all *WarehouseError except not-found, follow these rules, in
// order:
//
//   - 2xx is success.
//   - 409 with error type "out_of_stock" wraps ErrOutOfStock; final.
//   - 404 from a lookup wraps ErrShipmentNotFound; 422 with error type
//     "idempotency_error" wraps ErrIdempotencyKeyReused; final.
//   - 408 and 429 are retryable (the warehouse did not take the request);
//     every other 4xx is final.
//   - 5xx is retryable: a well-behaved warehouse commits nothing when it
//     answers 5xx.
//   - A failure before the request was fully written (a dial error,
//     connection refused, the caller's context ending first) is retryable,
//     wrapping the cause: nothing was sent.
//   - A failure after the request was written (a timeout, a reset or closed
//     connection while awaiting the answer, a 2xx whose body cannot be read)
//     leaves the outcome unknown: a non-retryable error wrapping
//     ErrUnknownOutcome (and the context error, if that was the cause), for
//     which IsRetryable is false and IsUnknownOutcome true. Call Lookup, or
//     repeat the call with the same idempotency key.
//   - Lookup changes nothing, so for Lookup that last case is retryable too.
//
// The warehouse client never lets net/http resend a request by itself, so
// every failure is reported to the caller. An HTTPWarehouse is safe for
// concurrent use.
type HTTPWarehouse struct {
	c *provhttp.Client
	// Set by the options, then handed to c.
	client  *http.Client
	timeout time.Duration
}

var _ Warehouse = (*HTTPWarehouse)(nil)

// HTTPOption configures an HTTPWarehouse.
type HTTPOption func(*HTTPWarehouse)

// WithTimeout sets the timeout of each call, from sending the request to
// reading the whole answer. Non-positive values are ignored; the default is
// DefaultHTTPTimeout.
func WithTimeout(d time.Duration) HTTPOption {
	return func(w *HTTPWarehouse) {
		if d > 0 {
			w.timeout = d
		}
	}
}

// WithHTTPClient sets the client that sends the requests. The default is a
// client on http.DefaultTransport that does not follow redirects.
func WithHTTPClient(c *http.Client) HTTPOption {
	return func(w *HTTPWarehouse) {
		if c != nil {
			w.client = c
		}
	}
}

// NewHTTPWarehouse returns a Warehouse for the warehouse at baseURL, an http
// or https URL such as "http://127.0.0.1:8090".
func NewHTTPWarehouse(baseURL string, opts ...HTTPOption) (*HTTPWarehouse, error) {
	w := &HTTPWarehouse{timeout: DefaultHTTPTimeout}
	for _, o := range opts {
		o(w)
	}
	c, err := provhttp.New(baseURL, w.timeout, w.client)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: warehouse %w", err) // "fulfillment: warehouse URL ... must be"
	}
	w.c = c
	return w, nil
}

// Ship implements Warehouse with POST /v1/shipments. An empty
// IdempotencyKey or no Items fails with a final *WarehouseError without a
// call.
func (w *HTTPWarehouse) Ship(ctx context.Context, req ShipmentRequest) (Shipment, error) {
	switch {
	case req.IdempotencyKey == "":
		return Shipment{}, &WarehouseError{Err: errors.New("idempotency key is required")}
	case len(req.Items) == 0:
		return Shipment{}, &WarehouseError{Err: errors.New("a shipment needs at least one item")}
	}
	ans, err := w.call(ctx, http.MethodPost, "/v1/shipments", req.IdempotencyKey, wireShipmentRequest{
		OrderID: req.OrderID, Items: req.Items,
	})
	if err != nil {
		return Shipment{}, err
	}
	var s wireShipment
	if err := ans.result(&s, true, nil); err != nil {
		return Shipment{}, err
	}
	return s.shipment(), nil
}

// Lookup implements Warehouse with GET /v1/shipments?idempotency_key=K.
func (w *HTTPWarehouse) Lookup(ctx context.Context, idempotencyKey string) (Shipment, error) {
	if idempotencyKey == "" {
		return Shipment{}, &WarehouseError{Err: errors.New("idempotency key is required")}
	}
	ans, err := w.call(ctx, http.MethodGet, "/v1/shipments?idempotency_key="+url.QueryEscape(idempotencyKey), "", nil)
	if err != nil {
		return Shipment{}, err
	}
	var s wireShipment
	if err := ans.result(&s, false, ErrShipmentNotFound); err != nil {
		return Shipment{}, err
	}
	return s.shipment(), nil
}

// answer is the warehouse's reply to one call.
type answer provhttp.Answer

// call sends one request and returns the answer, or the classified error of
// a call that got none (see HTTPWarehouse).
func (w *HTTPWarehouse) call(ctx context.Context, method, path, key string, body any) (answer, error) {
	a, err := w.c.Do(ctx, method, path, key, body)
	var se *provhttp.SendError
	switch {
	case err == nil:
		return answer(a), nil
	case !errors.As(err, &se):
		return answer{}, &WarehouseError{Err: err}
	case se.Sent && method != http.MethodGet:
		return answer{}, unknownOutcome(se.Err)
	default:
		return answer{}, &WarehouseError{Retryable: true, Err: se.Err}
	}
}

// result classifies a, decoding a 2xx into v. effect says whether the call
// changes something (so that an unreadable success leaves the outcome
// unknown); notFound, if not nil, is wrapped by the error of a 404.
func (a answer) result(v any, effect bool, notFound error) error {
	var e wireError
	_ = json.Unmarshal(a.Body, &e)
	detail := fmt.Sprintf("warehouse answered %d", a.Status)
	if e.Error.Type != "" {
		detail += " " + e.Error.Type
	}
	if e.Error.Message != "" {
		detail += ": " + e.Error.Message
	}
	switch s := a.Status; {
	case s >= 200 && s < 300:
		err := a.ReadErr
		if err == nil {
			err = json.Unmarshal(a.Body, v)
		}
		if err == nil {
			return nil
		}
		err = fmt.Errorf("reading the %d answer: %w", s, err)
		if effect {
			return unknownOutcome(err)
		}
		return &WarehouseError{Retryable: true, Err: err}
	case s == http.StatusConflict && e.Error.Type == "out_of_stock":
		return &WarehouseError{Err: fmt.Errorf("%w: %s", ErrOutOfStock, e.Error.Message)}
	case s == http.StatusNotFound && notFound != nil:
		return fmt.Errorf("%w: %s", notFound, detail)
	case s == http.StatusUnprocessableEntity && e.Error.Type == "idempotency_error":
		return &WarehouseError{Err: fmt.Errorf("%s: %w", detail, ErrIdempotencyKeyReused)}
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests:
		return &WarehouseError{Retryable: true, Err: errors.New(detail)}
	case s >= 400 && s < 500:
		return &WarehouseError{Err: errors.New(detail)}
	case s >= 500 && s < 600:
		return &WarehouseError{Retryable: true, Err: errors.New(detail)}
	case effect:
		return unknownOutcome(errors.New(detail))
	default:
		return &WarehouseError{Retryable: true, Err: errors.New(detail)}
	}
}

// Wire forms of the warehouse's API.
type (
	wireShipmentRequest struct {
		OrderID string       `json:"order_id"`
		Items   []order.Item `json:"items"`
	}
	wireShipment struct {
		ID             string    `json:"id"`
		IdempotencyKey string    `json:"idempotency_key"`
		OrderID        string    `json:"order_id"`
		CreatedAt      time.Time `json:"created_at"`
	}
	wireError struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
)

func (s wireShipment) shipment() Shipment {
	return Shipment{ID: s.ID, IdempotencyKey: s.IdempotencyKey, OrderID: s.OrderID, CreatedAt: s.CreatedAt.UTC()}
}
