package sqlite

import (
	"context"
	"database/sql"

	"github.com/orderly/orderly/store"
)

// backlog counts store.WorkBacklog at ?1, the store's clock; see store/postgres/backlog.go.
const backlog = `
SELECT (SELECT count(*) FROM idempotency_keys WHERE state = 'unknown_outcome'),
       (SELECT count(*) FROM idempotency_keys
         WHERE (state = 'in_progress' AND locked_until <= ?1) OR state = 'unknown_outcome'),
       (SELECT min(expires_at) FROM idempotency_keys
         WHERE state = 'completed' AND derived = 0 AND expires_at <= ?1)`

// Backlog implements store.BacklogCounter in one statement.
func (s *Store) Backlog(ctx context.Context) (store.WorkBacklog, error) {
	now := s.now()
	b := store.WorkBacklog{Now: fromMicros(now)}
	var oldest sql.NullInt64
	err := s.db.QueryRowContext(ctx, backlog, now).Scan(&b.UnknownOutcomes, &b.Abandoned, &oldest)
	if oldest.Valid {
		b.OldestUnswept = fromMicros(oldest.Int64)
	}
	return b, translate(err)
}
