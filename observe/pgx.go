package observe

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// spanKindClient is the start option of every client span, made once (an
// option built per call is an allocation per statement).
var spanKindClient = trace.WithSpanKind(trace.SpanKindClient)

// PgxTracer is a pgx tracer (pgx.QueryTracer and pgx.BatchTracer) that
// makes a client span of each statement and counts failed statements by
// kind in orderly_db_statement_errors_total. A statement sent alone is a
// "db.query" span; a pgx.Batch (store/postgres pipelines a transaction's
// statements as one) is a "db.batch" span with one "db.batch.query" child
// per statement, each ending when its result was read. Set it as
// pgxpool.Config.ConnConfig.Tracer.
type PgxTracer struct {
	m      *Metrics
	tracer trace.Tracer
}

var (
	_ pgx.QueryTracer       = (*PgxTracer)(nil)
	_ pgx.BatchTracer       = (*PgxTracer)(nil)
	_ pgxpool.AcquireTracer = (*PgxTracer)(nil)
)

// acquireKey carries the start of a pool acquire in its context.
type acquireKey struct{}

// TraceAcquireStart implements pgxpool.AcquireTracer: it notes when the
// acquire began.
func (t *PgxTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if t.m == nil {
		return ctx
	}
	return context.WithValue(ctx, acquireKey{}, time.Now())
}

// TraceAcquireEnd implements pgxpool.AcquireTracer: the wait for a
// connection goes to orderly_db_pool_acquire_wait_seconds.
func (t *PgxTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if start, ok := ctx.Value(acquireKey{}).(time.Time); ok && data.Err == nil {
		t.m.poolWait.Observe(time.Since(start).Seconds())
	}
}

// NewPgxTracer returns the tracer counting into m (nothing when nil) and
// tracing with tp (no spans when nil).
func NewPgxTracer(m *Metrics, tp trace.TracerProvider) *PgxTracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &PgxTracer{m: m, tracer: tp.Tracer(tracerName)}
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx, span := t.tracer.Start(ctx, "db.query", spanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attrDBSystem, attrDBQuery.String(compactSQL(data.SQL)))
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	t.failed(span, data.Err)
	span.End()
}

// batchState is what a batch's context carries between its statements.
type batchState struct {
	span    trace.Span
	lastEnd time.Time
	failed  bool
}

type batchKey struct{}

// TraceBatchStart implements pgx.BatchTracer.
func (t *PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	ctx, span := t.tracer.Start(ctx, "db.batch", spanKindClient)
	if span.IsRecording() && data.Batch != nil {
		span.SetAttributes(attrDBSystem, attrDBBatch.Int(data.Batch.Len()))
	}
	return context.WithValue(ctx, batchKey{}, &batchState{span: span, lastEnd: time.Now()})
}

// TraceBatchQuery implements pgx.BatchTracer: a span from the end of the
// previous statement's result (or the batch's start) to this one's.
func (t *PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	st, _ := ctx.Value(batchKey{}).(*batchState)
	if st == nil {
		return
	}
	if data.Err != nil {
		st.failed = true
	}
	if !st.span.IsRecording() {
		// Not traced (no exporter, or not sampled): no child span to
		// make, only the error to count.
		t.failed(st.span, data.Err)
		return
	}
	now := time.Now()
	_, span := t.tracer.Start(ctx, "db.batch.query", spanKindClient, trace.WithTimestamp(st.lastEnd))
	if span.IsRecording() {
		span.SetAttributes(attrDBSystem, attrDBQuery.String(compactSQL(data.SQL)))
	}
	st.lastEnd = now
	t.failed(span, data.Err)
	span.End(trace.WithTimestamp(now))
}

// TraceBatchEnd implements pgx.BatchTracer. A batch that failed without a
// statement's error (the connection broke) counts once.
func (t *PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	st, _ := ctx.Value(batchKey{}).(*batchState)
	if st == nil {
		return
	}
	if st.failed {
		st.span.SetStatus(codes.Error, "a statement failed")
	} else {
		t.failed(st.span, data.Err)
	}
	st.span.End()
}

// failed marks span failed and counts the error, if err is one.
func (t *PgxTracer) failed(span trace.Span, err error) {
	if err == nil {
		return
	}
	kind := ErrorKind(err)
	span.SetStatus(codes.Error, kind)
	if t.m != nil {
		t.m.stmtErrors.WithLabelValues(kind).Inc()
	}
}

// errorKinds are the values of ErrorKind.
var errorKinds = []string{"guard", "unique_violation", "serialization_failure", "deadlock", "statement_timeout",
	"lock_timeout", "unavailable", "constraint", "sql", "canceled", "connection", "other"}

// ErrorKind classes a statement's error for the kind label: "guard" (a
// guarded write refused by orderly_guard, SQLSTATE OL001: a lost lease, a
// version conflict, an attempt in flight — the protocol working),
// "unique_violation" (23505), "serialization_failure" (40001), "deadlock"
// (40P01), "statement_timeout" (57014), "lock_timeout" (55P03),
// "unavailable" (a shutdown 57P01–57P03, too many connections 53300),
// "constraint" (another class 23 violation), "sql" (any other SQLSTATE),
// "canceled" (the caller's context ended), "connection" (the connection
// broke or could not be made), or "other".
func ErrorKind(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "OL001":
			return "guard"
		case code == "23505":
			return "unique_violation"
		case code == "40001":
			return "serialization_failure"
		case code == "40P01":
			return "deadlock"
		case code == "57014":
			return "statement_timeout"
		case code == "55P03":
			return "lock_timeout"
		case code == "57P01", code == "57P02", code == "57P03", code == "53300":
			return "unavailable"
		case strings.HasPrefix(code, "23"):
			return "constraint"
		}
		return "sql"
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.As(err, &connErr), errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return "connection"
	}
	return "other"
}

// maxSQLAttr bounds the statement text put on a span.
const maxSQLAttr = 2048

// compactSQL folds sql's whitespace runs to single spaces and bounds its
// length. The text holds placeholders, never values: arguments are not
// recorded.
func compactSQL(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > maxSQLAttr {
		s = s[:maxSQLAttr]
	}
	return s
}
