package check

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // the embedded store's driver, for -database-url sqlite:PATH

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/paysim"
)

// Anomaly kinds: each is a broken promise found in the database, the
// provider ledger, or the answers.
const (
	AnomalyDuplicateOrder     = "duplicate_order"            // more than one order for one logical create
	AnomalyLostOrder          = "lost_order"                 // an order answered 201 is not in the database
	AnomalyWrongOrder         = "wrong_order"                // an order answered 201 belongs to another create
	AnomalyPhantomOrder       = "phantom_order"              // an order of the run that no logical create made
	AnomalyUnresolved         = "unresolved_operation"       // no definitive answer, even after reconciling
	AnomalyReplayMismatch     = "replay_mismatch"            // two answers for one key differ
	AnomalyReplayNotFlagged   = "replay_not_flagged"         // a replayed sequence answered without Idempotency-Replayed
	AnomalyReplayBytes        = "replay_not_identical"       // two answers for one stored outcome and order version differ in their bytes
	AnomalyDoubleExecution    = "double_execution"           // two original (non-replayed) answers for one key
	AnomalyUnexpectedStatus   = "unexpected_status"          // a definitive answer that is not legal for the operation
	AnomalyKeyRecord          = "key_record_mismatch"        // idempotency_keys disagrees with the answer
	AnomalyAckedStateLost     = "acked_state_lost"           // the order left a state an answer acknowledged, illegally
	AnomalyPhantomTransition  = "phantom_transition"         // the order reached a state no operation asked for
	AnomalyAttemptNotSettled  = "attempt_not_settled"        // a provider attempt left pending or unknown
	AnomalyStateAttempts      = "state_attempt_mismatch"     // the order's state disagrees with its provider attempts
	AnomalyDoubleCapture      = "double_capture"             // the provider captured an order more than once
	AnomalyDoubleShipment     = "double_shipment"            // the warehouse shipped an order more than once
	AnomalyRefundNoCapture    = "refund_without_capture"     // more refunds than captures
	AnomalyStateLedger        = "state_ledger_mismatch"      // the order's state disagrees with the provider ledger
	AnomalyAttemptLedger      = "attempt_ledger_mismatch"    // recorded successful charges differ from ledger captures
	AnomalyPaidNoCapture      = "paid_without_capture"       // the order is PAID or FULFILLED and the provider never captured it
	AnomalyShipNotFulfilled   = "shipment_without_fulfilled" // the warehouse shipped an order that is not FULFILLED
	AnomalyMoney              = "money_mismatch"             // the provider's captured minus refunded amount is not what the order's state says
	AnomalyRefundTotals       = "refund_totals_mismatch"     // the order's refunded total is not what the provider refunded, or partial refunds the provider made are not the order's succeeded ones
	AnomalyInternalError      = "internal_error_500"         // the service answered 500
	AnomalyHarnessUnreachable = "check_incomplete"           // a check could not run
)

// maxExamples bounds the anomalies listed one by one; all are counted.
const maxExamples = 200

// Anomaly is one broken promise.
type Anomaly struct {
	Kind   string `json:"kind"`
	Ref    string `json:"ref"`
	Detail string `json:"detail"`
}

