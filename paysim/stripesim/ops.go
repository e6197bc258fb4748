package stripesim

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orderly/orderly/internal/sqlitefile"
)

// paramSpec lists the parameters an endpoint accepts: plain names, and
// prefixes ending in "[" for hashes and arrays (metadata[k], expand[0]).
type paramSpec []string

var (
	createParams     = paramSpec{"amount", "currency", "metadata[", "capture_method", "confirm", "payment_method", "payment_method_types[", "automatic_payment_methods[", "description", "expand[", "return_url", "confirmation_method"}
	confirmParams    = paramSpec{"payment_method", "return_url", "expand[", "capture_method"}
	captureParams    = paramSpec{"amount_to_capture", "expand[", "metadata["}
	cancelParams     = paramSpec{"cancellation_reason", "expand["}
	refundParams     = paramSpec{"payment_intent", "charge", "amount", "metadata[", "reason", "expand["}
	retrieveParams   = paramSpec{"expand[", "client_secret"}
	searchParams     = paramSpec{"query", "limit", "page", "expand["}
	listIntentParams = paramSpec{"created", "created[", "limit", "starting_after", "ending_before", "expand[", "customer"}
	listRefundParams = paramSpec{"payment_intent", "charge", "limit", "starting_after", "ending_before", "expand[", "created["}
)

func (p paramSpec) allows(name string) bool {
	for _, a := range p {
		if name == a || (strings.HasSuffix(a, "[") && strings.HasPrefix(name, a)) {
			return true
		}
	}
	return false
}

// form parses the request's parameters (the form body of a POST, the query
// of a GET) and refuses unknown ones as Stripe does (400
// parameter_unknown); nothing is saved under the key.
func (s *Server) form(w http.ResponseWriter, r *http.Request, spec paramSpec) (url.Values, bool) {
	var vals url.Values
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		if err := r.ParseForm(); err != nil {
			invalid(w, "", "Invalid request body: "+err.Error())
			return nil, false
		}
		vals = r.PostForm
	} else {
		vals = r.URL.Query()
	}
	for name := range vals {
		if !spec.allows(name) {
			writeError(w, http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_unknown", Param: name,
				Message: "Received unknown parameter: " + name})
			return nil, false
		}
	}
	return vals, true
}

// hash returns the members of a form hash, name[k]=v.
func hash(form url.Values, name string) map[string]string {
	out := map[string]string{}
	for k, v := range form {
		if inner, ok := strings.CutPrefix(k, name+"["); ok && strings.HasSuffix(inner, "]") && len(v) > 0 {
			out[strings.TrimSuffix(inner, "]")] = v[0]
		}
	}
	return out
}

// expands reports whether expand[]/expand[N] names field.
func expands(form url.Values, field string) bool {
	for k, v := range form {
		if strings.HasPrefix(k, "expand[") && slices.Contains(v, field) {
			return true
		}
	}
	return false
}

func answer(status int, e stripeError) error { return &answered{status: status, body: e} }

func missing(param string) error {
	return answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_missing", Param: param,
		Message: "Missing required param: " + param + "."})
}

func badParam(param, msg string) error {
	return answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_invalid_integer", Param: param, Message: msg})
}

