// Package check verifies orderstorm's promise — a client may retry
// anything, and money moves once — from the deployment's database and the
// provider's ledger, not from the harness's own bookkeeping. It reads the
// run's orders, provider attempts and idempotency keys read-only (PostgreSQL
// or the embedded store's SQLite file), compares them with the run's book
// and with paysim's ledger, and reports every broken promise as an Anomaly.
package check