// Report is the checker's verdict and what it looked at.
type Report struct {
	Anomalies       []Anomaly      `json:"anomalies"`
	ByKind          map[string]int `json:"anomalies_by_kind"`
	Total           int            `json:"anomalies_total"`
	LogicalCreates  int            `json:"logical_creates"`
	AckedCreates    int            `json:"acked_creates"`
	DBOrders        int            `json:"db_orders"`
	DBStates        map[string]int `json:"db_states"`
	KeysChecked     int            `json:"keys_checked"`
	AttemptsChecked int            `json:"attempts_checked"`
	LedgerChecked   bool           `json:"ledger_checked"`
	LedgerCaptures  int            `json:"ledger_captures"`
	LedgerRefunds   int            `json:"ledger_refunds"`
	LedgerShipments int            `json:"ledger_shipments"`
	MaxCaptures     int            `json:"max_captures_per_order"`
	// LedgerCaptured and LedgerRefunded are the provider's amounts, minor
	// units (every currency summed: a storm pays in one); PaidAmount is the
	// sum of the amounts of the run's PAID and FULFILLED orders.
	LedgerCaptured int64 `json:"ledger_captured_minor"`
	LedgerRefunded int64 `json:"ledger_refunded_minor"`
	PaidAmount     int64 `json:"paid_orders_amount_minor"`
	// RunCaptures, RunRefunds and RunShipments are the provider's, for the
	// run's orders only; RunCaptured and RunRefunded their amounts (minor
	// units).
	RunCaptures  int   `json:"run_captures"`
	RunRefunds   int   `json:"run_refunds"`
	RunShipments int   `json:"run_shipments"`
	RunCaptured  int64 `json:"run_captured_minor"`
	RunRefunded  int64 `json:"run_refunded_minor"`
	// CancelledPaid counts CANCELLED orders the provider had captured.
	CancelledPaid int `json:"cancelled_paid_orders"`
	// PaidRefunded is what partial refunds returned of the run's PAID and
	// FULFILLED orders (their refunded totals, minor units); PartialRefunds
	// counts the run's partial refund attempts that succeeded (issue 16).
	PaidRefunded   int64 `json:"paid_orders_refunded_minor"`
	PartialRefunds int   `json:"partial_refunds"`
	// CaptureAtFulfilment is the Checker's: the money is held by
	// FULFILLED orders only.
	CaptureAtFulfilment bool `json:"capture_at_fulfilment,omitempty"`
	// Replays counts the stored answers that were replays; ReplaysCompared
	// those whose body could be compared byte for byte with the original's.
	Replays         int `json:"replays"`
	ReplaysCompared int `json:"replays_compared_bytes"`
	// Invariants is the verdict per promise, with its counts (Summarize).
	Invariants []Invariant `json:"invariants,omitempty"`
	// Seconds is how long each check took (analyze, database, webhooks,
	// bus), wall clock.
	Seconds map[string]float64 `json:"check_seconds,omitempty"`
}

// Add records an anomaly of kind about ref; only the first maxExamples are
// kept one by one, but all are counted.
func (r *Report) Add(kind, ref, format string, args ...any) {
	r.Total++
	r.ByKind[kind]++
	if len(r.Anomalies) < maxExamples {
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: kind, Ref: ref, Detail: fmt.Sprintf(format, args...)})
	}
}

// DB is a read-only handle on the service's database.
type DB struct {
	*sql.DB
	sqlite bool
}

// OpenDB opens url read-only: a postgres:// URL (through pgx, in a
// read-only session), or sqlite:PATH for the embedded store's file.
func OpenDB(url string) (*DB, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		return &DB{DB: db, sqlite: true}, nil
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("-database-url: %w", err)
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.RuntimeParams["application_name"] = "orderstorm-check"
	return &DB{DB: stdlib.OpenDB(*cfg)}, nil
}

// Analyze refreshes the planner's statistics of the tables the checks read
// (PostgreSQL's ANALYZE, allowed in a read-only session): a storm's tables
// are fresh, and their statistics would still say they are empty. The
// embedded store's file is opened read-only, and its queries here are
// single-table scans whatever the statistics: nothing to do.
func (d *DB) Analyze(ctx context.Context) error {
	if d.sqlite {
		return nil
	}
	_, err := d.ExecContext(ctx, `ANALYZE orders, idempotency_keys, provider_attempts, order_events, webhook_deliveries`)
	return err
}

var dollarParam = regexp.MustCompile(`\$(\d+)`)

// q adapts a query written with $N parameters to the dialect.
func (d *DB) q(query string) string {
	if d.sqlite {
		return dollarParam.ReplaceAllString(query, "?$1")
	}
	return query
}

