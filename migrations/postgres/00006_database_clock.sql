-- +goose Up
-- orderly_now() is the one clock every lease, schedule and retention
-- decision is made on: a key's lease and its expiry, the completer's
-- takeovers and backoff, webhook delivery leases and retries, the event
-- publisher's cursor lease. It is the database's clock (the transaction's
-- start, like now()), so instances whose clocks disagree still agree on
-- whose lease has run out. A test's own database may replace it with a
-- clock the test moves (store/pgtest.FollowClock).
-- +goose StatementBegin
CREATE FUNCTION orderly_now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT now()';
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION orderly_now();
