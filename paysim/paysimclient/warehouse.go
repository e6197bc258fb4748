package paysimclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/internal/provhttp"
	"github.com/orderly/orderly/paysim/paysimwire"
)

// Warehouse is a fulfillment.Warehouse over paysim's HTTP API: POST
// /v1/shipments with an Idempotency-Key header and the request's reference
// key in the body; GET /v1/shipments?reference=R&order_id=O for Find (paysim's
// index never lags); GET /v1/shipments/{id} for Retrieve. It never looks a
// request up by idempotency key.
//
// Its errors, all *fulfillment.WarehouseError except not-found, follow these
// rules, in order:
//
//   - 2xx is success.
//   - 409 with error type "out_of_stock" wraps fulfillment.ErrOutOfStock;
//     final.
//   - 404 from Find or Retrieve wraps fulfillment.ErrShipmentNotFound; 422 with
//     error type "idempotency_error" wraps
//     fulfillment.ErrIdempotencyKeyReused; final.
//   - 408 and 429 are retryable (paysim did not take the request); every
//     other 4xx is final.
//   - 5xx is retryable: paysim commits nothing when it answers 5xx.
//   - A failure before the request was fully written (a dial error,
//     connection refused, the caller's context ending first) is retryable,
//     wrapping the cause: nothing was sent.
//   - A failure after the request was written (a timeout, a reset or closed
//     connection while awaiting the answer, a 2xx whose body cannot be read)
//     leaves the outcome unknown: a non-retryable error wrapping
//     fulfillment.ErrUnknownOutcome (and the context error, if that was the
//     cause), for which fulfillment.IsRetryable is false and
//     fulfillment.IsUnknownOutcome true. Call Find with the request's
//     Reference, or repeat the call with the same idempotency key.
//   - Find and Retrieve change nothing, so for them that last case is
//     retryable too.
//
// The Warehouse never lets net/http resend a request by itself, so every
// failure is reported to the caller. A Warehouse is safe for concurrent use.
type Warehouse struct {
	c *provhttp.Client
}

var _ fulfillment.Warehouse = (*Warehouse)(nil)

// NewWarehouse returns a Warehouse for paysim at baseURL, an http or https
// URL such as "http://127.0.0.1:8090".
func NewWarehouse(baseURL string, opts ...Option) (*Warehouse, error) {
	c, err := dial(baseURL, opts)
	if err != nil {
		return nil, err
	}
	return &Warehouse{c: c}, nil
}

// Ship implements fulfillment.Warehouse with POST /v1/shipments. A request
// that req.Validate refuses fails with its final *fulfillment.WarehouseError
// without a call.
func (w *Warehouse) Ship(ctx context.Context, req fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	if err := req.Validate(); err != nil {
		return fulfillment.Shipment{}, err
	}
	items := make([]paysimwire.Item, len(req.Items))
	for i, it := range req.Items {
		items[i] = paysimwire.Item{SKU: it.SKU, Quantity: it.Quantity, UnitPrice: it.UnitPrice}
	}
	var s paysimwire.Shipment
	err := w.c.Call(ctx, http.MethodPost, "/v1/shipments", req.IdempotencyKey, paysimwire.ShipmentParams{
		OrderID: req.OrderID, Reference: req.Reference.Key, Items: items,
	}, &s)
	if err != nil {
		return fulfillment.Shipment{}, shipments.translate(err, nil)
	}
	return shipment(s), nil
}

// Find implements fulfillment.Warehouse with GET
// /v1/shipments?reference=R&order_id=O; a remembered out-of-stock failure
// is its final *fulfillment.WarehouseError wrapping fulfillment.ErrOutOfStock.
// A reference without an order id or a key fails with a final
// *fulfillment.WarehouseError without a call.
func (w *Warehouse) Find(ctx context.Context, ref fulfillment.Reference) (fulfillment.Shipment, error) {
	if ref.OrderID == "" || ref.Key == "" {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Err: errors.New("a reference needs an order id and a key")}
	}
	q := url.Values{"reference": {ref.Key}, "order_id": {ref.OrderID}}
	var s paysimwire.Shipment
	if err := w.c.Call(ctx, http.MethodGet, "/v1/shipments?"+q.Encode(), "", nil, &s); err != nil {
		return fulfillment.Shipment{}, shipments.translate(err, fulfillment.ErrShipmentNotFound)
	}
	return shipment(s), nil
}

// Retrieve implements fulfillment.Warehouse with GET /v1/shipments/{id}. An
// empty id fails with a final *fulfillment.WarehouseError without a call.
func (w *Warehouse) Retrieve(ctx context.Context, id string) (fulfillment.Shipment, error) {
	if id == "" {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Err: errors.New("shipment id is required")}
	}
	var s paysimwire.Shipment
	if err := w.c.Call(ctx, http.MethodGet, "/v1/shipments/"+url.PathEscape(id), "", nil, &s); err != nil {
		return fulfillment.Shipment{}, shipments.translate(err, fulfillment.ErrShipmentNotFound)
	}
	return shipment(s), nil
}

// shipments is package fulfillment's error vocabulary.
var shipments = vocabulary{
	fail: func(retryable bool, cause error) error {
		return &fulfillment.WarehouseError{Retryable: retryable, Err: cause}
	},
	unknownOutcome: fulfillment.ErrUnknownOutcome,
	keyReused:      fulfillment.ErrIdempotencyKeyReused,
	refusal: func(status int, b errorBody) error {
		if status != http.StatusConflict || b.Error.Type != paysimwire.ErrTypeOutOfStock {
			return nil
		}
		return &fulfillment.WarehouseError{Err: fmt.Errorf("%w: %s", fulfillment.ErrOutOfStock, b.Error.Message)}
	},
}

// shipment returns paysim's shipment as a fulfillment.Shipment.
func shipment(s paysimwire.Shipment) fulfillment.Shipment {
	sh := fulfillment.Shipment{ID: s.ID, IdempotencyKey: s.IdempotencyKey, OrderID: s.OrderID, CreatedAt: s.CreatedAt.UTC()}
	if s.Reference != "" {
		sh.Reference = fulfillment.Reference{OrderID: s.OrderID, Key: s.Reference}
	}
	return sh
}
