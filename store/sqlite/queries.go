package sqlite

// Column lists, in the order orderArgs, casArgs and keyArgs bind them.
const (
	orderColumns = `id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at`
	keyColumns   = `tenant_id, key_hash, fingerprint, derived, status_code, resource_id, error_code, error_detail, created_at, expires_at`
)

// claimKey inserts a key record (keyArgs). On a conflict it takes over only
// an expired derived key; otherwise it changes no row.
const claimKey = `
INSERT INTO idempotency_keys (` + keyColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    fingerprint = excluded.fingerprint, derived = excluded.derived,
    status_code = excluded.status_code, resource_id = excluded.resource_id,
    error_code = excluded.error_code, error_detail = excluded.error_detail,
    created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE idempotency_keys.derived = 1 AND idempotency_keys.expires_at <= excluded.created_at`

const insertOrder = `INSERT INTO orders (` + orderColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`

// casOrder is the guarded transition (casArgs): it matches only the version
// before the new one.
const casOrder = `
UPDATE orders SET state = ?3, version = ?4, paid_at = ?5, fulfilled_at = ?6, cancelled_at = ?7
WHERE id = ?1 AND tenant_id = ?2 AND version = ?4 - 1`

const selectKey = `SELECT ` + keyColumns + ` FROM idempotency_keys WHERE tenant_id = ?1 AND key_hash = ?2`

const selectOrder = `SELECT ` + orderColumns + ` FROM orders WHERE tenant_id = ?1 AND id = ?2`

const listOrders = `
SELECT ` + orderColumns + ` FROM orders
WHERE tenant_id = ?1
  AND (?2 = '' OR state = ?2)
  AND (?3 = '' OR customer_id = ?3)
  AND (?4 = '' OR id < ?4)
ORDER BY id DESC
LIMIT ?5`