func noSuch(what, id, param string) error {
	return answer(http.StatusNotFound, stripeError{Type: typeInvalidRequest, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", what, id)})
}

func positiveInt(form url.Values, name string, required bool) (int64, bool, error) {
	v := form.Get(name)
	if v == "" {
		if required {
			return 0, false, missing(name)
		}
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > 99999999 {
		return 0, false, badParam(name, "Invalid integer: "+v+" (a positive amount in minor units, at most 99999999)")
	}
	return n, true, nil
}

var currencyRe = regexp.MustCompile(`^[a-z]{3}$`)

// --- PaymentIntents (docs.stripe.com/api/payment_intents)

func (s *Server) createIntent(c *call) (int, any, error) {
	amount, _, err := positiveInt(c.form, "amount", true)
	if err != nil {
		return 0, nil, err
	}
	cur := strings.ToLower(c.form.Get("currency"))
	if cur == "" {
		return 0, nil, missing("currency")
	}
	if !currencyRe.MatchString(cur) {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_invalid_string", Param: "currency",
			Message: "Invalid currency: " + c.form.Get("currency")})
	}
	capture := c.form.Get("capture_method")
	switch capture {
	case "":
		capture = "automatic_async" // the default since API version 2024-04-10
	case "automatic", "automatic_async", "manual":
	default:
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_invalid_string",
			Param: "capture_method", Message: "Invalid capture_method: must be one of automatic, automatic_async, or manual"})
	}
	confirm := c.form.Get("confirm") == "true"
	pm := c.form.Get("payment_method")
	if pm != "" {
		if _, ok := methods[pm]; !ok {
			return 0, nil, noSuch("PaymentMethod", pm, "payment_method")
		}
	}
	meta := hash(c.form, "metadata")
	pi := intent{ID: newID("pi"), Amount: amount, Currency: cur, Status: "requires_payment_method", CaptureMethod: capture,
		PaymentMethod: pm, Metadata: meta, Description: c.form.Get("description"), CreatedAt: c.now}
	if pm != "" {
		pi.Status = "requires_confirmation"
	}
	metaJSON, _ := json.Marshal(meta)
	if _, err := c.tx.ExecContext(c.ctx, `INSERT INTO stripe_payment_intents (id, amount, currency, status, capture_method,
		payment_method, metadata, order_id, description, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		pi.ID, pi.Amount, pi.Currency, pi.Status, pi.CaptureMethod, nullable(pm), string(metaJSON), nullable(meta["orderly_order_id"]),
		nullable(pi.Description), micros(pi.CreatedAt)); err != nil {
		return 0, nil, err
	}
	c.emit("payment_intent.created", pi.json(nil))
	if confirm {
		return s.confirm(c, pi, pm)
	}
	return http.StatusOK, pi.json(nil), nil
}

func (c *call) emit(typ string, obj any) {
	c.events = append(c.events, event{typ: typ, obj: obj, key: c.key, at: c.now})
}

func loadIntent(c *call, id string) (intent, error) {
	pi, err := scanIntent(c.tx.QueryRowContext(c.ctx, `SELECT `+intentCols+` FROM stripe_payment_intents WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return pi, noSuch("payment_intent", id, "intent")
	}
	return pi, err
}

func (s *Server) confirmIntent(c *call) (int, any, error) {
	pi, err := loadIntent(c, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return s.confirm(c, pi, c.form.Get("payment_method"))
}

func unexpectedState(pi intent, verb string, allowed string) error {
	return answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "payment_intent_unexpected_state",
		Message:       fmt.Sprintf("You cannot %s this PaymentIntent because it has a status of %s.%s", verb, pi.Status, allowed),
		PaymentIntent: new(pi.json(nil))})
}

