package check

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
	"github.com/orderly/orderly/store/sqlite"
)

const testTenant = "acme"

// fixture writes rows straight into a migrated database, as a deployment
// would have left them, and the matching provider ledger.
type fixture struct {
	t      *testing.T
	db     *sql.DB
	sqlite bool
	ledger paysim.Snapshot
}

// pgFixture migrates a fresh PostgreSQL database (skipped without one, as
// the repository's other PostgreSQL tests are).
func pgFixture(t *testing.T) (*fixture, *DB) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	st, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &fixture{t: t, db: w}, db
}

// sqliteFixture migrates a fresh embedded-store file.
func sqliteFixture(t *testing.T) (*fixture, *DB) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	path := filepath.Join(dir, "orderly.db")
	w, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	db, err := OpenDB("sqlite:" + path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &fixture{t: t, db: w, sqlite: true}, db
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if f.sqlite {
		q = dollarParam.ReplaceAllString(q, "?$1")
	}
	if _, err := f.db.Exec(q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

// order inserts an order in state with the given marker.
func (f *fixture) order(id, marker, state string) {
	f.t.Helper()
	now := time.Now().UTC()
	var ts any = now
	if f.sqlite {
		ts = now.UnixMicro()
	}
	var paid, fulfilled, cancelled any
	switch state {
	case "PAID":
		paid = ts
	case "FULFILLED":
		paid, fulfilled = ts, ts
	case "CANCELLED":
		cancelled = ts
	}
	f.exec(`INSERT INTO orders (id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at)
		VALUES ($1, $2, $3, 'USD', '[{"sku":"s","quantity":1,"unit_price":100}]', 100, $4, 1, $5, $6, $7, $8)`,
		id, testTenant, marker, state, ts, paid, fulfilled, cancelled)
}

// key records a completed key for op with status.
func (f *fixture) key(op *book.Op, status int) { f.keyHash(op, op.KeyHash, status) }

// keyHash records a completed key with hash for op's order, with the
// outcome a status stands for: a create for 201, a transition for 200.
func (f *fixture) keyHash(op *book.Op, hash string, status int) {
	f.t.Helper()
	now := time.Now().UTC()
	var created, expires any = now, now.Add(time.Hour)
	derived := any(!op.Keyed)
	if f.sqlite {
		created, expires = now.UnixMicro(), now.Add(time.Hour).UnixMicro()
		derived = map[bool]int{true: 1, false: 0}[!op.Keyed]
	}
	operation := map[int]string{http.StatusCreated: "create", http.StatusOK: "pay"}[status]
	if operation == "" {
		f.t.Fatalf("fixture: no successful outcome has status %d", status)
	}
	f.exec(`INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id, created_at, expires_at)
		VALUES ($1, $2, 'fp', $3, 'completed', $4, $5, $6, $7)`, testTenant, hash, derived, operation, op.Order.ID(), created, expires)
}

// attempt records a provider attempt.
func (f *fixture) attempt(orderID, kind, status string) {
	f.t.Helper()
	now := time.Now().UTC()
	var ts any = now
	if f.sqlite {
		ts = now.UnixMicro()
	}
	f.exec(`INSERT INTO provider_attempts (provider_key, tenant_id, order_id, kind, status, amount, currency, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 100, 'USD', $6, $6)`, orderID+"/"+kind+"/"+status, testTenant, orderID, kind, status, ts)
}

func (f *fixture) capture(orderID string) {
	f.ledger.Charges = append(f.ledger.Charges, paysim.Charge{ID: "ch_" + orderID, IdempotencyKey: orderID + "/pay/1",
		OrderID: orderID, Amount: 100, Currency: "USD", Status: paysim.ChargeCaptured})
}

// testRun is a small book of answers plus the rows that go with it.
type testRun struct {
	f    *fixture
	book *book.Book
	seq  int
}

func newRun(f *fixture, id string) *testRun {
	return &testRun{f: f, book: book.NewBook(id, testTenant)}
}

func ok(status int, id, state string, replayed bool) book.Obs {
	return book.Obs{Via: book.ViaPrimary, Status: status, ResourceID: id, State: state, Replayed: replayed, Definitive: true,
		Attempts: 1, At: time.Now()}
}

// created records a logical create answered 201 with id; it returns the
// order and its create op.
func (r *testRun) created(id string, obs ...book.Obs) (*book.OrderRec, *book.Op) {
	r.seq++
	in := order.NewOrderInput{CustomerID: fmt.Sprintf("%s%07d", r.book.MarkerPrefix(), r.seq), Currency: "USD",
		Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 100}}}
	o := r.book.NewOrder(r.seq, in)
	op, err := r.book.NewOp(o, book.OpSpec{Kind: book.KindCreate, Keyed: true, Create: &in, Allowed: []int{http.StatusCreated}})
	if err != nil {
		r.f.t.Fatal(err)
	}
	if len(obs) == 0 {
		obs = []book.Obs{ok(http.StatusCreated, id, "RCVD", false)}
	}
	for _, ob := range obs {
		op.Record(ob)
	}
	return o, op
}

