package api_test

import (
	"log/slog"
	"os"
	"testing"

	"github.com/orderly/orderly/store/pgtest"
)

// TestMain keeps the per-request INFO lines of the API out of the test
// output; warnings and errors (a refund, a provider outage, an internal
// error) still show. A run that skipped PostgreSQL tests ends with one line
// saying how many and how to enable them (pgtest.Run).
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(pgtest.Run(m))
}
