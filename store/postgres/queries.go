package postgres

import "strings"

// Column lists, in the order orderArgs and scanOrder, and claimArgs and
// scanKey, use them.
const (
	orderColumns = `id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at`
	keyColumns   = `tenant_id, key_hash, fingerprint, derived, state, operation, resource_id, error_code, error_detail, ` +
		`locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until`
	// attemptInsertColumns are the columns an attempt is inserted with;
	// attemptColumns those it is read with.
	attemptInsertColumns = `provider_key, tenant_id, order_id, kind, status, amount, currency, payment_method, provider_ref, error_code, created_at, updated_at`
	attemptColumns       = attemptInsertColumns + `, intent_id, key_sent_at`
)

// insertOrder inserts an order ($1..$12 are orderArgs) and its
// order.created event ($13 event id, $14 created, $15 body) in one
// statement.
var insertOrder = `
WITH created AS (
    INSERT INTO orders (` + orderColumns + `)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
    RETURNING 1
), ` + appendEvents(`SELECT $13::text, $2::text, $1::text, $8::bigint, 'order.created', $14::timestamptz, $15::text FROM created`) + `
SELECT 1`

// claimAndInsertOrder claims a completed key ($13..$21: tenant, key hash,
// fingerprint, derived, operation, resource, error code, error detail,
// retention in microseconds; created at orderly_now()) and inserts the order
// ($1..$12) and its order.created event ($22 event id, $23 created, $24
// body) only if the claim succeeded, in one statement. It returns whether
// the key was claimed, the database's clock, and, when the key was not
// claimed, the holder's record and its order's current state (both NULL in
// the rare case that the holder committed after this statement's snapshot
// was taken: the caller then reads them).
//
// A client key is claimed with ON CONFLICT DO NOTHING: a replay then reads
// the conflicting row without locking or writing it (no WAL, no row lock
// queue for a burst of retries). A derived key may take over an expired
// one, which needs DO UPDATE … WHERE.
var (
	claimAndInsertOrder        = claimAndInsert(`true`, `DO NOTHING`)
	claimDerivedAndInsertOrder = claimAndInsert(`NOT EXISTS (SELECT 1 FROM idempotency_keys held
        WHERE held.tenant_id = $13 AND held.key_hash = $14 AND NOT `+
		strings.NewReplacer("idempotency_keys.", "held.", "EXCLUDED.created_at", "orderly_now()").Replace(derivedExpired)+`)`, `DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived, state = 'completed',
        operation = EXCLUDED.operation, resource_id = EXCLUDED.resource_id,
        error_code = EXCLUDED.error_code, error_detail = EXCLUDED.error_detail,
        locked_until = NULL, recovery_point = NULL, attempt_key = NULL, tombstone_until = NULL,
        fencing_token = idempotency_keys.fencing_token + 1,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE `+derivedExpired)
)

// claimAndInsert builds the statement; the key is inserted only where
// unheld (for a derived key: unless a key that is not expired holds it, so
// a replay neither locks nor writes the row; see heldOnly).
func claimAndInsert(unheld, onConflict string) string {
	return `
WITH claim AS (
    INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                                  error_code, error_detail, created_at, expires_at)
    SELECT $13::text, $14::text, $15::text, $16::boolean, 'completed', $17::text, $18::text, $19::text, $20::text,
           orderly_now(), orderly_now() + $21::bigint * interval '1 microsecond'
    WHERE ` + unheld + `
    ON CONFLICT (tenant_id, key_hash) ` + onConflict + `
    RETURNING 1
), created AS (
    INSERT INTO orders (` + orderColumns + `)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
    WHERE EXISTS (SELECT 1 FROM claim)
    RETURNING 1
), ` + appendEvents(`SELECT $22::text, $2::text, $1::text, $8::bigint, 'order.created', $23::timestamptz, $24::text FROM created`) + `
SELECT EXISTS (SELECT 1 FROM claim), orderly_now(), ` + prefixed("k.", keyColumns) + `, ` + prefixed("o.", orderColumns) + `
FROM (SELECT 1) AS one
LEFT JOIN idempotency_keys k ON k.tenant_id = $13 AND k.key_hash = $14 AND NOT EXISTS (SELECT 1 FROM claim)
LEFT JOIN orders o ON o.tenant_id = k.tenant_id AND o.id = k.resource_id`
}

