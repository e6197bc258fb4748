package sqlitefile

import (
	"context"
	"database/sql"
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
