package sqlitefile

import (
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Conditions of the database that [Translate] marks a driver error with. A
// marked error wraps both the condition and the driver's error, so
// errors.Is(err, ErrBusy) and errors.As(err, new(*sqlite.Error)) both hold.
var (
	// ErrBusy means the database stayed locked by another connection past
	// the busy timeout (SQLITE_BUSY or SQLITE_LOCKED): the statement did
	// nothing, and the same work may succeed later.
	ErrBusy = errors.New("sqlitefile: database busy")
	// ErrClosed means the handle was closed, as it is while the process
	// shuts down: the statement did not run. Another process, or this one
	// after a restart, may do the same work.
	ErrClosed = errors.New("sqlitefile: database closed")
	// ErrIO means the operating system failed a read or a write of the file,
	// the disk is full, or the file cannot be written (SQLITE_IOERR,
	// SQLITE_FULL, SQLITE_READONLY). A statement that
	// failed so was rolled back, but an I/O error from COMMIT may come after
	// the transaction reached the disk: its outcome is unknown, so ErrIO is
	// not [Retryable].
	ErrIO = errors.New("sqlitefile: disk I/O error")
)

// Translate returns err marked with the condition it reports — [ErrBusy],
// [ErrClosed] or [ErrIO] — and every other error unchanged: nil,
// sql.ErrNoRows, the caller's own errors, constraint violations and the
// rest. Translating twice changes nothing.
func Translate(err error) error {
	if err == nil || errors.Is(err, ErrBusy) || errors.Is(err, ErrClosed) || errors.Is(err, ErrIO) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", ErrBusy, err)
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY:
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
	}
	// database/sql reports a closed handle with an unexported error.
	if strings.Contains(err.Error(), "database is closed") {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Retryable reports whether err, translated or not, means the database did
// nothing and the same work may be tried again: [ErrBusy] or [ErrClosed].
// It is false for nil, for [ErrIO] (whose COMMIT may have taken effect) and
// for every other error.
func Retryable(err error) bool {
	err = Translate(err)
	return errors.Is(err, ErrBusy) || errors.Is(err, ErrClosed)
}
