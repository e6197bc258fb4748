package intake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
)

// Op is an operation on an order that a transition request names.
type Op string

// The transitions a request may ask for.
const (
	OpPay     Op = "pay"
	OpFulfill Op = "fulfill"
	OpCancel  Op = "cancel"
)

// Valid reports whether op is one of the transitions.
func (op Op) Valid() bool { return op == OpPay || op == OpFulfill || op == OpCancel }

// Route is the route template op's requests are fingerprinted under
// ("/v1/orders/{id}/pay"): the HTTP route, so that an HTTP request and a
// command share keys.
func (op Op) Route() string { return "/v1/orders/{id}/" + string(op) }

// CreateRoute is the route template creates are fingerprinted under.
const CreateRoute = "/v1/orders"

// method is the method every side-effecting request is fingerprinted with.
const method = "POST"

// Decoder decodes, validates and fingerprints requests.
type Decoder struct {
	// Policy is what to do without an idempotency key (default
	// idempotency.PolicyDerive).
	Policy idempotency.Policy
	// Fingerprinter fingerprints requests; its VolatileFields are the
	// body members ignored (and accepted, at every depth).
	Fingerprinter idempotency.Fingerprinter
}

// policy returns d.Policy or its default.
func (d Decoder) policy() idempotency.Policy {
	if d.Policy == "" {
		return idempotency.PolicyDerive
	}
	return d.Policy
}

// JSON decodes body strictly into v: no unknown members, no duplicate
// members, no trailing data (EInvalid naming the member by its JSON
// Pointer, RFC 6901). The volatile members the fingerprint ignores are
// dropped at every depth before decoding. An empty body (whitespace only)
// is EInvalid when required, and decodes nothing otherwise. The caller
// checks the media type first (HTTP: Content-Type).
func (d Decoder) JSON(body []byte, v any, required bool) error {
	return decodeParsed(d.Fingerprinter.Parse(body), v, required)
}

// decodeParsed is JSON of a body parsed once (idempotency.Fingerprinter.Parse),
// whose fingerprint the caller takes from the same parse.
func decodeParsed(b idempotency.Body, v any, required bool) error {
	if Empty(b.Decode) {
		if required {
			return apperr.Errorf(apperr.EInvalid, "a JSON request body is required")
		}
		return nil
	}
	if err := json.Unmarshal(b.Decode, v, json.RejectUnknownMembers(true)); err != nil {
		return apperr.Errorf(apperr.EInvalid, "the request body is not acceptable JSON: %s", jsonReason(err, b.Decode))
	}
	return nil
}

// Empty reports whether body holds nothing but JSON whitespace.
func Empty(body []byte) bool { return len(bytes.TrimSpace(body)) == 0 }

// Key returns the request's idempotency key from the values of its key
// field (the HTTP Idempotency-Key header and its alias, or a command's
// Nats-Msg-Id): the one value parsed, or under PolicyDerive without one a
// key derived from the fingerprint of (route, params, body). Errors:
// EInvalid for a malformed key, several values, or a key in the server's
// reserved namespaces (derived:, anon:); EKeyRequired under PolicyRequire
// without one.
func (d Decoder) Key(values []string, route string, params map[string]string, body []byte) (idempotency.Key, error) {
	return d.key(values, route, params, func() idempotency.Body { return d.Fingerprinter.Parse(body) })
}

// key is Key with the body parsed by parsed, called only when a
// fingerprint is needed.
func (d Decoder) key(values []string, route string, params map[string]string, parsed func() idempotency.Body) (idempotency.Key, error) {
	const field = "Idempotency-Key"
	if len(values) > 1 {
		return idempotency.Key{}, &apperr.Error{Code: apperr.EInvalid, Message: "send exactly one Idempotency-Key",
			Fields: []apperr.FieldError{{Field: field, Reason: "must appear once"}}}
	}
	p := d.policy()
	if len(values) == 0 && p == idempotency.PolicyOff {
		return idempotency.Key{}, nil
	}
	if len(values) == 0 && p == idempotency.PolicyRequire {
		return idempotency.Key{}, apperr.Errorf(apperr.EKeyRequired,
			"this server requires an Idempotency-Key header on %s %s", method, route)
	}
	fp, err := parsed().Fingerprint(method, route, params)
	if err != nil {
		return idempotency.Key{}, err
	}
	if len(values) == 0 {
		return idempotency.Key{Value: idempotency.DerivedKey(fp), Derived: true, Fingerprint: fp}, nil
	}
	k, err := idempotency.ParseKey(values[0])
	if err != nil {
		return idempotency.Key{}, err
	}
	if strings.HasPrefix(k, "derived:") || strings.HasPrefix(k, "anon:") {
		// These namespaces are the server's own keys (derived from a
		// fingerprint, or private); a client key there could shadow them.
		return idempotency.Key{}, &apperr.Error{Code: apperr.EInvalid, Message: "Idempotency-Key must not start with derived: or anon:",
			Fields: []apperr.FieldError{{Field: field, Reason: "uses a namespace reserved by the server"}}}
	}
	return idempotency.Key{Value: k, Fingerprint: fp}, nil
}

