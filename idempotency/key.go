package idempotency

import (
	"strings"

	"github.com/orderly/orderly/apperr"
)

// MaxKeyLength is the largest number of characters ParseKey accepts in an
// idempotency key. The draft (draft-ietf-httpapi-idempotency-key-header) sets
// no limit; 255 leaves room for a UUID (RFC 9562, 36 characters), which the
// draft recommends, and for any reasonable client-generated key, while
// bounding what the store has to index.
const MaxKeyLength = 255

// keyField is the field name reported in the FieldError of a rejected key.
const keyField = "Idempotency-Key"

// Reasons reported for a rejected Idempotency-Key.
const (
	reasonKeyChars      = "must be 1 to 255 visible ASCII characters"
	reasonKeySingle     = "must be a single key, without lists or parameters"
	reasonKeyUnquote    = "has an unterminated quoted string"
	reasonKeyTrailing   = "has characters after the closing quote"
	reasonKeyEscape     = `has an invalid escape; only \" and \\ are allowed in a quoted string`
	reasonKeyQuotedChar = "has a character outside printable ASCII in its quoted string"
)

// ParseKey parses the value of an Idempotency-Key header field and returns the
// idempotency key it carries.
//
// The draft (draft-ietf-httpapi-idempotency-key-header §2.1) defines the field
// as an Item Structured Field whose value is a String: an sf-string of RFC
// 8941 §3.3.3, now RFC 9651 §3.3.3, such as "8e03978e-40d5-43e8-bc93-6894a57f9324"
// with its double quotes. ParseKey accepts that form and, for leniency with
// clients that omit the quotes, a bare value too. The rules are:
//
//   - Optional whitespace (SP or HTAB) around the value is removed, as HTTP
//     does for every field value (RFC 9110 §5.5).
//   - A value starting with a double quote is parsed as an sf-string (RFC 9651
//     §4.2.5): its characters must be printable ASCII (0x20 to 0x7E), the only
//     escapes are \" and \\, and nothing may follow the closing quote, so a
//     parameter such as ;a=1 is rejected.
//   - Any other value is a bare key. It must not contain a double quote, a
//     comma or a semicolon, so a list of keys or a key with parameters is
//     rejected rather than taken as one key.
//   - The resulting key, after unquoting, must be 1 to MaxKeyLength
//     characters, each visible ASCII (0x21 to 0x7E). A space is rejected even
//     inside a quoted key, which RFC 9651 would allow: keys stay visible ASCII
//     so that they log, compare and store without ambiguity.
//
// On failure ParseKey returns an *apperr.Error with Code apperr.EInvalid and one
// FieldError for the field "Idempotency-Key" saying what is wrong.
func ParseKey(field string) (string, error) {
	v := strings.Trim(field, " \t")
	if v == "" {
		return "", invalidKey(reasonKeyChars)
	}
	if v[0] == '"' {
		return parseQuotedKey(v)
	}
	if strings.ContainsAny(v, `",;`) {
		return "", invalidKey(reasonKeySingle)
	}
	if !validKey(v) {
		return "", invalidKey(reasonKeyChars)
	}
	return v, nil
}

// parseQuotedKey parses v, which starts with a double quote, as an sf-string
// following RFC 9651 §4.2.5, and then checks the unquoted key.
func parseQuotedKey(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", invalidKey(reasonKeyUnquote)
			}
			if v[i] != '"' && v[i] != '\\' {
				return "", invalidKey(reasonKeyEscape)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", invalidKey(reasonKeyTrailing)
			}
			key := b.String()
			if !validKey(key) {
				return "", invalidKey(reasonKeyChars)
			}
			return key, nil
		case c < 0x20 || c > 0x7e:
			return "", invalidKey(reasonKeyQuotedChar)
		default:
			if b.Len() >= MaxKeyLength {
				return "", invalidKey(reasonKeyChars)
			}
			b.WriteByte(c)
		}
	}
	return "", invalidKey(reasonKeyUnquote)
}

// validKey reports whether key is 1 to MaxKeyLength visible ASCII characters
// (0x21 to 0x7E).
func validKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// invalidKey returns the EInvalid error for a rejected Idempotency-Key.
func invalidKey(reason string) *apperr.Error {
	return &apperr.Error{
		Code:    apperr.EInvalid,
		Message: keyField + " " + reason,
		Fields:  []apperr.FieldError{{Field: keyField, Reason: reason}},
	}
}
