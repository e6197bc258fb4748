package postgres

// Column lists, in the order orderArgs and scanOrder, and claimArgs and
// scanKey, use them.
const (
	orderColumns = `id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at`
	keyColumns   = `tenant_id, key_hash, fingerprint, derived, state, status_code, resource_id, error_code, error_detail, ` +
		`locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until`
	attemptColumns = `provider_key, tenant_id, order_id, kind, status, amount, currency, payment_method, provider_ref, error_code, created_at, updated_at`
)

// insertOrder inserts an order: $1..$12 are orderArgs.
const insertOrder = `INSERT INTO orders (` + orderColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// claimAndInsertOrder claims a completed key ($13..$22: tenant, key hash,
// fingerprint, derived, status, resource, error code, error detail,
// created, expires) and inserts the order ($1..$12) only if the claim
// succeeded, in one statement. It returns whether the key was claimed.
//
// A client key is claimed with ON CONFLICT DO NOTHING: a replay then reads
// the conflicting row without locking or writing it (no WAL, no row lock
// queue for a burst of retries). A derived key may take over an expired
// one, which needs DO UPDATE … WHERE.
var (
	claimAndInsertOrder        = claimAndInsert(`DO NOTHING`)
	claimDerivedAndInsertOrder = claimAndInsert(`DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived, state = 'completed',
        status_code = EXCLUDED.status_code, resource_id = EXCLUDED.resource_id,
        error_code = EXCLUDED.error_code, error_detail = EXCLUDED.error_detail,
        locked_until = NULL, recovery_point = NULL, attempt_key = NULL, tombstone_until = NULL,
        fencing_token = idempotency_keys.fencing_token + 1,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE ` + derivedExpired)
)

func claimAndInsert(onConflict string) string {
	return `
WITH claim AS (
    INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, status_code, resource_id,
                                  error_code, error_detail, created_at, expires_at)
    VALUES ($13, $14, $15, $16, 'completed', $17, $18, $19, $20, $21, $22)
    ON CONFLICT (tenant_id, key_hash) ` + onConflict + `
    RETURNING 1
), created AS (
    INSERT INTO orders (` + orderColumns + `)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
    WHERE EXISTS (SELECT 1 FROM claim)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claim)`
}

// derivedExpired: the conflicting key is a derived key past its window
// (completed, or already a tombstone), which a new claim replaces.
const derivedExpired = `(idempotency_keys.derived AND idempotency_keys.state IN ('completed', 'expired')
        AND idempotency_keys.expires_at <= EXCLUDED.created_at)`

// resumable: the conflicting key belongs to the same request and nobody
// holds it: in progress with an expired lease, a retryable failure, or an
// unknown outcome.
const resumable = `(idempotency_keys.state IN ('in_progress', 'retryable_failure', 'unknown_outcome')
        AND idempotency_keys.fingerprint = EXCLUDED.fingerprint
        AND (idempotency_keys.locked_until IS NULL OR idempotency_keys.locked_until <= EXCLUDED.created_at))`

// acquireLease claims a key in progress ($1 tenant, $2 key hash, $3
// fingerprint, $4 derived, $5 resource, $6 locked until, $7 created, $8
// expires), or takes it over: a resumable key keeps its recovery point and
// attempt; an expired derived key starts afresh. It returns the row when the
// caller holds the key, no row otherwise.
const acquireLease = `
INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, resource_id, locked_until,
                              fencing_token, recovery_point, created_at, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, 1, 'started', $7, $8)
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    state = 'in_progress',
    locked_until = EXCLUDED.locked_until,
    fencing_token = idempotency_keys.fencing_token + 1,
    status_code = NULL, error_code = NULL, error_detail = NULL, tombstone_until = NULL,
    fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived, resource_id = EXCLUDED.resource_id,
    recovery_point = CASE WHEN ` + resumable + ` THEN idempotency_keys.recovery_point ELSE 'started' END,
    attempt_key    = CASE WHEN ` + resumable + ` THEN idempotency_keys.attempt_key ELSE NULL END,
    created_at     = CASE WHEN ` + resumable + ` THEN idempotency_keys.created_at ELSE EXCLUDED.created_at END,
    expires_at     = CASE WHEN ` + resumable + ` THEN idempotency_keys.expires_at ELSE EXCLUDED.expires_at END
WHERE ` + resumable + ` OR ` + derivedExpired + `
RETURNING ` + keyColumns

// fenceRecordAttempt moves the recovery point of a held key ($1 tenant, $2
// key hash, $3 token, $4 attempt key).
const fenceRecordAttempt = `
UPDATE idempotency_keys SET recovery_point = 'attempt_recorded', attempt_key = $4
WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress'`

