package postgres_test

import (
	"os"
	"testing"

	"github.com/orderly/orderly/store/pgtest"
)

// parallel is how many tests run at once here (unless -parallel says):
// the conformance suite's ~100 parallel subtests each clone a database,
// open a pool of poolSize connections on it and drop it, and spend most
// of their time waiting on the server, so more than go test's default
// (GOMAXPROCS) overlap those waits; 6 × (poolSize + 2) connections stays
// well under max_connections beside another package's tests.
const parallel = 6

// TestMain runs the tests parallel at once (pgtest.Parallel) and ends a
// run that skipped PostgreSQL tests with one line saying how many and how
// to enable them (pgtest.Run).
func TestMain(m *testing.M) {
	pgtest.Parallel(parallel)
	os.Exit(pgtest.Run(m))
}
