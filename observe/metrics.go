package observe

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
)

// Metrics is the set of orderly_ metrics of one orderd process, registered
// in a registry of its own (with the Go runtime and process collectors).
// It is safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec   // route, method, status_class
	httpDuration *prometheus.HistogramVec // route
	httpInFlight prometheus.Gauge

	keyEvents    map[service.KeyEvent]*prometheus.CounterVec // operation
	sweptKeys    *prometheus.CounterVec                      // action
	sweeperLag   prometheus.Gauge
	providerCall *prometheus.CounterVec   // operation, outcome
	providerTime *prometheus.HistogramVec // operation
	unknownOpen  prometheus.Gauge
	attention    prometheus.Gauge
	backlog      prometheus.Gauge
	passDuration prometheus.Observer
	transitions  *prometheus.CounterVec // from, to
	noOps        *prometheus.CounterVec // event
	stmtErrors   *prometheus.CounterVec // kind
	// Stages a request waits in (issue 19: what the slow ones wait on).
	poolWait   prometheus.Observer
	groupSize  prometheus.Observer
	groupWait  prometheus.Observer
	groupWrite prometheus.Observer
}

// stageBuckets are the buckets of the stage histograms, in seconds: from
// 50 µs to 2.5 s, finer than prometheus.DefBuckets below 5 ms.
var stageBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// keyEventMetrics names the counter of each idempotency protocol event.
var keyEventMetrics = map[service.KeyEvent][2]string{
	service.KeyClaimed:             {"orderly_idempotency_keys_claimed_total", "Client-sent idempotency keys claimed afresh."},
	service.KeyDerivedClaimed:      {"orderly_idempotency_derived_keys_total", "Idempotency keys derived from the request fingerprint (no Idempotency-Key sent) claimed afresh."},
	service.KeyReplayed:            {"orderly_idempotency_replays_total", "Stored outcomes replayed to a retry with the same key and fingerprint."},
	service.KeyFingerprintMismatch: {"orderly_idempotency_fingerprint_mismatches_total", "Keys reused with a different request (422 idempotency_key_reused)."},
	service.KeyInProgressConflict:  {"orderly_idempotency_in_progress_conflicts_total", "Duplicates answered 409 idempotency_key_in_progress while the key was held."},
	service.KeyWaited:              {"orderly_idempotency_waits_total", "Duplicates that waited for the key's holder (Prefer: wait, RFC 7240)."},
	service.KeyLeaseTakeover:       {"orderly_idempotency_lease_takeovers_total", "Keys taken over from a holder that let go or vanished (the fencing token grew), by a retry or the completer."},
	service.KeyFencingRejection:    {"orderly_idempotency_fencing_rejections_total", "Writes refused because their lease's fencing token was stale."},
	service.KeyExpiredHit:          {"orderly_idempotency_expired_key_hits_total", "Keys that came back after their retention (422 idempotency_key_expired)."},
}

// NewMetrics returns the metrics, registered.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{reg}
	m := &Metrics{
		reg: reg,
		httpRequests: f.counter("orderly_http_requests_total",
			"API requests by route template, method and status class (2xx…5xx).", "route", "method", "status_class"),
		httpDuration: f.histogram("orderly_http_request_duration_seconds",
			"API request latency in seconds, from the first byte read to the handler's return, by route template.",
			prometheus.DefBuckets, "route"),
		httpInFlight: f.gauge("orderly_http_requests_in_flight", "API requests being served now."),
		keyEvents:    map[service.KeyEvent]*prometheus.CounterVec{},
		sweptKeys: f.counter("orderly_idempotency_sweeper_keys_total",
			"Idempotency keys the sweeper tombstoned (outcome dropped past retention) or deleted.", "action"),
		sweeperLag: f.gauge("orderly_idempotency_sweeper_lag_seconds",
			"Seconds since the retention of the oldest completed client key the sweeper has not tombstoned yet ended; 0 when none waits."),
		providerCall: f.counter("orderly_provider_calls_total",
			"Calls to the payment provider and the warehouse by operation and outcome (approved, declined, rejected, retryable, unknown, conflict).",
			"operation", "outcome"),
		providerTime: f.histogram("orderly_provider_call_duration_seconds",
			"Provider call latency in seconds by operation.", prometheus.DefBuckets, "operation"),
		unknownOpen: f.gauge("orderly_provider_unknown_outcomes",
			"Requests left with an unknown provider outcome that no retry or completer pass has resolved yet (counted after each completer pass)."),
		attention: f.gauge("orderly_provider_attempts_needing_attention",
			"Provider attempts parked for a person: unresolved past the provider's key retention (ORDERD_UNRESOLVED_AFTER); GET /v1/attempts lists them."),
		backlog: f.gauge("orderly_completer_backlog",
			"Keys the completer would take over now: in progress past their lease, or left with an unknown outcome (counted after each pass)."),
		passDuration: f.histogram("orderly_completer_pass_duration_seconds",
			"Duration of one completer pass in seconds.", prometheus.DefBuckets).WithLabelValues(),
		transitions: f.counter("orderly_order_transitions_total",
			"Order state transitions by from and to state (from \"none\" for a create).", "from", "to"),
		noOps: f.counter("orderly_order_noops_total",
			"Events whose effect already held, answered 200 with the current order, by event.", "event"),
		stmtErrors: f.counter("orderly_db_statement_errors_total",
			"PostgreSQL statements that failed, by kind (guard, unique_violation, serialization_failure, deadlock, statement_timeout, lock_timeout, unavailable, constraint, sql, canceled, connection, other).",
			"kind"),
		poolWait: f.histogram("orderly_db_pool_acquire_wait_seconds",
			"Seconds each PostgreSQL statement or transaction waited for a connection of orderd's pool (0 when one was idle).",
			stageBuckets).WithLabelValues(),
		groupSize: f.histogram("orderly_group_commit_size",
			"Creates per group of the group commit (one transaction and one commit each).",
			[]float64{1, 2, 4, 8, 16, 32, 64}).WithLabelValues(),
		groupWait: f.histogram("orderly_group_commit_wait_seconds",
			"Seconds from the arrival of a group's oldest create until the group's write began (gathering, and waiting while another group was written).",
			stageBuckets).WithLabelValues(),
		groupWrite: f.histogram("orderly_group_commit_write_seconds",
			"Seconds of one group's write: its transaction and commit (and on SQLite its fsync).",
			stageBuckets).WithLabelValues(),
	}
	for ev, nh := range keyEventMetrics {
		m.keyEvents[ev] = f.counter(nh[0], nh[1]+" By operation (create, pay, fulfill, cancel).", "operation")
	}
	m.initSeries()
	return m
}