// derivedExpired: the conflicting key is a derived key past its window
// (completed, or already a tombstone), which a new claim replaces. A
// claim's created_at is orderly_now(), the database's clock.
const derivedExpired = `(idempotency_keys.derived AND idempotency_keys.state IN ('completed', 'expired')
        AND idempotency_keys.expires_at <= EXCLUDED.created_at)`

// resumable: the conflicting key belongs to the same request and nobody
// holds it: in progress with a lease expired on the database's clock (the
// claim's created_at is orderly_now()), a retryable failure, or an unknown
// outcome.
const resumable = `(idempotency_keys.state IN ('in_progress', 'retryable_failure', 'unknown_outcome')
        AND idempotency_keys.fingerprint = EXCLUDED.fingerprint
        AND (idempotency_keys.locked_until IS NULL OR idempotency_keys.locked_until <= EXCLUDED.created_at))`

// heldOnly is resumable OR derivedExpired said of a key row "held" and the
// claim's values ($3 fingerprint, orderly_now()) instead of EXCLUDED. A key
// that exists and is neither is held by someone else: acquireLease then
// inserts nothing, so it neither locks the row nor writes (a replay costs
// one read). The check reads this statement's snapshot; a key committed
// after it still meets ON CONFLICT, which decides on the newest row.
var heldOnly = strings.NewReplacer("idempotency_keys.", "held.", "EXCLUDED.fingerprint", "$3::text",
	"EXCLUDED.created_at", "orderly_now()").Replace(resumable + ` OR ` + derivedExpired)

// acquireLease claims a key in progress ($1 tenant, $2 key hash, $3
// fingerprint, $4 derived, $5 resource, $6 lease and $7 retention in
// microseconds from orderly_now(), $8 operation), or takes it over: a
// resumable key keeps its recovery point and attempt; an expired derived key
// starts afresh. It returns the row when the caller holds the key, no row
// otherwise.
var acquireLease = `
INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, resource_id, locked_until,
                              fencing_token, recovery_point, created_at, expires_at, operation)
SELECT $1::text, $2::text, $3::text, $4::boolean, 'in_progress', $5::text,
       orderly_now() + $6::bigint * interval '1 microsecond', 1, 'started',
       orderly_now(), orderly_now() + $7::bigint * interval '1 microsecond', $8::text
WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys held WHERE held.tenant_id = $1 AND held.key_hash = $2
                  AND NOT (` + heldOnly + `))
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    state = 'in_progress',
    locked_until = EXCLUDED.locked_until,
    fencing_token = idempotency_keys.fencing_token + 1,
    error_code = NULL, error_detail = NULL, tombstone_until = NULL,
    fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived, resource_id = EXCLUDED.resource_id,
    operation = EXCLUDED.operation,
    recovery_point = CASE WHEN ` + resumable + ` THEN idempotency_keys.recovery_point ELSE 'started' END,
    attempt_key    = CASE WHEN ` + resumable + ` THEN idempotency_keys.attempt_key ELSE NULL END,
    created_at     = CASE WHEN ` + resumable + ` THEN idempotency_keys.created_at ELSE EXCLUDED.created_at END,
    expires_at     = CASE WHEN ` + resumable + ` THEN idempotency_keys.expires_at ELSE EXCLUDED.expires_at END
WHERE ` + resumable + ` OR ` + derivedExpired + `
RETURNING ` + keyColumns

// fenceRecordAttempt moves the recovery point of a held key ($1 tenant, $2
// key hash, $3 token, $4 attempt key). Guarded: lease_lost.
const fenceRecordAttempt = `
WITH w AS (
    UPDATE idempotency_keys SET recovery_point = 'attempt_recorded', attempt_key = $4
    WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress'
    RETURNING 1
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM w), 'lease_lost')`

// insertAttempt records an attempt unless one with its provider key exists;
// a failed one (the provider did nothing) is re-opened with the new
// request's payment method.
const insertAttempt = `
INSERT INTO provider_attempts (` + attemptInsertColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (provider_key) DO UPDATE SET status = 'pending', payment_method = EXCLUDED.payment_method,
    error_code = NULL, updated_at = EXCLUDED.updated_at
