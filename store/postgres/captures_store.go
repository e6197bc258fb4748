package postgres

import (
	"context"
	"time"

	"github.com/orderly/orderly/store"
)

// PutAuthorization implements store.CaptureExecutor in one transaction.
func (s *Store) PutAuthorization(ctx context.Context, a store.Authorization) error {
	return s.InTx(ctx, func(tx store.Executor) error { return tx.(executor).PutAuthorization(ctx, a) })
}

// SetAuthorization implements store.CaptureExecutor in one transaction.
func (s *Store) SetAuthorization(ctx context.Context, tenantID, orderID string, to store.AuthorizationStatus, at time.Time) error {
	return s.InTx(ctx, func(tx store.Executor) error {
		return tx.(executor).SetAuthorization(ctx, tenantID, orderID, to, at)
	})
}
