package intake_test

import (
	"os"
	"testing"

	"github.com/orderly/orderly/store/pgtest"
)

// TestMain ends a run that skipped PostgreSQL tests with one line saying
// how many and how to enable them (pgtest.Run).
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