// insertAttempt records an attempt unless one with its provider key exists;
// a failed one (the provider did nothing) is re-opened with the new
// request's payment method.
const insertAttempt = `
INSERT INTO provider_attempts (` + attemptColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (provider_key) DO UPDATE SET status = 'pending', payment_method = EXCLUDED.payment_method,
    error_code = NULL, updated_at = EXCLUDED.updated_at
WHERE provider_attempts.status = 'failed'`

// lockOrderVersion locks the order's row ($1 id, $2 tenant) and returns its
// version, so no transition can slip between this check and the attempt.
const lockOrderVersion = `SELECT version FROM orders WHERE id = $1 AND tenant_id = $2 FOR UPDATE`

// otherOpenAttempt finds an open attempt on order $1 other than $2.
const otherOpenAttempt = `
SELECT EXISTS (SELECT 1 FROM provider_attempts
               WHERE order_id = $1 AND provider_key <> $2 AND status IN ('pending', 'unknown'))`

// sameKeyOtherMethod finds an open attempt with provider key $1 made with
// another payment method than $2: joining it would give this request
// another request's outcome.
const sameKeyOtherMethod = `
SELECT EXISTS (SELECT 1 FROM provider_attempts
               WHERE provider_key = $1 AND payment_method <> $2 AND status IN ('pending', 'unknown'))`

const selectAttempt = `SELECT ` + attemptColumns + ` FROM provider_attempts WHERE provider_key = $1`

// updateAttempt settles an attempt ($1 provider key, $2 status, $3 provider
// ref, $4 error code, $5 at). A settled attempt is never re-opened by a
// late, stale answer: succeeded, declined and rejected stay.
const updateAttempt = `
UPDATE provider_attempts SET status = $2, provider_ref = COALESCE($3, provider_ref),
    error_code = $4, updated_at = $5
WHERE provider_key = $1 AND status NOT IN ('succeeded', 'declined', 'rejected')`

// completeKey records the outcome of a held key ($1 tenant, $2 key hash, $3
// token, $4 status, $5 resource, $6 error code, $7 error detail).
const completeKey = `
UPDATE idempotency_keys SET state = 'completed', status_code = $4, resource_id = $5,
    error_code = $6, error_detail = $7, locked_until = NULL
WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress'`

// releaseKey ends a held key's lease without an outcome ($4 the new state).
const releaseKey = `
UPDATE idempotency_keys SET state = $4, locked_until = NULL
WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress'`

// casOrder is the guarded transition: $1 id, $2 tenant, $3 new state, $4
// new version, $5..$7 timestamps. It matches only the version before.
const casOrder = `
UPDATE orders SET state = $3, version = $4, paid_at = $5, fulfilled_at = $6, cancelled_at = $7
WHERE id = $1 AND tenant_id = $2 AND version = $4 - 1`

// takeOverAbandoned leases ($2 until) at most $3 keys abandoned at $1.
// SKIP LOCKED lets several completers share the work without waiting.
var takeOverAbandoned = `
UPDATE idempotency_keys k SET state = 'in_progress', locked_until = $2, fencing_token = k.fencing_token + 1
FROM (
    SELECT tenant_id, key_hash FROM idempotency_keys
    WHERE (state = 'in_progress' AND locked_until <= $1) OR state = 'unknown_outcome'
    ORDER BY locked_until NULLS FIRST
    LIMIT $3
    FOR UPDATE SKIP LOCKED
) abandoned
WHERE k.tenant_id = abandoned.tenant_id AND k.key_hash = abandoned.key_hash
RETURNING ` + prefixed("k.", keyColumns)

// tombstoneKeys drops the outcome of at most $3 completed client keys past
// retention at $1, keeping a tombstone for $2 more microseconds.
const tombstoneKeys = `
UPDATE idempotency_keys k SET state = 'expired', status_code = NULL, error_code = NULL, error_detail = NULL,
    tombstone_until = k.expires_at + $2::bigint * interval '1 microsecond'
FROM (
    SELECT tenant_id, key_hash FROM idempotency_keys
    WHERE state = 'completed' AND NOT derived AND expires_at <= $1
    LIMIT $3
    FOR UPDATE SKIP LOCKED
) old
WHERE k.tenant_id = old.tenant_id AND k.key_hash = old.key_hash`

// deleteKeys deletes at most $2 keys that have nothing left to say at $1.
const deleteKeys = `
DELETE FROM idempotency_keys k
USING (
    SELECT tenant_id, key_hash FROM idempotency_keys
    WHERE (state = 'expired' AND tombstone_until <= $1)
       OR (state = 'completed' AND derived AND expires_at <= $1)
       OR (state = 'retryable_failure' AND expires_at <= $1)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) old
WHERE k.tenant_id = old.tenant_id AND k.key_hash = old.key_hash`

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
