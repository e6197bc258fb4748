package requestid_test

import (
	"context"
	"strings"
	"testing"

	"github.com/orderly/orderly/internal/requestid"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"":                                     false,
		"req-1":                                true,
		"0b8a7c3e-1f2d-4c5b-9a8e-7d6c5b4a3f2e": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": true,
		strings.Repeat("a", requestid.MaxLen):                     true,
		strings.Repeat("a", requestid.MaxLen+1):                   false,
		"has space":                                               false,
		"new\nline":                                               false,
		`quote"`:                                                  false,
		"ünïcode":                                                 false,
	} {
		if got := requestid.Valid(id); got != want {
			t.Errorf("Valid(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestNewIsValidAndFresh(t *testing.T) {
	t.Parallel()
	a, b := requestid.New(), requestid.New()
	if !requestid.Valid(a) || len(a) != 26 || a == b {
		t.Errorf("New() = %q, %q; want two different valid 26-character ids", a, b)
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	if id := requestid.FromContext(context.Background()); id != "" {
		t.Errorf("FromContext(empty) = %q", id)
	}
	if id := requestid.FromContext(requestid.NewContext(context.Background(), "r1")); id != "r1" {
		t.Errorf("FromContext = %q, want r1", id)
	}
}