// confirm attempts the payment of pi with payment method pmParam (or the
// one pi holds). docs.stripe.com/payments/paymentintents/lifecycle.
func (s *Server) confirm(c *call, pi intent, pmParam string) (int, any, error) {
	switch pi.Status {
	case "requires_payment_method", "requires_confirmation", "requires_action":
	default:
		return 0, nil, unexpectedState(pi, "confirm", " Only a PaymentIntent with one of the following statuses may be confirmed: requires_confirmation, requires_payment_method, requires_action.")
	}
	pm := pmParam
	if pm == "" {
		pm = pi.PaymentMethod
	}
	if pm == "" {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "payment_intent_unexpected_state",
			Message: "You cannot confirm this PaymentIntent because it's missing a payment method. To confirm the PaymentIntent with " + pi.ID + ", specify a payment method attached to this customer along with the customer ID."})
	}
	m, ok := methods[pm]
	if !ok {
		return 0, nil, noSuch("PaymentMethod", pm, "payment_method")
	}
	if m.fault != faultNone && !hasFault(pi.FaultsFired, m.fault) {
		pi.FaultsFired = strings.TrimPrefix(pi.FaultsFired+","+string(m.fault), ",")
		if _, err := c.tx.ExecContext(c.ctx, `UPDATE stripe_payment_intents SET faults_fired = ? WHERE id = ?`, pi.FaultsFired, pi.ID); err != nil {
			return 0, nil, err
		}
		c.fault = m.fault
		if m.fault == faultError || m.fault == faultTimeout {
			return 0, nil, nil
		}
	}
	if c.injectDecline && m.kind == kindCard {
		m = methods[MethodDeclined]
		c.declined = true
	}
	pi.PaymentMethod, pi.LastPaymentError, pi.NextAction = pm, nil, nil
	ch := charge{ID: newID("ch"), PaymentIntent: pi.ID, OrderID: pi.Metadata["orderly_order_id"], Amount: pi.Amount,
		Currency: pi.Currency, PaymentMethod: pm, CreatedAt: c.now}
	status := http.StatusOK
	var body any
	switch m.kind {
	case kindDecline:
		ch.Status, ch.FailureCode, ch.DeclineCode, ch.FailureMessage = "failed", m.code, m.declineCode, m.message
		e := stripeError{Type: typeCard, Code: m.code, DeclineCode: m.declineCode, Message: m.message, Charge: ch.ID,
			PaymentMethod: map[string]any{"id": pm, "object": "payment_method", "type": m.typ},
			DocURL:        "https://docs.stripe.com/error-codes/" + strings.ReplaceAll(m.code, "_", "-")}
		pi.LastPaymentError = mustJSON(e)
		pi.Status, pi.PaymentMethod, pi.LatestCharge = "requires_payment_method", "", ch.ID
		pj := pi.json(nil)
		e.PaymentIntent = &pj
		status, body = http.StatusPaymentRequired, struct {
			Error stripeError `json:"error"`
		}{e}
		c.emit("charge.failed", ch.json())
		c.emit("payment_intent.payment_failed", pj)
	case kind3DS:
		pi.Status = "requires_action"
		pi.NextAction = mustJSON(map[string]any{"type": "redirect_to_url", "redirect_to_url": map[string]any{
			"url":        "/admin/stripe/payment_intents/" + pi.ID + "/authenticate",
			"return_url": strp(c.form.Get("return_url")),
		}})
		ch = charge{}
		c.emit("payment_intent.requires_action", pi.json(nil))
	case kindBankDebit:
		ch.Status = "pending"
		pi.Status, pi.LatestCharge = "processing", ch.ID
		c.emit("payment_intent.processing", pi.json(nil))
	default:
		succeed(c, &pi, &ch)
	}
	if ch.ID != "" {
		if err := insertCharge(c, ch); err != nil {
			return 0, nil, err
		}
	}
	if err := saveIntent(c, pi); err != nil {
		return 0, nil, err
	}
	if body == nil {
		body = pi.json(expandedCharge(c, ch, "latest_charge"))
	}
	return status, body, nil
}

// succeed authorizes ch for pi: captured at once unless pi captures
// manually.
func succeed(c *call, pi *intent, ch *charge) {
	ch.Status = "succeeded"
	pi.LatestCharge, pi.LastPaymentError, pi.NextAction = ch.ID, nil, nil
	if pi.CaptureMethod == "manual" {
		pi.Status, pi.AmountCapturable = "requires_capture", pi.Amount
		ch.CaptureBefore = c.now.Add(c.window)
		c.emit("charge.succeeded", ch.json())
		c.emit("payment_intent.amount_capturable_updated", pi.json(nil))
		return
	}
	ch.Captured, ch.AmountCaptured = true, ch.Amount
	pi.Status, pi.AmountReceived, pi.AmountCapturable = "succeeded", pi.Amount, 0
	c.emit("charge.succeeded", ch.json())
	c.emit("payment_intent.succeeded", pi.json(nil))
}

func expandedCharge(c *call, ch charge, field string) *charge {
	if ch.ID == "" || !expands(c.form, field) {
		return nil
	}
	return &ch
}

