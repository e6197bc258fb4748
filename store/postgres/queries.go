package postgres

// Column lists, in the order orderArgs, casArgs and keyArgs bind them.
const (
	orderColumns = `id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at`
	keyColumns   = `tenant_id, key_hash, fingerprint, derived, status_code, resource_id, error_code, error_detail, created_at, expires_at`
)

// claimKeySQL inserts a key record ($n offset by the caller's arguments). On
// a conflict it takes over only an expired derived key; a live key, or an
// expired client-sent one, stays and the statement returns no row.
const claimKeyTemplate = `
INSERT INTO idempotency_keys (` + keyColumns + `)
VALUES (%[1]s)
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived,
    status_code = EXCLUDED.status_code, resource_id = EXCLUDED.resource_id,
    error_code = EXCLUDED.error_code, error_detail = EXCLUDED.error_detail,
    created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
WHERE idempotency_keys.derived AND idempotency_keys.expires_at <= EXCLUDED.created_at`

// claimKey claims a key alone: $1..$10 are keyArgs.
var claimKey = sprintf(claimKeyTemplate, params(1, 10))

// insertOrder inserts an order: $1..$12 are orderArgs.
const insertOrder = `INSERT INTO orders (` + orderColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// claimAndInsertOrder claims the key ($13..$22) and inserts the order
// ($1..$12) only if the claim succeeded, in one statement. It returns
// whether the key was claimed.
var claimAndInsertOrder = `
WITH claim AS (` + sprintf(claimKeyTemplate, params(13, 22)) + `
    RETURNING 1
), created AS (
    INSERT INTO orders (` + orderColumns + `)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
    WHERE EXISTS (SELECT 1 FROM claim)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claim)`

// casOrder is the guarded transition: $1 id, $2 tenant, $3 new state, $4
// new version, $5..$7 timestamps. It matches only the version before.
const casOrder = `
UPDATE orders SET state = $3, version = $4, paid_at = $5, fulfilled_at = $6, cancelled_at = $7
WHERE id = $1 AND tenant_id = $2 AND version = $4 - 1`

// claimAndCAS claims the key ($8..$17) and runs the compare-and-set ($1..$7)
// only if the claim succeeded. It returns (claimed, updated); the caller
// rolls back unless both hold.
var claimAndCAS = `
WITH claim AS (` + sprintf(claimKeyTemplate, params(8, 17)) + `
    RETURNING 1
), updated AS (
    UPDATE orders SET state = $3, version = $4, paid_at = $5, fulfilled_at = $6, cancelled_at = $7
    WHERE id = $1 AND tenant_id = $2 AND version = $4 - 1 AND EXISTS (SELECT 1 FROM claim)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claim), EXISTS (SELECT 1 FROM updated)`

const selectKey = `SELECT ` + keyColumns + ` FROM idempotency_keys WHERE tenant_id = $1 AND key_hash = $2`

const selectOrder = `SELECT ` + orderColumns + ` FROM orders WHERE tenant_id = $1 AND id = $2`

// listOrders: $1 tenant, $2 state or ”, $3 customer or ”, $4 cursor id or
// ”, $5 limit.
const listOrders = `
SELECT ` + orderColumns + ` FROM orders
WHERE tenant_id = $1
  AND ($2 = '' OR state = $2)
  AND ($3 = '' OR customer_id = $3)
  AND ($4 = '' OR id < $4)
ORDER BY id DESC
LIMIT $5`
