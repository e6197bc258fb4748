// Package book is orderstorm's record of a run: every logical order, each
// operation on it (one key, one body) and every call made for it, with the
// answer as the harness saw it. The storm writes it; the checker compares it
// with the database and the provider's ledger.
package book
