package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/service"
)

// refundBody is the answer to POST /v1/orders/{id}/refunds (issue 16): the
// refund (ID, its provider key; Amount in minor units of Currency; Status
// "succeeded"; ProviderRef, the provider's refund id) and its order's
// totals right after it, in minor units: AmountCaptured (what the charge
// captured) and AmountRefunded (what the order's succeeded refunds had
// returned once this one succeeded, this one included). A replay answers
// the same body (draft-ietf-httpapi-idempotency-key-header §2.6): later
// refunds do not change it, nor does the refund's failure at the provider
// after it succeeded, which the order's totals and its
// order.refund_failed event report.
type refundBody struct {
	ID             string    `json:"id"`
	OrderID        string    `json:"order_id"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	Reason         string    `json:"reason"`
	Status         string    `json:"status"`
	ProviderRef    string    `json:"provider_ref"`
	CreatedAt      time.Time `json:"created_at"`
	AmountCaptured int64     `json:"amount_captured"`
	AmountRefunded int64     `json:"amount_refunded"`
}

// refundOrder serves POST /v1/orders/{id}/refunds: the body read (bounded),
// its media type checked, decoded, validated and fingerprinted by package
// intake, and run. A success (and its replay, with Idempotency-Replayed)
// is a 200 with the refund.
func (s *server) refundOrder(w http.ResponseWriter, r *http.Request) {
	body, err := s.readAll(w, r)
	if err == nil {
		err = checkMedia(r, body)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	call, in, err := s.decoder().Refund(tenantOf(r.Context()), chi.URLParam(r, "id"), keyValues(r), body)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := s.svc.Refund(r.Context(), call, in)
	if res.Replayed {
		w.Header().Set("Idempotency-Replayed", "true")
	}
	if !res.KeyExpiresAt.IsZero() {
		w.Header().Set("Idempotency-Key-Expires", res.KeyExpiresAt.UTC().Format(http.TimeFormat))
	}
	s.setConsistencyToken(w, r, service.Result{Replayed: res.Replayed}, err)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	rf := res.Refund
	writeJSON(w, http.StatusOK, refundBody{ID: rf.ProviderKey, OrderID: rf.OrderID, Amount: rf.Amount, Currency: rf.Currency,
		Reason: rf.Reason, Status: string(payment.AttemptSucceeded), ProviderRef: rf.ProviderRef, CreatedAt: rf.CreatedAt,
		AmountCaptured: res.Totals.Captured, AmountRefunded: rf.RefundedAfter})
}
