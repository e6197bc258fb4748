package intake

import (
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
)

// RefundRoute is the route of a partial refund (issue 16).
const RefundRoute = "/v1/orders/{id}/refunds"

// MaxRefundReason bounds a refund's reason, in bytes of UTF-8.
const MaxRefundReason = 500

// refundBody is the body of a partial refund; pointers tell a missing or
// null member (400) from a wrong one.
type refundBody struct {
	Amount   *int64  `json:"amount"`
	Currency *string `json:"currency"`
	Reason   *string `json:"reason"`
}

// Refund decodes and validates a partial refund of tenant's order orderID:
// body {"amount": minor units > 0, "currency": ISO 4217 code, "reason":
// optional text of at most MaxRefundReason bytes}, amount and currency
// required (money is never defaulted). keys are the key field's values;
// the fingerprint covers the route, the order id and the body, so the same
// key with another amount is a 422 (draft-ietf-httpapi-idempotency-key-header
// §2.7). Errors: EInvalid naming each bad member, and the errors of Key.
func (d Decoder) Refund(tenant, orderID string, keys []string, body []byte) (service.Call, service.RefundInput, error) {
	parsed := d.Fingerprinter.Parse(body)
	var rb refundBody
	if err := decodeParsed(parsed, &rb, true); err != nil {
		return service.Call{}, service.RefundInput{}, err
	}
	var fe []apperr.FieldError
	switch {
	case rb.Amount == nil:
		fe = append(fe, apperr.FieldError{Field: "amount", Reason: "is required and must not be null (minor currency units)"})
	case *rb.Amount <= 0 || *rb.Amount > order.MaxAmount:
		fe = append(fe, apperr.FieldError{Field: "amount", Reason: "must be from 1 to 2^53-1 (minor currency units)"})
	}
	if rb.Currency == nil {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: "is required and must not be null"})
	} else if reason := order.CurrencyReason(*rb.Currency); reason != "" {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: reason})
	}
	in := service.RefundInput{}
	if rb.Reason != nil && *rb.Reason != "" {
		if reason := order.TextReason(*rb.Reason, MaxRefundReason); reason != "" {
			fe = append(fe, apperr.FieldError{Field: "reason", Reason: reason})
		}
		in.Reason = *rb.Reason
	}
	if len(fe) > 0 {
		return service.Call{}, service.RefundInput{}, &apperr.Error{Code: apperr.EInvalid, Message: "the refund has invalid fields", Fields: fe}
	}
	in.Amount, in.Currency = *rb.Amount, *rb.Currency
	key, err := d.key(keys, RefundRoute, map[string]string{"id": orderID}, func() idempotency.Body { return parsed })
	if err != nil {
		return service.Call{}, service.RefundInput{}, err
	}
	return service.Call{TenantID: tenant, OrderID: orderID, Key: key}, in, nil
}