// Checker verifies the promise from the database and the provider ledger.
type Checker struct {
	DB *DB
	// Ledger is the provider's ledger; nil skips the provider checks.
	Ledger *paysim.Snapshot
	// HTTP500 is how many 500 answers the harness received.
	HTTP500 int64
	// DerivedTTL is the retention of derived keys; keys of keyless
	// operations older than it may be swept, so they are not looked up.
	DerivedTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// CaptureAtFulfilment: orderd ran with ORDERD_CAPTURE=at_fulfilment
	// (issue 16). A PAID order's payment is only authorized (the provider
	// holds no capture for it), a FULFILLED one's captured once it
	// shipped, a cancel voids (no capture, no refund).
	CaptureAtFulfilment bool
}

type dbOrder struct {
	id, marker, state string
	amount            int64 // minor units
}

type dbKey struct {
	state     string
	operation sql.NullString
	errorCode sql.NullString
	resource  sql.NullString
}

// agrees reports whether the key's stored outcome is the answer first: the
// same error code for an error; for a success no error code, and a create
// (201) exactly when the key's operation is a create. (The key stores no
// HTTP status: the api derives it from these.)
func (k dbKey) agrees(first book.Obs) bool {
	if first.Status < 200 || first.Status >= 300 {
		return k.errorCode.String == first.Code
	}
	return !k.errorCode.Valid && (first.Status == http.StatusCreated) == (k.operation.String == "create")
}

func (k dbKey) outcome() string {
	if k.errorCode.Valid {
		return "error " + k.errorCode.String
	}
	return "a successful " + k.operation.String
}

