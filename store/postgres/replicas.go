package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// Defaults of ReplicaConfig.
const (
	DefaultReplicaMaxLag        = 5 * time.Second
	DefaultReplicaCheckInterval = 200 * time.Millisecond
)

// ReplicaConfig configures the read replicas of a Replicated store.
type ReplicaConfig struct {
	// Replicas are the pool configurations of the standbys, one each. Each
	// must be a streaming standby of the primary (pg_is_in_recovery(),
	// the same system identifier).
	Replicas []*pgxpool.Config
	// MaxLag is the staleness bound: a replica whose data is older than
	// MaxLag, or that does not answer, is out of rotation until it catches
	// up (default DefaultReplicaMaxLag).
	MaxLag time.Duration
	// CheckInterval is how often each replica's lag is measured (default
	// DefaultReplicaCheckInterval).
	CheckInterval time.Duration
	// Logger receives one line on every change of a replica's rotation
	// state (default slog.Default()).
	Logger *slog.Logger
}

// Replicated is a Store whose read endpoints (store.ReplicaReader) may be
// served by streaming replicas. Everything else — every Executor method,
// InTx, StartLeased, CreateOrders — is the embedded primary Store's, so no
// decision is ever made from a replica.
//
// Tokens are WAL positions: ConsistencyToken reads
// pg_current_wal_insert_lsn() on the primary after the write has returned.
// Every transaction visible then has inserted its commit record before that
// position, and a standby makes a transaction visible when it replays the
// commit record, so a standby whose pg_last_wal_replay_lsn() has reached the
// token shows the write (and anything older) to any snapshot taken after.
// A replica's replay position is read by the lag monitor in a statement
// that ends before any read routed by it starts, and the position only
// grows, so routing by the last measured position is safe however old the
// measurement.
//
// Lag is measured in time, on orderd's clock: every CheckInterval the
// monitor samples the primary's insert position, then each replica's replay
// position; a replica's lag is how long ago the newest primary sample it
// has replayed was taken (at most the retained history, which spans twice
// MaxLag). An idle primary means no lag. A read is routed to a replica only
// while its lag at the last check plus the time since that check is within
// MaxLag, so a stalled monitor cannot stretch the bound.
type Replicated struct {
	*Store
	cfg      ReplicaConfig
	log      *slog.Logger
	replicas []*replica
	next     atomic.Uint64 // round robin over the primary and the eligible replicas
	primary  atomic.Int64  // reads of the read endpoints served by the primary

	mu      sync.Mutex
	samples []positionSample // the primary's insert positions, oldest first

	stop context.CancelFunc
	done chan struct{}
}

var _ store.ReplicaReader = (*Replicated)(nil)

// replica is one standby and what the monitor last measured of it.
type replica struct {
	name string // host:port/database, never the password
	pool *pgxpool.Pool

	replayed atomic.Uint64 // pg_last_wal_replay_lsn() as last read; 0 before the first
	reads    atomic.Int64  // reads it served
	misses   atomic.Int64  // reads it could not answer (not found, error), retried on the primary

	mu         sync.Mutex
	inRotation bool
	lag        time.Duration
	checkedAt  time.Time
	reason     string
}

// positionSample is the primary's WAL insert position at a time.
type positionSample struct {
	at  time.Time
	lsn uint64
}

// maxToken is the consistency token only the primary satisfies: no replay
// position reaches it.
const maxToken = "FFFFFFFF/FFFFFFFF"