// Create decodes and validates a create's body and returns its key and
// input. keys are the key field's values.
func (d Decoder) Create(keys []string, body []byte) (idempotency.Key, order.NewOrderInput, error) {
	// One parse for the decoder and the fingerprint.
	parsed := d.Fingerprinter.Parse(body)
	var cb createBody
	if err := decodeParsed(parsed, &cb, true); err != nil {
		return idempotency.Key{}, order.NewOrderInput{}, err
	}
	in, err := cb.input()
	if err != nil {
		return idempotency.Key{}, order.NewOrderInput{}, err
	}
	key, err := d.key(keys, CreateRoute, nil, func() idempotency.Body { return parsed })
	return key, in, err
}

// Transition is a decoded, validated pay, fulfil or cancel, ready to run.
type Transition struct {
	Op   Op
	Call service.Call
	// Pay is the payment of OpPay (amount in minor units of Currency).
	Pay service.PayInput
}

// Transition decodes and validates a request for op on tenant's order
// orderID: body (pay: {"amount","currency","payment_method"}, each
// required; fulfil and cancel: empty, null or {}, all one request), keys
// the key field's values, wait the Prefer: wait of the request (0: none).
// Errors: EInvalid naming each bad member, the errors of Key, and ENotFound
// for an operation that is not a transition.
func (d Decoder) Transition(tenant string, op Op, orderID string, keys []string, body []byte, wait time.Duration) (Transition, error) {
	t := Transition{Op: op, Call: service.Call{TenantID: tenant, OrderID: orderID, Wait: wait}}
	parsed := d.Fingerprinter.Parse(body) // one parse for the decoder and the fingerprint
	switch op {
	case OpPay:
		var pb payBody
		if err := decodeParsed(parsed, &pb, true); err != nil {
			return Transition{}, err
		}
		in, err := pb.input()
		if err != nil {
			return Transition{}, err
		}
		t.Pay = in
	case OpFulfill, OpCancel:
		if err := decodeParsed(parsed, &emptyBody{}, false); err != nil {
			return Transition{}, err
		}
		if Empty(body) || bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
			parsed = d.Fingerprinter.Parse([]byte("{}")) // no body, null and {} are the same request
		}
	default:
		return Transition{}, apperr.Errorf(apperr.ENotFound, "%q is not an operation on an order (pay, fulfill or cancel)", op)
	}
	key, err := d.key(keys, op.Route(), map[string]string{"id": orderID}, func() idempotency.Body { return parsed })
	if err != nil {
		return Transition{}, err
	}
	t.Call.Key = key
	return t, nil
}

// Run runs t on svc.
func (t Transition) Run(ctx context.Context, svc *service.Service) (service.Result, error) {
	switch t.Op {
	case OpPay:
		return svc.Pay(ctx, t.Call, t.Pay)
	case OpFulfill:
		return svc.Fulfill(ctx, t.Call)
	default:
		return svc.Cancel(ctx, t.Call)
	}
}

// payBody is the body of a pay request; pointers tell a missing member
// (400) from a wrong one (422 mismatch).
type payBody struct {
	Amount        *int64  `json:"amount"`
	Currency      *string `json:"currency"`
	PaymentMethod *string `json:"payment_method"`
}

