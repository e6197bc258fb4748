package pgpair

import (
	"context"
	"os"
	"testing"
)

// StartForTest starts a pair for t and stops it when t ends. Where the
// PostgreSQL server programs are missing it skips t with a message saying
// what to install — or fails t when CI=true, so CI never passes by skipping.
func StartForTest(t testing.TB, opt Options) *Pair {
	t.Helper()
	if _, err := BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	p, err := Start(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
