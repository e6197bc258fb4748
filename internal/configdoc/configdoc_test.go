package configdoc_test

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/configdoc"
)

func usage(t *testing.T) string {
	t.Helper()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("addr", "127.0.0.1:80", "listen address")
	fs.Duration("ttl", 24*time.Hour, "retention")
	fs.Bool("group-commit", true, "coalesce")
	fs.String("url", "", "a URL")
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}

func TestParseUsage(t *testing.T) {
	got := configdoc.ParseUsage(usage(t))
	want := []configdoc.Flag{{"addr", "127.0.0.1:80"}, {"group-commit", "true"}, {"ttl", "24h0m0s"}, {"url", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("ParseUsage = %v, want %v", got, want)
	}
}

func TestCheck(t *testing.T) {
	good := "| variable | default | meaning |\n|---|---|---|\n" +
		"| `X_ADDR` | `127.0.0.1:80` | listen |\n| `X_TTL` | `24h` | keep |\n" +
		"| `X_GROUP_COMMIT` | `true` | on |\n| `X_URL` | (empty: none) | a URL |\n"
	if p := configdoc.Check(configdoc.ParseUsage(usage(t)), good, "X"); p != nil {
		t.Errorf("Check of a complete table = %q, want nothing", p)
	}
	// Rows of a table with another header are no configuration rows.
	other := good + "\nprose\n\n| setting | entry point |\n|---|---|\n| `X_URL` | the API |\n| `X_GONE` | none |\n"
	if p := configdoc.Check(configdoc.ParseUsage(usage(t)), other, "X"); p != nil {
		t.Errorf("Check counts the rows of another table: %q", p)
	}
	for name, tc := range map[string]struct{ readme, want string }{
		"a missing row":      {strings.Replace(good, "| `X_GROUP_COMMIT` | `true` | on |\n", "", 1), "-group-commit (X_GROUP_COMMIT) has no row"},
		"a stale row":        {good + "| `X_GONE` | `1` | old |\n", "X_GONE has a row in the README but is no flag"},
		"a wrong default":    {strings.Replace(good, "`24h`", "`12h`", 1), `X_TTL: the README says the default is "` + "`12h`" + `"`},
		"a default in words": {strings.Replace(good, "`127.0.0.1:80`", "loopback", 1), "X_ADDR: the README says"},
		"a duplicate row":    {good + "| `X_URL` | (empty) | again |\n", "X_URL has two rows"},
	} {
		t.Run(name, func(t *testing.T) {
			p := configdoc.Check(configdoc.ParseUsage(usage(t)), tc.readme, "X")
			if len(p) != 1 || !strings.Contains(p[0], tc.want) {
				t.Errorf("Check = %q, want one problem containing %q", p, tc.want)
			}
		})
	}
}