// input returns the payment of b, or an EInvalid error naming every bad
// member.
func (b payBody) input() (service.PayInput, error) {
	var fe []apperr.FieldError
	switch {
	case b.Amount == nil:
		fe = append(fe, apperr.FieldError{Field: "amount", Reason: "is required and must not be null (minor currency units)"})
	case *b.Amount < 0 || *b.Amount > order.MaxAmount:
		// The documented bound (README "Limits"): a 400, never a stored 422.
		fe = append(fe, apperr.FieldError{Field: "amount", Reason: "must be from 0 to 2^53-1 (minor currency units)"})
	}
	if b.Currency == nil {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: "is required and must not be null"})
	} else if reason := order.CurrencyReason(*b.Currency); reason != "" {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: reason})
	}
	if b.PaymentMethod == nil {
		fe = append(fe, apperr.FieldError{Field: "payment_method", Reason: "is required and must not be null"})
	} else if reason := paymentMethodReason(*b.PaymentMethod); reason != "" {
		fe = append(fe, apperr.FieldError{Field: "payment_method", Reason: reason})
	}
	if len(fe) > 0 {
		return service.PayInput{}, &apperr.Error{Code: apperr.EInvalid, Message: "the payment has invalid fields", Fields: fe}
	}
	return service.PayInput{Amount: *b.Amount, Currency: *b.Currency, PaymentMethod: *b.PaymentMethod}, nil
}

// emptyBody is the body fulfil and cancel accept: nothing, or {}.
type emptyBody struct{}

// paymentMethodReason says what is wrong with a payment method id, or "".
func paymentMethodReason(pm string) string {
	return order.TextReason(pm, 255)
}

// jsonReason turns the error of decoding body into a client-facing reason,
// naming the member by its JSON Pointer (RFC 6901) and never a Go type. A
// member of the wrong type is shown with the value sent (at most
// maxShownValue bytes of it): `/amount: expected an integer, got the
// string "12.5"`.
func jsonReason(err error, body []byte) string {
	var se *json.SemanticError
	if errors.As(err, &se) {
		at := string(se.JSONPointer)
		switch {
		case errors.Is(se.Err, json.ErrUnknownName):
			return fmt.Sprintf("unknown member %s", at)
		case se.JSONKind != 0 && se.GoType != nil:
			want := map[reflect.Kind]string{reflect.Int64: "an integer", reflect.String: "a string",
				reflect.Slice: "an array", reflect.Struct: "an object", reflect.Pointer: "a value"}[se.GoType.Kind()]
			if want == "" {
				want = "a different type"
			}
			if at == "" {
				at = "the body"
			}
			got := kindName(se.JSONKind)
			if v, ok := valueAt(body, se.JSONPointer); ok && se.JSONKind != 'n' {
				got += " " + shown(v)
			}
			return fmt.Sprintf("%s: expected %s, got %s", at, want, got)
		}
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		msg := strings.TrimPrefix(syn.Error(), "jsontext: ")
		return msg
	}
	return "malformed JSON"
}

// maxShownValue bounds how much of a value a reason repeats, in bytes.
const maxShownValue = 64

// shown is v's JSON text as sent, cut to maxShownValue bytes (on a rune
// boundary) with "…" when longer.
func shown(v jsontext.Value) string {
	s := string(v)
	if len(s) <= maxShownValue {
		return s
	}
	cut := maxShownValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// valueAt returns the JSON value at ptr in the document body, exactly as
// written, and false when body has no value there.
func valueAt(body []byte, ptr jsontext.Pointer) (jsontext.Value, bool) {
	v := jsontext.Value(body)
	for tok := range ptr.Tokens() {
		switch v.Kind() {
		case '{':
			var members map[string]jsontext.Value
			if json.Unmarshal(v, &members) != nil {
				return nil, false
			}
			m, ok := members[tok]
			if !ok {
				return nil, false
			}
			v = m
		case '[':
			var elems []jsontext.Value
			i, err := strconv.Atoi(tok)
			if json.Unmarshal(v, &elems) != nil || err != nil || i < 0 || i >= len(elems) {
				return nil, false
			}
			v = elems[i]
		default:
			return nil, false
		}
	}
	v = bytes.TrimSpace(v)
	return v, len(v) > 0
}

// kindName names the kind of a JSON value for a reason: "the string".
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "the string"
	case '0':
		return "the number"
	case '{':
		return "the object"
	case '[':
		return "the array"
	case 't', 'f':
		return "the boolean"
	case 'n':
		return "null"
	}
	return "a value"
}