WHERE provider_attempts.status = 'failed'`

// lockOrderVersion locks the order's row ($1 id, $2 tenant) and returns its
// version, so no transition can slip between this check and the attempt.
const lockOrderVersion = `SELECT version FROM orders WHERE id = $1 AND tenant_id = $2 FOR UPDATE`

// sameKeyOtherMethod raises attempt_in_flight when provider key $1 is open
// with another payment method than $2: joining it would give this request
// another request's outcome.
const sameKeyOtherMethod = `
SELECT orderly_guard(NOT EXISTS (SELECT 1 FROM provider_attempts
    WHERE provider_key = $1 AND payment_method <> $2 AND status IN ('pending', 'unknown', 'needs_attention', 'requires_action', 'processing')), 'attempt_in_flight')`

const selectAttempt = `SELECT ` + attemptColumns + ` FROM provider_attempts WHERE provider_key = $1`

// selectAttemptByIntent reads the attempt that recorded intent $1
// (provider_attempts_intent_idx).
const selectAttemptByIntent = `SELECT ` + attemptColumns + ` FROM provider_attempts WHERE intent_id = $1
ORDER BY created_at, provider_key LIMIT 1`

// updateAttempt settles an attempt ($1 provider key, $2 status, $3 provider
// ref, $4 error code, $5 at). A settled attempt is never re-opened by a
// late, stale answer: succeeded, declined and rejected stay.
const updateAttempt = `
UPDATE provider_attempts SET status = $2, provider_ref = COALESCE($3, provider_ref),
    error_code = $4, updated_at = $5
WHERE provider_key = $1 AND status NOT IN ('succeeded', 'declined', 'rejected')`

// recordAttemptProgress records an attempt's intent id ($5, ” for none)
// and the time its key was first sent ($6, NULL for none), each only if
// unset, fenced by the lease ($1 tenant, $2 key hash, $3 token) whose key
// holds the attempt ($4). It returns the attempt as stored: no row means the
// lease is lost.
var recordAttemptProgress = `
UPDATE provider_attempts a SET intent_id = COALESCE(a.intent_id, NULLIF($5::text, '')),
    key_sent_at = COALESCE(a.key_sent_at, $6::timestamptz)
FROM idempotency_keys k
WHERE a.provider_key = $4 AND k.tenant_id = $1 AND k.key_hash = $2 AND k.fencing_token = $3
  AND k.state = 'in_progress' AND k.attempt_key = $4
RETURNING ` + prefixed("a.", attemptColumns)

// completeKey records the outcome of a held key ($1 tenant, $2 key hash, $3
// token, $4 resource, $5 error code, $6 error detail). Guarded: it raises
// lease_lost when the token is stale.
const completeKey = `
WITH w AS (
    UPDATE idempotency_keys SET state = 'completed', resource_id = $4,
        error_code = $5, error_detail = $6, locked_until = NULL
    WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress'
    RETURNING 1
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM w), 'lease_lost')`

// releaseKey ends a held key's lease without an outcome ($4 the new state).
// Guarded: lease_lost.
const releaseKey = `
WITH w AS (
    UPDATE idempotency_keys SET state = $4, locked_until = NULL
    WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress'
    RETURNING 1
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM w), 'lease_lost')`

// casOrder is the guarded transition: $1 id, $2 tenant, $3 new state, $4
// new version, $5..$7 timestamps. It matches only the version before, and
// raises version_conflict otherwise.
const casOrder = `
WITH w AS (
    UPDATE orders SET state = $3, version = $4, paid_at = $5, fulfilled_at = $6, cancelled_at = $7
    WHERE id = $1 AND tenant_id = $2 AND version = $4 - 1
    RETURNING 1
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM w), 'version_conflict')`

// noOtherOpenAttempt raises attempt_in_flight when an attempt on order $1
// other than $2 is open. It runs as its own statement after the caller
// locked the order's row (casOrder, lockOrderVersion), so its snapshot sees
// every attempt committed before the lock: attempts are only ever recorded
// under that lock.
const noOtherOpenAttempt = `
SELECT orderly_guard(NOT EXISTS (SELECT 1 FROM provider_attempts
    WHERE order_id = $1 AND provider_key <> $2 AND status IN ('pending', 'unknown', 'needs_attention', 'requires_action', 'processing')), 'attempt_in_flight')`

// takeOverAbandoned leases (for $1 microseconds) at most $2 keys abandoned
// as of orderly_now(), the longest due first across both kinds: an expired
// lease is due since its locked_until, an unknown outcome since its
// retry_at (or its creation when never deferred). Taking an unknown outcome
// defers its next takeover by min($3·2^recoveries, $4) microseconds. SKIP
// LOCKED lets several completers share the work without waiting.
var takeOverAbandoned = `
UPDATE idempotency_keys k SET state = 'in_progress',
    locked_until = orderly_now() + $1::bigint * interval '1 microsecond', fencing_token = k.fencing_token + 1,
    recoveries = CASE WHEN k.state = 'unknown_outcome' THEN k.recoveries + 1 ELSE k.recoveries END,
    retry_at   = CASE WHEN k.state = 'unknown_outcome'
                      THEN orderly_now() + least($3::bigint * power(2, least(k.recoveries, 30))::bigint, $4::bigint) * interval '1 microsecond'
                      ELSE k.retry_at END
