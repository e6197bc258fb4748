package paysim

// All of the ledger's SQL. Timestamps are microseconds since the Unix epoch.

const chargeColumns = `idempotency_key, id, order_id, amount, currency, payment_method, status,
	amount_refunded, failure_code, failure_message, created_at`

const (
	// insertCharge claims the key and records the outcome in one statement;
	// zero rows affected means the key was already held.
	insertCharge = `INSERT INTO charges (` + chargeColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)
	ON CONFLICT (idempotency_key) DO NOTHING`
	selectCharge = `SELECT ` + chargeColumns + ` FROM charges WHERE idempotency_key = ?`
	listCharges  = `SELECT ` + chargeColumns + ` FROM charges ORDER BY created_at, rowid`
	// refundCharge applies a refund to a capture, guarded so that the total
	// refunded never exceeds the amount; zero rows means it would.
	refundCharge = `UPDATE charges
	SET status = 'refunded', amount_refunded = amount_refunded + ?1
	WHERE idempotency_key = ?2 AND status <> 'failed' AND amount_refunded + ?1 <= amount`

	refundColumns = `r.idempotency_key, r.id, c.id, r.charge_key, c.order_id, c.currency, r.amount, r.created_at`
	insertRefund  = `INSERT INTO refunds (idempotency_key, id, charge_key, amount, created_at)
	VALUES (?, ?, ?, ?, ?)`
	selectRefund = `SELECT ` + refundColumns + `
	FROM refunds r JOIN charges c ON c.idempotency_key = r.charge_key
	WHERE r.idempotency_key = ?`
	listRefunds = `SELECT ` + refundColumns + `
	FROM refunds r JOIN charges c ON c.idempotency_key = r.charge_key
	ORDER BY r.created_at, r.rowid`

	shipmentColumns = `idempotency_key, id, order_id, items, status, failure_message, created_at`
	insertShipment  = `INSERT INTO shipments (` + shipmentColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (idempotency_key) DO NOTHING`
	selectShipment = `SELECT ` + shipmentColumns + ` FROM shipments WHERE idempotency_key = ?`
	listShipments  = `SELECT ` + shipmentColumns + ` FROM shipments ORDER BY created_at, rowid`

	// claimFault records that a key's one-shot fault fired; zero rows means
	// it had fired before.
	claimFault = `INSERT INTO fired_faults (endpoint, idempotency_key, fault, fired_at)
	VALUES (?, ?, ?, ?)
	ON CONFLICT (endpoint, idempotency_key) DO NOTHING`

	capturesByOrder  = `SELECT order_id, COUNT(*) FROM charges WHERE status <> 'failed' GROUP BY order_id`
	shipmentsByOrder = `SELECT order_id, COUNT(*) FROM shipments WHERE status = 'shipped' GROUP BY order_id`
	countAll         = `SELECT
	(SELECT COUNT(*) FROM charges WHERE status <> 'failed'),
	(SELECT COUNT(*) FROM charges WHERE status = 'failed'),
	(SELECT COUNT(*) FROM refunds),
	(SELECT COUNT(*) FROM shipments WHERE status = 'shipped'),
	(SELECT COUNT(*) FROM shipments WHERE status = 'out_of_stock')`
)