// orderLedger is what the provider did for one order.
type orderLedger struct {
	captures, refunds, shipments int
	captured, refunded           int64 // minor units
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Check runs every invariant over the run's orders.
func (c *Checker) Check(ctx context.Context, b *book.Book) (Report, error) {
	rep := Report{ByKind: map[string]int{}, DBStates: map[string]int{}, CaptureAtFulfilment: c.CaptureAtFulfilment}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	like := escapeLike(b.MarkerPrefix()) + "%"

	// Every query below reads one table in one pass, filtered by the tenant
	// (and, for orders, the run's marker), and the joins are made here, on
	// maps: no plan the statistics of fresh tables could choose is a nested
	// loop over orders × keys (issue 20: that plan took over 11 minutes
	// after a 100 000-operation storm).

	// The run's orders, found by their customer_id marker.
	byMarker := map[string][]dbOrder{}
	byID := map[string]dbOrder{}
	rows, err := c.DB.QueryContext(ctx, c.DB.q(`SELECT id, customer_id, state, amount FROM orders
		WHERE tenant_id = $1 AND customer_id LIKE $2 ESCAPE '\'`), b.Tenant, like)
	if err != nil {
		return rep, fmt.Errorf("reading orders: %w", err)
	}
	for rows.Next() {
		var o dbOrder
		if err := rows.Scan(&o.id, &o.marker, &o.state, &o.amount); err != nil {
			rows.Close()
			return rep, err
		}
		byMarker[o.marker] = append(byMarker[o.marker], o)
		byID[o.id] = o
		rep.DBOrders++
		rep.DBStates[o.state]++
		if o.state == "FULFILLED" || (o.state == "PAID" && !c.CaptureAtFulfilment) {
			rep.PaidAmount += o.amount
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, err
	}

	// Their provider attempts, counted by kind/status: the tenant's
	// attempts, kept for the run's orders.
	attempts := map[string]map[string]int{}
	// A partial refund's attempt (provider key <order id>/refunds/…) counts
	// as kind partial_refund, apart from the cancel's refund.
	rows, err = c.DB.QueryContext(ctx, c.DB.q(`SELECT order_id, kind, status, provider_key FROM provider_attempts WHERE tenant_id = $1`), b.Tenant)
	if err != nil {
		return rep, fmt.Errorf("reading provider attempts: %w", err)
	}
	for rows.Next() {
		var id, kind, status, key string
		if err := rows.Scan(&id, &kind, &status, &key); err != nil {
			rows.Close()
			return rep, err
		}
		if _, ours := byID[id]; !ours {
			continue
		}
		if kind == "refund" && strings.Contains(key, "/refunds/") {
			kind = "partial_refund"
		}
		if attempts[id] == nil {
			attempts[id] = map[string]int{}
		}
		attempts[id][kind+"/"+status]++
		rep.AttemptsChecked++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, err
	}

	// Their refund totals (issue 16): what partial refunds (and a cancel
	// from PAID) returned, per order.
	refunded := map[string]int64{}
	rows, err = c.DB.QueryContext(ctx, c.DB.q(`SELECT order_id, refunded FROM order_refund_totals WHERE tenant_id = $1`), b.Tenant)
	if err != nil {
		return rep, fmt.Errorf("reading refund totals: %w", err)
	}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return rep, err
		}
		if _, ours := byID[id]; ours {
			refunded[id] = n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, err
	}

	// Their idempotency keys: the tenant's keys that name a resource, kept
	// for the run's orders.
	keys, err := c.runKeys(ctx, b.Tenant, byID)
	if err != nil {
		return rep, err
	}

	ledger := c.ledgerByOrder(&rep)

	for _, o := range b.Orders() {
		rep.LogicalCreates++
		ops := o.Ops()
		found := byMarker[o.Marker]
		delete(byMarker, o.Marker)
		acked := map[string]bool{}
		if len(ops) > 0 && ops[0].Kind == book.KindCreate {
			for _, ob := range ops[0].Observations() {
				if ob.Definitive && ob.Status == http.StatusCreated && ob.ResourceID != "" {
					acked[ob.ResourceID] = true
				}
			}
		}
		if len(acked) > 0 {
			rep.AckedCreates++
		}
		if len(found) > 1 {
			ids := make([]string, len(found))
			for i, f := range found {
				ids[i] = f.id
			}
			rep.Add(AnomalyDuplicateOrder, o.Marker, "%d orders for one logical create: %s", len(found), strings.Join(ids, ", "))
		}
		for id := range acked {
			switch row, ok := byID[id]; {
			case !ok:
				rep.Add(AnomalyLostOrder, o.Marker, "order %s was answered 201 but is not in the database", id)
			case row.marker != o.Marker:
				rep.Add(AnomalyWrongOrder, o.Marker, "order %s was answered 201 but has customer_id %s", id, row.marker)
			}
		}
		for _, op := range ops {
			c.checkOp(&rep, op, keys, byID, now())
		}
		if len(found) == 1 {
			dbRefunded, hasTotals := refunded[found[0].id]
			c.checkState(&rep, o, found[0], ops, attempts[found[0].id], dbRefunded, hasTotals, ledger)
		}
	}
	markers := make([]string, 0, len(byMarker))
	for m := range byMarker {
		markers = append(markers, m)
	}
	sort.Strings(markers)
	for _, m := range markers {
		for _, f := range byMarker[m] {
			rep.Add(AnomalyPhantomOrder, m, "order %s (%s) matches no logical create of the run", f.id, f.state)
		}
	}
	if c.HTTP500 > 0 {
		rep.Add(AnomalyInternalError, "-", "the service answered 500 %d times", c.HTTP500)
	}
	return rep, nil
}

// OpenAttempts counts the provider attempts of the run's orders that are
// pending or unknown: one pass over the tenant's attempts and one over the
// run's orders.
func (c *Checker) OpenAttempts(ctx context.Context, b *book.Book) (int, error) {
	rows, err := c.DB.QueryContext(ctx, c.DB.q(`SELECT order_id FROM provider_attempts
		WHERE tenant_id = $1 AND status IN ('pending', 'unknown')`), b.Tenant)
	if err != nil {
		return 0, fmt.Errorf("reading open provider attempts: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	orders, err := c.runOrders(ctx, b)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if _, ours := orders[id]; ours {
			n++
		}
	}
	return n, nil
}

// runKeys reads the tenant's idempotency keys that name a resource, in one
// pass, and keeps those of orders in byID (key hash → record).
func (c *Checker) runKeys(ctx context.Context, tenant string, byID map[string]dbOrder) (map[string]dbKey, error) {
	rows, err := c.DB.QueryContext(ctx, c.DB.q(`SELECT key_hash, state, operation, error_code, resource_id
		FROM idempotency_keys WHERE tenant_id = $1 AND resource_id IS NOT NULL`), tenant)
	if err != nil {
		return nil, fmt.Errorf("reading idempotency keys: %w", err)
	}
	defer rows.Close()
	keys := map[string]dbKey{}
	for rows.Next() {
		var h string
		var k dbKey
		if err := rows.Scan(&h, &k.state, &k.operation, &k.errorCode, &k.resource); err != nil {
			return nil, err
		}
		if _, ours := byID[k.resource.String]; ours {
			keys[h] = k
		}
	}
	return keys, rows.Err()
}

// ledgerByOrder indexes the provider ledger by order id.
func (c *Checker) ledgerByOrder(rep *Report) map[string]*orderLedger {
	if c.Ledger == nil {
		return nil
	}
	rep.LedgerChecked = true
	out := map[string]*orderLedger{}
	get := func(id string) *orderLedger {
		if out[id] == nil {
			out[id] = &orderLedger{}
		}
		return out[id]
	}
	chargeOrder := map[string]string{}
	for _, ch := range c.Ledger.Charges {
		chargeOrder[ch.IdempotencyKey] = ch.OrderID
		if ch.Status != paysim.ChargeFailed {
			l := get(ch.OrderID)
			l.captures++
			l.captured += ch.Amount
			rep.LedgerCaptures++
			rep.LedgerCaptured += ch.Amount
			rep.MaxCaptures = max(rep.MaxCaptures, l.captures)
		}
	}
	for _, rf := range c.Ledger.Refunds {
		if rf.Status == paysim.RefundFailed {
			continue // it failed later: nothing was returned
		}
		id, ok := chargeOrder[rf.ChargeKey]
		if !ok {
			id = "?" + rf.ChargeKey
		}
		l := get(id)
		l.refunds++
		l.refunded += rf.Amount
		rep.LedgerRefunds++
		rep.LedgerRefunded += rf.Amount
	}
	for _, sh := range c.Ledger.Shipments {
		if sh.Status == paysim.ShipmentShipped {
			get(sh.OrderID).shipments++
			rep.LedgerShipments++
		}
	}
	return out
}

// checkOp checks the answers to one operation and its key's record.
func (c *Checker) checkOp(rep *Report, op *book.Op, keys map[string]dbKey, byID map[string]dbOrder, now time.Time) {
	ref := fmt.Sprintf("%s/%s#%d", op.Order.Marker, op.Kind, op.Seq)
	obs := op.Observations()
	var first *book.Obs
	outcomes := map[string]int{}
	originals := 0
	for i := range obs {
		ob := &obs[i]
		if !ob.Definitive {
			continue
		}
		if first == nil {
			first = ob
		}
		outcomes[ob.Outcome()]++
		if ob.Stored() && !ob.Replayed {
			originals++
		}
		if ob.Via == book.ViaSequenceReplay && ob.Stored() && !ob.Replayed {
			rep.Add(AnomalyReplayNotFlagged, ref, "a replay of the %s sequence was answered %s without Idempotency-Replayed",
				op.Kind, ob.Outcome())
		}
	}
	if first == nil {
		last := ""
		if len(obs) > 0 {
			l := obs[len(obs)-1]
			last = fmt.Sprintf("; last: status %d %s %s", l.Status, l.Code, l.Err)
		}
		rep.Add(AnomalyUnresolved, ref, "no definitive answer in %d calls%s", len(obs), last)
		return
	}
	if len(outcomes) > 1 {
		parts := make([]string, 0, len(outcomes))
		for k, n := range outcomes {
			parts = append(parts, fmt.Sprintf("%q×%d", k, n))
		}
		sort.Strings(parts)
		rep.Add(AnomalyReplayMismatch, ref, "answers for one key differ: %s (%s)", strings.Join(parts, ", "), describeObs(obs))
	}
	c.checkBytes(rep, ref, obs)
	if originals > 1 {
		rep.Add(AnomalyDoubleExecution, ref, "%d answers were originals (not replays) for one key (%s)", originals, describeObs(obs))
	}
	if !slices.Contains(op.Allowed, first.Status) {
		rep.Add(AnomalyUnexpectedStatus, ref, "answered %d %s; legal: %v", first.Status, first.Code, op.Allowed)
	}
	if !first.Stored() {
		return
	}
	orderID := op.Order.ID()
	if _, exists := byID[orderID]; orderID == "" || !exists {
		return // reported as a lost or unresolved create
	}
	if !op.Keyed && c.DerivedTTL > 0 && now.Sub(first.At) > c.DerivedTTL-time.Minute {
		return // a derived key this old may have been swept
	}
	rep.KeysChecked++
	k, ok := keys[op.KeyHash]
	for _, h := range op.AltKeyHashes {
		if !ok {
			k, ok = keys[h]
		}
	}
	switch {
	case !ok:
		rep.Add(AnomalyKeyRecord, ref, "answered %s but idempotency_keys has no record of the %s (%s)", first.Outcome(), describeKey(op), describeObs(obs))
	case k.state != "completed":
		rep.Add(AnomalyKeyRecord, ref, "answered %s but the key is %s (%s)", first.Outcome(), k.state, describeObs(obs))
	case !k.agrees(*first):
		rep.Add(AnomalyKeyRecord, ref, "answered %s but the key records %s (%s)", first.Outcome(), k.outcome(), describeObs(obs))
	case k.resource.String != orderID:
		rep.Add(AnomalyKeyRecord, ref, "the key records resource %s, not order %s", k.resource.String, orderID)
	}
}

// checkBytes checks that the answers for one key that stand for one stored
// outcome — the same error, or the same success at the same order version
// (a replay shows the order's current state, so a later version differs
// legitimately) — are byte-identical, and counts the replays.
func (c *Checker) checkBytes(rep *Report, ref string, obs []book.Obs) {
	first := map[string]book.Obs{}
	for _, ob := range obs {
		if !ob.Definitive || !ob.Stored() {
			continue
		}
		if ob.Replayed {
			rep.Replays++
		}
		if ob.BodyHash == "" {
			continue
		}
		group := ob.Outcome()
		if ob.Status >= 200 && ob.Status < 300 {
			group += fmt.Sprintf(" v%d", ob.Version)
		}
		f, seen := first[group]
		if !seen {
			first[group] = ob
			continue
		}
		if ob.Replayed || f.Replayed {
			rep.ReplaysCompared++
		}
		if f.BodyHash != ob.BodyHash {
			rep.Add(AnomalyReplayBytes, ref, "two answers %s differ in their bytes: %s@%d (sha256 %.12s) and %s@%d (sha256 %.12s)",
				group, f.Via, f.Instance, f.BodyHash, ob.Via, ob.Instance, ob.BodyHash)
		}
	}
}

func describeKey(op *book.Op) string {
	if op.Keyed {
		return fmt.Sprintf("key %q (hash %s)", op.Key, op.KeyHash[:12])
	}
	return fmt.Sprintf("derived key (hash %s)", op.KeyHash[:12])
}

// describeObs lists the calls of an operation, for anomaly details.
func describeObs(obs []book.Obs) string {
	parts := make([]string, 0, len(obs))
	for _, o := range obs {
		s := fmt.Sprintf("%s@%d→%d", o.Via, o.Instance, o.Status)
		if o.Code != "" {
			s += " " + o.Code
		}
		if o.Replayed {
			s += " replayed"
		}
		if o.Attempts > 1 {
			s += fmt.Sprintf(" after %d attempts", o.Attempts)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// reachable reports whether an order seen in state from may legally be in
// state to later.
func reachable(from, to string) bool {
	switch from {
	case "RCVD", "":
		return true
	case "PAID":
		return to == "PAID" || to == "FULFILLED" || to == "CANCELLED"
	default:
		return from == to
	}
}

// checkState checks the order's final state against the answers, its
// provider attempts and the provider's ledger.
//
// Partial refunds (issue 16) leave the state alone: a PAID or FULFILLED
// order's provider holds its amount less its refunded total (dbRefunded,
// minor units), which must be what the provider refunded, by as many
// refunds as the order's partial refund attempts that succeeded; a
// CANCELLED one nets to nothing, and when it has totals (it was cancelled
// from PAID: hasTotals) they hold what the provider refunded. Money refunded never exceeds money
// captured.
func (c *Checker) checkState(rep *Report, o *book.OrderRec, row dbOrder, ops []*book.Op, att map[string]int, dbRefunded int64, hasTotals bool, ledger map[string]*orderLedger) {
	ref := o.Marker + "/" + row.id
	asked := map[string]bool{}
	shipRefused := false // a fulfil answered 422: the warehouse refused the shipment for good
	for _, op := range ops {
		asked[op.Kind] = true
		for _, ob := range op.Observations() {
			if op.Kind == book.KindFulfill && ob.Definitive && ob.Status == http.StatusUnprocessableEntity {
				shipRefused = true
			}
			if ob.Definitive && ob.Status >= 200 && ob.Status < 300 && !reachable(ob.State, row.state) {
				rep.Add(AnomalyAckedStateLost, ref, "a %s was answered %d with state %s, but the order is %s",
					op.Kind, ob.Status, ob.State, row.state)
			}
		}
	}
	switch row.state {
	case "PAID":
		if !asked[book.KindPay] {
			rep.Add(AnomalyPhantomTransition, ref, "the order is PAID but no pay was sent")
		}
	case "FULFILLED":
		if !asked[book.KindPay] || !asked[book.KindFulfill] {
			rep.Add(AnomalyPhantomTransition, ref, "the order is FULFILLED but pay and fulfill were not both sent")
		}
	case "CANCELLED":
		// With capture at fulfilment a shipment refused for good voids the
		// authorization and cancels the order (README "Capture at
		// fulfilment").
		if !asked[book.KindCancel] && !(c.CaptureAtFulfilment && shipRefused) {
			rep.Add(AnomalyPhantomTransition, ref, "the order is CANCELLED but no cancel was sent")
		}
	}

	charges, shipments := att["charge/succeeded"], att["shipment/succeeded"]
	for k, n := range att {
		if strings.HasSuffix(k, "/pending") || strings.HasSuffix(k, "/unknown") {
			rep.Add(AnomalyAttemptNotSettled, ref, "%d provider attempts %s after the run settled", n, k)
		}
	}
	bad := func(format string, args ...any) { rep.Add(AnomalyStateAttempts, ref, format, args...) }
	switch {
	case charges > 1:
		bad("%d succeeded charge attempts", charges)
	case (row.state == "PAID" || row.state == "FULFILLED") && charges != 1:
		bad("state %s with %d succeeded charge attempts", row.state, charges)
	case row.state == "RCVD" && charges != 0:
		bad("state RCVD with %d succeeded charge attempts", charges)
	}
	if (row.state == "FULFILLED") != (shipments == 1) || shipments > 1 {
		bad("state %s with %d succeeded shipment attempts", row.state, shipments)
	}

	if ledger == nil {
		return
	}
	l := ledger[row.id]
	if l == nil {
		l = &orderLedger{}
	}
	rep.RunCaptures += l.captures
	rep.RunRefunds += l.refunds
	rep.RunShipments += l.shipments
	rep.RunCaptured += l.captured
	rep.RunRefunded += l.refunded
	if l.captures > 1 {
		rep.Add(AnomalyDoubleCapture, ref, "the provider captured the order %d times", l.captures)
	}
	if l.shipments > 1 {
		rep.Add(AnomalyDoubleShipment, ref, "the warehouse shipped the order %d times", l.shipments)
	}
	if l.refunded > l.captured {
		rep.Add(AnomalyRefundNoCapture, ref, "the provider refunded %d of %d captured (%d refunds, %d captures)",
			l.refunded, l.captured, l.refunds, l.captures)
	}
	partial := att["partial_refund/succeeded"]
	rep.PartialRefunds += partial
	// paidState: the provider holds the order's money (less its refunds).
	paidState := row.state == "FULFILLED" || (row.state == "PAID" && !c.CaptureAtFulfilment)
	switch {
	case paidState && (dbRefunded != l.refunded || partial != l.refunds):
		rep.Add(AnomalyRefundTotals, ref, "state %s: the order's refunded total is %d by %d partial refunds, the provider refunded %d in %d refunds",
			row.state, dbRefunded, partial, l.refunded, l.refunds)
	case row.state == "CANCELLED" && hasTotals && dbRefunded != l.refunded:
		rep.Add(AnomalyRefundTotals, ref, "state CANCELLED: the order's refunded total is %d, the provider refunded %d of %d captured",
			dbRefunded, l.refunded, l.captured)
	case row.state == "CANCELLED" && l.refunds != partial && l.refunds != partial+1:
		rep.Add(AnomalyRefundTotals, ref, "state CANCELLED: %d partial refunds succeeded, the provider made %d refunds (want those and at most the cancel's)",
			partial, l.refunds)
	case !paidState && row.state != "CANCELLED" && partial > 0:
		rep.Add(AnomalyRefundTotals, ref, "state %s with %d succeeded partial refunds", row.state, partial)
	}
	ok := true
	switch {
	case row.state == "RCVD", row.state == "PAID" && c.CaptureAtFulfilment:
		ok = l.captures == 0 && l.refunds == 0 && l.shipments == 0
	case row.state == "PAID":
		ok = l.captures == 1 && l.shipments == 0
	case row.state == "FULFILLED":
		ok = l.captures == 1 && l.shipments == 1
	case row.state == "CANCELLED":
		ok = l.refunded == l.captured && l.shipments == 0
	}
	// The money: what the provider holds for the order, net of refunds, is
	// the order's amount less what its partial refunds returned exactly
	// when the order is PAID or FULFILLED, and nothing otherwise; every
	// capture is of the order's amount.
	want := int64(0)
	if paidState {
		want = row.amount - dbRefunded
		rep.PaidRefunded += dbRefunded
	}
	if net := l.captured - l.refunded; net != want || l.captured != int64(l.captures)*row.amount {
		rep.Add(AnomalyMoney, ref, "state %s, amount %d: the provider captured %d in %d captures and refunded %d (net %d, want %d)",
			row.state, row.amount, l.captured, l.captures, l.refunded, net, want)
	}
	if row.state == "CANCELLED" && l.captures > 0 {
		rep.CancelledPaid++
	}
	switch {
	case paidState && l.captures == 0:
		rep.Add(AnomalyPaidNoCapture, ref, "state %s but the provider has no capture (%d refunds, %d shipments)",
			row.state, l.refunds, l.shipments)
	case row.state != "FULFILLED" && l.shipments > 0:
		rep.Add(AnomalyShipNotFulfilled, ref, "state %s but the warehouse shipped the order %d times (%d captures, %d refunds)",
			row.state, l.shipments, l.captures, l.refunds)
	case !ok:
		rep.Add(AnomalyStateLedger, ref, "state %s but the provider has %d captures, %d refunds, %d shipments",
			row.state, l.captures, l.refunds, l.shipments)
	}
	if c.CaptureAtFulfilment {
		// A charge attempt authorizes; the capture attempt captures.
		if n := att["capture/succeeded"]; n != l.captures {
			rep.Add(AnomalyAttemptLedger, ref, "%d succeeded capture attempts recorded, %d captures at the provider", n, l.captures)
		}
	} else if charges != l.captures {
		rep.Add(AnomalyAttemptLedger, ref, "%d succeeded charge attempts recorded, %d captures at the provider",
			charges, l.captures)
	}
}
