package sqlite

// Column lists, in the order orderArgs and scanOrder, and scanKey, use them.
const (
	orderColumns = `id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at`
	keyColumns   = `tenant_id, key_hash, fingerprint, derived, state, operation, resource_id, error_code, error_detail, ` +
		`locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until`
	// attemptInsertColumns are the columns an attempt is inserted with;
	// attemptColumns those it is read with.
	attemptInsertColumns = `provider_key, tenant_id, order_id, kind, status, amount, currency, payment_method, provider_ref, error_code, created_at, updated_at`
	attemptColumns       = attemptInsertColumns + `, intent_id, key_sent_at`
)

// derivedExpired and resumable are the takeover conditions; see
// store/postgres/queries.go.
const (
	derivedExpired = `(idempotency_keys.derived = 1 AND idempotency_keys.state IN ('completed', 'expired')
        AND idempotency_keys.expires_at <= excluded.created_at)`
	resumable = `(idempotency_keys.state IN ('in_progress', 'retryable_failure', 'unknown_outcome')
        AND idempotency_keys.fingerprint = excluded.fingerprint
        AND (idempotency_keys.locked_until IS NULL OR idempotency_keys.locked_until <= excluded.created_at))`
)

// claimCompleted claims a completed key (?1 tenant, ?2 key hash, ?3
// fingerprint, ?4 derived, ?5 operation, ?6 resource, ?7 error code, ?8 error
// detail, ?9 created, ?10 expires), taking over only an expired derived key.
const claimCompleted = `
INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                              error_code, error_detail, created_at, expires_at)
VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    fingerprint = excluded.fingerprint, derived = excluded.derived, state = 'completed',
    operation = excluded.operation, resource_id = excluded.resource_id,
    error_code = excluded.error_code, error_detail = excluded.error_detail,
    locked_until = NULL, recovery_point = NULL, attempt_key = NULL, tombstone_until = NULL,
    fencing_token = idempotency_keys.fencing_token + 1,
    created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE ` + derivedExpired

const insertOrder = `INSERT INTO orders (` + orderColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`

// acquireLease: see store/postgres/queries.go. ?1 tenant, ?2 key hash, ?3
// fingerprint, ?4 derived, ?5 resource, ?6 locked until, ?7 created, ?8
// expires, ?9 operation.
const acquireLease = `
INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, resource_id, locked_until,
                              fencing_token, recovery_point, created_at, expires_at, operation)
VALUES (?1, ?2, ?3, ?4, 'in_progress', ?5, ?6, 1, 'started', ?7, ?8, ?9)
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    state = 'in_progress',
    locked_until = excluded.locked_until,
    fencing_token = idempotency_keys.fencing_token + 1,
    error_code = NULL, error_detail = NULL, tombstone_until = NULL,
    fingerprint = excluded.fingerprint, derived = excluded.derived, resource_id = excluded.resource_id,
    operation = excluded.operation,
    recovery_point = CASE WHEN ` + resumable + ` THEN idempotency_keys.recovery_point ELSE 'started' END,
    attempt_key    = CASE WHEN ` + resumable + ` THEN idempotency_keys.attempt_key ELSE NULL END,
    created_at     = CASE WHEN ` + resumable + ` THEN idempotency_keys.created_at ELSE excluded.created_at END,
    expires_at     = CASE WHEN ` + resumable + ` THEN idempotency_keys.expires_at ELSE excluded.expires_at END
