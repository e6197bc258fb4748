package service

import (
	"context"

	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

type consistencyTokenKey struct{}

// WithConsistencyToken returns a copy of ctx carrying token, the consistency
// token a client presented with a read. Get and List then answer from a
// read replica only once it has replayed past the token (read your writes).
// An empty token carries nothing.
func WithConsistencyToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return context.WithValue(ctx, consistencyTokenKey{}, token)
}

func consistencyToken(ctx context.Context) string {
	t, _ := ctx.Value(consistencyTokenKey{}).(string)
	return t
}

// ConsistencyToken returns the consistency token a write's response carries
// (store.ReplicaReader.ConsistencyToken), or "" when the store has no read
// replicas. Call it after the write returned.
func (s *Service) ConsistencyToken(ctx context.Context) string {
	if rr, ok := s.store.(store.ReplicaReader); ok {
		return rr.ConsistencyToken(ctx)
	}
	return ""
}

// readOrder reads an order for Get: through the store's replicas when it has
// them (a 404 only ever comes from the primary), else from the store.
func (s *Service) readOrder(ctx context.Context, tenantID, id string) (order.Order, error) {
	if rr, ok := s.store.(store.ReplicaReader); ok {
		return rr.ReadOrder(ctx, tenantID, id, consistencyToken(ctx))
	}
	return s.store.GetOrder(ctx, tenantID, id)
}

// readOrders lists orders for List, routed as readOrder.
func (s *Service) readOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error) {
	if rr, ok := s.store.(store.ReplicaReader); ok {
		return rr.ReadOrders(ctx, tenantID, f, consistencyToken(ctx))
	}
	return s.store.ListOrders(ctx, tenantID, f)
}
