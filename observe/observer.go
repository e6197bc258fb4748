package observe

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// tracerName is the instrumentation scope of orderd's own spans.
const tracerName = "github.com/orderly/orderly/observe"

// Observer implements service.Observer: it counts into Metrics and traces
// with a tracer of the given provider.
type Observer struct {
	m      *Metrics
	tracer trace.Tracer
}

var (
	_ service.Observer      = (*Observer)(nil)
	_ service.StageObserver = (*Observer)(nil)
)

// GroupCommit implements service.StageObserver: the group's size, wait and
// write in orderly_group_commit_size, _wait_seconds and _write_seconds.
func (o *Observer) GroupCommit(size int, wait, write time.Duration) {
	o.m.groupSize.Observe(float64(size))
	o.m.groupWait.Observe(wait.Seconds())
	o.m.groupWrite.Observe(write.Seconds())
}

// NewObserver returns the service observer over m, tracing with tp (no
// spans when tp is nil).
func NewObserver(m *Metrics, tp trace.TracerProvider) *Observer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Observer{m: m, tracer: tp.Tracer(tracerName)}
}

// StartOperation implements service.Observer with a span named
// "service.<operation>"; an error whose code is internal or unavailable
// marks it failed.
func (o *Observer) StartOperation(ctx context.Context, op idempotency.Operation) (context.Context, func(error)) {
	ctx, span := o.tracer.Start(ctx, "service."+string(op), trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, func(err error) {
		if err != nil {
			code := apperr.ErrorCode(err)
			span.SetAttributes(attrErrorCode.String(string(code)))
			if code == apperr.EInternal || code == apperr.EUnavailable {
				span.SetStatus(codes.Error, string(code))
			}
		}
		span.End()
	}
}

// StartProviderCall implements service.Observer with a client span named
// "provider.<operation>", and counts the call and its latency.
func (o *Observer) StartProviderCall(ctx context.Context, op service.ProviderOp) (context.Context, func(service.ProviderOutcome)) {
	start := time.Now()
	ctx, span := o.tracer.Start(ctx, "provider."+string(op), spanKindClient)
	return ctx, func(out service.ProviderOutcome) {
		o.m.providerTime.WithLabelValues(string(op)).Observe(time.Since(start).Seconds())
		o.m.providerCall.WithLabelValues(string(op), string(out)).Inc()
		span.SetAttributes(attrOutcome.String(string(out)))
		if out == service.OutcomeRetryable || out == service.OutcomeUnknown {
			span.SetStatus(codes.Error, string(out))
		}
		span.End()
	}
}

// KeyEvent implements service.Observer.
func (o *Observer) KeyEvent(ev service.KeyEvent, op idempotency.Operation) {
	if c, ok := o.m.keyEvents[ev]; ok {
		if op == "" {
			op = "unknown"
		}
		c.WithLabelValues(string(op)).Inc()
	}
}

// Transition implements service.Observer.
func (o *Observer) Transition(ev order.Event, from, to order.State) {
	if from == to {
		o.m.noOps.WithLabelValues(string(ev)).Inc()
		return
	}
	o.m.transitions.WithLabelValues(stateLabel(from), stateLabel(to)).Inc()
}

// CompleterPass implements service.Observer: the pass duration, and the
// backlog gauges (unknown outcomes, completer backlog, sweeper lag).
func (o *Observer) CompleterPass(d time.Duration, _ int, b store.WorkBacklog, ok bool) {
	o.m.passDuration.Observe(d.Seconds())
	if !ok {
		return
	}
	o.m.unknownOpen.Set(float64(b.UnknownOutcomes))
	o.m.backlog.Set(float64(b.Abandoned))
	o.m.attention.Set(float64(b.NeedsAttention))
	lag := 0.0
	if !b.OldestUnswept.IsZero() {
		// Both on the database's clock when the store says it.
		lag = max(0, dbNowOr(b.Now).Sub(b.OldestUnswept).Seconds())
	}
	o.m.sweeperLag.Set(lag)
}

// SweepPass implements service.Observer.
func (o *Observer) SweepPass(res store.SweepResult) {
	o.m.sweptKeys.WithLabelValues("tombstoned").Add(float64(res.Tombstoned))
	o.m.sweptKeys.WithLabelValues("deleted").Add(float64(res.Deleted))
}

// dbNowOr returns now, the database's clock as a store read it, or this
// process's clock when the store did not say.
func dbNowOr(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}
