package intake

import (
	"strconv"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
)

// createBody is the body of a create. Every member that defines money or
// goods is a pointer, so that a missing member and a JSON null (which the
// decoder leaves as the zero value) are told apart from a zero: neither is
// ever defaulted, both are a 400 naming the member.
type createBody struct {
	CustomerID *string     `json:"customer_id"`
	Currency   *string     `json:"currency"`
	Items      *[]itemBody `json:"items"`
}

// itemBody is one line of a createBody; UnitPrice is in minor units.
type itemBody struct {
	SKU       *string `json:"sku"`
	Quantity  *int64  `json:"quantity"`
	UnitPrice *int64  `json:"unit_price"`
}

// input returns the order input of b, or an EInvalid error naming every
// required member that is missing or null (items[i].unit_price, …).
// Further validation (ranges, currency, text) is order.New's.
func (b createBody) input() (order.NewOrderInput, error) {
	var fe []apperr.FieldError
	required := func(field, reason string) {
		fe = append(fe, apperr.FieldError{Field: field, Reason: "is required and must not be null" + reason})
	}
	in := order.NewOrderInput{}
	if b.CustomerID == nil {
		required("customer_id", "")
	} else {
		in.CustomerID = *b.CustomerID
	}
	if b.Currency == nil {
		required("currency", " (an ISO 4217 code)")
	} else {
		in.Currency = *b.Currency
	}
	if b.Items == nil {
		required("items", "")
	} else {
		in.Items = make([]order.Item, len(*b.Items))
		for i, it := range *b.Items {
			p := func(member string) string { return "items[" + strconv.Itoa(i) + "]" + member } // named only on an error
			if it.SKU == nil {
				required(p(".sku"), "")
			} else {
				in.Items[i].SKU = *it.SKU
			}
			if it.Quantity == nil {
				required(p(".quantity"), "")
			} else {
				in.Items[i].Quantity = *it.Quantity
			}
			if it.UnitPrice == nil {
				required(p(".unit_price"), " (minor currency units)")
			} else {
				in.Items[i].UnitPrice = *it.UnitPrice
			}
		}
	}
	if len(fe) > 0 {
		return order.NewOrderInput{}, &apperr.Error{Code: apperr.EInvalid, Message: "the order has missing fields", Fields: fe}
	}
	return in, nil
}
