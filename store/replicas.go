package store

import (
	"context"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
)

// ReplicaReader is implemented by a store that can serve the read endpoints
// (GET /v1/orders/{id}, GET /v1/orders) from read replicas. Only those
// endpoints use it: every idempotency decision, claim, lease,
// compare-and-set, key-status read and every read inside a write path uses
// the Executor and Store methods, which always go to the primary.
//
// A consistency token is an opaque position in the primary's write history
// (PostgreSQL: a WAL position). A read that presents one is answered by a
// replica only once that replica has replayed past it, else by the
// primary, so a client reads its own writes.
type ReplicaReader interface {
	// ConsistencyToken returns a token at or past every write that was
	// visible on the primary when it was called: a write's response
	// carries it. It never fails: when the position cannot be read it
	// returns a token only the primary satisfies.
	ConsistencyToken(ctx context.Context) string

	// ReadOrder is GetOrder for the read endpoint: from a replica in
	// rotation (one that has replayed past token, when token is not ""),
	// or the primary. A replica's ErrNotFound or error is retried on the
	// primary, so ErrNotFound always comes from the primary. Errors:
	// ErrInvalidToken, and GetOrder's.
	ReadOrder(ctx context.Context, tenantID, id, token string) (order.Order, error)

	// ReadOrders is ListOrders for the read endpoint, routed as ReadOrder.
	// Without a token a replica's list may be as stale as the replicas'
	// staleness bound. Errors: ErrInvalidToken, and ListOrders's.
	ReadOrders(ctx context.Context, tenantID string, f order.Filter, token string) ([]order.Order, error)
}

// ErrInvalidToken is returned for a consistency token that the store did
// not make (EInvalid: the client sent it, a 400).
var ErrInvalidToken = &apperr.Error{Code: apperr.EInvalid,
	Message: "the consistency token is not one this API returned; send back the token of a write's response, or none"}
