package event

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// EndpointIDPrefix starts every webhook endpoint id.
const EndpointIDPrefix = "we_"

// ValidEndpointID reports whether id has the shape of an endpoint id:
// EndpointIDPrefix and 32 lower-case hex digits. An id of any other shape
// (NUL, invalid UTF-8, another prefix) names no endpoint and never reaches
// a store.
func ValidEndpointID(id string) bool {
	hex, ok := strings.CutPrefix(id, EndpointIDPrefix)
	if !ok || len(hex) != 32 {
		return false
	}
	for _, c := range hex {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SecretPrefix starts every webhook endpoint secret.
const SecretPrefix = "whsec_"

// Endpoint is a tenant's webhook target: the URL that receives a POST of
// every event whose type is in Types.
type Endpoint struct {
	ID       string `json:"id"`
	TenantID string `json:"-"`
	URL      string `json:"url"`
	Types    []Type `json:"events"`
	Secret   string `json:"secret,omitempty"`
	Enabled  bool   `json:"enabled"`
	// DisabledReason says why delivery stopped (such as a 410 Gone).
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// DeliveryStatus is where one delivery of an event to an endpoint stands.
type DeliveryStatus string

// Delivery statuses.
const (
	// DeliveryPending: waiting for its next attempt (NextAttemptAt), or for
	// an earlier event of the same order to be delivered first.
	DeliveryPending DeliveryStatus = "pending"
	// DeliveryDelivering: an instance holds it under a lease and is sending
	// it; past the lease another instance takes it over.
	DeliveryDelivering DeliveryStatus = "delivering"
	// DeliverySucceeded: the endpoint answered 2xx.
	DeliverySucceeded DeliveryStatus = "succeeded"
	// DeliveryFailed: given up (the retry window ended, or the endpoint
	// answered 410 Gone and was disabled).
	DeliveryFailed DeliveryStatus = "failed"
)

// Delivery is one event to one endpoint. Attempts counts the attempts
// started; it is also the fencing token of the current holder's lease.
type Delivery struct {
	EndpointID    string         `json:"endpoint_id"`
	EventID       string         `json:"event_id"`
	TenantID      string         `json:"-"`
	OrderID       string         `json:"order_id"`
	Sequence      int64          `json:"sequence"`
	Type          Type           `json:"type"`
	Status        DeliveryStatus `json:"status"`
	Attempts      int            `json:"attempts"`
	LastStatus    int            `json:"last_status_code,omitempty"`
	LastError     string         `json:"last_error,omitempty"`
	NextAttemptAt *time.Time     `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time      `json:"created_at"`
	UpdatedAt     time.Time      `json:"updated_at"`
	// Body is the event's JSON (not listed; sent).
	Body []byte `json:"-"`
	// URL and Secret are the endpoint's, for the sender; PreviousSecret
	// is its secret before a rotation, while the rotation's grace period
	// lasts (empty otherwise): the sender signs with both.
	URL            string `json:"-"`
	Secret         string `json:"-"`
	PreviousSecret string `json:"-"`
}

// SignatureHeader is the header that carries a delivery's signature.
const SignatureHeader = "Orderly-Signature"

// EventIDHeader is the header that carries a delivery's event id.
const EventIDHeader = "Orderly-Event-Id"

// Sign returns the Orderly-Signature value of body sent at t with secret:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>" (the Stripe
// scheme).
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// SignAll is Sign with one v1 value per secret, in order:
// "t=<unix seconds>,v1=<hex>,v1=<hex>" (empty secrets are skipped). A
// receiver checking any one of them accepts it (Verify), so an endpoint's
// secret can be rotated with a grace period in which both sign.
func SignAll(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	out := "t=" + ts
	for _, s := range secrets {
		if s != "" {
			out += ",v1=" + hex.EncodeToString(mac(s, ts, body))
		}
	}
	return out
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Signature verification errors.
var (
	// ErrSignatureMalformed: the header is missing or not t=…,v1=….
	ErrSignatureMalformed = errors.New("event: malformed Orderly-Signature header")
	// ErrSignatureMismatch: no v1 signature matches the body and secret.
	ErrSignatureMismatch = errors.New("event: signature does not match")
	// ErrSignatureStale: the timestamp is further than the tolerance from
	// now (a replayed or badly delayed request).
	ErrSignatureStale = errors.New("event: signature timestamp outside the tolerance")
)

// Verify checks header, an Orderly-Signature value, against body and secret
// at now: some v1 signature must equal the HMAC (compared in constant time)
// and the timestamp must be within tolerance of now (zero tolerance skips
// the age check). Errors: ErrSignatureMalformed, ErrSignatureMismatch,
// ErrSignatureStale.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrSignatureMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return ErrSignatureMalformed
			}
			sigs = append(sigs, b)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrSignatureMalformed
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return ErrSignatureMismatch
	}
	if tolerance > 0 {
		if age := now.Sub(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
			return ErrSignatureStale
		}
	}
	return nil
}
