package idempotency

import (
	"strings"
	"testing"
)

// FuzzParseKey checks ParseKey's invariants on arbitrary header values: it
// never panics, a key it returns is 1 to MaxKeyLength visible ASCII bytes, a
// key parsed from a bare value parses to itself, and the key quoted as an
// sf-string (RFC 9651 §4.1.6) parses back to itself.
func FuzzParseKey(f *testing.F) {
	for _, tc := range keyCases {
		f.Add(tc.field)
	}
	f.Fuzz(func(t *testing.T, field string) {
		key, err := ParseKey(field)
		if err != nil {
			if key != "" {
				t.Fatalf("ParseKey(%q) returned key %q with error %v", field, key, err)
			}
			checkKeyError(t, err)
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d out of 1..%d", field, key, len(key), MaxKeyLength)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x at %d is not visible ASCII", field, key, key[i], i)
			}
		}
		if trimmed := strings.Trim(field, " \t"); !strings.HasPrefix(trimmed, `"`) {
			again, err := ParseKey(key)
			if err != nil || again != key {
				t.Fatalf("bare key %q did not round-trip: got %q, %v", key, again, err)
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := ParseKey(quoted)
		if err != nil || again != key {
			t.Fatalf("quoted key %s did not round-trip to %q: got %q, %v", quoted, key, again, err)
		}
	})
}
