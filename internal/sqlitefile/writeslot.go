package sqlitefile

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync"
	"time"
)

// slotWait bounds a wait for the write slot: the busy timeout Open sets.
// Past it the writer goes on without the slot, and SQLite's own lock (its
// busy handler, then SQLITE_BUSY) decides, as it would without the slot.
const slotWait = 15 * time.Second

// writeSlot queues one handle's writers in process. SQLite lets one
// connection write at a time; a writer that finds the file locked sleeps in
// SQLite's busy handler (1, 2, 5, … up to 100 ms between tries) and may lose
// the lock again to a writer that did not sleep, so under a write load
// writers waited hundreds of milliseconds while the lock was free most of
// the time (BENCHMARKS.md). Writers of one handle instead take this slot
// first, in arrival order (a channel's senders are queued FIFO), and the
// next one runs as soon as the previous commits. Every statement passes
// through cachingConn, so every write takes the slot: a transaction (BEGIN
// IMMEDIATE takes the write lock) from BeginTx to its end, and a statement
// outside one that may write (any but a SELECT or VALUES: an INSERT …
// RETURNING included) until it is done or its rows are closed. Reads
// outside a transaction take nothing. The slot is only a queue: SQLite's
// lock still guards the file (against other processes too, which the data
// directory's lock keeps out), so correctness never depends on it.
type writeSlot chan struct{}

// acquire takes the slot and returns its release, or ctx's error if ctx
// ends first. After slotWait it returns a release that does nothing:
// SQLite's lock decides.
func (s writeSlot) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s <- struct{}{}:
		return s.releaser(), nil
	default:
	}
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case s <- struct{}{}:
		return s.releaser(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return func() {}, nil
	}
}

// releaser returns the release of a taken slot, which frees it once however
// often it is called.
func (s writeSlot) releaser() func() {
	var once sync.Once
	return func() { once.Do(func() { <-s }) }
}

// mayWrite reports whether query may write outside a transaction: false
// only for a statement that begins with SELECT or VALUES (after blanks and
// comments), which cannot.
func mayWrite(query string) bool {
	q := query
	for {
		q = strings.TrimLeft(q, " \t\r\n\f")
		switch {
		case strings.HasPrefix(q, "--"):
			i := strings.IndexByte(q, '\n')
			if i < 0 {
				return true
			}
			q = q[i+1:]
			continue
		case strings.HasPrefix(q, "/*"):
			i := strings.Index(q, "*/")
			if i < 0 {
				return true
			}
			q = q[i+2:]
			continue
		}
		break
	}
	end := strings.IndexFunc(q, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') })
	if end < 0 {
		end = len(q)
	}
	w := q[:end]
	return !strings.EqualFold(w, "SELECT") && !strings.EqualFold(w, "VALUES")
}

// slotTx is a transaction that holds the write slot until it ends.
type slotTx struct {
	driver.Tx
	end func()
}

func (t *slotTx) Commit() error {
	defer t.end()
	return t.Tx.Commit()
}

func (t *slotTx) Rollback() error {
	defer t.end()
	return t.Tx.Rollback()
}