FROM (
    SELECT tenant_id, key_hash FROM idempotency_keys
    WHERE ` + abandonedDue + `
    ORDER BY CASE WHEN state = 'in_progress' THEN locked_until ELSE COALESCE(retry_at, created_at) END
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) abandoned
WHERE k.tenant_id = abandoned.tenant_id AND k.key_hash = abandoned.key_hash
RETURNING ` + prefixed("k.", keyColumns)

// abandonedDue is true of a key the completer may take now, on the
// database's clock.
const abandonedDue = `((state = 'in_progress' AND locked_until <= orderly_now())
        OR (state = 'unknown_outcome' AND (retry_at IS NULL OR retry_at <= orderly_now())))`

// abandonedBacklog counts the completer's queue as of orderly_now(): expired leases,
// unknown outcomes due and deferred, attempts needing attention, and when
// the oldest due key became due.
const abandonedBacklog = `
SELECT count(*) FILTER (WHERE state = 'in_progress' AND locked_until <= orderly_now()),
       count(*) FILTER (WHERE state = 'unknown_outcome' AND (retry_at IS NULL OR retry_at <= orderly_now())),
       count(*) FILTER (WHERE state = 'unknown_outcome' AND retry_at > orderly_now()),
       (SELECT count(*) FROM provider_attempts WHERE status = 'needs_attention'),
       min(CASE WHEN state = 'in_progress' THEN locked_until ELSE COALESCE(retry_at, created_at) END)
           FILTER (WHERE ` + abandonedDue + `)
FROM idempotency_keys WHERE state IN ('in_progress', 'unknown_outcome')`

// forgetKey deletes a held key ($1 tenant, $2 key hash, $3 token) that
// recorded no attempt. Guarded: lease_lost.
const forgetKey = `
WITH w AS (
    DELETE FROM idempotency_keys
    WHERE tenant_id = $1 AND key_hash = $2 AND fencing_token = $3 AND state = 'in_progress' AND attempt_key IS NULL
    RETURNING 1
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM w), 'lease_lost')`

// attemptsNeedingAttention: at most $2 of tenant $1's parked attempts,
// oldest first.
const attemptsNeedingAttention = `SELECT ` + attemptColumns + ` FROM provider_attempts
WHERE tenant_id = $1 AND status = 'needs_attention' ORDER BY updated_at, provider_key LIMIT $2`

// tombstoneKeys drops the outcome of at most $2 completed client keys past
// retention as of orderly_now(), keeping a tombstone for $1 more
// microseconds.
const tombstoneKeys = `
UPDATE idempotency_keys k SET state = 'expired', error_code = NULL, error_detail = NULL,
    tombstone_until = k.expires_at + $1::bigint * interval '1 microsecond'
