package flagenv_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/peterbourgon/ff/v3"

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

// TestNameUnparsableValue: a typed flag's value that does not parse, from
// the environment (ff's error carries no value) or an argument (the flag
// package's says only "parse error"), is named with its variable, the value
// and what the flag takes.
func TestNameUnparsableValue(t *testing.T) {
	newFlags := func() (*flag.FlagSet, *flagenv.Namer) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Duration("lease", time.Second, "")
		fs.Int("max-in-flight", 1, "")
		fs.Bool("group-commit", true, "")
		fs.Uint64("seed", 0, "")
		fs.Float64("rate", 0, "")
		fs.String("addr", "", "")
		n := flagenv.NewNamer("ORDERD")
		n.Record(fs)
		return fs, n
	}
	for _, tc := range []struct{ env, value, want string }{
		{"ORDERD_LEASE", "30", `-lease (ORDERD_LEASE): "30" is not a duration: a number with a unit, such as 30s, 1m30s or 24h`},
		{"ORDERD_MAX_IN_FLIGHT", "lots", `-max-in-flight (ORDERD_MAX_IN_FLIGHT): "lots" is not an integer`},
		{"ORDERD_MAX_IN_FLIGHT", "99999999999999999999", `-max-in-flight (ORDERD_MAX_IN_FLIGHT): "99999999999999999999" is out of range for an integer`},
		{"ORDERD_GROUP_COMMIT", "maybe", `-group-commit (ORDERD_GROUP_COMMIT): "maybe" is not true or false`},
		{"ORDERD_SEED", "-1", `-seed (ORDERD_SEED): "-1" is not a non-negative integer`},
		{"ORDERD_RATE", "fast", `-rate (ORDERD_RATE): "fast" is not a number`},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			fs, n := newFlags()
			err := n.Name(ff.Parse(fs, nil, ff.WithEnvVarPrefix("ORDERD")))
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %s", err, tc.want)
			}
		})
	}
	t.Run("argument", func(t *testing.T) {
		fs, n := newFlags()
		err := n.Name(ff.Parse(fs, []string{"-lease", `1"h`}, ff.WithEnvVarPrefix("ORDERD")))
		want := `-lease (ORDERD_LEASE): "1\"h" is not a duration: a number with a unit, such as 30s, 1m30s or 24h`
		if err == nil || err.Error() != want {
			t.Errorf("err = %v, want %s", err, want)
		}
	})
}
