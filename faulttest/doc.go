// Package faulttest runs Orderly's promise — "a client may retry anything,
// and money moves once" — against real processes: paysim (the simulated
// payment provider, with its durable ledger) and orderd on PostgreSQL,
// talking over loopback HTTP.
//
// Its tests inject one fault at a time (provider latency, a 503, a
// timeout, a committed charge whose reply is dropped, orderd killed between
// the provider call and the post-call write, a decline and, when
// ORDERLY_FAULT_PG_RESTART=1, a PostgreSQL restart) and check, for each, the
// paysim ledger (at most one capture per order, reconciled with orderd's
// provider attempts), that every order ends PAID or RCVD with a stored
// decline once the completer has run, and that a retry with the same
// Idempotency-Key returns the final result as a replay. A fault-matrix
// summary is logged at the end; any anomaly fails the run.
//
// TestRedeliveriesTakeEffectOnce (both stores, with the machine's NATS
// JetStream) redelivers every provider webhook and every bus command many
// times, shuffled, alongside HTTP retries of the same operations and
// across a SIGKILL of orderd, and checks one capture, one effect and one
// event per change.
//
// TestStripeCancelRefundsOnceAcrossSIGKILL (both stores) runs orderd on
// the Stripe adapter against paysim -api stripe and kills it with SIGKILL
// while the refund of a PAID order's cancel is at paysim, before paysim
// committed it (a timeout fault holds it) and after (orderd frozen by
// SIGSTOP while paysim commits); the new orderd's completer cancels the
// order with one refund of the whole amount.
//
// The package holds no production code: everything else is in its tests.
package faulttest
