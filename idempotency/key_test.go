package idempotency

import (
	"errors"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
)

// keyCases are the ParseKey table cases; the fuzz test seeds its corpus with
// their inputs.
var keyCases = []struct {
	name  string
	field string
	want  string // expected key; "" means ParseKey must fail
}{
	{"uuid bare", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
	{"uuid quoted", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
	{"quoted escaped quote", `"ab\"cd"`, `ab"cd`},
	{"quoted escaped backslash", `"ab\\cd"`, `ab\cd`},
	{"quoted comma is one key", `"a,b"`, "a,b"},
	{"bare 255", strings.Repeat("k", 255), strings.Repeat("k", 255)},
	{"quoted 255", `"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255)},
	{"bare 256", strings.Repeat("k", 256), ""},
	{"quoted 256", `"` + strings.Repeat("k", 256) + `"`, ""},
	{"empty", "", ""},
	{"whitespace only", " \t ", ""},
	{"empty quoted", `""`, ""},
	{"unterminated quote", `"abc`, ""},
	{"unterminated after escape", `"abc\`, ""},
	{"invalid escape", `"ab\ncd"`, ""},
	{"trailing junk after quote", `"abc"x`, ""},
	{"parameter after quote", `"abc";a=1`, ""},
	{"two quoted keys", `"a", "b"`, ""},
	{"control char bare", "ab\x01cd", ""},
	{"control char quoted", "\"ab\x01cd\"", ""},
	{"tab inside bare", "ab\tcd", ""},
	{"DEL bare", "ab\x7fcd", ""},
	{"non-ASCII bare", "clé", ""},
	{"non-ASCII quoted", `"clé"`, ""},
	{"comma list", "a, b", ""},
	{"comma list no space", "a,b", ""},
	{"semicolon parameter bare", "abc;a=1", ""},
	{"quote inside bare", `ab"cd`, ""},
	{"space inside bare", "ab cd", ""},
	{"space inside quoted", `"ab cd"`, ""},
	{"surrounding whitespace bare", " \tabc-123\t ", "abc-123"},
	{"surrounding whitespace quoted", "\t \"abc-123\" \t", "abc-123"},
}

func TestParseKey(t *testing.T) {
	for _, tc := range keyCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKey(tc.field)
			if tc.want != "" {
				if err != nil {
					t.Fatalf("ParseKey(%q) error = %v, want %q", tc.field, err, tc.want)
				}
				if got != tc.want {
					t.Fatalf("ParseKey(%q) = %q, want %q", tc.field, got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseKey(%q) = %q, want error", tc.field, got)
			}
			if got != "" {
				t.Errorf("ParseKey(%q) returned key %q with error", tc.field, got)
			}
			checkKeyError(t, err)
		})
	}
}

// checkKeyError checks that err is an EInvalid *apperr.Error naming the
// Idempotency-Key field.
func checkKeyError(t *testing.T, err error) {
	t.Helper()
	var e *apperr.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *apperr.Error", err, err)
	}
	if e.Code != apperr.EInvalid {
		t.Errorf("Code = %q, want %q", e.Code, apperr.EInvalid)
	}
	if !strings.HasPrefix(e.Message, "Idempotency-Key ") {
		t.Errorf("Message = %q, want it to start with %q", e.Message, "Idempotency-Key ")
	}
	if len(e.Fields) != 1 || e.Fields[0].Field != "Idempotency-Key" || e.Fields[0].Reason == "" {
		t.Errorf("Fields = %+v, want one FieldError for Idempotency-Key with a reason", e.Fields)
	}
}

func TestParseKeyMessage(t *testing.T) {
	_, err := ParseKey("")
	var e *apperr.Error
	if !errors.As(err, &e) {
		t.Fatalf("ParseKey(\"\") error = %v, want *apperr.Error", err)
	}
	const want = "Idempotency-Key must be 1 to 255 visible ASCII characters"
	if e.Message != want {
		t.Errorf("Message = %q, want %q", e.Message, want)
	}
}
