package sqlitefile_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"modernc.org/sqlite"

	"github.com/orderly/orderly/internal/sqlitefile"
)

// open opens a fresh file with Open's settings and one table, t(v), and a
// child table whose foreign key is checked at COMMIT.
func open(t *testing.T) (db *sql.DB, dir string) {
	t.Helper()
	dir = t.TempDir()
	db, err := sqlitefile.Open(dir, "test.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE t (v INTEGER PRIMARY KEY)`,
		`CREATE TABLE child (v INTEGER REFERENCES t (v) DEFERRABLE INITIALLY DEFERRED)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db, dir
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOpenSetsTheDurabilitySettings(t *testing.T) {
	db, _ := open(t)
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "15000"} {
		var got string
		if err := db.QueryRow(`PRAGMA ` + pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

func TestInTxCommitsWhenFnReturnsNil(t *testing.T) {
	db, _ := open(t)
	err := sqlitefile.InTx(context.Background(), db, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO t (v) VALUES (1)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "t"); n != 1 {
		t.Errorf("%d rows after a committed insert, want 1", n)
	}
}

func TestInTxRollsBackAndReturnsFnsError(t *testing.T) {
	db, _ := open(t)
	mine := errors.New("mine")
	err := sqlitefile.InTx(context.Background(), db, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO t (v) VALUES (1)`); err != nil {
			return err
		}
		return mine
	})
	if err != mine {
		t.Errorf("InTx returned %v, want fn's own error unchanged", err)
	}
	if n := count(t, db, "t"); n != 0 {
		t.Errorf("%d rows after a rolled-back insert, want 0", n)
	}
}

func TestInTxRollsBackWhenFnPanics(t *testing.T) {
	db, _ := open(t)
	db.SetMaxOpenConns(1) // the next statement reuses the connection the panic left
	func() {
		defer func() {
			if recover() != "boom" {
				t.Error("the panic did not go on")
			}
		}()
		_ = sqlitefile.InTx(context.Background(), db, func(tx *sql.Tx) error {
			if _, err := tx.Exec(`INSERT INTO t (v) VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			panic("boom")
		})
	}()
	if n := count(t, db, "t"); n != 0 {
		t.Errorf("%d rows after a panic in the transaction, want 0", n)
	}
}

// TestInTxReturnsTheCommitError: fn succeeds but COMMIT fails (a deferred
// foreign key is violated). The error must reach the caller, nothing may be
// written, and the connection must be usable again.
func TestInTxReturnsTheCommitError(t *testing.T) {
	db, _ := open(t)
	db.SetMaxOpenConns(1)
	err := sqlitefile.InTx(context.Background(), db, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO child (v) VALUES (42)`) // no t row 42: fails at COMMIT
		return err
	})
	if err == nil {
		t.Fatal("InTx returned nil although COMMIT failed")
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		t.Errorf("the COMMIT error %v is not the driver's", err)
	}
	if n := count(t, db, "child"); n != 0 {
		t.Errorf("%d rows after a failed COMMIT, want 0", n)
	}
	if err := sqlitefile.InTx(context.Background(), db, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO t (v) VALUES (7)`)
		return err
	}); err != nil {
		t.Errorf("the connection is not clean after a failed COMMIT: %v", err)
	}
}

func TestInTxReturnsTheBeginError(t *testing.T) {
	db, _ := open(t)
	db.Close()
	called := false
	err := sqlitefile.InTx(context.Background(), db, func(*sql.Tx) error { called = true; return nil })
	if err == nil || called {
		t.Errorf("InTx on a closed handle: err %v, fn called %v; want an error and no call", err, called)
	}
}

// TestTranslate provokes each condition with the real driver.
func TestTranslate(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		provoke   func(t *testing.T) error
		want      error // nil: unmarked
		retryable bool
	}{
		{"a write lock held elsewhere is busy", func(t *testing.T) error {
			db, dir := open(t)
			holder, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: holds the write lock
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback() }()
			other, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "test.db")+"?_pragma=busy_timeout(0)&_txlock=immediate")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			return sqlitefile.InTx(ctx, other, func(*sql.Tx) error { return nil })
		}, sqlitefile.ErrBusy, true},
		{"a table in use by the same connection is locked", func(t *testing.T) error {
			db, _ := open(t)
			if _, err := db.Exec(`INSERT INTO t (v) VALUES (1), (2)`); err != nil {
				t.Fatal(err)
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rows, err := conn.QueryContext(ctx, `SELECT v FROM t`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			rows.Next() // the statement stays active
			_, err = conn.ExecContext(ctx, `DROP TABLE t`)
			return err
		}, sqlitefile.ErrBusy, true},
		{"a closed handle is closed", func(t *testing.T) error {
			db, _ := open(t)
			db.Close()
			_, err := db.Exec(`INSERT INTO t (v) VALUES (1)`)
			return err
		}, sqlitefile.ErrClosed, true},
		{"a full database is an I/O error", func(t *testing.T) error {
			db, _ := open(t)
			db.SetMaxOpenConns(1) // the page limit is per connection
			if _, err := db.Exec(`PRAGMA max_page_count = 3`); err != nil {
				t.Fatal(err)
			}
			_, err := db.Exec(`CREATE TABLE big (b BLOB); INSERT INTO big VALUES (zeroblob(65536))`)
			return err
		}, sqlitefile.ErrIO, false},
		{"no rows is left alone", func(t *testing.T) error {
			db, _ := open(t)
			var v int
			return db.QueryRow(`SELECT v FROM t`).Scan(&v)
		}, nil, false},
		{"a constraint violation is left alone", func(t *testing.T) error {
			db, _ := open(t)
			_, err := db.Exec(`INSERT INTO t (v) VALUES (1), (1)`)
			return err
		}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.provoke(t)
			if raw == nil {
				t.Fatal("the condition was not provoked: no error")
			}
			got := sqlitefile.Translate(raw)
			for _, cond := range []error{sqlitefile.ErrBusy, sqlitefile.ErrClosed, sqlitefile.ErrIO} {
				if is := errors.Is(got, cond); is != (cond == tc.want) {
					t.Errorf("Translate(%v): errors.Is(%v) = %v", raw, cond, is)
				}
			}
			if tc.want == nil && got != raw {
				t.Errorf("Translate changed an error it does not mark: %v → %v", raw, got)
			}
			if !errors.Is(got, raw) {
				t.Errorf("Translate(%v) = %v lost the driver's error", raw, got)
			}
			if again := sqlitefile.Translate(got); again != got {
				t.Errorf("translating twice changed %v to %v", got, again)
			}
			if r := sqlitefile.Retryable(raw); r != tc.retryable {
				t.Errorf("Retryable(%v) = %v, want %v", raw, r, tc.retryable)
			}
		})
	}
	if sqlitefile.Translate(nil) != nil || sqlitefile.Retryable(nil) {
		t.Error("nil is not translated to nil, or is retryable")
	}
}
