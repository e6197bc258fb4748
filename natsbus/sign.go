package natsbus

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// SignatureHeader carries a command's signature:
//
//	Orderly-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>
//
// The HMAC's key is one of the tenant's API keys (ORDERD_API_KEYS), and its
// message is, each part followed by a newline except the last:
//
//	orderly-command-v1
//	<subject>            orderly.<tenant>.commands.<op>: tenant and operation
//	<Nats-Msg-Id>        the idempotency key
//	<Orderly-Order-Id>   the order
//	<t>                  the timestamp, as in the header
//	<body>               the raw body
//
// So a signature binds the tenant, the operation, the order, the key and
// the body together: none can be changed, and the message cannot be moved
// to another tenant's subject. Several v1 values may be sent (one per key,
// while a key rotates); one that verifies is enough.
const SignatureHeader = "Orderly-Signature"

// DefaultSignatureTolerance is how far a signature's timestamp may be from
// the time the stream stored the message, either way (clock skew between
// publisher and NATS server included). A captured command re-published
// later than that is refused; within it, it carries the original's
// Nats-Msg-Id, so the stream's duplicate window or the idempotency ledger
// replays it and nothing happens twice.
const DefaultSignatureTolerance = 5 * time.Minute

// signatureVersion starts every signed message, so that a change of the
// scheme never verifies an old signature.
const signatureVersion = "orderly-command-v1"

// ErrSignature is wrapped by the errors of a command's signature check.
var ErrSignature = errors.New("natsbus: command signature does not verify")

// Sign sets m's SignatureHeader: a signature with apiKey, timestamped t,
// over m's subject, Nats-Msg-Id, Orderly-Order-Id and body. Set those
// first; a publisher calls Sign last, then publishes m.
func Sign(m *nats.Msg, apiKey string, t time.Time) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	m.Header.Set(SignatureHeader, "t="+ts+",v1="+hex.EncodeToString(
		commandMAC([]byte(apiKey), m.Subject, m.Header.Get(nats.MsgIdHdr), m.Header.Get(OrderIDHeader), ts, m.Data)))
}

// commandMAC is the HMAC-SHA256 with key of the signed message.
func commandMAC(key []byte, subject, msgID, orderID, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range []string{signatureVersion, subject, msgID, orderID, ts} {
		m.Write([]byte(p))
		m.Write([]byte{'\n'})
	}
	m.Write(body)
	return m.Sum(nil)
}

// maxSignatureHeader bounds the signature header parsed.
const maxSignatureHeader = 1024

// verify checks a command's signature header against keys (the tenant's API
// keys): its shape, its timestamp within tolerance of stored (when the
// stream stored the message), and one v1 value made with one of keys.
// Errors wrap ErrSignature and say which check failed, never a key.
func verify(header string, keys [][]byte, subject, msgID, orderID string, body []byte, stored time.Time, tolerance time.Duration) error {
	if header == "" {
		return fmt.Errorf("%w: the %s header is required", ErrSignature, SignatureHeader)
	}
	if len(header) > maxSignatureHeader {
		return fmt.Errorf("%w: the %s header is longer than %d bytes", ErrSignature, SignatureHeader, maxSignatureHeader)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
		case k == "t":
			ts = v
		case k == "v1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want %s: t=<unix seconds>,v1=<hex>", ErrSignature, SignatureHeader)
	}
	if d := stored.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %d is more than %s from when the stream stored the command", ErrSignature, sec, tolerance)
	}
	for _, k := range keys {
		want := commandMAC(k, subject, msgID, orderID, ts, body)
		for _, s := range sigs {
			if hmac.Equal(s, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature matches a key of the tenant", ErrSignature)
}
