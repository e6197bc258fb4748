package api_test

import (
	"log/slog"
	"os"
	"testing"
)

// TestMain keeps the per-request INFO lines of the API out of the test
// output; warnings and errors (a refund, a provider outage, an internal
// error) still show.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}