func insertCharge(c *call, ch charge) error {
	_, err := c.tx.ExecContext(c.ctx, `INSERT INTO stripe_charges (id, payment_intent, order_id, amount, amount_captured,
		amount_refunded, currency, payment_method, status, captured, failure_code, decline_code, failure_message, created_at,
		capture_before)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, ch.ID, ch.PaymentIntent, nullable(ch.OrderID), ch.Amount,
		ch.AmountCaptured, ch.AmountRefunded, ch.Currency, ch.PaymentMethod, ch.Status, boolInt(ch.Captured),
		nullable(ch.FailureCode), nullable(ch.DeclineCode), nullable(ch.FailureMessage), micros(ch.CreatedAt),
		nullTime(ch.CaptureBefore))
	return err
}

func updateCharge(c *call, ch charge) error {
	_, err := c.tx.ExecContext(c.ctx, `UPDATE stripe_charges SET amount_captured = ?, amount_refunded = ?, status = ?,
		captured = ?, failure_code = ?, decline_code = ?, failure_message = ?, capture_before = ? WHERE id = ?`, ch.AmountCaptured,
		ch.AmountRefunded, ch.Status, boolInt(ch.Captured), nullable(ch.FailureCode), nullable(ch.DeclineCode),
		nullable(ch.FailureMessage), nullTime(ch.CaptureBefore), ch.ID)
	return err
}

func saveIntent(c *call, pi intent) error {
	var canceled any
	if !pi.CanceledAt.IsZero() {
		canceled = micros(pi.CanceledAt)
	}
	_, err := c.tx.ExecContext(c.ctx, `UPDATE stripe_payment_intents SET status = ?, payment_method = ?, amount_capturable = ?,
		amount_received = ?, latest_charge = ?, last_payment_error = ?, next_action = ?, canceled_at = ?,
		cancellation_reason = ?, faults_fired = ? WHERE id = ?`, pi.Status, nullable(pi.PaymentMethod), pi.AmountCapturable,
		pi.AmountReceived, nullable(pi.LatestCharge), nullRaw(pi.LastPaymentError), nullRaw(pi.NextAction), canceled,
		nullable(pi.CancellationReason), pi.FaultsFired, pi.ID)
	return err
}

func loadCharge(c *call, id string) (charge, error) {
	return scanCharge(c.tx.QueryRowContext(c.ctx, `SELECT `+chargeCols+` FROM stripe_charges WHERE id = ?`, id))
}

func (s *Server) captureIntent(c *call) (int, any, error) {
	pi, err := loadIntent(c, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if pi.Status != "requires_capture" {
		return 0, nil, unexpectedState(pi, "capture", " Only a PaymentIntent with status requires_capture may be captured.")
	}
	amt, set, err := positiveInt(c.form, "amount_to_capture", false)
	if err != nil {
		return 0, nil, err
	}
	if !set {
		amt = pi.AmountCapturable
	}
	if amt > pi.AmountCapturable {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "amount_too_large", Param: "amount_to_capture",
			Message: fmt.Sprintf("The amount_to_capture (%d) is greater than the amount_capturable (%d).", amt, pi.AmountCapturable)})
	}
	ch, err := loadCharge(c, pi.LatestCharge)
	if err != nil {
		return 0, nil, err
	}
	if !ch.CaptureBefore.IsZero() && !c.now.Before(ch.CaptureBefore) {
		// Expired, though not swept yet: Stripe has released it.
		return 0, nil, unexpectedState(intent{ID: pi.ID, Status: "canceled", Amount: pi.Amount, Currency: pi.Currency,
			Metadata: pi.Metadata}, "capture", " The authorization expired at its capture_before.")
	}
	ch.Captured, ch.AmountCaptured, ch.CaptureBefore = true, amt, time.Time{}
	pi.Status, pi.AmountReceived, pi.AmountCapturable = "succeeded", amt, 0
	if err := updateCharge(c, ch); err != nil {
		return 0, nil, err
	}
	if err := saveIntent(c, pi); err != nil {
		return 0, nil, err
	}
	c.emit("charge.captured", ch.json())
	c.emit("payment_intent.succeeded", pi.json(nil))
	return http.StatusOK, pi.json(expandedCharge(c, ch, "latest_charge")), nil
}

var cancellationReasons = []string{"", "duplicate", "fraudulent", "requested_by_customer", "abandoned"}

func (s *Server) cancelIntent(c *call) (int, any, error) {
	pi, err := loadIntent(c, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	switch pi.Status {
	case "requires_payment_method", "requires_capture", "requires_confirmation", "requires_action":
	case "processing":
		// Stripe cancels a processing PaymentIntent "in rare cases" only
		// (docs.stripe.com/api/payment_intents/cancel); a bank debit that
		// was submitted settles or fails, so paysim refuses, as Stripe does
		// for the debits it simulates.
		return 0, nil, unexpectedState(pi, "cancel", " This PaymentIntent is processing and can no longer be canceled; wait for it to succeed or fail.")
	default:
		return 0, nil, unexpectedState(pi, "cancel", " Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, requires_confirmation, requires_action, or, in rare cases, processing.")
	}
	reason := c.form.Get("cancellation_reason")
	if !slices.Contains(cancellationReasons, reason) {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_invalid_string",
			Param: "cancellation_reason", Message: "Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer, or abandoned"})
	}
	if pi.Status == "requires_capture" {
		if ch, err := loadCharge(c, pi.LatestCharge); err == nil {
			ch.Status = "succeeded" // an authorization released, never captured
			ch.CaptureBefore = time.Time{}
			if err := updateCharge(c, ch); err != nil {
				return 0, nil, err
			}
		}
	}
	pi.Status, pi.CanceledAt, pi.CancellationReason, pi.AmountCapturable, pi.NextAction = "canceled", c.now, reason, 0, nil
	if err := saveIntent(c, pi); err != nil {
		return 0, nil, err
	}
	c.emit("payment_intent.canceled", pi.json(nil))
	return http.StatusOK, pi.json(nil), nil
}

func (s *Server) retrieveIntent(w http.ResponseWriter, r *http.Request, q url.Values) {
	id := r.PathValue("id")
	pi, err := scanIntent(s.db.QueryRowContext(r.Context(), `SELECT `+intentCols+` FROM stripe_payment_intents WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		writeAnswer(w, noSuch("payment_intent", id, "intent"))
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	var latest *charge
	if pi.LatestCharge != "" && expands(q, "latest_charge") {
		ch, err := scanCharge(s.db.QueryRowContext(r.Context(), `SELECT `+chargeCols+` FROM stripe_charges WHERE id = ?`, pi.LatestCharge))
		if err != nil {
			s.internal(w, err)
			return
		}
		latest = &ch
	}
	writeJSON(w, http.StatusOK, pi.json(latest))
}

// searchClause is one term of the supported subset of Stripe's search
// query language: metadata['key']:'value' or status:'value', joined by AND
// (docs.stripe.com/search#search-query-language).
var searchClause = regexp.MustCompile(`^\s*(?:metadata\['([^'\]]+)'\]|(status|currency)):'([^']*)'\s*$`)

// searchIntents serves GET /v1/payment_intents/search. A PaymentIntent
// becomes visible to search Config.SearchLag after its creation, as
// Stripe's index lags (docs.stripe.com/search#data-freshness); the objects
// returned are current.
func (s *Server) searchIntents(w http.ResponseWriter, r *http.Request, q url.Values) {
	query := q.Get("query")
	if query == "" {
		writeAnswer(w, missing("query"))
		return
	}
	where := []string{"created_at <= ?"}
	cutoff := s.cfg.Now()
	if s.cfg.SearchLag > 0 {
		cutoff = cutoff.Add(-s.cfg.SearchLag)
	}
	args := []any{micros(cutoff)}
	for term := range strings.SplitSeq(query, " AND ") {
		m := searchClause.FindStringSubmatch(term)
		if m == nil {
			writeAnswer(w, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_invalid_string", Param: "query",
				Message: "paysim supports search terms metadata['key']:'value', status:'value' and currency:'value' joined by AND, not " + strconv.Quote(term)}))
			return
		}
		if m[1] != "" {
			where, args = append(where, "json_extract(metadata, ?) = ?"), append(args, `$."`+strings.ReplaceAll(m[1], `"`, ``)+`"`, m[3])
		} else {
			where, args = append(where, m[2]+" = ?"), append(args, m[3])
		}
	}
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeAnswer(w, badParam("limit", "limit must be an integer between 1 and 100"))
			return
		}
		limit = n
	}
	//nolint:gosec // G202: the WHERE is joined from constant fragments; every value is a bound ? parameter
	rows, err := s.db.QueryContext(r.Context(), `SELECT `+intentCols+` FROM stripe_payment_intents WHERE `+strings.Join(where, " AND ")+
		` ORDER BY created_at DESC, id LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		s.internal(w, err)
		return
	}
	defer rows.Close()
	data := []piJSON{}
	for rows.Next() {
		pi, err := scanIntent(rows)
		if err != nil {
			s.internal(w, err)
			return
		}
		data = append(data, pi.json(nil))
	}
	if err := rows.Err(); err != nil {
		s.internal(w, err)
		return
	}
	more := len(data) > limit
	if more {
		data = data[:limit]
	}
	writeJSON(w, http.StatusOK, struct {
		Object   string   `json:"object"`
		Data     []piJSON `json:"data"`
		HasMore  bool     `json:"has_more"`
		NextPage *string  `json:"next_page"`
		URL      string   `json:"url"`
	}{"search_result", data, more, nil, "/v1/payment_intents/search"})
}

// listIntents serves GET /v1/payment_intents: newest first, filtered by
// created[gte|gt|lte|lt] (unix seconds), paginated by limit and
// starting_after. Unlike search it is read-after-write consistent.
func (s *Server) listIntents(w http.ResponseWriter, r *http.Request, q url.Values) {
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeAnswer(w, badParam("limit", "limit must be an integer between 1 and 100"))
			return
		}
		limit = n
	}
	where, args := "1 = 1", []any{}
	for op, sqlOp := range map[string]string{"gte": ">=", "gt": ">", "lte": "<=", "lt": "<"} {
		v := q.Get("created[" + op + "]")
		if v == "" {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeAnswer(w, badParam("created["+op+"]", "Invalid integer: "+v))
			return
		}
		bound := sec * 1e6
		if op == "gt" || op == "lte" {
			bound = (sec + 1) * 1e6
			sqlOp = map[string]string{"gt": ">=", "lte": "<"}[op]
		}
		where, args = where+" AND created_at "+sqlOp+" ?", append(args, bound)
	}
	if v := q.Get("starting_after"); v != "" {
		where, args = where+" AND (created_at, id) < (SELECT created_at, id FROM stripe_payment_intents WHERE id = ?)", append(args, v)
	}
	//nolint:gosec // G202: the WHERE is joined from constant fragments; every value is a bound ? parameter
	rows, err := s.db.QueryContext(r.Context(), `SELECT `+intentCols+` FROM stripe_payment_intents WHERE `+where+
		` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		s.internal(w, err)
		return
	}
	defer rows.Close()
	data := []piJSON{}
	for rows.Next() {
		pi, err := scanIntent(rows)
		if err != nil {
			s.internal(w, err)
			return
		}
		data = append(data, pi.json(nil))
	}
	if err := rows.Err(); err != nil {
		s.internal(w, err)
		return
	}
	more := len(data) > limit
	if more {
		data = data[:limit]
	}
	writeJSON(w, http.StatusOK, listJSON{Object: "list", Data: data, HasMore: more, URL: "/v1/payment_intents"})
}

