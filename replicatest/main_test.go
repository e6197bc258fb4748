package replicatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderly/orderly/internal/pgpair"
	"github.com/orderly/orderly/store/pgtest"
)

// applyDelay is the standby's recovery_min_apply_delay: every commit
// becomes visible there 2 s after the primary's.
const applyDelay = 2 * time.Second

var (
	pairOnce sync.Once
	pair     *pgpair.Pair
	pairErr  error
)

// TestMain stops the shared pair after the tests; a run that skipped them
// ends with one line saying how many and why (pgtest.Run).
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if pair != nil {
		pair.Close()
	}
	os.Exit(code)
}

// sharedPair returns the package's primary and lagging standby, started on
// first use. It skips t where PostgreSQL's server programs are missing,
// and fails it there in CI (CI=true or ORDERLY_REQUIRE_POSTGRES=1).
func sharedPair(t *testing.T) *pgpair.Pair {
	t.Helper()
	if _, err := pgpair.BinDir(); err != nil {
		pgtest.Skip(t, err.Error()) // fails instead in CI (pgtest.Required)
	}
	pairOnce.Do(func() { pair, pairErr = pgpair.Start(context.Background(), pgpair.Options{ApplyDelay: applyDelay}) })
	if pairErr != nil {
		t.Fatal(pairErr)
	}
	return pair
}

// newDatabase creates a database of t's own on the pair, present on the
// standby when it returns, and drops it when t ends.
func newDatabase(t *testing.T, p *pgpair.Pair) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := "replicatest_" + hex.EncodeToString(b)
	if err := p.CreateDatabase(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, p.PrimaryURL("postgres"))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
	})
	return db
}

// poolConfig parses url with a pool of at most n connections.
func poolConfig(t *testing.T, url string, n int32) *pgxpool.Config {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = n
	return pc
}

// standbyExec runs sql on the standby's database db.
func standbyExec(t *testing.T, p *pgpair.Pair, db, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.StandbyURL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("standby: %s: %v", sql, err)
	}
}

// eventually polls cond every 50ms until it holds or a minute passes
// (generous: the machine is shared), and fails t with what then.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
