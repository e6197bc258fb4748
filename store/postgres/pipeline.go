package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// db is what the store's operations run on: the pool (each statement its
// own transaction) or a pipelined transaction (pipeTx).
type db interface {
	// exec runs a write whose only outcome is success or an error (guarded
	// writes raise through orderly_guard). A transaction may defer it to
	// the next query or the commit.
	exec(ctx context.Context, sql string, args ...any) error
	// query runs sql now and hands its rows to scan.
	query(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error
}

// poolDB runs each statement on the pool, as its own transaction.
type poolDB struct{ pool *pgxpool.Pool }

func (p poolDB) exec(ctx context.Context, sql string, args ...any) error {
	_, err := p.pool.Exec(ctx, sql, args...)
	return err
}

func (p poolDB) query(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return scanned(rows, scan)
}

// scanned runs scan on rows and returns its error, except that an error of
// rows itself (the connection broke, the statement failed) wins: a scan that
// stops early sees no more rows and may say pgx.ErrNoRows, which translate
// would turn into store.ErrNotFound, where the truth is retryable.
func scanned(rows pgx.Rows, scan func(pgx.Rows) error) error {
	err := scan(rows)
	if rerr := rows.Err(); rerr != nil {
		return rerr
	}
	return err
}

// pipeTx is a transaction on one connection that pipelines: writes are
// queued and sent with the next query, or with the COMMIT, in one batch (one
// round trip). BEGIN is sent only with the first query; a transaction of
// writes alone is sent as one batch without BEGIN or COMMIT, which
// PostgreSQL runs as one implicit transaction: all of it commits at the
// batch's end, or none of it if a statement fails.
type pipeTx struct {
	conn   *pgxpool.Conn
	queued []queuedStmt
	begun  bool
}

// rollbackTimeout bounds a ROLLBACK sent after the caller's context ended.
const rollbackTimeout = 5 * time.Second

type queuedStmt struct {
	sql  string
	args []any
}

func (t *pipeTx) exec(_ context.Context, sql string, args ...any) error {
	t.queued = append(t.queued, queuedStmt{sql, args})
	return nil
}

func (t *pipeTx) query(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	b := t.batch(!t.begun)
	t.begun = true
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error { return scanned(rows, scan) })
	return t.conn.SendBatch(ctx, b).Close()
}

// batch returns a batch of the queued writes, after a BEGIN if begin.
func (t *pipeTx) batch(begin bool) *pgx.Batch {
	b := &pgx.Batch{}
	if begin {
		b.Queue("begin")
	}
	for _, q := range t.queued {
		b.Queue(q.sql, q.args...)
	}
	t.queued = nil
	return b
}

// commit sends the queued writes and ends the transaction in one round
// trip. On an error the transaction is rolled back.
func (t *pipeTx) commit(ctx context.Context) error {
	if !t.begun {
		if len(t.queued) == 0 {
			return nil
		}
		return t.conn.SendBatch(ctx, t.batch(false)).Close()
	}
	b := t.batch(false)
	b.Queue("commit")
	if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
		t.rollback(ctx)
		return err
	}
	return nil
}

// rollback ends a begun transaction. A connection it cannot roll back is
// not idle, and the pool closes it on release.
func (t *pipeTx) rollback(ctx context.Context) {
	t.queued = nil
	if t.begun && t.conn.Conn().PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_, _ = t.conn.Exec(ctx, "rollback")
	}
}