WHERE ` + resumable + ` OR ` + derivedExpired + `
RETURNING ` + keyColumns

const fenceRecordAttempt = `
UPDATE idempotency_keys SET recovery_point = 'attempt_recorded', attempt_key = ?4
WHERE tenant_id = ?1 AND key_hash = ?2 AND fencing_token = ?3 AND state = 'in_progress'`

const insertAttempt = `
INSERT INTO provider_attempts (` + attemptInsertColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
ON CONFLICT (provider_key) DO UPDATE SET status = 'pending', payment_method = excluded.payment_method,
    error_code = NULL, updated_at = excluded.updated_at
WHERE provider_attempts.status = 'failed'`

// orderVersion reads the order's version; writers are serialised, so nothing
// slips between this check and the attempt.
const orderVersion = `SELECT version FROM orders WHERE id = ?1 AND tenant_id = ?2`

// otherOpenAttempt finds an open attempt on order ?1 other than ?2.
const otherOpenAttempt = `
SELECT EXISTS (SELECT 1 FROM provider_attempts
               WHERE order_id = ?1 AND provider_key <> ?2 AND status IN ('pending', 'unknown', 'needs_attention', 'requires_action', 'processing'))`

// sameKeyOtherMethod finds an open attempt with provider key ?1 made with
// another payment method than ?2: joining it would give this request
// another request's outcome.
const sameKeyOtherMethod = `
SELECT EXISTS (SELECT 1 FROM provider_attempts
               WHERE provider_key = ?1 AND payment_method <> ?2 AND status IN ('pending', 'unknown', 'needs_attention', 'requires_action', 'processing'))`

// recordAttemptProgress records an attempt's intent id (?5, ” for none)
// and the time its key was first sent (?6, NULL for none), each only if
// unset, fenced by the lease (?1 tenant, ?2 key hash, ?3 token) whose key
// holds the attempt (?4). No row returned means the lease is lost.
const recordAttemptProgress = `
UPDATE provider_attempts SET intent_id = COALESCE(intent_id, NULLIF(?5, '')),
    key_sent_at = COALESCE(key_sent_at, ?6)
WHERE provider_key = ?4 AND EXISTS (SELECT 1 FROM idempotency_keys k
    WHERE k.tenant_id = ?1 AND k.key_hash = ?2 AND k.fencing_token = ?3 AND k.state = 'in_progress' AND k.attempt_key = ?4)
RETURNING ` + attemptColumns

const selectAttempt = `SELECT ` + attemptColumns + ` FROM provider_attempts WHERE provider_key = ?1`

// selectAttemptByIntent reads the attempt that recorded intent ?1
// (provider_attempts_intent_idx).
const selectAttemptByIntent = `SELECT ` + attemptColumns + ` FROM provider_attempts WHERE intent_id = ?1
ORDER BY created_at, provider_key LIMIT 1`

const updateAttempt = `
UPDATE provider_attempts SET status = ?2, provider_ref = COALESCE(?3, provider_ref),
    error_code = ?4, updated_at = ?5
WHERE provider_key = ?1 AND status NOT IN ('succeeded', 'declined', 'rejected')`

const completeKey = `
UPDATE idempotency_keys SET state = 'completed', resource_id = ?4,
    error_code = ?5, error_detail = ?6, locked_until = NULL
WHERE tenant_id = ?1 AND key_hash = ?2 AND fencing_token = ?3 AND state = 'in_progress'`

const releaseKey = `
UPDATE idempotency_keys SET state = ?4, locked_until = NULL
WHERE tenant_id = ?1 AND key_hash = ?2 AND fencing_token = ?3 AND state = 'in_progress'`

// casOrder is the guarded transition (casArgs): it matches only the version
// before the new one.
const casOrder = `
UPDATE orders SET state = ?3, version = ?4, paid_at = ?5, fulfilled_at = ?6, cancelled_at = ?7
WHERE id = ?1 AND tenant_id = ?2 AND version = ?4 - 1`

// takeOverAbandoned: see store/postgres/queries.go. Writers are serialised
// (BEGIN IMMEDIATE), so no row locking is needed. ?1 now, ?2 lease until,
// ?3 limit, ?4 backoff and ?5 its cap in microseconds.
const takeOverAbandoned = `
UPDATE idempotency_keys SET state = 'in_progress', locked_until = ?2, fencing_token = fencing_token + 1,
    recoveries = CASE WHEN state = 'unknown_outcome' THEN recoveries + 1 ELSE recoveries END,
    retry_at   = CASE WHEN state = 'unknown_outcome' THEN ?1 + min(?4 * (1 << min(recoveries, 30)), ?5) ELSE retry_at END
WHERE rowid IN (
    SELECT rowid FROM idempotency_keys
    WHERE ` + abandonedDue + `
    ORDER BY CASE WHEN state = 'in_progress' THEN locked_until ELSE COALESCE(retry_at, created_at) END
    LIMIT ?3
)
RETURNING ` + keyColumns

// abandonedDue is true of a key the completer may take at ?1.
const abandonedDue = `((state = 'in_progress' AND locked_until <= ?1)
        OR (state = 'unknown_outcome' AND (retry_at IS NULL OR retry_at <= ?1)))`

// abandonedBacklog: see store/postgres/queries.go.
const abandonedBacklog = `
SELECT count(*) FILTER (WHERE state = 'in_progress' AND locked_until <= ?1),
       count(*) FILTER (WHERE state = 'unknown_outcome' AND (retry_at IS NULL OR retry_at <= ?1)),
       count(*) FILTER (WHERE state = 'unknown_outcome' AND retry_at > ?1),
       (SELECT count(*) FROM provider_attempts WHERE status = 'needs_attention'),
       min(CASE WHEN state = 'in_progress' THEN locked_until ELSE COALESCE(retry_at, created_at) END)
           FILTER (WHERE ` + abandonedDue + `)
FROM idempotency_keys WHERE state IN ('in_progress', 'unknown_outcome')`

// forgetKey deletes a held key (?1 tenant, ?2 key hash, ?3 token) that
// recorded no attempt.
const forgetKey = `
DELETE FROM idempotency_keys
WHERE tenant_id = ?1 AND key_hash = ?2 AND fencing_token = ?3 AND state = 'in_progress' AND attempt_key IS NULL`

// attemptsNeedingAttention: at most ?2 of tenant ?1's parked attempts,
// oldest first.
const attemptsNeedingAttention = `SELECT ` + attemptColumns + ` FROM provider_attempts
WHERE tenant_id = ?1 AND status = 'needs_attention' ORDER BY updated_at, provider_key LIMIT ?2`

const tombstoneKeys = `
UPDATE idempotency_keys SET state = 'expired', error_code = NULL, error_detail = NULL,
    tombstone_until = expires_at + ?2
WHERE rowid IN (
    SELECT rowid FROM idempotency_keys
    WHERE state = 'completed' AND derived = 0 AND expires_at <= ?1
    LIMIT ?3
)`

const deleteKeys = `
DELETE FROM idempotency_keys
WHERE rowid IN (
    SELECT rowid FROM idempotency_keys
    WHERE (state = 'expired' AND tombstone_until <= ?1)
       OR (state = 'completed' AND derived = 1 AND expires_at <= ?1)
       OR (state = 'retryable_failure' AND expires_at <= ?1)
    LIMIT ?2
)`

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

// pingWrite is Ping's committed write (?1 now in microseconds).
const pingWrite = `UPDATE readiness SET checked_at = ?1 WHERE id = 1`
