package faulttest

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/paysim"
)

// matrixRow is one fault's line of the summary.
type matrixRow struct {
	fault    string
	orders   int
	requests int64  // POSTs sent to orderd: creates, pays, retries and the final replay checks
	injected string // faults paysim counted during the run, plus process-level ones
	captures int
	maxPer   int // most captures of one order

	// anomalies
	double   int // orders captured more than once
	illegal  int // orders or keys not in a legal final state (stuck, or PAID without one capture…)
	badRetry int // retries with the same key that did not return the stored final result
	recon    int // orders whose paysim charges and orderd provider attempts disagree

	status string // ok, FAILED, skipped
	note   string
}

func (r *matrixRow) anomalies() int { return r.double + r.illegal + r.badRetry + r.recon }

// matrix collects the rows of one TestFaults run.
type matrix struct {
	mu   sync.Mutex
	rows []*matrixRow
}

func (m *matrix) add(r *matrixRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, r)
}

// log writes the summary table and returns the total of anomalies.
func (m *matrix) log(t *testing.T) int {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "fault matrix (anomalies = double captures + illegal final states + retries without the final result + paysim/orderd disagreements):\n")
	fmt.Fprintf(&b, "%-44s %6s %8s  %-26s %8s %8s %9s  %-28s %s\n",
		"fault", "orders", "requests", "faults injected", "captures", "max/ord", "anomalies", "(double/illegal/retry/recon)", "result")
	total := 0
	for _, r := range m.rows {
		total += r.anomalies()
		res := r.status
		if r.note != "" {
			res += ": " + r.note
		}
		fmt.Fprintf(&b, "%-44s %6d %8d  %-26s %8d %8d %9d  %-28s %s\n", r.fault, r.orders, r.requests, r.injected,
			r.captures, r.maxPer, r.anomalies(), fmt.Sprintf("(%d/%d/%d/%d)", r.double, r.illegal, r.badRetry, r.recon), res)
	}
	fmt.Fprintf(&b, "total anomalies: %d", total)
	t.Log(b.String())
	return total
}

// env is what the subtests of TestFaults share: one paysim, and one orderd
// on its own database for the faults that do not need their own.
type env struct {
	paysim *proc
	psa    *paysimAdmin
	dbURL  string
	orderd *proc
	m      *matrix
}

// payKey is one pay request's key, as a client would keep it to retry.
type payKey struct {
	order, key, method string
}

// faultRun accounts for one fault: what was sent, which orders and keys it
// made, and the anomalies found at the end.
type faultRun struct {
	t      *testing.T
	e      *env
	ct     *countingTransport
	api    *orderdAPI // the orderd now serving; finish verifies through it
	dbURL  string     // that orderd's database
	before paysim.Stats
	row    *matrixRow
	orders []string
	keys   []payKey
	extra  []string // faults injected outside paysim (SIGKILL, restart)
	done   bool
}

// begin starts accounting for a fault on the orderd at addr with database
// dbURL. The row is added to the matrix when t ends, marked FAILED if t
// failed.
func (e *env) begin(t *testing.T, fault, addr, dbURL string) *faultRun {
	t.Helper()
	fr := &faultRun{t: t, e: e, ct: &countingTransport{base: newTransport()}, dbURL: dbURL,
		before: e.psa.stats(t), row: &matrixRow{fault: fault}}
	fr.api = fr.apiFor(addr)
	t.Cleanup(func() {
		if !fr.done {
			fr.row.note = "stopped before the final checks"
		}
		fr.row.requests = fr.ct.posts.Load()
		switch {
		case t.Skipped():
			fr.row.status = "skipped"
		case t.Failed():
			fr.row.status = "FAILED"
		default:
			fr.row.status = "ok"
		}
		e.m.add(fr.row)
	})
	return fr
}

func newTransport() *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
}

// apiFor returns a client of the orderd at addr that counts into this run.
func (fr *faultRun) apiFor(addr string) *orderdAPI {
	return &orderdAPI{base: "http://" + addr, ct: fr.ct, hc: &http.Client{Transport: fr.ct, Timeout: 20 * time.Second}}
}

// create makes an order to be checked at the end.
func (fr *faultRun) create(key string) orderJSON {
	fr.t.Helper()
	o := fr.api.create(fr.t, key)
	fr.orders = append(fr.orders, o.ID)
	return o
}

// track records a pay key to be checked at the end.
func (fr *faultRun) track(order, key, method string) {
	fr.keys = append(fr.keys, payKey{order: order, key: key, method: method})
}

func (fr *faultRun) anomaly(counter *int, format string, args ...any) {
	fr.t.Helper()
	*counter++
	fr.t.Errorf("ANOMALY: "+format, args...)
}

