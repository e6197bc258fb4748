package paysim

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/orderly/orderly/internal/sqlitefile"
	"github.com/orderly/orderly/paysim/testmode"
)

// FileName is the database file OpenLedger creates in its directory.
const FileName = "paysim.db"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Errors of the Ledger.
var (
	// ErrNotFound is returned when no outcome is recorded under a key.
	ErrNotFound = errors.New("paysim: not found")
	// ErrChargeNotFound is returned by CreateRefund when the charge key has
	// no capture (unknown, or declined).
	ErrChargeNotFound = errors.New("paysim: no captured charge under that key")
	// ErrRefundTooLarge is returned by CreateRefund when the amount exceeds
	// what is left unrefunded.
	ErrRefundTooLarge = errors.New("paysim: refund exceeds the unrefunded amount")
	// ErrBusy is returned when the database stayed locked past its busy
	// timeout, or is closed. Nothing was written; the request may be retried.
	ErrBusy = errors.New("paysim: ledger busy")
)

// Ledger is paysim's durable record of charges, refunds, shipments and fired
// one-shot faults: one SQLite file, in WAL mode with synchronous=FULL, so a
// committed outcome survives a crash. Each idempotency key is a PRIMARY KEY
// and its outcome is written by the statement (or BEGIN IMMEDIATE
// transaction) that claims it, so a key never holds two outcomes, even with
// concurrent requests or across restarts. A Ledger is safe for concurrent
// use; only one process may use a file at a time.
type Ledger struct {
	db *sql.DB
}

// OpenLedger opens (creating if needed) FileName in dir and applies the
// embedded goose migrations.
func OpenLedger(ctx context.Context, dir string) (*Ledger, error) {
	db, err := sqlitefile.Open(dir, FileName)
	if err != nil {
		return nil, fmt.Errorf("paysim: %w", err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return &Ledger{db: db}, nil
}

func migrate(ctx context.Context, db *sql.DB) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub)
	if err != nil {
		return fmt.Errorf("paysim: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("paysim: migrations: %w", err)
	}
	return nil
}

// Close closes the database.
func (l *Ledger) Close() error { return l.db.Close() }

// Ping checks that the database answers.
func (l *Ledger) Ping(ctx context.Context) error {
	var one int
	return translate(l.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one))
}

// Charge returns the outcome recorded under the charge key, or ErrNotFound.
func (l *Ledger) Charge(ctx context.Context, key string) (Charge, error) {
	c, err := scanCharge(l.db.QueryRowContext(ctx, selectCharge, key))
	return c, translate(err)
}

// CreateCharge records c (a capture or a decline, with its ID, Status and
// CreatedAt set) under c.IdempotencyKey in one statement. If the key already
// holds an outcome, nothing is written and that outcome is returned with
// created false; the caller compares parameters.
func (l *Ledger) CreateCharge(ctx context.Context, c Charge) (_ Charge, created bool, _ error) {
	res, err := l.db.ExecContext(ctx, insertCharge, c.IdempotencyKey, c.ID, c.OrderID, c.Amount, c.Currency,
		c.PaymentMethod, string(c.Status), nullable(c.FailureCode), nullable(c.FailureMessage), micros(c.CreatedAt),
		nullable(c.PaymentIntent))
	if n, err := affected(res, err); err != nil {
		return Charge{}, false, translate(err)
	} else if n == 1 {
		return c, true, nil
	}
	held, err := l.Charge(ctx, c.IdempotencyKey)
	return held, false, err
}

// Refund returns the refund recorded under the refund key, or ErrNotFound.
func (l *Ledger) Refund(ctx context.Context, key string) (Refund, error) {
	r, err := scanRefund(l.db.QueryRowContext(ctx, selectRefund, key))
	return r, translate(err)
}

