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
// [cachingConn], all sharing one write slot.
type cachingConnector struct {
	driver.Connector
	slot writeSlot
}

func newCachingConnector(base driver.Connector) cachingConnector {
	return cachingConnector{Connector: base, slot: make(writeSlot, 1)}
}

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newCachingConn(dc, c.slot)
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
// cache needs no lock of its own. Writes take the handle's write slot
// (writeSlot).
type cachingConn struct {
	driverConn
	stmts map[string]*cachedStmt
	slot  writeSlot
	inTx  bool   // a transaction is open: it holds the slot
	txEnd func() // ends it (releases the slot), set while inTx
}

type cachedStmt struct {
	s     driver.Stmt
	busy  bool // rows of it are open
	write bool // mayWrite
}

// stmtRunner is what the driver's statements implement.
type stmtRunner interface {
	driver.StmtExecContext
	driver.StmtQueryContext
}

func newCachingConn(dc driver.Conn, slot writeSlot) (driver.Conn, error) {
	c, ok := dc.(driverConn)
	if !ok {
		dc.Close()
		return nil, errors.New("sqlitefile: the driver's connection lacks an interface the statement cache forwards")
	}
	return &cachingConn{driverConn: c, stmts: map[string]*cachedStmt{}, slot: slot}, nil
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
	cs := &cachedStmt{s: s, write: mayWrite(query)}
	c.stmts[query] = cs
	return cs, nil
}

// slotFor takes the write slot for a statement outside a transaction that
// may write, and returns its release (nil when none was taken).
func (c *cachingConn) slotFor(ctx context.Context, cs *cachedStmt, query string) (func(), error) {
	if c.inTx {
		return nil, nil
	}
	if cs != nil && !cs.write || cs == nil && !mayWrite(query) {
		return nil, nil
	}
	return c.slot.acquire(ctx)
}

// ExecContext implements driver.ExecerContext on the cached statement.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	release, err := c.slotFor(ctx, cs, query)
	if err != nil {
		return nil, err
	}
	if release != nil {
		defer release()
	}
	if cs == nil {
		return c.driverConn.ExecContext(ctx, query, args)
	}
	return cs.s.(stmtRunner).ExecContext(ctx, args)
}

// QueryContext implements driver.QueryerContext on the cached statement,
// which stays in use until its rows are closed; a writing query holds the
// write slot until then.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	release, err := c.slotFor(ctx, cs, query)
	if err != nil {
		return nil, err
	}
	var r driver.Rows
	if cs == nil {
		r, err = c.driverConn.QueryContext(ctx, query, args)
	} else {
		r, err = cs.s.(stmtRunner).QueryContext(ctx, args)
	}
	if err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	if cs != nil {
		cs.busy = true
	}
	return &cachedRows{Rows: r, cs: cs, release: release}, nil
}

// BeginTx implements driver.ConnBeginTx: the transaction holds the write
// slot from before its BEGIN (IMMEDIATE, which takes SQLite's write lock)
// to its COMMIT or ROLLBACK.
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	release, err := c.slot.acquire(ctx)
	if err != nil {
		return nil, err
	}
	t, err := c.driverConn.BeginTx(ctx, opts)
	if err != nil {
		release()
		return nil, err
	}
	c.inTx = true
	c.txEnd = func() { c.inTx, c.txEnd = false, nil; release() }
	return &slotTx{Tx: t, end: c.txEnd}, nil
}

// Begin implements driver.Conn through BeginTx.
func (c *cachingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// PrepareContext implements driver.ConnPrepareContext: a statement prepared
// explicitly is not cached, and takes the write slot as ExecContext and
// QueryContext do.
func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.driverConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	r, ok := s.(stmtRunner)
	if !ok {
		return s, nil
	}
	return &preparedStmt{Stmt: s, run: r, c: c, query: query}, nil
}

// Prepare implements driver.Conn through PrepareContext.
func (c *cachingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// preparedStmt is a statement of an explicit Prepare.
type preparedStmt struct {
	driver.Stmt
	run   stmtRunner
	c     *cachingConn
	query string
}

func (s *preparedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	release, err := s.c.slotFor(ctx, nil, s.query)
	if err != nil {
		return nil, err
	}
	if release != nil {
		defer release()
	}
	return s.run.ExecContext(ctx, args)
}

func (s *preparedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	release, err := s.c.slotFor(ctx, nil, s.query)
	if err != nil {
		return nil, err
	}
	r, err := s.run.QueryContext(ctx, args)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	return &cachedRows{Rows: r, release: release}, nil
}

// Close finalizes the cached statements, then closes the connection (which
// rolls back a transaction left open, whose slot it releases).
func (c *cachingConn) Close() error {
	if c.txEnd != nil {
		defer c.txEnd()
	}
	var errs []error
	for q, cs := range c.stmts {
		errs = append(errs, cs.s.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.driverConn.Close())...)
}

// cachedRows releases its cached statement (cs, if any) and the write slot
// (release, if any) when closed. It forwards the column type interfaces of
// the driver's rows.
type cachedRows struct {
	driver.Rows
	cs      *cachedStmt
	release func()
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	if r.cs != nil {
		r.cs.busy = false
	}
	if r.release != nil {
		r.release()
	}
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
