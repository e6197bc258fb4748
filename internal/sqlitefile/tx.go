package sqlitefile

import (
	"context"
	"database/sql"
)

// InTx runs fn in a transaction on db and ends it by what fn did: it
// commits when fn returns nil and rolls back when fn returns an error or
// panics (the panic then goes on). It returns the error of BEGIN, of fn
// (unchanged, so errors.Is and errors.As see the caller's own errors), or of
// COMMIT; a failed COMMIT is never reported as success, and the driver rolls
// the transaction back so the connection returns to the pool clean.
//
// On a handle from [Open] the transaction begins IMMEDIATE: it takes the
// write lock at BEGIN, waiting up to the busy timeout, so fn never fails
// half-way to upgrade a read lock. Errors are returned as the driver gave
// them; pass them through [Translate] to tell busy, closed and I/O failures
// apart.
func InTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // fn's error, or its panic, is what the caller must see
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true // whatever COMMIT returns, the transaction is over
	return tx.Commit()
}