FROM (
    SELECT tenant_id, key_hash FROM idempotency_keys
    WHERE state = 'completed' AND NOT derived AND expires_at <= orderly_now()
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) old
WHERE k.tenant_id = old.tenant_id AND k.key_hash = old.key_hash`

// deleteKeys deletes at most $1 keys that have nothing left to say as of
// orderly_now().
const deleteKeys = `
DELETE FROM idempotency_keys k
USING (
    SELECT tenant_id, key_hash FROM idempotency_keys
    WHERE (state = 'expired' AND tombstone_until <= orderly_now())
       OR (state = 'completed' AND derived AND expires_at <= orderly_now())
       OR (state = 'retryable_failure' AND expires_at <= orderly_now())
    LIMIT $1
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

// heldHere is true for the key row ($1 tenant, $2 key hash, as alias k) that
// this transaction acquired: its current version was written by this
// transaction (xmin) and it is in progress. A key held by another request
// was written by another transaction, or only locked by this one.
const heldHere = `(k.tenant_id = $1 AND k.key_hash = $2 AND k.state = 'in_progress'
    AND k.xmin = pg_current_xact_id_if_assigned()::xid)`

// Phase 1 of a leased request is the four statements below, pipelined in one
// implicit transaction (one round trip, one commit): acquireLease;
// lockLeasedOrder; recordIntent; readStarted. Each statement takes a fresh
// snapshot (READ COMMITTED), so recordIntent's checks for open attempts run
// after the order's row lock is held and see every attempt recorded before.

// lockLeasedOrder locks the order $3 of tenant $1 if this transaction
// acquired key $2.
const lockLeasedOrder = `
SELECT 1 FROM orders o
WHERE o.tenant_id = $1 AND o.id = $3
  AND EXISTS (SELECT 1 FROM idempotency_keys k WHERE ` + heldHere + `)
FOR UPDATE OF o`

// recordIntent records the intent's attempt when this transaction holds
// key $2 (tenant $1) and the order $3 allows it: in state $6, amount $7 (or
// NULL for any), currency $8 (or ” for any); provider key $4, followed by
// the order's version when $5; kind $9, payment method $10, at $11. Like
// insertAttempt, an existing failed attempt is re-opened and any other kept;
// nothing is recorded when the key already points at another attempt (a
// resumed request continues only its own), when another attempt on the
// order is open, or when this provider key is open with another payment
// method. The key's recovery point moves to the attempt.
const recordIntent = `
WITH target AS (
    SELECT o.id, o.tenant_id, o.amount, o.currency,
           $4::text || CASE WHEN $5::boolean THEN o.version::text ELSE '' END AS provider_key,
           k.attempt_key
    FROM orders o JOIN idempotency_keys k ON ` + heldHere + `
    WHERE o.tenant_id = $1 AND o.id = $3 AND o.state = $6
      AND ($7::bigint IS NULL OR o.amount = $7::bigint) AND ($8::text = '' OR o.currency = $8::text)
), eligible AS (
    SELECT t.* FROM target t
    WHERE (t.attempt_key IS NULL OR t.attempt_key = t.provider_key)
      AND NOT EXISTS (SELECT 1 FROM provider_attempts a WHERE a.order_id = t.id
                      AND a.provider_key <> t.provider_key AND a.status IN ('pending', 'unknown', 'needs_attention', 'requires_action', 'processing'))
      AND NOT EXISTS (SELECT 1 FROM provider_attempts a WHERE a.provider_key = t.provider_key
                      AND a.payment_method <> $10::text AND a.status IN ('pending', 'unknown', 'needs_attention', 'requires_action', 'processing'))
), recorded AS (
    INSERT INTO provider_attempts (` + attemptInsertColumns + `)
    SELECT provider_key, tenant_id, id, $9::text, 'pending', amount, currency, $10::text, NULL, NULL, $11::timestamptz, $11::timestamptz
    FROM eligible
    ON CONFLICT (provider_key) DO UPDATE SET
        status         = CASE WHEN provider_attempts.status = 'failed' THEN 'pending' ELSE provider_attempts.status END,
        payment_method = CASE WHEN provider_attempts.status = 'failed' THEN EXCLUDED.payment_method ELSE provider_attempts.payment_method END,
        error_code     = CASE WHEN provider_attempts.status = 'failed' THEN NULL ELSE provider_attempts.error_code END,
        updated_at     = CASE WHEN provider_attempts.status = 'failed' THEN EXCLUDED.updated_at ELSE provider_attempts.updated_at END
    RETURNING provider_key
)
UPDATE idempotency_keys SET recovery_point = 'attempt_recorded', attempt_key = recorded.provider_key
FROM recorded WHERE tenant_id = $1 AND key_hash = $2`

// readStarted reads key $2 of tenant $1 after phase 1: whether this
// transaction holds it, the database's clock, the record, its order and its
// attempt.
var readStarted = `
SELECT COALESCE(` + heldHere + `, false), orderly_now(), ` + prefixed("k.", keyColumns) + `, ` + prefixed("o.", orderColumns) + `, ` + prefixed("a.", attemptColumns) + `
FROM idempotency_keys k
LEFT JOIN orders o ON o.tenant_id = k.tenant_id AND o.id = k.resource_id
LEFT JOIN provider_attempts a ON a.provider_key = k.attempt_key
WHERE k.tenant_id = $1 AND k.key_hash = $2`

// Group commit: claimMany inserts many completed keys and their orders in
// one statement from parallel arrays ($1 order ids, $2 tenants, $3
// customers, $4 currencies, $5 items as JSON text, $6 amounts, $7 states,
// $8 versions, $9 created; $10 key hashes, $11 fingerprints, $12 derived,
// $13 operations, $14 retention in microseconds, from orderly_now()) and
// returns the key hashes (with tenants and created_at) it claimed, with the order.created
// event of each order it inserted ($15 event ids, $16 event created, $17
// bodies). Keys are distinct within a call.
func claimMany(onConflict string) string {
	return `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
                         $8::bigint[], $9::timestamptz[], $10::text[], $11::text[], $12::boolean[], $13::text[],
                         $14::bigint[], $15::text[], $16::timestamptz[], $17::text[])
        AS t(id, tenant_id, customer_id, currency, items, amount, state, version, created_at,
             key_hash, fingerprint, derived, operation, ttl_us, event_id, event_at, event_body)
), claim AS (
    INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                                  created_at, expires_at)
    SELECT tenant_id, key_hash, fingerprint, derived, 'completed', operation, id,
           orderly_now(), orderly_now() + ttl_us * interval '1 microsecond'
    FROM input
    ON CONFLICT (tenant_id, key_hash) ` + onConflict + `
    RETURNING tenant_id, key_hash, resource_id, created_at
), created AS (
    INSERT INTO orders (` + orderColumns + `)
    SELECT i.id, i.tenant_id, i.customer_id, i.currency, i.items::jsonb, i.amount, i.state, i.version,
           i.created_at, NULL, NULL, NULL
    FROM input i JOIN claim c ON c.tenant_id = i.tenant_id AND c.key_hash = i.key_hash AND c.resource_id = i.id
    RETURNING id
), ` + appendEvents(`SELECT i.event_id, i.tenant_id, i.id, i.version, 'order.created', i.event_at, i.event_body
    FROM input i JOIN created c ON c.id = i.id`) + `
SELECT tenant_id, key_hash, created_at FROM claim`
}

var (
	claimManyClient  = claimMany(`DO NOTHING`)
	claimManyDerived = claimMany(`DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived, state = 'completed',
        operation = EXCLUDED.operation, resource_id = EXCLUDED.resource_id,
        error_code = NULL, error_detail = NULL,
        locked_until = NULL, recovery_point = NULL, attempt_key = NULL, tombstone_until = NULL,
        fencing_token = idempotency_keys.fencing_token + 1,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE ` + derivedExpired)
)

// insertMany inserts orders without keys from the same parallel arrays as
// claimMany ($1..$9), and their order.created events ($10 event ids, $11
// event created, $12 bodies).
var insertMany = `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
                         $8::bigint[], $9::timestamptz[], $10::text[], $11::timestamptz[], $12::text[])
        AS t(id, tenant_id, customer_id, currency, items, amount, state, version, created_at, event_id, event_at, event_body)
), created AS (
    INSERT INTO orders (` + orderColumns + `)
    SELECT id, tenant_id, customer_id, currency, items::jsonb, amount, state, version, created_at, NULL, NULL, NULL
    FROM input
    RETURNING id
), ` + appendEvents(`SELECT i.event_id, i.tenant_id, i.id, i.version, 'order.created', i.event_at, i.event_body
    FROM input i JOIN created c ON c.id = i.id`) + `
SELECT 1`

// readHolders reads the keys ($1 tenants, $2 key hashes) with their orders,
// and the database's clock, except the keys this transaction wrote (xmin,
// as heldHere): in CreateOrders' batch those are the keys claimMany claimed
// (and returned) a statement before, whose holder nobody reads, so a new
// create scans no key or order row a second time. A key that vanished
// between the claim and this read is absent either way (CreateOrders
// claims it again alone).
var readHolders = `
SELECT orderly_now(), ` + prefixed("k.", keyColumns) + `, ` + prefixed("o.", orderColumns) + `
FROM unnest($1::text[], $2::text[]) AS want(tenant_id, key_hash)
JOIN idempotency_keys k ON k.tenant_id = want.tenant_id AND k.key_hash = want.key_hash
LEFT JOIN orders o ON o.tenant_id = k.tenant_id AND o.id = k.resource_id
WHERE k.xmin IS DISTINCT FROM pg_current_xact_id_if_assigned()::xid`
