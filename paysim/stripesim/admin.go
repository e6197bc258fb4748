package stripesim

import (
	"encoding/json"
	"net/http"

	"github.com/orderly/orderly/paysim"
)

// Snapshot returns the native ledger's shipments with the Stripe mode's
// payments in the native shapes, so that a harness reading
// GET /admin/ledger (orderstorm's checker) checks Stripe-mode captures and
// refunds as it checks native ones: one paysim.Charge per Stripe charge
// that captured money or was declined (IdempotencyKey and ID are the
// charge id ch_…, OrderID the PaymentIntent's metadata orderly_order_id,
// Status captured, refunded or failed; authorizations not captured and
// pending bank debits are left out), one paysim.Refund per Stripe refund
// that did not fail (ChargeKey and ChargeID the charge id; a failed
// refund returned nothing).
func (s *Server) Snapshot(r *http.Request) (paysim.Snapshot, error) {
	snap, err := s.ledger.Snapshot(r.Context())
	if err != nil {
		return snap, err
	}
	snap.Charges, snap.Refunds = []paysim.Charge{}, []paysim.Refund{}
	rows, err := s.db.QueryContext(r.Context(), `SELECT `+chargeCols+` FROM stripe_charges
		WHERE status = 'failed' OR captured = 1 ORDER BY created_at, id`)
	if err != nil {
		return snap, err
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			return snap, err
		}
		pc := paysim.Charge{ID: c.ID, IdempotencyKey: c.ID, OrderID: c.OrderID, Amount: c.AmountCaptured, Currency: c.Currency,
			PaymentMethod: c.PaymentMethod, Status: paysim.ChargeCaptured, AmountRefunded: c.AmountRefunded, CreatedAt: c.CreatedAt}
		switch {
		case c.Status == "failed":
			pc.Status, pc.Amount, pc.FailureCode, pc.FailureMessage = paysim.ChargeFailed, c.Amount, c.FailureCode, c.FailureMessage
			if c.DeclineCode != "" {
				pc.FailureCode = c.DeclineCode
			}
		case c.AmountRefunded > 0:
			pc.Status = paysim.ChargeRefunded
		}
		snap.Charges = append(snap.Charges, pc)
	}
	if err := rows.Err(); err != nil {
		return snap, err
	}
	rrows, err := s.db.QueryContext(r.Context(), `SELECT `+refundCols+` FROM stripe_refunds WHERE status <> 'failed' ORDER BY created_at, id`)
	if err != nil {
		return snap, err
	}
	defer rrows.Close()
	for rrows.Next() {
		rf, err := scanRefund(rrows)
		if err != nil {
			return snap, err
		}
		snap.Refunds = append(snap.Refunds, paysim.Refund{ID: rf.ID, IdempotencyKey: rf.ID, ChargeID: rf.Charge,
			ChargeKey: rf.Charge, Amount: rf.Amount, CreatedAt: rf.CreatedAt})
	}
	return snap, rrows.Err()
}

func (s *Server) adminLedger(w http.ResponseWriter, r *http.Request) {
	snap, err := s.Snapshot(r)
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

// adminStats serves GET /admin/stats in paysim's Stats shape: the payment
// counts from the Stripe mode's ledger, the shipments and the webhook and
// fault counters of both.
func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.native.Stats(r.Context())
	if err != nil {
		s.internal(w, err)
		return
	}
	snap, err := s.Snapshot(r)
	if err != nil {
		s.internal(w, err)
		return
	}
	st.Charges, st.Declines, st.Refunds, st.CapturesByOrder, st.MaxCapturesPerOrder = 0, 0, len(snap.Refunds), map[string]int{}, 0
	for _, c := range snap.Charges {
		if c.Status == paysim.ChargeFailed {
			st.Declines++
			continue
		}
		st.Charges++
		st.CapturesByOrder[c.OrderID]++
		st.MaxCapturesPerOrder = max(st.MaxCapturesPerOrder, st.CapturesByOrder[c.OrderID])
	}
	st.Requests += s.requests.Load()
	s.mu.Lock()
	for k, v := range s.injected {
		st.FaultsInjected[k] += v
	}
	s.mu.Unlock()
	hs := s.hooks.snapshot()
	st.Webhooks.Events += hs.Events
	st.Webhooks.Dropped += hs.Dropped
	st.Webhooks.Duplicated += hs.Duplicated
	st.Webhooks.Delivered += hs.Delivered
	st.Webhooks.Failed += hs.Failed
	st.Webhooks.GaveUp += hs.GaveUp
	writeJSON(w, http.StatusOK, st)
}