func (r *testRun) op(o *book.OrderRec, kind string, obs ...book.Obs) *book.Op {
	spec := book.OpSpec{Kind: kind, Keyed: true, Allowed: []int{http.StatusOK}}
	if kind == book.KindPay {
		spec.Pay = &client.PayInput{Amount: o.Amount, Currency: "USD", PaymentMethod: "pm_card_visa"}
	}
	op, err := r.book.NewOp(o, spec)
	if err != nil {
		r.f.t.Fatal(err)
	}
	for _, ob := range obs {
		op.Record(ob)
	}
	return op
}

// paidOrder is a consistent PAID order: rows, keys, attempt and capture.
func (r *testRun) paidOrder(id string) *book.OrderRec {
	o, create := r.created(id)
	pay := r.op(o, book.KindPay, ok(http.StatusOK, id, "PAID", false))
	r.f.order(id, o.Marker, "PAID")
	r.f.key(create, http.StatusCreated)
	r.f.key(pay, http.StatusOK)
	r.f.attempt(id, "charge", "succeeded")
	r.f.capture(id)
	return o
}

func (r *testRun) check(db *DB, withLedger bool) Report {
	r.f.t.Helper()
	c := &Checker{DB: db, DerivedTTL: 10 * time.Minute}
	if withLedger {
		c.Ledger = &r.f.ledger
	}
	rep, err := c.Check(context.Background(), r.book)
	if err != nil {
		r.f.t.Fatal(err)
	}
	return rep
}

func wantKinds(t *testing.T, rep Report, kinds ...string) {
	t.Helper()
	for _, k := range kinds {
		if rep.ByKind[k] == 0 {
			t.Errorf("no %s anomaly; got %v %+v", k, rep.ByKind, rep.Anomalies)
		}
	}
	if len(kinds) == 0 && rep.Total != 0 {
		t.Errorf("anomalies in a consistent run: %+v", rep.Anomalies)
	}
}

// TestCheckerCleanRun: a consistent run has no anomalies, and the checker
// really looked (orders, keys, attempts, ledger).
func TestCheckerCleanRun(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "clean01")
	o := r.paidOrder("ord_clean1")
	// A replayed sequence: the same answers, flagged as replays.
	for _, op := range o.Ops() {
		first, _ := op.Definitive()
		again := first
		again.Via, again.Replayed = book.ViaSequenceReplay, true
		op.Record(again)
	}
	// A cancelled order: no capture.
	o2, c2 := r.created("ord_clean2")
	cancel := r.op(o2, book.KindCancel, ok(http.StatusOK, "ord_clean2", "CANCELLED", false))
	f.order("ord_clean2", o2.Marker, "CANCELLED")
	f.key(c2, http.StatusCreated)
	f.key(cancel, http.StatusOK)
	rep := r.check(db, true)
	wantKinds(t, rep)
	if rep.DBOrders != 2 || rep.KeysChecked != 4 || rep.AttemptsChecked != 1 || rep.LedgerCaptures != 1 {
		t.Errorf("report %+v: the checker did not see the rows", rep)
	}
}

// TestCheckerFindsDuplicateOrder plants a second order for one logical
// create.
func TestCheckerFindsDuplicateOrder(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "dup00001")
	o := r.paidOrder("ord_dup1")
	f.order("ord_dup1_twin", o.Marker, "RCVD") // the duplicate
	wantKinds(t, r.check(db, true), AnomalyDuplicateOrder)
}

// TestCheckerFindsDuplicateOrderEmbedded is the same on the embedded
// store's file.
func TestCheckerFindsDuplicateOrderEmbedded(t *testing.T) {
	f, db := sqliteFixture(t)
	r := newRun(f, "dupsql01")
	o := r.paidOrder("ord_dup2")
	rep := r.check(db, true)
	wantKinds(t, rep)
	f.order("ord_dup2_twin", o.Marker, "RCVD")
	wantKinds(t, r.check(db, true), AnomalyDuplicateOrder)
}

func TestCheckerFindsLostAndPhantomOrders(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "lost0001")
	r.created("ord_never_stored") // answered 201, not in the database
	f.order("ord_phantom", r.book.MarkerPrefix()+"9999999", "RCVD")
	wantKinds(t, r.check(db, false), AnomalyLostOrder, AnomalyPhantomOrder)
}

func TestCheckerFindsDoubleCapture(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "cap00001")
	r.paidOrder("ord_cap1")
	f.ledger.Charges = append(f.ledger.Charges, paysim.Charge{ID: "ch_2", IdempotencyKey: "ord_cap1/pay/2",
		OrderID: "ord_cap1", Status: paysim.ChargeCaptured})
	wantKinds(t, r.check(db, true), AnomalyDoubleCapture, AnomalyStateLedger, AnomalyAttemptLedger)
}

