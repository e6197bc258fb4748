// Package replicatest proves, with a real PostgreSQL primary and a real
// streaming standby that lags by a recovery_min_apply_delay of 2 s
// (package internal/pgpair), that read replicas never decide and never
// hide a client's own writes:
//
//   - 50 concurrent identical creates and 50 concurrent pays split across
//     two orderd processes with the lagging replica configured make one
//     order and one capture, and the standby's statistics show that no
//     statement touched idempotency_keys or provider_attempts there;
//   - a read that presents a write's consistency token sees that write,
//     1,000 times out of 1,000, and a read of an order that exists is
//     never a 404, with or without a token;
//   - a replica whose replay is paused (pg_wal_replay_pause) leaves
//     rotation, reads move to the primary, and it returns once resumed.
//
// The tests start their own servers on free loopback ports as the OS user
// postgres and remove them at the end; the machine's shared server is not
// touched. Without PostgreSQL's server programs they skip, except in CI
// (CI=true), where they fail. It has only tests.
package replicatest
