package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/payment"
)

// insertInboxEvent records a provider event unless its (source, event id)
// is there ($1 source, $2 event id, $3 type, $4 provider key (the
// reference's key), $5 received at, $6 provider type, $7 object id, $8
// intent id, $9 reference order id, $10 amount, $11 currency; empty text is
// NULL). It returns one row when it inserted, none for a duplicate; a
// concurrent insert of the same event waits for the other transaction.
const insertInboxEvent = `
INSERT INTO provider_inbox (source, event_id, event_type, provider_key, received_at,
    provider_type, object_id, intent_id, reference_order_id, amount, currency)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''), NULLIF($8, ''), NULLIF($9, ''), $10, NULLIF($11, ''))
ON CONFLICT (source, event_id) DO NOTHING
RETURNING true`

// RecordInboxEvent implements store.Executor in one statement, sent at once
// (with any writes the transaction has queued) so the caller knows before
// it writes the effect.
func (e executor) RecordInboxEvent(ctx context.Context, ev payment.ProviderEvent) (bool, error) {
	recorded := false
	err := e.db.query(ctx, insertInboxEvent, []any{ev.Source, ev.EventID, string(ev.Type), ev.Reference.Key, ev.ReceivedAt,
		ev.ProviderType, ev.ObjectID, ev.IntentID, ev.Reference.OrderID, ev.Amount, ev.Currency},
		func(rows pgx.Rows) error {
			for rows.Next() {
				recorded = true
			}
			return nil
		})
	if err != nil {
		return false, translate(err)
	}
	return recorded, nil
}