// CreateRefund records r (with its ID and CreatedAt set) under
// r.IdempotencyKey and applies it to the charge under r.ChargeKey, marking
// the charge refunded, in one BEGIN IMMEDIATE transaction. If the key
// already holds a refund, nothing is written and that refund is returned
// with created false. Errors: ErrChargeNotFound, ErrRefundTooLarge.
func (l *Ledger) CreateRefund(ctx context.Context, r Refund) (_ Refund, created bool, _ error) {
	var out Refund
	err := sqlitefile.InTx(ctx, l.db, func(tx *sql.Tx) error {
		held, err := scanRefund(tx.QueryRowContext(ctx, selectRefund, r.IdempotencyKey))
		if err == nil {
			out = held
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if r.PaymentIntent != "" {
			if err := resolveIntentCharge(ctx, tx, &r); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, refundCharge, r.Amount, r.ChargeKey)
		if n, err := affected(res, err); err != nil {
			return err
		} else if n == 0 {
			c, err := scanCharge(tx.QueryRowContext(ctx, selectCharge, r.ChargeKey))
			switch {
			case errors.Is(err, sql.ErrNoRows) || (err == nil && c.Status == ChargeFailed):
				return ErrChargeNotFound
			case err != nil:
				return err
			}
			return fmt.Errorf("%w: %d requested, %d left of charge %s", ErrRefundTooLarge, r.Amount, c.Amount-c.AmountRefunded, c.ID)
		}
		if _, err := tx.ExecContext(ctx, insertRefund, r.IdempotencyKey, r.ID, r.ChargeKey, r.Amount, micros(r.CreatedAt), nullable(r.Reference)); err != nil {
			return err
		}
		created = true
		out, err = scanRefund(tx.QueryRowContext(ctx, selectRefund, r.IdempotencyKey))
		return err
	})
	return out, created, translate(err)
}

// ErrRefundNotFailable is returned by FailRefund for a refund that did not
// succeed (failed already) or whose charge was not paid with
// testmode.MethodRefundFail.
var ErrRefundNotFailable = errors.New("paysim: the refund cannot fail")

// FailRefund fails the succeeded refund id of a charge paid with
// testmode.MethodRefundFail, in one BEGIN IMMEDIATE transaction: the
// refund becomes failed and its amount is its charge's again (the charge
// captured again once nothing of it stays refunded). It returns the
// refund after. Errors: ErrNotFound, ErrRefundNotFailable.
func (l *Ledger) FailRefund(ctx context.Context, id string) (Refund, error) {
	var out Refund
	err := sqlitefile.InTx(ctx, l.db, func(tx *sql.Tx) error {
		var method string
		var created int64
		var intent, ref sql.NullString
		r := Refund{}
		err := tx.QueryRowContext(ctx, selectRefundByID, id).Scan(&r.IdempotencyKey, &r.ID, &r.ChargeID, &r.ChargeKey, &r.OrderID,
			&r.Currency, &r.Amount, &created, &intent, &ref, &r.Status, &method)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case method != testmode.MethodRefundFail:
			return fmt.Errorf("%w: refund %s is of a charge paid with %q; only %s's refunds fail", ErrRefundNotFailable, id, method, testmode.MethodRefundFail)
		}
		res, err := tx.ExecContext(ctx, failRefund, id)
		if n, err := affected(res, err); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w: refund %s is %s", ErrRefundNotFailable, id, r.Status)
		}
		res, err = tx.ExecContext(ctx, unrefundCharge, r.Amount, r.ChargeKey)
		if n, err := affected(res, err); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("paysim: charge %s holds less refunded than refund %s", r.ChargeKey, id)
		}
		out, err = scanRefund(tx.QueryRowContext(ctx, selectRefund, r.IdempotencyKey))
		return err
	})
	return out, translate(err)
}

// Shipment returns the outcome recorded under the shipment key, or
// ErrNotFound.
func (l *Ledger) Shipment(ctx context.Context, key string) (Shipment, error) {
	s, err := scanShipment(l.db.QueryRowContext(ctx, selectShipment, key))
	return s, translate(err)
}

// ShipmentByID returns the shipment (or remembered out-of-stock failure)
// with id id, or ErrNotFound.
func (l *Ledger) ShipmentByID(ctx context.Context, id string) (Shipment, error) {
	s, err := scanShipment(l.db.QueryRowContext(ctx, selectShipmentID, id))
	return s, translate(err)
}

// ShipmentByReference returns the outcome of the first shipment request of
// order orderID that carried reference ref, or ErrNotFound. The index is
// written with the row: it never lags.
func (l *Ledger) ShipmentByReference(ctx context.Context, ref, orderID string) (Shipment, error) {
	s, err := scanShipment(l.db.QueryRowContext(ctx, selectShipmentRef, ref, orderID))
	return s, translate(err)
}

// CreateShipment records s (a shipment or an out-of-stock failure, with its
// ID, Status and CreatedAt set) under s.IdempotencyKey in one statement. If
// the key already holds an outcome, nothing is written and that outcome is
// returned with created false.
func (l *Ledger) CreateShipment(ctx context.Context, s Shipment) (_ Shipment, created bool, _ error) {
	items, err := json.Marshal(s.Items)
	if err != nil {
		return Shipment{}, false, err
	}
	res, err := l.db.ExecContext(ctx, insertShipment, s.IdempotencyKey, s.ID, s.OrderID, string(items),
		string(s.Status), nullable(s.FailureMessage), micros(s.CreatedAt), nullable(s.Reference))
	if n, err := affected(res, err); err != nil {
		return Shipment{}, false, translate(err)
	} else if n == 1 {
		return s, true, nil
	}
	held, err := l.Shipment(ctx, s.IdempotencyKey)
	return held, false, err
}

// ClaimFault records that the one-shot fault of (endpoint, key) fired and
// reports whether this call was the first: true exactly once per pair,
// across restarts.
func (l *Ledger) ClaimFault(ctx context.Context, endpoint, key string, kind FaultKind) (bool, error) {
	res, err := l.db.ExecContext(ctx, claimFault, endpoint, key, string(kind), micros(time.Now()))
	n, err := affected(res, err)
	return n == 1, translate(err)
}