// --- refunds (docs.stripe.com/api/refunds)

func (s *Server) createRefund(c *call) (int, any, error) {
	piID, chID := c.form.Get("payment_intent"), c.form.Get("charge")
	if piID == "" && chID == "" {
		return 0, nil, missing("payment_intent")
	}
	var pi intent
	var err error
	if piID != "" {
		if pi, err = loadIntent(c, piID); err != nil {
			var a *answered
			if errors.As(err, &a) {
				a.body.Param = "payment_intent"
			}
			return 0, nil, err
		}
		chID = pi.LatestCharge
	}
	ch, err := loadCharge(c, chID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !ch.Captured) {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Param: "payment_intent",
			Message: "This PaymentIntent does not have a successful charge to refund."})
	}
	if err != nil {
		return 0, nil, err
	}
	if pi.ID == "" {
		if pi, err = loadIntent(c, ch.PaymentIntent); err != nil {
			return 0, nil, err
		}
	}
	left := ch.AmountCaptured - ch.AmountRefunded
	if left == 0 {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "charge_already_refunded",
			Message: fmt.Sprintf("Charge %s has already been refunded.", ch.ID), Charge: ch.ID})
	}
	amt, set, err := positiveInt(c.form, "amount", false)
	if err != nil {
		return 0, nil, err
	}
	if !set {
		amt = left
	}
	if amt > left {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amt, left)})
	}
	reason := c.form.Get("reason")
	if !slices.Contains([]string{"", "duplicate", "fraudulent", "requested_by_customer"}, reason) {
		return 0, nil, answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Code: "parameter_invalid_string", Param: "reason",
			Message: "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer"})
	}
	rf := refund{ID: newID("re"), PaymentIntent: pi.ID, Charge: ch.ID, Amount: amt, Currency: ch.Currency, Status: "succeeded",
		Reason: reason, Metadata: hash(c.form, "metadata"), CreatedAt: c.now}
	meta, _ := json.Marshal(rf.Metadata)
	if _, err := c.tx.ExecContext(c.ctx, `INSERT INTO stripe_refunds (id, payment_intent, charge, amount, currency, status,
		reason, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, rf.ID, rf.PaymentIntent, rf.Charge, rf.Amount,
		rf.Currency, rf.Status, nullable(rf.Reason), string(meta), micros(rf.CreatedAt)); err != nil {
		return 0, nil, err
	}
	ch.AmountRefunded += amt
	if err := updateCharge(c, ch); err != nil {
		return 0, nil, err
	}
	c.emit("refund.created", rf.json())
	c.emit("charge.refunded", ch.json())
	return http.StatusOK, rf.json(), nil
}

func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request, q url.Values) {
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeAnswer(w, badParam("limit", "limit must be an integer between 1 and 100"))
			return
		}
		limit = n
	}
	where, args := "1 = 1", []any{}
	if v := q.Get("payment_intent"); v != "" {
		where, args = where+" AND payment_intent = ?", append(args, v)
	}
	if v := q.Get("charge"); v != "" {
		where, args = where+" AND charge = ?", append(args, v)
	}
	if v := q.Get("starting_after"); v != "" {
		where, args = where+" AND (created_at, id) < (SELECT created_at, id FROM stripe_refunds WHERE id = ?)", append(args, v)
	}
	//nolint:gosec // G202: the WHERE is joined from constant fragments; every value is a bound ? parameter
	rows, err := s.db.QueryContext(r.Context(), `SELECT `+refundCols+` FROM stripe_refunds WHERE `+where+
		` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		s.internal(w, err)
		return
	}
	defer rows.Close()
	data := []refundJSON{}
	for rows.Next() {
		rf, err := scanRefund(rows)
		if err != nil {
			s.internal(w, err)
			return
		}
		data = append(data, rf.json())
	}
	if err := rows.Err(); err != nil {
		s.internal(w, err)
		return
	}
	more := len(data) > limit
	if more {
		data = data[:limit]
	}
	writeJSON(w, http.StatusOK, listJSON{Object: "list", Data: data, HasMore: more, URL: "/v1/refunds"})
}

