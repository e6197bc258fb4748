package flagenv_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/orderly/orderly/internal/flagenv"
)

// TestName: the rewrite adds each recorded flag's environment variable
// once, leaves other words, names already given and flag.ErrHelp alone,
// and keeps the error chain.
func TestName(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, name := range []string{"addr", "data-dir", "lease", "provider-timeout", "max-in-flight"} {
		fs.String(name, "", "")
	}
	n := flagenv.NewNamer("ORDERD")
	n.Record(fs)
	base := errors.New("boom")
	for _, tc := range []struct{ in, want string }{
		{"-addr: listen tcp: address already in use", "-addr (ORDERD_ADDR): listen tcp: address already in use"},
		{"-data-dir: sqlite: data directory is in use", "-data-dir (ORDERD_DATA_DIR): sqlite: data directory is in use"},
		{"-lease (ORDERD_LEASE, 1s) must exceed twice -provider-timeout", "-lease (ORDERD_LEASE, 1s) must exceed twice -provider-timeout (ORDERD_PROVIDER_TIMEOUT)"},
		{"min(-max-in-flight, 32)", "min(-max-in-flight (ORDERD_MAX_IN_FLIGHT), 32)"},
		{`invalid value "x" for flag -lease: parse error`, `invalid value "x" for flag -lease (ORDERD_LEASE): parse error`},
		{"a non-flag like -race or x-lease stays", "a non-flag like -race or x-lease stays"},
	} {
		got := n.Name(fmt.Errorf("%s: %w", tc.in, base))
		if want := tc.want + ": boom"; got.Error() != want {
			t.Errorf("Name(%q) = %q, want %q", tc.in, got, want)
		}
		if !errors.Is(got, base) {
			t.Errorf("Name(%q) lost the wrapped error", tc.in)
		}
	}
	if err := n.Name(flag.ErrHelp); err != flag.ErrHelp {
		t.Errorf("Name(flag.ErrHelp) = %v, want it unchanged", err)
	}
	if n.Name(nil) != nil {
		t.Error("Name(nil) is not nil")
	}
	if got := flagenv.NewNamer("ORDERD").Name(errors.New("-addr: x")); got.Error() != "-addr: x" {
		t.Errorf("a Namer that recorded no flags rewrote the error: %q", got)
	}
}
