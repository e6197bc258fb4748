// Package sqlitefile keeps what Orderly's SQLite files (modernc.org/sqlite)
// share, in one place for the embedded order store and paysim's ledger: the
// settings a file is opened with, the transaction helper, and the meaning of
// the driver's errors.
//
// # Opening
//
// [Open] sets WAL mode with synchronous=FULL, so a committed transaction
// survives a crash or power loss; BEGIN IMMEDIATE transactions, so writers
// are serialised instead of failing to upgrade a read lock; a 15 s busy
// timeout, so contention waits rather than fails; foreign keys enforced.
//
// # Transactions
//
// [InTx] runs a function in a transaction with pgx's BeginFunc semantics:
// it commits when the function returns nil, rolls back when it returns an
// error or panics, and returns the error of BEGIN, of the function or of
// COMMIT, never losing one.
//
// # Errors
//
// [Translate] marks the driver errors a caller must tell apart with
// [ErrBusy], [ErrClosed] and [ErrIO], keeping the driver's error in the
// chain; [Retryable] says whether an error means the database did nothing
// and the same work may be tried again.
package sqlitefile