func (s *Server) retrieveRefund(w http.ResponseWriter, r *http.Request, _ url.Values) {
	id := r.PathValue("id")
	rf, err := scanRefund(s.db.QueryRowContext(r.Context(), `SELECT `+refundCols+` FROM stripe_refunds WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		writeAnswer(w, noSuch("refund", id, "id"))
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rf.json())
}

// --- admin completion of 3-D Secure and bank debits (issue 16 builds the flows)

// adminComplete serves POST /admin/stripe/payment_intents/{id}/authenticate
// (a requires_action PaymentIntent; ?outcome=success|failure, the customer
// passing or failing 3-D Secure) and /settle (a processing bank debit;
// ?outcome=success|failure). Success captures (or, with manual capture,
// authorizes) the payment; failure returns the PaymentIntent to
// requires_payment_method with a last_payment_error.
func (s *Server) adminComplete(kind methodKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		outcome := r.URL.Query().Get("outcome")
		if outcome == "" {
			outcome = "success"
		}
		if outcome != "success" && outcome != "failure" {
			invalid(w, "outcome", "outcome must be success or failure")
			return
		}
		c := &call{ctx: r.Context(), r: r, form: url.Values{}, now: s.cfg.Now().UTC().Truncate(time.Microsecond), window: s.cfg.AuthorizationWindow}
		var out piJSON
		err := sqlitefile.InTx(r.Context(), s.db, func(tx *sql.Tx) error {
			c.tx, c.events = tx, nil
			pi, err := loadIntent(c, r.PathValue("id"))
			if err != nil {
				return err
			}
			want := map[methodKind]string{kind3DS: "requires_action", kindBankDebit: "processing"}[kind]
			if pi.Status != want {
				return unexpectedState(pi, "complete", " This admin endpoint completes a PaymentIntent in "+want+".")
			}
			var ch charge
			if kind == kindBankDebit {
				if ch, err = loadCharge(c, pi.LatestCharge); err != nil {
					return err
				}
			} else {
				ch = charge{ID: newID("ch"), PaymentIntent: pi.ID, OrderID: pi.Metadata["orderly_order_id"], Amount: pi.Amount,
					Currency: pi.Currency, PaymentMethod: pi.PaymentMethod, CreatedAt: c.now}
			}
			if outcome == "success" {
				succeed(c, &pi, &ch)
			} else {
				code, msg := "payment_intent_authentication_failure", "The provided PaymentMethod has failed authentication."
				if kind == kindBankDebit {
					code, msg = "insufficient_funds", "The customer's account has insufficient funds to cover this payment."
				}
				ch.Status, ch.FailureCode, ch.FailureMessage = "failed", code, msg
				pi.LastPaymentError = mustJSON(stripeError{Type: typeCard, Code: code, Message: msg, Charge: ch.ID})
				pi.Status, pi.PaymentMethod, pi.NextAction, pi.LatestCharge = "requires_payment_method", "", nil, ch.ID
				c.emit("charge.failed", ch.json())
				c.emit("payment_intent.payment_failed", pi.json(nil))
			}
			if kind == kindBankDebit {
				err = updateCharge(c, ch)
			} else {
				err = insertCharge(c, ch)
			}
			if err != nil {
				return err
			}
			out = pi.json(nil)
			return saveIntent(c, pi)
		})
		if err != nil {
			var a *answered
			if errors.As(err, &a) {
				writeAnswer(w, err)
				return
			}
			s.internal(w, err)
			return
		}
		for _, ev := range c.events {
			s.hooks.emit(ev)
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// --- helpers

func writeAnswer(w http.ResponseWriter, err error) {
	var a *answered
	if errors.As(err, &a) {
		writeError(w, a.status, a.body)
		return
	}
	writeError(w, http.StatusInternalServerError, stripeError{Type: typeAPI, Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

func nullRaw(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// adminFailRefund serves POST /admin/stripe/refunds/{id}/fail: the later
// failure of a succeeded refund of a charge paid with MethodRefundFail
// (Stripe: "its status begins as succeeded; some time later, it
// transitions to failed", docs.stripe.com/testing#refunds). In one
// transaction the refund becomes failed and its amount is the charge's
// again (amount_refunded shrinks: the money is back in the merchant's
// balance, docs.stripe.com/refunds "Failed refunds"); then
// charge.refund.updated, refund.updated and refund.failed are sent. A
// refund of another method, or not succeeded, is a 400
// (invalid_request_error); an unknown one a 404 resource_missing. It
// answers the refund.
func (s *Server) adminFailRefund(w http.ResponseWriter, r *http.Request) {
	c := &call{ctx: r.Context(), r: r, form: url.Values{}, now: s.cfg.Now().UTC().Truncate(time.Microsecond), window: s.cfg.AuthorizationWindow}
	var out refundJSON
	err := sqlitefile.InTx(r.Context(), s.db, func(tx *sql.Tx) error {
		c.tx, c.events = tx, nil
		id := r.PathValue("id")
		rf, err := scanRefund(tx.QueryRowContext(c.ctx, `SELECT `+refundCols+` FROM stripe_refunds WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return noSuch("refund", id, "refund")
		} else if err != nil {
			return err
		}
		ch, err := loadCharge(c, rf.Charge)
		if err != nil {
			return err
		}
		if ch.PaymentMethod != MethodRefundFail {
			return answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Param: "refund",
				Message: "Only a refund of a charge paid with " + MethodRefundFail + " fails later."})
		}
		if rf.Status != "succeeded" {
			return answer(http.StatusBadRequest, stripeError{Type: typeInvalidRequest, Param: "refund",
				Message: fmt.Sprintf("Refund %s is %s; only a succeeded refund fails later.", rf.ID, rf.Status)})
		}
		rf.Status = "failed"
		if _, err := tx.ExecContext(c.ctx, `UPDATE stripe_refunds SET status = ? WHERE id = ?`, rf.Status, rf.ID); err != nil {
			return err
		}
		ch.AmountRefunded -= rf.Amount
		if err := updateCharge(c, ch); err != nil {
			return err
		}
		out = rf.json()
		c.emit("charge.refund.updated", out)
		c.emit("refund.updated", out)
		c.emit("refund.failed", out)
		return nil
	})
	if err != nil {
		var a *answered
		if errors.As(err, &a) {
			writeAnswer(w, err)
			return
		}
		s.internal(w, err)
		return
	}
	for _, ev := range c.events {
		s.hooks.emit(ev)
	}
	writeJSON(w, http.StatusOK, out)
}
