package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/store"
)

// backlog counts store.WorkBacklog as of orderly_now() with the partial indexes of the
// completer and the sweeper (idempotency_keys_recovery_idx,
// idempotency_keys_expires_idx), so it reads no more rows than it counts.
const backlog = `
SELECT orderly_now(), (SELECT count(*) FROM idempotency_keys WHERE state = 'unknown_outcome'),
       (SELECT count(*) FROM idempotency_keys
         WHERE (state = 'in_progress' AND locked_until <= orderly_now()) OR state = 'unknown_outcome'),
       (SELECT min(expires_at) FROM idempotency_keys
         WHERE state = 'completed' AND NOT derived AND expires_at <= orderly_now())`

// Backlog implements store.BacklogCounter in one statement.
func (s *Store) Backlog(ctx context.Context) (store.WorkBacklog, error) {
	var b store.WorkBacklog
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, backlog).Scan(&b.Now, &b.UnknownOutcomes, &b.Abandoned, &oldest)
	if err == pgx.ErrNoRows {
		err = nil
	}
	if oldest != nil {
		b.OldestUnswept = oldest.UTC()
	}
	b.Now = b.Now.UTC()
	return b, translate(err)
}
