package observe

import (
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderly/orderly/store"
)

// TestCompleterPassSetsTheBacklogGauges checks the gauges a completer pass
// sets: unknown outcomes, completer backlog, sweeper lag; and that a pass
// whose store could not count leaves them alone.
func TestCompleterPassSetsTheBacklogGauges(t *testing.T) {
	m := NewMetrics()
	o := NewObserver(m, nil)
	o.CompleterPass(20*time.Millisecond, 3, store.WorkBacklog{UnknownOutcomes: 2, Abandoned: 5,
		OldestUnswept: time.Now().Add(-time.Hour), NeedsAttention: 4}, true)
	if got := testutil.ToFloat64(m.attention); got != 4 {
		t.Errorf("orderly_provider_attempts_needing_attention = %v, want 4", got)
	}
	if got := testutil.ToFloat64(m.unknownOpen); got != 2 {
		t.Errorf("orderly_provider_unknown_outcomes = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.backlog); got != 5 {
		t.Errorf("orderly_completer_backlog = %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.sweeperLag); got < 3600 {
		t.Errorf("orderly_idempotency_sweeper_lag_seconds = %v, want at least 3600", got)
	}
	// On the database's clock when the store says it: a store an hour
	// behind this process reports the lag it sees, not an hour more.
	dbNow := time.Now().Add(-time.Hour)
	o.CompleterPass(time.Millisecond, 0, store.WorkBacklog{Abandoned: 5, Now: dbNow, OldestUnswept: dbNow.Add(-90 * time.Second)}, true)
	if got := testutil.ToFloat64(m.sweeperLag); got != 90 {
		t.Errorf("sweeper lag with the database's clock = %v, want 90 (its now minus the oldest unswept)", got)
	}
	o.CompleterPass(time.Millisecond, 0, store.WorkBacklog{}, false)
	if got := testutil.ToFloat64(m.backlog); got != 5 {
		t.Errorf("a pass that could not count changed the backlog to %v", got)
	}
	o.CompleterPass(time.Millisecond, 0, store.WorkBacklog{}, true)
	if got := testutil.ToFloat64(m.sweeperLag); got != 0 {
		t.Errorf("with nothing unswept the lag = %v, want 0", got)
	}
}

// TestErrorKind checks the kind label of failed statements.
func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "OL001", Message: "lease_lost"}, "guard"},
		{&pgconn.PgError{Code: "23505"}, "unique_violation"},
		{&pgconn.PgError{Code: "23503"}, "constraint"},
		{&pgconn.PgError{Code: "40001"}, "serialization_failure"},
		{&pgconn.PgError{Code: "40P01"}, "deadlock"},
		{&pgconn.PgError{Code: "57014"}, "statement_timeout"},
		{&pgconn.PgError{Code: "55P03"}, "lock_timeout"},
		{&pgconn.PgError{Code: "57P01"}, "unavailable"},
		{&pgconn.PgError{Code: "42601"}, "sql"},
		{io.ErrUnexpectedEOF, "connection"},
		{errors.New("something else"), "other"},
	} {
		if got := ErrorKind(tc.err); got != tc.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestLabelsAreBounded checks the HTTP labels take values from closed sets.
func TestLabelsAreBounded(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "BREW": "other", "get": "other"} {
		if got := methodLabel(in); got != want {
			t.Errorf("methodLabel(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int]string{200: "2xx", 201: "2xx", 409: "4xx", 503: "5xx", 99: "other", 600: "other"} {
		if got := statusClass(in); got != want {
			t.Errorf("statusClass(%d) = %q, want %q", in, got, want)
		}
	}
}

// The stage histograms count what they are told: GroupCommit's size, wait
// and write, and each pool acquire's wait (PgxTracer as pgxpool's
// AcquireTracer).
func TestStageHistograms(t *testing.T) {
	m := NewMetrics()
	o := NewObserver(m, nil)
	o.GroupCommit(3, 2*time.Millisecond, 5*time.Millisecond)
	o.GroupCommit(1, 0, time.Millisecond)
	tr := NewPgxTracer(m, nil)
	ctx := tr.TraceAcquireStart(t.Context(), nil, pgxpool.TraceAcquireStartData{})
	tr.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{})
	want := map[string]struct {
		count uint64
		sum   float64
	}{
		"orderly_group_commit_size":            {2, 4},
		"orderly_group_commit_wait_seconds":    {2, 0.002},
		"orderly_group_commit_write_seconds":   {2, 0.006},
		"orderly_db_pool_acquire_wait_seconds": {1, -1},
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		w, ok := want[mf.GetName()]
		if !ok {
			continue
		}
		delete(want, mf.GetName())
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != w.count || (w.sum >= 0 && math.Abs(h.GetSampleSum()-w.sum) > 1e-9) {
			t.Errorf("%s: count %d, sum %g; want %d, %g", mf.GetName(), h.GetSampleCount(), h.GetSampleSum(), w.count, w.sum)
		}
	}
	for name := range want {
		t.Errorf("%s is not registered", name)
	}
}