// OpenReplicated opens the replicas of cfg beside primary, checks each one
// that answers is a standby of primary, measures them once, and starts the
// lag monitor. A replica that does not answer (or lacks the database yet)
// is not an error: it stays out of rotation until it does. Close closes the
// replicas and primary.
func OpenReplicated(ctx context.Context, primary *Store, cfg ReplicaConfig) (*Replicated, error) {
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultReplicaMaxLag
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultReplicaCheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replicated{Store: primary, cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	sysID, err := systemIdentifier(ctx, primary.pool)
	if err != nil {
		return nil, fmt.Errorf("postgres: read the primary's system identifier: %w", err)
	}
	for _, pc := range cfg.Replicas {
		name := fmt.Sprintf("%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			r.closeReplicas()
			return nil, fmt.Errorf("postgres: replica %s: %w", name, err)
		}
		rep := &replica{name: name, pool: pool, reason: "not checked yet"}
		r.replicas = append(r.replicas, rep)
		var wrong *notAStandbyError
		if err := checkStandby(ctx, pool, sysID); errors.As(err, &wrong) {
			r.closeReplicas()
			return nil, fmt.Errorf("postgres: replica %s: %w", name, err)
		}
	}
	r.check(ctx)
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	go r.monitor(mctx)
	return r, nil
}

// systemIdentifier returns the database cluster's system identifier, which
// a streaming standby shares with its primary (and with nothing else).
func systemIdentifier(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var id int64
	err := pool.QueryRow(ctx, `SELECT system_identifier FROM pg_control_system()`).Scan(&id)
	return id, err
}

// notAStandbyError says a replica answered and is not a standby of the
// primary: a configuration error, unlike a replica that does not answer
// (yet: a new database reaches a lagging standby late).
type notAStandbyError struct{ msg string }

func (e *notAStandbyError) Error() string { return e.msg }

// checkStandby returns a *notAStandbyError unless pool's server is a
// standby of the cluster sysID, or the error that kept it from asking. WAL
// positions of another cluster mean nothing here, and a server that is not
// in recovery is not bounded by any replay position.
func checkStandby(ctx context.Context, pool *pgxpool.Pool, sysID int64) error {
	var inRecovery bool
	var id int64
	err := pool.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())`).
		Scan(&inRecovery, &id)
	switch {
	case err != nil:
		return err
	case !inRecovery:
		return &notAStandbyError{"it is not a standby (pg_is_in_recovery() is false); point the replica URLs at streaming replicas of the primary"}
	case id != sysID:
		return &notAStandbyError{fmt.Sprintf("it is a standby of another cluster (system identifier %d, the primary's is %d)", id, sysID)}
	}
	return nil
}

// Close stops the lag monitor and closes the replicas and the primary.
func (r *Replicated) Close() error {
	r.stop()
	<-r.done
	r.closeReplicas()
	return r.Store.Close()
}

func (r *Replicated) closeReplicas() {
	for _, rep := range r.replicas {
		rep.pool.Close()
	}
}

// ConsistencyToken implements store.ReplicaReader: the primary's WAL insert
// position, read after the write returned (see Replicated). It is the
// insert position rather than the write or flush position because a commit
// with synchronous_commit off is visible before it is flushed.
func (r *Replicated) ConsistencyToken(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var lsn string
	if err := r.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return maxToken
	}
	return lsn
}

// ReadOrder implements store.ReplicaReader.
func (r *Replicated) ReadOrder(ctx context.Context, tenantID, id, token string) (order.Order, error) {
	rep, err := r.route(token)
	if err != nil {
		return order.Order{}, err
	}
	if rep != nil {
		o, err := executor{db: poolDB{rep.pool}}.GetOrder(ctx, tenantID, id)
		if err == nil {
			rep.reads.Add(1)
			return o, nil
		}
		// Not found on a replica may be a create it has not replayed yet;
		// a replica's error (a recovery conflict, a broken connection) is
		// not the primary's. Either way the primary answers.
		rep.misses.Add(1)
	}
	r.primary.Add(1)
	return r.GetOrder(ctx, tenantID, id)
}

// ReadOrders implements store.ReplicaReader.
func (r *Replicated) ReadOrders(ctx context.Context, tenantID string, f order.Filter, token string) ([]order.Order, error) {
	rep, err := r.route(token)
	if err != nil {
		return nil, err
	}
	if rep != nil {
		os, err := executor{db: poolDB{rep.pool}}.ListOrders(ctx, tenantID, f)
		if err == nil {
			rep.reads.Add(1)
			return os, nil
		}
		rep.misses.Add(1)
	}
	r.primary.Add(1)
	return r.ListOrders(ctx, tenantID, f)
}

// route picks the server of one read, round robin over the primary and the
// replicas eligible for token: nil is the primary.
func (r *Replicated) route(token string) (*replica, error) {
	var after uint64
	if token != "" {
		var err error
		if after, err = parseLSN(token); err != nil {
			return nil, store.ErrInvalidToken
		}
	}
	now := time.Now()
	var eligible [8]*replica
	candidates := append(eligible[:0], nil) // the primary
	for _, rep := range r.replicas {
		if rep.eligible(now, after, r.cfg.MaxLag) {
			candidates = append(candidates, rep)
		}
	}
	return candidates[r.next.Add(1)%uint64(len(candidates))], nil
}

// eligible reports whether rep may serve a read at now that must see
// position after (0: any).
func (rep *replica) eligible(now time.Time, after uint64, maxLag time.Duration) bool {
	if after != 0 && rep.replayed.Load() < after {
		return false
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return rep.inRotation && rep.lag+now.Sub(rep.checkedAt) <= maxLag
}

// monitor measures the replicas every CheckInterval until ctx is done.
func (r *Replicated) monitor(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.check(ctx)
	}
}

// check samples the primary's position, then measures every replica and
// logs each change of rotation state.
func (r *Replicated) check(ctx context.Context) {
	timeout := max(time.Second, r.cfg.CheckInterval)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	var text string
	err := r.pool.QueryRow(pctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text)
	cancel()
	if err == nil {
		if lsn, perr := parseLSN(text); perr == nil {
			r.addSample(positionSample{at: time.Now(), lsn: lsn})
		}
	}
	var wg sync.WaitGroup
	for _, rep := range r.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.measure(ctx, rep, timeout)
		}()
	}
	wg.Wait()
}

// measure reads rep's replay position, within timeout, and decides its
// rotation state.
func (r *Replicated) measure(ctx context.Context, rep *replica, timeout time.Duration) {
	var inRecovery bool
	var text *string
	qctx, cancel := context.WithTimeout(ctx, timeout)
	err := rep.pool.QueryRow(qctx, `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text`).Scan(&inRecovery, &text)
	cancel()
	now := time.Now()
	in, lag, reason := false, time.Duration(0), ""
	switch {
	case err != nil && ctx.Err() != nil:
		return // shutting down
	case err != nil:
		reason = "unreachable: " + err.Error()
	case !inRecovery || text == nil:
		reason = "not a standby (promoted?)"
	default:
		lsn, perr := parseLSN(*text)
		if perr != nil {
			reason = perr.Error()
			break
		}
		if lsn > rep.replayed.Load() {
			rep.replayed.Store(lsn)
		}
		var known bool
		lag, known = r.lagOf(lsn, now)
		in = known && lag <= r.cfg.MaxLag
		switch {
		case !known:
			reason = "behind every primary position measured: lag unknown"
		case !in:
			reason = "lag above " + r.cfg.MaxLag.String()
		}
	}
	rep.mu.Lock()
	changed := rep.inRotation != in || rep.checkedAt.IsZero()
	rep.inRotation, rep.lag, rep.checkedAt, rep.reason = in, lag, now, reason
	rep.mu.Unlock()
	if changed {
		r.log.Info("replica rotation", "replica", rep.name, "in_rotation", in,
			"lag_seconds", lag.Seconds(), "replay_lsn", formatLSN(rep.replayed.Load()), "reason", reason)
	}
}

// addSample records one primary position and drops those older than twice
// MaxLag (keeping the newest such, so lag beyond the bound still measures
// beyond it).
func (r *Replicated) addSample(s positionSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	keep := s.at.Add(-2 * r.cfg.MaxLag)
	drop := 0
	for drop+1 < len(r.samples) && r.samples[drop+1].at.Before(keep) {
		drop++
	}
	r.samples = append(r.samples[:0], r.samples[drop:]...)
}

// lagOf returns how stale a replica that has replayed to lsn is at now, and
// whether that is known or only a lower bound.
func (r *Replicated) lagOf(lsn uint64, now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lagOf(r.samples, lsn, now)
}

// walPageHeader is the largest WAL page header (a segment's first page).
// The primary's insert position at the start of a page points past the
// header, while a standby that replayed every record to the page's end
// reports the page boundary; lag measurement forgives the difference.
const walPageHeader = 40

// lagOf returns how long ago the newest of samples (oldest first) whose
// position lsn has reached was taken: the replica shows the primary as of
// then or later. With no samples the lag is 0. A replica behind every
// sample is at least as old as the oldest sample, but how much older is
// unknown (known is false): the samples span twice the bound once the
// monitor has run that long, and at start a replica behind the first sample
// may be behind by anything.
func lagOf(samples []positionSample, lsn uint64, now time.Time) (lag time.Duration, known bool) {
	for i := len(samples) - 1; i >= 0; i-- {
		if lsn+walPageHeader >= samples[i].lsn {
			if i == len(samples)-1 {
				return 0, true // caught up with the newest sample
			}
			return max(0, now.Sub(samples[i+1].at)), true
		}
	}
	if len(samples) == 0 {
		return 0, true
	}
	return max(0, now.Sub(samples[0].at)), false
}

// ReplicaStats is what the lag monitor last measured of one replica, and
// how many reads it served.
type ReplicaStats struct {
	// Name is host:port/database.
	Name string
	// InRotation says whether the replica serves reads.
	InRotation bool
	// Lag is the replica's staleness at its last check (a lower bound when
	// Reason says it is unknown).
	Lag time.Duration
	// ReplayLSN is its last replayed WAL position ("0/0" before the first
	// check that reached it).
	ReplayLSN string
	// CheckedAt is when it was last checked.
	CheckedAt time.Time
	// Reason says why it is out of rotation ("" in rotation).
	Reason string
	// Reads counts the reads it served; Misses those it could not answer
	// (not found, an error), which the primary then served.
	Reads, Misses int64
}

// ReadStats is the routing of the read endpoints: reads the primary served
// and each replica's state.
type ReadStats struct {
	PrimaryReads int64
	Replicas     []ReplicaStats
}

// Stats returns the read routing's counters and each replica's last
// measurement, for tests, logs and metrics.
func (r *Replicated) Stats() ReadStats {
	out := ReadStats{PrimaryReads: r.primary.Load()}
	for _, rep := range r.replicas {
		rep.mu.Lock()
		out.Replicas = append(out.Replicas, ReplicaStats{
			Name: rep.name, InRotation: rep.inRotation, Lag: rep.lag, CheckedAt: rep.checkedAt, Reason: rep.reason,
			ReplayLSN: formatLSN(rep.replayed.Load()), Reads: rep.reads.Load(), Misses: rep.misses.Load(),
		})
		rep.mu.Unlock()
	}
	return out
}

// parseLSN parses PostgreSQL's text form of a WAL position, "X/Y" with X
// and Y hexadecimal of at most 8 digits.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || len(hi) == 0 || len(hi) > 8 || len(lo) == 0 || len(lo) > 8 {
		return 0, fmt.Errorf("not a WAL position: %q", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("not a WAL position: %q", s)
	}
	return h<<32 | l, nil
}

// formatLSN is the inverse of parseLSN.
func formatLSN(lsn uint64) string {
	return fmt.Sprintf("%X/%X", lsn>>32, lsn&0xFFFFFFFF)
}
