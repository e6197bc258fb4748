package sqlite

import (
	"context"

	"github.com/orderly/orderly/payment"
)

// insertInboxEvent records a provider event unless its (source, event id)
// is there; it changes one row when it inserted, none for a duplicate.
const insertInboxEvent = `
INSERT INTO provider_inbox (source, event_id, event_type, provider_key, received_at,
    provider_type, object_id, intent_id, reference_order_id, amount, currency)
VALUES (?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), NULLIF(?, ''), NULLIF(?, ''), ?, NULLIF(?, ''))
ON CONFLICT (source, event_id) DO NOTHING`

// RecordInboxEvent implements store.Executor in one statement.
func (e executor) RecordInboxEvent(ctx context.Context, ev payment.ProviderEvent) (bool, error) {
	res, err := e.c.ExecContext(ctx, insertInboxEvent, ev.Source, ev.EventID, string(ev.Type), ev.Reference.Key, micros(ev.ReceivedAt),
		ev.ProviderType, ev.ObjectID, ev.IntentID, ev.Reference.OrderID, ev.Amount, ev.Currency)
	if err != nil {
		return false, translate(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, translate(err)
	}
	return n == 1, nil
}