func TestCheckerFindsMoneyMovedForUnpaidOrder(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "rcvd0001")
	o, create := r.created("ord_rcvd1")
	f.order("ord_rcvd1", o.Marker, "RCVD")
	f.key(create, http.StatusCreated)
	f.capture("ord_rcvd1")
	wantKinds(t, r.check(db, true), AnomalyStateLedger, AnomalyAttemptLedger)
}

func TestCheckerFindsStateInconsistentWithAttempts(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "att00001")
	r.paidOrder("ord_att1")
	f.attempt("ord_att1", "refund", "pending")     // left open
	f.attempt("ord_att1", "shipment", "succeeded") // shipped, yet the order is only PAID
	wantKinds(t, r.check(db, false), AnomalyAttemptNotSettled, AnomalyStateAttempts)
}

func TestCheckerFindsReplayAnomalies(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "rep00001")
	first := ok(http.StatusCreated, "ord_rep1", "RCVD", false)
	other := ok(http.StatusCreated, "ord_rep_other", "RCVD", true) // a "replay" naming another order
	notFlagged := ok(http.StatusCreated, "ord_rep1", "RCVD", false)
	notFlagged.Via = book.ViaSequenceReplay
	o, create := r.created("ord_rep1", first, other, notFlagged)
	f.order("ord_rep1", o.Marker, "RCVD")
	f.key(create, http.StatusCreated)
	wantKinds(t, r.check(db, false), AnomalyReplayMismatch, AnomalyReplayNotFlagged, AnomalyDoubleExecution)
}

func TestCheckerFindsLostAcknowledgementsAndKeyRecords(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "ack00001")
	o, create := r.created("ord_ack1")
	r.op(o, book.KindPay, ok(http.StatusOK, "ord_ack1", "PAID", false)) // acknowledged…
	f.order("ord_ack1", o.Marker, "RCVD")                               // …but the order is unpaid, and the pay key missing
	f.key(create, http.StatusCreated)
	wantKinds(t, r.check(db, false), AnomalyAckedStateLost, AnomalyKeyRecord)
}

func TestCheckerFindsUnresolvedAndIllegalAnswers(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "unr00001")
	o, create := r.created("ord_unr1")
	r.op(o, book.KindFulfill, book.Obs{Via: book.ViaPrimary, Status: 503, Code: "unavailable", Attempts: 6, At: time.Now()})
	r.op(o, book.KindCancel, book.Obs{Via: book.ViaPrimary, Status: 422, Code: "mismatch", Definitive: true, At: time.Now()})
	f.order("ord_unr1", o.Marker, "RCVD")
	f.key(create, http.StatusCreated)
	wantKinds(t, r.check(db, false), AnomalyUnresolved, AnomalyUnexpectedStatus)
}

// TestDerivedKeyOfBodilessRequest: a keyless fulfil may be fingerprinted
// with no body or with {}; the checker accepts either record.
func TestDerivedKeyOfBodilessRequest(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "drv00001")
	o, create := r.created("ord_drv1")
	op, err := r.book.NewOp(o, book.OpSpec{Kind: book.KindCancel, Allowed: []int{http.StatusOK}})
	if err != nil {
		t.Fatal(err)
	}
	op.Record(ok(http.StatusOK, "ord_drv1", "CANCELLED", false))
	fp, _ := idempotency.Fingerprinter{}.Fingerprint(idempotency.Request{Method: "POST", Route: "/v1/orders/{id}/cancel",
		PathParams: map[string]string{"id": "ord_drv1"}, Body: []byte("{}")})
	if len(op.AltKeyHashes) != 1 || op.AltKeyHashes[0] != idempotency.HashKey(idempotency.DerivedKey(fp)) {
		t.Fatalf("alternative hashes %v", op.AltKeyHashes)
	}
	f.order("ord_drv1", o.Marker, "CANCELLED")
	f.key(create, http.StatusCreated)
	f.keyHash(op, op.AltKeyHashes[0], http.StatusOK)
	wantKinds(t, r.check(db, false))
}

// TestCheckerCaptureAtFulfilment (issue 16): with capture at fulfilment a
// PAID order holds only an authorization, so one the provider captured is
// an anomaly (money moved before the goods shipped), and one it did not
// is consistent; a FULFILLED order must be captured once by its capture
// attempt.
func TestCheckerCaptureAtFulfilment(t *testing.T) {
	f, db := pgFixture(t)
	r := newRun(f, "capful01")
	check := func() Report {
		t.Helper()
		rep, err := (&Checker{DB: db, DerivedTTL: 10 * time.Minute, Ledger: &f.ledger, CaptureAtFulfilment: true}).Check(context.Background(), r.book)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	r.paidOrder("ord_authorized")
	f.ledger.Charges = f.ledger.Charges[:len(f.ledger.Charges)-1] // authorized, not captured
	wantKinds(t, check())

	r.paidOrder("ord_captured_early") // the provider holds a capture of a PAID order
	wantKinds(t, check(), AnomalyStateLedger, AnomalyAttemptLedger)
}