// stripeFaults is the body of GET and PUT /admin/stripe/faults: paysim's
// Faults members plus commit_500_rate and lock_timeout_rate. GET and PUT
// /admin/faults read and set paysim's Faults only (the shape harnesses of
// the native API use), keeping the two Stripe rates.
type stripeFaults struct {
	paysim.Faults
	Commit500Rate   float64 `json:"commit_500_rate"`
	LockTimeoutRate float64 `json:"lock_timeout_rate"`
}

func (f stripeFaults) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(f.Faults)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["commit_500_rate"], m["lock_timeout_rate"] = f.Commit500Rate, f.LockTimeoutRate
	return json.Marshal(m)
}

func (s *Server) adminGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.currentFaults())
}

func (s *Server) adminPutFaults(w http.ResponseWriter, r *http.Request) {
	var f paysim.Faults
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
		invalid(w, "", "malformed JSON body: "+err.Error())
		return
	}
	s.mu.Lock()
	extra := s.extra
	s.mu.Unlock()
	if err := s.SetFaults(f, extra[0], extra[1]); err != nil {
		invalid(w, "", err.Error())
		return
	}
	s.adminGetFaults(w, r)
}

func (s *Server) adminGetStripeFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	f := stripeFaults{s.faults, s.extra[0], s.extra[1]}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) adminPutStripeFaults(w http.ResponseWriter, r *http.Request) {
	var m map[string]json.RawMessage
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&m); err != nil {
		invalid(w, "", "malformed JSON body: "+err.Error())
		return
	}
	var extra [2]float64
	for i, k := range []string{"commit_500_rate", "lock_timeout_rate"} {
		if v, ok := m[k]; ok {
			if err := json.Unmarshal(v, &extra[i]); err != nil {
				invalid(w, k, k+": "+err.Error())
				return
			}
			delete(m, k)
		}
	}
	rest, _ := json.Marshal(m)
	var f paysim.Faults
	if err := json.Unmarshal(rest, &f); err != nil {
		invalid(w, "", err.Error())
		return
	}
	if err := s.SetFaults(f, extra[0], extra[1]); err != nil {
		invalid(w, "", err.Error())
		return
	}
	s.adminGetStripeFaults(w, r)
}

// stripeLedger is GET /admin/stripe/ledger: every PaymentIntent, charge and
// refund in Stripe's shapes, in creation order.
func (s *Server) adminStripeLedger(w http.ResponseWriter, r *http.Request) {
	out := struct {
		PaymentIntents []piJSON     `json:"payment_intents"`
		Charges        []chargeJSON `json:"charges"`
		Refunds        []refundJSON `json:"refunds"`
	}{[]piJSON{}, []chargeJSON{}, []refundJSON{}}
	ctx := r.Context()
	rows, err := s.db.QueryContext(ctx, `SELECT `+intentCols+` FROM stripe_payment_intents ORDER BY created_at, id`)
	if err != nil {
		s.internal(w, err)
		return
	}
	for rows.Next() {
		pi, err := scanIntent(rows)
		if err != nil {
			rows.Close()
			s.internal(w, err)
			return
		}
		out.PaymentIntents = append(out.PaymentIntents, pi.json(nil))
	}
	rows.Close()
	rows, err = s.db.QueryContext(ctx, `SELECT `+chargeCols+` FROM stripe_charges ORDER BY created_at, id`)
	if err != nil {
		s.internal(w, err)
		return
	}
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			rows.Close()
			s.internal(w, err)
			return
		}
		out.Charges = append(out.Charges, c.json())
	}
	rows.Close()
	rows, err = s.db.QueryContext(ctx, `SELECT `+refundCols+` FROM stripe_refunds ORDER BY created_at, id`)
	if err != nil {
		s.internal(w, err)
		return
	}
	for rows.Next() {
		rf, err := scanRefund(rows)
		if err != nil {
			rows.Close()
			s.internal(w, err)
			return
		}
		out.Refunds = append(out.Refunds, rf.json())
	}
	rows.Close()
	writeJSON(w, http.StatusOK, out)
}