// finish runs the checks every fault shares, counting anomalies:
//
//   - every tracked key completes (the completer leaves nothing stuck)
//     within 20s, and a retry with it returns the stored final result as a
//     replay (Idempotency-Replayed: true; 200 with the order PAID, or the
//     stored 402);
//   - every order ends PAID with exactly one capture at paysim, or RCVD
//     with none and only declined pays;
//   - paysim's charges of each order are exactly orderd's settled provider
//     attempts (same provider keys and charge ids), and no attempt is left
//     open.
func (fr *faultRun) finish() {
	t := fr.t
	t.Helper()
	fr.done = true
	row := fr.row
	row.orders = len(fr.orders)
	ctx := context.Background()

	stored := map[string]keyStatus{}
	for _, k := range fr.keys {
		ks, err := fr.api.awaitKeyCompleted(k.key, 20*time.Second)
		if err != nil {
			fr.anomaly(&row.illegal, "key %s of order %s is stuck: %v", k.key, k.order, err)
			continue
		}
		stored[k.key] = ks
		if ks.ResourceID != k.order {
			fr.anomaly(&row.illegal, "key %s completed for %q, want order %s", k.key, ks.ResourceID, k.order)
		}
		r := fr.api.pay(ctx, k.order, k.key, k.method)
		if r.err != nil || r.status != ks.StatusCode || !r.replayed || (r.status == http.StatusOK && r.order.State != "PAID") ||
			(r.status != http.StatusOK && r.status != http.StatusPaymentRequired) {
			fr.anomaly(&row.badRetry, "retry of key %s (order %s) = %v, want the stored %d replayed", k.key, k.order, r, ks.StatusCode)
		}
	}

	st := fr.e.psa.stats(t)
	for _, id := range fr.orders {
		c := st.CapturesByOrder[id]
		row.captures += c
		row.maxPer = max(row.maxPer, c)
		if c > 1 {
			fr.anomaly(&row.double, "order %s was captured %d times at paysim", id, c)
		}
		g := fr.api.getOrder(id)
		if g.err != nil || g.status != http.StatusOK {
			fr.anomaly(&row.illegal, "GET order %s = %v", id, g)
			continue
		}
		declinedOnly, keys := true, 0
		for _, k := range fr.keys {
			if k.order == id {
				keys++
				if stored[k.key].StatusCode != http.StatusPaymentRequired {
					declinedOnly = false
				}
			}
		}
		legal := (g.order.State == "PAID" && c == 1) || (g.order.State == "RCVD" && c == 0 && keys > 0 && declinedOnly)
		if !legal {
			fr.anomaly(&row.illegal, "order %s ends %s with %d captures (pay keys stored: %v)", id, g.order.State, c, stored)
		}
	}
	fr.reconcile(ctx)

	var inj []string
	for _, k := range slices.Sorted(maps.Keys(st.FaultsInjected)) {
		if d := st.FaultsInjected[k] - fr.before.FaultsInjected[k]; d > 0 {
			inj = append(inj, fmt.Sprintf("%s=%d", k, d))
		}
	}
	if d := st.Declines - fr.before.Declines; d > 0 {
		inj = append(inj, fmt.Sprintf("declines=%d", d))
	}
	inj = append(inj, fr.extra...)
	if len(inj) == 0 {
		inj = []string{"none"}
	}
	row.injected = strings.Join(inj, " ")
}

// injectedDelta returns how many faults of kind paysim injected since begin.
func (fr *faultRun) injectedDelta(kind paysim.FaultKind) int64 {
	fr.t.Helper()
	return fr.e.psa.stats(fr.t).FaultsInjected[kind] - fr.before.FaultsInjected[kind]
}

// reconcile compares paysim's ledger with orderd's provider attempts for
// the run's orders.
func (fr *faultRun) reconcile(ctx context.Context) {
	t := fr.t
	t.Helper()
	snap := fr.e.psa.ledger(t)
	type side struct{ captured, declined map[string]string }
	newSide := func() *side { return &side{captured: map[string]string{}, declined: map[string]string{}} }
	ps, db := map[string]*side{}, map[string]*side{}
	open := map[string][]string{}
	for _, id := range fr.orders {
		ps[id], db[id] = newSide(), newSide()
	}
	// orderd pays through intents (issue 15): each attempt's intent carries
	// the attempt's provider key as its reference, and the attempt records
	// the intent's id as its provider ref.
	for _, in := range snap.Intents {
		s, ok := ps[in.OrderID]
		if !ok {
			continue
		}
		switch {
		case in.AmountReceived > 0:
			s.captured[in.Reference] = in.ID
		case in.LastDecline != nil:
			s.declined[in.Reference] = in.ID
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, fr.dbURL)
	if err != nil {
		t.Fatalf("connect to orderd's database: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(cctx, `SELECT provider_key, order_id, status, COALESCE(provider_ref, '')
		FROM provider_attempts WHERE kind = 'charge' AND order_id = ANY($1)`, fr.orders)
	if err != nil {
		t.Fatalf("read provider attempts: %v", err)
	}
	for rows.Next() {
		var key, id, status, ref string
		if err := rows.Scan(&key, &id, &status, &ref); err != nil {
			t.Fatalf("read provider attempts: %v", err)
		}
		switch status {
		case "succeeded":
			db[id].captured[key] = ref
		case "declined":
			db[id].declined[key] = ""
		case "pending", "unknown":
			open[id] = append(open[id], key+"="+status)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read provider attempts: %v", err)
	}
	for _, id := range fr.orders {
		p, d := ps[id], db[id]
		switch {
		case !maps.Equal(p.captured, d.captured):
			fr.anomaly(&fr.row.recon, "order %s: paysim captured %v (key=charge id), orderd's succeeded attempts %v", id, p.captured, d.captured)
		case !slices.Equal(slices.Sorted(maps.Keys(p.declined)), slices.Sorted(maps.Keys(d.declined))):
			fr.anomaly(&fr.row.recon, "order %s: paysim declined keys %v, orderd's declined attempts %v", id, p.declined, d.declined)
		case len(open[id]) > 0:
			fr.anomaly(&fr.row.recon, "order %s: provider attempts left open: %v", id, open[id])
		}
	}
}