// initSeries creates the series of every known label combination at 0, so
// a scrape shows them before their first event and rates start from 0.
func (m *Metrics) initSeries() {
	for _, c := range m.keyEvents {
		for _, op := range []idempotency.Operation{idempotency.OpCreate, idempotency.OpPay, idempotency.OpFulfill, idempotency.OpCancel, idempotency.OpRefund} {
			c.WithLabelValues(string(op))
		}
	}
	for _, a := range []string{"tombstoned", "deleted"} {
		m.sweptKeys.WithLabelValues(a)
	}
	for op, outs := range map[service.ProviderOp][]service.ProviderOutcome{
		service.ProviderCharge:       {service.OutcomeApproved, service.OutcomeDeclined, service.OutcomeRetryable, service.OutcomeUnknown, service.OutcomeConflict, service.OutcomePending},
		service.ProviderChargeLookup: {service.OutcomeApproved, service.OutcomeDeclined, service.OutcomeRetryable, service.OutcomeUnknown, service.OutcomePending},
		service.ProviderCancel:       {service.OutcomeApproved, service.OutcomeDeclined, service.OutcomeRetryable, service.OutcomeUnknown, service.OutcomePending},
		service.ProviderPrepare:      {service.OutcomeApproved, service.OutcomeRetryable, service.OutcomeUnknown, service.OutcomeConflict},
		service.ProviderRefund:       {service.OutcomeApproved, service.OutcomeRejected, service.OutcomeRetryable, service.OutcomeUnknown},
		service.ProviderShip:         {service.OutcomeApproved, service.OutcomeRejected, service.OutcomeRetryable, service.OutcomeUnknown, service.OutcomeConflict},
		service.ProviderShipmentFind: {service.OutcomeApproved, service.OutcomeRejected, service.OutcomeRetryable, service.OutcomeUnknown},
	} {
		m.providerTime.WithLabelValues(string(op))
		for _, out := range outs {
			m.providerCall.WithLabelValues(string(op), string(out))
		}
	}
	for _, e := range [][2]order.State{{"", order.Received}, {order.Received, order.Paid}, {order.Paid, order.Fulfilled},
		{order.Received, order.Cancelled}, {order.Paid, order.Cancelled}} {
		m.transitions.WithLabelValues(stateLabel(e[0]), stateLabel(e[1]))
	}
	for _, ev := range []order.Event{order.EventPay, order.EventFulfill, order.EventCancel} {
		m.noOps.WithLabelValues(string(ev))
	}
	for _, k := range errorKinds {
		m.stmtErrors.WithLabelValues(k)
	}
}

// stateLabel is the label of an order state: "none" before a create.
func stateLabel(s order.State) string {
	if s == "" {
		return "none"
	}
	return string(s)
}

// Registry returns the registry the metrics are in, for adding collectors
// (PoolCollector) or gathering in tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// factory makes metrics registered in one registry.
type factory struct{ reg prometheus.Registerer }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}
