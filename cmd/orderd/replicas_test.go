package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/proctest"
	"github.com/orderly/orderly/store/pgtest"
)

// TestParseConfigReplicas: replica URLs are a comma-separated list of
// postgres:// URLs beside a PostgreSQL primary; anything else is refused
// with a message naming the setting.
func TestParseConfigReplicas(t *testing.T) {
	t.Setenv("ORDERD_DATABASE_URL", "postgres://p@127.0.0.1:5432/o")
	t.Setenv("ORDERD_DATABASE_REPLICA_URLS", " postgres://r1@127.0.0.1:5433/o , postgresql://r2@127.0.0.1:5434/o,")
	c, err := ParseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ReplicaURLs) != 2 || c.ReplicaMaxLag != 5*time.Second || c.ReplicaCheckInterval != 200*time.Millisecond {
		t.Errorf("replicas = %q, max lag %s, interval %s", c.ReplicaURLs, c.ReplicaMaxLag, c.ReplicaCheckInterval)
	}
	for _, tc := range []struct{ name, env, value, want string }{
		{"a replica that is not a postgres:// URL", "ORDERD_DATABASE_REPLICA_URLS", "mysql://x", "ORDERD_DATABASE_REPLICA_URLS"},
		{"replicas of the embedded store", "ORDERD_DATABASE_URL", "", "embedded store has no read replicas"},
		{"no lag bound", "ORDERD_DATABASE_REPLICA_MAX_LAG", "0s", "ORDERD_DATABASE_REPLICA_MAX_LAG"},
		{"a check interval not below the bound", "ORDERD_DATABASE_REPLICA_CHECK_INTERVAL", "5s", "ORDERD_DATABASE_REPLICA_CHECK_INTERVAL"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			if _, err := ParseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s=%q: err = %v, want one saying %q", tc.env, tc.value, err, tc.want)
			}
		})
	}
}

// TestRefusesReplicasOfTheEmbeddedStore: orderd on the embedded store with
// replica URLs set exits 2 at start, saying why, instead of ignoring them.
func TestRefusesReplicasOfTheEmbeddedStore(t *testing.T) {
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/orderd")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ORDERD_ADDR=127.0.0.1:0", "ORDERD_DATABASE_URL=", "ORDERD_DATA_DIR="+t.TempDir(),
		"ORDERD_DATABASE_REPLICA_URLS=postgres://postgres@127.0.0.1:5432/x")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("orderd: %v, want exit status 2\n%s", err, out)
	}
	if want := "ORDERD_DATABASE_REPLICA_URLS) is set, but the embedded store has no read replicas"; !strings.Contains(string(out), want) {
		t.Errorf("output = %q, want %q", out, want)
	}
}

// TestRefusesAReplicaThatIsNotAStandby: a replica URL naming the primary
// itself (not in recovery: its reads would be bounded by nothing) stops
// orderd at start with a message naming the setting.
func TestRefusesAReplicaThatIsNotAStandby(t *testing.T) {
	url := pgtest.NewDatabase(t)
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/orderd")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ORDERD_ADDR=127.0.0.1:0", "ORDERD_DATABASE_URL="+url, "ORDERD_DATABASE_REPLICA_URLS="+url)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("orderd: %v, want exit status 1\n%s", err, out)
	}
	if want := "it is not a standby (pg_is_in_recovery() is false)"; !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "ORDERD_DATABASE_REPLICA_URLS") {
		t.Errorf("output = %q, want %q naming ORDERD_DATABASE_REPLICA_URLS", out, want)
	}
}