// Snapshot returns every intent, charge, refund and shipment, in creation
// order.
func (l *Ledger) Snapshot(ctx context.Context) (Snapshot, error) {
	s := Snapshot{Intents: []Intent{}, Charges: []Charge{}, Refunds: []Refund{}, Shipments: []Shipment{}}
	var err error
	if s.Intents, err = collect(ctx, l.db, listIntents, scanIntent); err != nil {
		return s, err
	}
	if s.Charges, err = collect(ctx, l.db, listCharges, scanCharge); err != nil {
		return s, err
	}
	if s.Refunds, err = collect(ctx, l.db, listRefunds, scanRefund); err != nil {
		return s, err
	}
	s.Shipments, err = collect(ctx, l.db, listShipments, scanShipment)
	return s, err
}

// Counts returns the ledger's totals.
func (l *Ledger) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	err := l.db.QueryRowContext(ctx, countAll).Scan(&c.Charges, &c.Declines, &c.Refunds, &c.Shipments, &c.OutOfStock)
	if err != nil {
		return c, translate(err)
	}
	if c.CapturesByOrder, c.MaxCapturesPerOrder, err = l.perOrder(ctx, capturesByOrder); err != nil {
		return c, err
	}
	c.ShipmentsByOrder, c.MaxShipmentsPerOrder, err = l.perOrder(ctx, shipmentsByOrder)
	return c, err
}

type orderCount struct {
	id string
	n  int
}

func (l *Ledger) perOrder(ctx context.Context, query string) (map[string]int, int, error) {
	rows, err := collect(ctx, l.db, query, func(r scanner) (orderCount, error) {
		var oc orderCount
		return oc, r.Scan(&oc.id, &oc.n)
	})
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]int, len(rows))
	top := 0
	for _, r := range rows {
		out[r.id] = r.n
		top = max(top, r.n)
	}
	return out, top, nil
}

type scanner interface{ Scan(dest ...any) error }

// collect runs query and scans every row with scan.
func collect[T any](ctx context.Context, db *sql.DB, query string, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, v)
	}
	return out, translate(rows.Err())
}

func scanCharge(row scanner) (Charge, error) {
	var c Charge
	var status string
	var code, msg, intent sql.NullString
	var created int64
	err := row.Scan(&c.IdempotencyKey, &c.ID, &c.OrderID, &c.Amount, &c.Currency, &c.PaymentMethod,
		&status, &c.AmountRefunded, &code, &msg, &created, &intent)
	c.Status, c.FailureCode, c.FailureMessage, c.PaymentIntent = ChargeStatus(status), code.String, msg.String, intent.String
	c.CreatedAt = fromMicros(created)
	return c, err
}

func scanRefund(row scanner) (Refund, error) {
	var r Refund
	var created int64
	var intent, ref sql.NullString
	err := row.Scan(&r.IdempotencyKey, &r.ID, &r.ChargeID, &r.ChargeKey, &r.OrderID, &r.Currency, &r.Amount, &created,
		&intent, &ref, &r.Status)
	r.PaymentIntent, r.Reference = intent.String, ref.String
	r.CreatedAt = fromMicros(created)
	return r, err
}

func scanShipment(row scanner) (Shipment, error) {
	var s Shipment
	var items, status string
	var msg, ref sql.NullString
	var created int64
	if err := row.Scan(&s.IdempotencyKey, &s.ID, &s.OrderID, &items, &status, &msg, &created, &ref); err != nil {
		return s, err
	}
	s.Status, s.FailureMessage, s.CreatedAt, s.Reference = ShipmentStatus(status), msg.String, fromMicros(created), ref.String
	return s, json.Unmarshal([]byte(items), &s.Items)
}

func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// translate maps driver errors to the Ledger's: no rows → ErrNotFound; a
// database that is busy (SQLITE_BUSY/LOCKED past the busy timeout) or closed
// → ErrBusy. See sqlitefile.Translate.
func translate(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrChargeNotFound), errors.Is(err, ErrRefundTooLarge),
		errors.Is(err, ErrIntentNotFound), errors.Is(err, ErrIntentState), errors.Is(err, ErrRefundNotFailable):
		return err
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case sqlitefile.Retryable(err):
		return fmt.Errorf("%w: %v", ErrBusy, err)
	}
	return fmt.Errorf("paysim: %w", sqlitefile.Translate(err))
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// now returns the current UTC time at the ledger's precision, so that a
// created outcome and its replay are identical.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// newID returns prefix followed by 24 random hex digits, in the form the
// in-process simulators give too.
func newID(prefix string) string { return testmode.NewID(prefix) }

// DB returns the ledger's database, for the Stripe mode (package
// paysim/stripesim), whose tables the same migrations create.
func (l *Ledger) DB() *sql.DB { return l.db }
