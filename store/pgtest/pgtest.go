// Package pgtest gives tests a fresh PostgreSQL database of their own.
//
// The server comes from, in order:
//  1. ORDERLY_TEST_DATABASE_URL, a postgres:// URL of a server the tests may
//     create and drop databases on (CI sets it to this machine's server);
//  2. a container started with testcontainers-go when Docker is available;
//  3. neither: the test is skipped with a message saying how to enable it —
//     unless CI=true or ORDERLY_REQUIRE_POSTGRES=1, where it fails instead, so
//     a CI run can never pass by skipping PostgreSQL.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/orderly/orderly/internal/testclock"
)

// EnvURL names the environment variable with the test server's URL.
const EnvURL = "ORDERLY_TEST_DATABASE_URL"

// EnvRequire names the environment variable that turns a skip into a failure.
const EnvRequire = "ORDERLY_REQUIRE_POSTGRES"

// ContainerImage is the image started when Docker is the source.
const ContainerImage = "postgres:16-alpine"

var (
	containerOnce sync.Once
	containerURL  string
	containerErr  error
)

// Required reports whether PostgreSQL tests must run (CI=true or
// ORDERLY_REQUIRE_POSTGRES=1) rather than skip.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv(EnvRequire) == "1"
}

// ServerURL returns the URL of a server tests may create databases on, or
// skips (fails when Required) t.
func ServerURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	containerOnce.Do(startContainer)
	if containerErr == nil {
		return containerURL
	}
	msg := fmt.Sprintf("PostgreSQL tests need a server: set %s=postgres://user@127.0.0.1:5432/postgres?sslmode=disable "+
		"(a role that may CREATE DATABASE), or run Docker for testcontainers-go (%v)", EnvURL, containerErr)
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func startContainer() {
	defer func() {
		if r := recover(); r != nil {
			containerErr = fmt.Errorf("docker is not available: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		containerErr = fmt.Errorf("docker is not available: %w", err)
		return
	}
	if err := p.Health(ctx); err != nil {
		containerErr = fmt.Errorf("docker is not available: %w", err)
		return
	}
	// The Ryuk reaper removes the container when the test process exits.
	c, err := tcpostgres.Run(ctx, ContainerImage,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		containerErr = fmt.Errorf("start %s: %w", ContainerImage, err)
		return
	}
	containerURL, containerErr = c.ConnectionString(ctx, "sslmode=disable")
}

// NewDatabase creates an empty database of its own for t on the test server,
// drops it (forcing out connections) when t ends, and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL, got %q", EnvURL, server)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "orderly_test_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		if Required() {
			t.Fatalf("connect to test PostgreSQL %s: %v", u.Redacted(), err)
		}
		t.Skipf("connect to test PostgreSQL %s: %v", u.Redacted(), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// FollowClock makes the database at dbURL (migrated already: call it after
// the store's Open; again after a reopen is harmless) read clk as its clock: orderly_now(), which every
// lease, schedule and retention decision uses, returns clk's reading
// instead of the transaction's start time, from now until t ends. Only a
// test's own database is changed.
func FollowClock(t testing.TB, dbURL string, clk *testclock.Clock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest.FollowClock: %v", err)
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") { // pgxpool's, which one connection refuses
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("pgtest.FollowClock: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `
CREATE TABLE IF NOT EXISTS orderly_test_clock (now timestamptz NOT NULL);
INSERT INTO orderly_test_clock SELECT 'epoch' WHERE NOT EXISTS (SELECT 1 FROM orderly_test_clock);
CREATE OR REPLACE FUNCTION orderly_now() RETURNS timestamptz LANGUAGE sql STABLE
    AS 'SELECT now FROM orderly_test_clock'`)
	if err != nil {
		t.Fatalf("pgtest.FollowClock: %v", err)
	}
	var mu sync.Mutex
	clk.Follow(func(now time.Time) {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `UPDATE orderly_test_clock SET now = $1`, now); err != nil {
			t.Errorf("pgtest: set the database clock to %s: %v", now, err)
		}
	})
}
