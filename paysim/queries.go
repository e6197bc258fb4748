package paysim

// All of the ledger's SQL. Timestamps are microseconds since the Unix epoch.

const chargeColumns = `idempotency_key, id, order_id, amount, currency, payment_method, status,
	amount_refunded, failure_code, failure_message, created_at, payment_intent`

const (
	// insertCharge claims the key and records the outcome in one statement;
	// zero rows affected means the key was already held.
	insertCharge = `INSERT INTO charges (` + chargeColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)
	ON CONFLICT (idempotency_key) DO NOTHING`
	selectCharge = `SELECT ` + chargeColumns + ` FROM charges WHERE idempotency_key = ?`
	listCharges  = `SELECT ` + chargeColumns + ` FROM charges ORDER BY created_at, rowid`
	// refundCharge applies a refund to a capture, guarded so that the total
	// refunded never exceeds the amount; zero rows means it would.
	refundCharge = `UPDATE charges
	SET status = 'refunded', amount_refunded = amount_refunded + ?1
	WHERE idempotency_key = ?2 AND status <> 'failed' AND amount_refunded + ?1 <= amount`

	refundColumns = `r.idempotency_key, r.id, c.id, r.charge_key, c.order_id, c.currency, r.amount, r.created_at,
	c.payment_intent, r.reference, r.status`
	selectRefundByID = `SELECT ` + refundColumns + `, c.payment_method
	FROM refunds r JOIN charges c ON c.idempotency_key = r.charge_key
	WHERE r.id = ?`
	// failRefund fails a succeeded refund; zero rows means it was not
	// succeeded.
	failRefund = `UPDATE refunds SET status = 'failed' WHERE id = ? AND status = 'succeeded'`
	// unrefundCharge gives a failed refund's amount back to its charge.
	unrefundCharge = `UPDATE charges
	SET amount_refunded = amount_refunded - ?1,
	    status = CASE WHEN amount_refunded - ?1 = 0 THEN 'captured' ELSE 'refunded' END
	WHERE idempotency_key = ?2 AND amount_refunded >= ?1`
	insertRefund = `INSERT INTO refunds (idempotency_key, id, charge_key, amount, created_at, reference)
	VALUES (?, ?, ?, ?, ?, ?)`
	selectRefund = `SELECT ` + refundColumns + `
	FROM refunds r JOIN charges c ON c.idempotency_key = r.charge_key
	WHERE r.idempotency_key = ?`
	refundsOfIntent = `SELECT ` + refundColumns + `
	FROM refunds r JOIN charges c ON c.idempotency_key = r.charge_key
	WHERE c.payment_intent = ?
	ORDER BY r.created_at, r.rowid`
	listRefunds = `SELECT ` + refundColumns + `
	FROM refunds r JOIN charges c ON c.idempotency_key = r.charge_key
	ORDER BY r.created_at, r.rowid`

	shipmentColumns = `idempotency_key, id, order_id, items, status, failure_message, created_at, reference`
	insertShipment  = `INSERT INTO shipments (` + shipmentColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (idempotency_key) DO NOTHING`
	selectShipment   = `SELECT ` + shipmentColumns + ` FROM shipments WHERE idempotency_key = ?`
	selectShipmentID = `SELECT ` + shipmentColumns + ` FROM shipments WHERE id = ?`
	// selectShipmentRef finds the first request that carried a reference
	// for an order.
	selectShipmentRef = `SELECT ` + shipmentColumns + ` FROM shipments
	WHERE reference = ? AND order_id = ? ORDER BY created_at, rowid LIMIT 1`
	listShipments = `SELECT ` + shipmentColumns + ` FROM shipments ORDER BY created_at, rowid`

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
	(SELECT COUNT(*) FROM refunds WHERE status = 'succeeded'),
	(SELECT COUNT(*) FROM shipments WHERE status = 'shipped'),
	(SELECT COUNT(*) FROM shipments WHERE status = 'out_of_stock')`

	intentColumns = `i.id, i.idempotency_key, i.order_id, i.reference, i.amount, i.currency, i.created_at,
	i.canceled_at IS NOT NULL,
	COALESCE((SELECT c.amount FROM charges c WHERE c.payment_intent = i.id AND c.status <> 'failed'), 0),
	COALESCE((SELECT c.amount_refunded FROM charges c WHERE c.payment_intent = i.id AND c.status <> 'failed'), 0),
	EXISTS (SELECT 1 FROM charges c WHERE c.payment_intent = i.id AND c.status <> 'failed'),
	(SELECT c.failure_code FROM charges c WHERE c.payment_intent = i.id AND c.status = 'failed'
	 ORDER BY c.created_at DESC, c.rowid DESC LIMIT 1),
	(SELECT c.failure_message FROM charges c WHERE c.payment_intent = i.id AND c.status = 'failed'
	 ORDER BY c.created_at DESC, c.rowid DESC LIMIT 1),
	i.capture_method,
	(SELECT a.capture_before FROM authorizations a WHERE a.payment_intent = i.id)`
	insertIntent = `INSERT INTO intents (id, idempotency_key, order_id, reference, amount, currency, created_at, capture_method)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (idempotency_key) DO NOTHING`
	selectIntent         = `SELECT ` + intentColumns + ` FROM intents i WHERE i.id = ?`
	selectIntentByKey    = `SELECT ` + intentColumns + ` FROM intents i WHERE i.idempotency_key = ?`
	selectIntentByRef    = `SELECT ` + intentColumns + ` FROM intents i WHERE i.reference = ? AND i.order_id = ? ORDER BY i.created_at LIMIT 1`
	listIntents          = `SELECT ` + intentColumns + ` FROM intents i ORDER BY i.created_at, i.rowid`
	cancelIntent         = `UPDATE intents SET canceled_at = ? WHERE id = ? AND canceled_at IS NULL`
	insertCancel         = `INSERT INTO cancels (idempotency_key, payment_intent, created_at) VALUES (?, ?, ?)`
	selectCancelIntentID = `SELECT payment_intent FROM cancels WHERE idempotency_key = ?`
	capturedChargeKey    = `SELECT idempotency_key FROM charges WHERE payment_intent = ? AND status <> 'failed'`

	authorizationColumns = `a.idempotency_key, a.id, i.order_id, i.amount, i.currency, a.payment_method, a.created_at, a.payment_intent`
	selectAuthorization  = `SELECT ` + authorizationColumns + `
	FROM authorizations a JOIN intents i ON i.id = a.payment_intent WHERE a.idempotency_key = ?`
	insertAuthorization = `INSERT INTO authorizations (idempotency_key, id, payment_intent, payment_method, capture_before, created_at)
	VALUES (?, ?, ?, ?, ?, ?)`
	selectCaptureByKey = `SELECT payment_intent, amount FROM captures WHERE idempotency_key = ?`
	insertCapture      = `INSERT INTO captures (idempotency_key, payment_intent, charge_key, amount, created_at) VALUES (?, ?, ?, ?, ?)`
	selectAuthMethod   = `SELECT payment_method FROM authorizations WHERE payment_intent = ?`
)
