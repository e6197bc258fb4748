package store

import (
	"context"
	"time"
)

// WorkBacklog is the work the background workers have before them at one
// instant, as metrics report it.
type WorkBacklog struct {
	// UnknownOutcomes is the number of keys whose request ended with an
	// unknown provider outcome (sent, no answer) that no one has resolved
	// yet: each is a charge, shipment or refund that may have happened,
	// until a retry or the completer asks the provider.
	UnknownOutcomes int
	// Abandoned is the number of keys the completer would take over now:
	// in progress past their lease, or left with an unknown outcome.
	Abandoned int
	// OldestUnswept is the retention end (ExpiresAt) of the oldest
	// completed client key past retention that the sweeper has not yet
	// tombstoned; zero when there is none.
	OldestUnswept time.Time
	// NeedsAttention is the number of provider attempts parked for a
	// person (unresolved past the provider's key retention).
	NeedsAttention int
	// Now is the database's clock when the backlog was counted: Now minus
	// OldestUnswept is the sweeper's lag.
	Now time.Time
}

// BacklogCounter is implemented by stores that can count their WorkBacklog.
// It is not part of Store: a store without it simply reports no backlog.
type BacklogCounter interface {
	// Backlog counts the backlog as of the database's clock, in one
	// read-only statement. Errors: an error wrapping ErrUnavailable, or
	// another error.
	Backlog(ctx context.Context) (WorkBacklog, error)
}
