package sqlitefile

import (
	"context"
	"database/sql/driver"
	"errors"
	"reflect"
)

// maxCachedStmts bounds one connection's statement cache. The stores' SQL is
// a fixed set of constant strings (a few hundred at most); a statement
// beyond the bound evicts another that is not in use.
const maxCachedStmts = 512

// cachingConnector opens the driver's connections wrapped in a
// [cachingConn].
type cachingConnector struct{ driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newCachingConn(dc)
}

// driverConn is what a modernc.org/sqlite connection implements and a
// cachingConn forwards (the driver's NewConnector documents the list).
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn keeps each SQL text it runs prepared, so that ExecContext and
// QueryContext with a query string (every statement database/sql runs
// outside an explicit Prepare) parse it once per connection rather than on
// every call: modernc.org/sqlite otherwise prepares and finalizes the
// statement each time, and the SQLite parser was about a third of orderd's
// CPU under a create load (BENCHMARKS.md). A cached statement whose rows are
// still open (a query run again while iterating its own result) is not
// shared: that call prepares a statement of its own, as the driver does
// without the cache. database/sql uses a connection from one goroutine at a
// time (closing rows from another under the same connection lock), so the
// cache needs no lock of its own.
type cachingConn struct {
	driverConn
	stmts map[string]*cachedStmt
}

type cachedStmt struct {
	s    driver.Stmt
	busy bool // rows of it are open
}

// stmtRunner is what the driver's statements implement.
type stmtRunner interface {
	driver.StmtExecContext
	driver.StmtQueryContext
}

func newCachingConn(dc driver.Conn) (driver.Conn, error) {
	c, ok := dc.(driverConn)
	if !ok {
		dc.Close()
		return nil, errors.New("sqlitefile: the driver's connection lacks an interface the statement cache forwards")
	}
	return &cachingConn{driverConn: c, stmts: map[string]*cachedStmt{}}, nil
}

// Unwrap returns the driver's connection (sqlite.Limit sees through it so).
func (c *cachingConn) Unwrap() driver.Conn { return c.driverConn }

// stmt returns the cached statement of query, preparing it if needed, or
// nil if it is in use (the caller then runs query uncached).
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if cs, ok := c.stmts[query]; ok {
		if cs.busy {
			return nil, nil
		}
		return cs, nil
	}
	s, err := c.driverConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if _, ok := s.(stmtRunner); !ok {
		s.Close()
		return nil, nil
	}
	if len(c.stmts) >= maxCachedStmts {
		for q, old := range c.stmts {
			if !old.busy {
				_ = old.s.Close()
				delete(c.stmts, q)
				break
			}
		}
	}
	cs := &cachedStmt{s: s}
	c.stmts[query] = cs
	return cs, nil
}

// ExecContext implements driver.ExecerContext on the cached statement.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.driverConn.ExecContext(ctx, query, args)
	}
	return cs.s.(stmtRunner).ExecContext(ctx, args)
}

// QueryContext implements driver.QueryerContext on the cached statement,
// which stays in use until its rows are closed.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.driverConn.QueryContext(ctx, query, args)
	}
	r, err := cs.s.(stmtRunner).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	cs.busy = true
	return &cachedRows{Rows: r, cs: cs}, nil
}

// Close finalizes the cached statements, then closes the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for q, cs := range c.stmts {
		errs = append(errs, cs.s.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.driverConn.Close())...)
}

// cachedRows releases its statement when closed. It forwards the column
// type interfaces of the driver's rows.
type cachedRows struct {
	driver.Rows
	cs *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.cs.busy = false
	return err
}

func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *cachedRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *cachedRows) ColumnTypeLength(i int) (length int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *cachedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *cachedRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}
