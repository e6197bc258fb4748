package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
)

// oneConn opens a fresh file with Open's settings, a table t(v) holding
// 1..3, and returns one connection of it.
func oneConn(t *testing.T) *sql.Conn {
	t.Helper()
	db, err := Open(t.TempDir(), "test.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (v INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3)`); err != nil {
		t.Fatal(err)
	}
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cached returns how many statements c's connection keeps prepared.
func cached(t *testing.T, c *sql.Conn) int {
	t.Helper()
	var n int
	if err := c.Raw(func(dc any) error {
		cc, ok := dc.(*cachingConn)
		if !ok {
			return fmt.Errorf("the connection is a %T, not a *cachingConn", dc)
		}
		n = len(cc.stmts)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStatementsArePreparedOncePerConnection(t *testing.T) {
	c := oneConn(t)
	ctx := context.Background()
	before := cached(t, c)
	for i := range 10 {
		if _, err := c.ExecContext(ctx, `UPDATE t SET v = v WHERE v = ?`, i); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM t WHERE v <= ?`, 2).Scan(&n); err != nil || n != 2 {
			t.Fatalf("count = %d, %v; want 2", n, err)
		}
	}
	if got := cached(t, c); got != before+2 {
		t.Errorf("%d statements cached after 20 runs of 2 statements, want %d", got, before+2)
	}
}

// A query run again while its own rows are open gets a statement of its
// own, and both result sets are whole.
func TestStatementInUseIsNotShared(t *testing.T) {
	c := oneConn(t)
	ctx := context.Background()
	const q = `SELECT v FROM t WHERE v >= ? ORDER BY v`
	outer, err := c.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for outer.Next() {
		var v int
		if err := outer.Scan(&v); err != nil {
			t.Fatal(err)
		}
		inner, err := c.QueryContext(ctx, q, v)
		if err != nil {
			t.Fatal(err)
		}
		s := fmt.Sprint(v, ":")
		for inner.Next() {
			var w int
			if err := inner.Scan(&w); err != nil {
				t.Fatal(err)
			}
			s += fmt.Sprint(w)
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	outer.Close()
	if fmt.Sprint(got) != "[1:123 2:23 3:3]" {
		t.Errorf("nested runs of one query read %v, want [1:123 2:23 3:3]", got)
	}
	// Closed, the statement is shared again.
	var n int
	if err := c.QueryRowContext(ctx, q, 3).Scan(&n); err != nil || n != 3 {
		t.Errorf("after the rows closed: %d, %v; want 3", n, err)
	}
}

// Past maxCachedStmts, a statement evicts another; every statement still
// runs, and errors are the driver's.
func TestStatementCacheIsBounded(t *testing.T) {
	c := oneConn(t)
	ctx := context.Background()
	for i := range maxCachedStmts + 50 {
		var v int
		if err := c.QueryRowContext(ctx, fmt.Sprintf(`SELECT %d`, i)).Scan(&v); err != nil || v != i {
			t.Fatalf("SELECT %d = %d, %v", i, v, err)
		}
	}
	if n := cached(t, c); n > maxCachedStmts {
		t.Errorf("%d statements cached, more than the bound %d", n, maxCachedStmts)
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err == nil {
		t.Error("a duplicate key was inserted")
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err == nil {
		t.Error("a duplicate key was inserted by the cached statement")
	}
	if _, err := c.ExecContext(ctx, `SELEC nonsense`); err == nil {
		t.Error("a syntax error was accepted")
	}
}

// slotHeld reports whether the write slot of c's handle is taken.
func slotHeld(t *testing.T, c *sql.Conn) bool {
	t.Helper()
	var held bool
	if err := c.Raw(func(dc any) error {
		held = len(dc.(*cachingConn).slot) == 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return held
}

func TestMayWrite(t *testing.T) {
	for q, want := range map[string]bool{
		`SELECT 1`:                                           false,
		"  \n\tselect v FROM t":                              false,
		"-- a comment\nSELECT 1":                             false,
		"/* c */ VALUES (1)":                                 false,
		`INSERT INTO t VALUES (1) RETURNING v`:               true,
		`UPDATE t SET v = 1`:                                 true,
		`WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x`: true,
		`PRAGMA journal_mode = WAL`:                          true,
		`SAVEPOINT a`:                                        true,
		"-- unterminated":                                    true,
		"/* unterminated":                                    true,
		``:                                                   true,
		`SELECTED`:                                           true,
	} {
		if got := mayWrite(q); got != want {
			t.Errorf("mayWrite(%q) = %v, want %v", q, got, want)
		}
	}
}

// A transaction holds the write slot from BEGIN to its end; a writing
// query outside one until its rows are closed; a read takes nothing.
func TestWritesHoldTheSlot(t *testing.T) {
	c := oneConn(t)
	ctx := context.Background()
	if slotHeld(t, c) {
		t.Fatal("the slot is taken before any write")
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slotHeld(t, c) {
		t.Error("an open transaction does not hold the slot")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (10)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if slotHeld(t, c) {
		t.Error("the slot is still taken after COMMIT")
	}
	tx, err = c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if slotHeld(t, c) {
		t.Error("the slot is still taken after ROLLBACK")
	}

	rows, err := c.QueryContext(ctx, `INSERT INTO t VALUES (11), (12) RETURNING v`)
	if err != nil {
		t.Fatal(err)
	}
	if !slotHeld(t, c) {
		t.Error("an INSERT … RETURNING with open rows does not hold the slot")
	}
	rows.Close()
	if slotHeld(t, c) {
		t.Error("the slot is still taken after the rows closed")
	}

	rows, err = c.QueryContext(ctx, `SELECT v FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	if slotHeld(t, c) {
		t.Error("a SELECT takes the slot")
	}
	rows.Close()
}

// A writer waiting for the slot gives up when its context ends, with the
// context's error; a release frees the slot once however often it runs.
func TestSlotWaitEndsWithTheContext(t *testing.T) {
	slot := make(writeSlot, 1)
	release, err := slot.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := slot.acquire(ctx); !errors.Is(err, context.Canceled) || r != nil {
		t.Errorf("acquire of a taken slot with an ended context = %v, %v; want context.Canceled", r != nil, err)
	}
	release()
	release()
	if len(slot) != 0 {
		t.Fatal("the slot is taken after its release")
	}
	again, err := slot.acquire(context.Background())
	if err != nil || len(slot) != 1 {
		t.Fatalf("acquire after release: %v, taken %v", err, len(slot) == 1)
	}
	release() // the first holder's release must not free the second's slot
	if len(slot) != 1 {
		t.Error("a stale release freed another holder's slot")
	}
	again()
}

// Many writers at once — transactions and autocommit INSERT … RETURNING
// queries, the kind the slot once missed — all commit.
func TestConcurrentWritersAllCommit(t *testing.T) {
	db, err := Open(t.TempDir(), "test.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (v INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const writers, each = 16, 25
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			ctx := context.Background()
			for i := range each {
				v := w*each + i
				if w%2 == 0 {
					errs0 := InTx(ctx, db, func(tx *sql.Tx) error {
						_, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (?)`, v)
						return err
					})
					if errs0 != nil {
						errs <- errs0
						return
					}
					continue
				}
				var got int
				if err := db.QueryRowContext(ctx, `INSERT INTO t VALUES (?) RETURNING v`, v).Scan(&got); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != writers*each {
		t.Errorf("%d rows, %v; want %d", n, err, writers*each)
	}
}
