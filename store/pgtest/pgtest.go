// Package pgtest gives tests a fresh PostgreSQL database of their own.
//
// The server comes from, in order:
//  1. ORDERLY_TEST_DATABASE_URL, a postgres:// URL of a server the tests may
//     create and drop databases on (CI sets it to this machine's server);
//  2. a container started with testcontainers-go (by the small program
//     store/pgtest/pgcontainer, so that the Docker client is not linked into
//     every test binary) when a Docker engine seems to be there;
//  3. neither: the test is skipped with a message saying how to enable it —
//     unless CI=true or ORDERLY_REQUIRE_POSTGRES=1, where it fails instead, so
//     a CI run can never pass by skipping PostgreSQL.
//
// A package whose tests use PostgreSQL runs them through Run from its
// TestMain, which ends a run that skipped some with one line saying how
// many and how to enable them, on the terminal where go test would hide it
// (Report).
//
// NewDatabase hands each test a database migrated to the newest schema
// without running the migrations: it clones (CREATE DATABASE … TEMPLATE) a
// template database migrated once per set of migration files and named
// after their hash, so a new or edited migration makes a new template, and
// the template of an older set is dropped when a newer one is built.
// NewEmptyDatabase is for tests of the migrations themselves.
package pgtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/migrations"
)

// EnvURL names the environment variable with the test server's URL.
const EnvURL = "ORDERLY_TEST_DATABASE_URL"

// EnvRequire names the environment variable that turns a skip into a failure.
const EnvRequire = "ORDERLY_REQUIRE_POSTGRES"

// ContainerImage is the image started when Docker is the source (see
// store/pgtest/pgcontainer).
const ContainerImage = "postgres:16-alpine"

// TemplatePrefix begins the name of every template database this package
// makes: TemplatePrefix + the first 16 hex digits of migrations.Hash.
const TemplatePrefix = "orderly_tmpl_"

// buildPrefix begins the name of a template while it is being migrated; it
// is renamed to its TemplatePrefix name when complete, so a template under
// its final name is always fully migrated.
const buildPrefix = "orderly_tmplbuild_"

// templateLock is the advisory lock key (in the server URL's database)
// under which templates are built and stale ones dropped, so that test
// processes starting at once build one template, not one each.
const templateLock = 0x6f72646c_746d706c // "ordltmpl"

var (
	containerOnce sync.Once
	containerURL  string
	containerErr  error
	// containerStdin keeps the pipe to pgcontainer open for the life of
	// this process (pgcontainer stops the container when it closes); it is
	// never read, only held so that it is not collected and closed.
	containerStdin io.WriteCloser //nolint:unused // held open, see above

	templateMu    sync.Mutex
	templateReady = map[string]string{} // server URL → template database name
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
	skip(t, fmt.Sprintf("PostgreSQL tests need a server: set %s=postgres://user@127.0.0.1:5432/postgres?sslmode=disable "+
		"(a role that may CREATE DATABASE), or run Docker for testcontainers-go (%v)", EnvURL, containerErr),
		"no server; set "+EnvURL+" to a postgres:// URL of a role that may CREATE DATABASE, or run Docker")
	return ""
}

// dockerSeemsAvailable reports whether a Docker (or compatible) engine's
// endpoint is configured or its socket exists where testcontainers-go
// looks, without compiling testcontainers to find out.
func dockerSeemsAvailable() bool {
	if os.Getenv("DOCKER_HOST") != "" || os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") != "" {
		return true
	}
	home, _ := os.UserHomeDir()
	candidates := []string{"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock"}
	if home != "" {
		candidates = append(candidates, filepath.Join(home, ".testcontainers.properties"),
			filepath.Join(home, ".docker", "run", "docker.sock"), filepath.Join(home, ".docker", "desktop", "docker.sock"),
			filepath.Join(home, ".colima", "default", "docker.sock"))
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "docker.sock"), filepath.Join(d, "podman", "podman.sock"))
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return true
		}
	}
	return false
}

// startContainer runs store/pgtest/pgcontainer and reads the URL it prints.
func startContainer() {
	if !dockerSeemsAvailable() {
		containerErr = errors.New("docker is not available (no DOCKER_HOST and no Docker socket)")
		return
	}
	cmd := exec.CommandContext(context.Background(), "go", "run", "-tags", "pgcontainer", "github.com/orderly/orderly/store/pgtest/pgcontainer")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err == nil {
		var stdout io.ReadCloser
		if stdout, err = cmd.StdoutPipe(); err == nil {
			if err = cmd.Start(); err == nil {
				line, rerr := bufio.NewReader(stdout).ReadString('\n')
				line = strings.TrimSpace(line)
				switch {
				case strings.HasPrefix(line, "URL="):
					containerStdin, containerURL = stdin, strings.TrimPrefix(line, "URL=")
					return
				case strings.HasPrefix(line, "ERR="):
					err = errors.New(strings.TrimPrefix(line, "ERR="))
				default:
					err = fmt.Errorf("pgcontainer said %q (%v)", line, rerr)
				}
				_ = stdin.Close()
				_ = cmd.Wait()
			}
		}
	}
	containerErr = fmt.Errorf("start %s with testcontainers-go: %w", ContainerImage, err)
}

// NewDatabase creates a database of its own for t on the test server,
// migrated to the newest schema (a clone of the template database: see the
// package documentation), drops it (forcing out connections) when t ends,
// and returns its URL. Opening a store on it applies no migration but
// still checks, under the migration lock, that none is missing.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// NewEmptyDatabase is NewDatabase without the schema: an empty database,
// for tests of the migrations themselves.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

func newDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	server := ServerURL(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL, got %q", EnvURL, server)
	}
	name := "orderly_test_" + randomHex()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		skip(t, fmt.Sprintf("connect to test PostgreSQL %s: %v", u.Redacted(), err), "cannot connect to "+u.Redacted()+" ("+EnvURL+")")
	}
	defer admin.Close(ctx)
	if migrated {
		err = cloneTemplate(ctx, admin, server, name)
	} else {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	}
	if err != nil {
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

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cloneTemplate creates database name as a copy of the template for
// today's migrations, building the template first if it is missing. A
// template dropped meanwhile (by a test run of other migrations) is built
// again; a template another session is connected to (CREATE DATABASE
// refuses to copy it then) is retried.
func cloneTemplate(ctx context.Context, admin *pgx.Conn, server, name string) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		var tmpl string
		if tmpl, err = ensureTemplate(ctx, admin, server); err != nil {
			return err
		}
		if _, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl); err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			return err
		}
		switch pgErr.Code {
		case "3D000": // invalid_catalog_name: the template is gone
			templateMu.Lock()
			delete(templateReady, server)
			templateMu.Unlock()
		case "55006": // object_in_use: someone is connected to the template
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(50*(attempt+1)) * time.Millisecond):
			}
		default:
			return err
		}
	}
	return err
}

// ensureTemplate returns the name of the template database of today's
// migrations on server, building it if it is not there: under an advisory
// lock, so concurrent test processes build it once, as a database of
// another name that is migrated, then renamed (so the template's name
// never denotes a half-migrated database). Templates of other migrations
// and builds left by killed processes are dropped meanwhile.
func ensureTemplate(ctx context.Context, admin *pgx.Conn, server string) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if name, ok := templateReady[server]; ok {
		return name, nil
	}
	hash, err := migrations.Hash(migrations.Postgres)
	if err != nil {
		return "", err
	}
	name := TemplatePrefix + hash[:16]
	exists := func() (bool, error) {
		var ok bool
		err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok)
		return ok, err
	}
	ok, err := exists()
	if err != nil {
		return "", err
	}
	if !ok {
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLock)); err != nil {
			return "", fmt.Errorf("pgtest: take the template lock: %w", err)
		}
		err = func() error {
			if ok, err = exists(); err != nil || ok {
				return err
			}
			return buildTemplate(ctx, admin, server, name)
		}()
		if _, uerr := admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(templateLock)); err == nil && uerr != nil {
			err = uerr
		}
		if err != nil {
			return "", err
		}
	}
	templateReady[server] = name
	return name, nil
}

// buildTemplate makes template name; the caller holds the template lock.
func buildTemplate(ctx context.Context, admin *pgx.Conn, server, name string) error {
	// Leftovers: builds of killed processes, templates of other migrations
	// (a database someone is still connected to, or cloning, is left).
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE (starts_with(datname, $1) OR starts_with(datname, $2)) AND datname <> $3`,
		buildPrefix, TemplatePrefix, name)
	if err != nil {
		return err
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, db := range stale {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	}

	build := buildPrefix + randomHex()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+build); err != nil {
		return fmt.Errorf("pgtest: create template: %w", err)
	}
	err = func() error {
		u, err := url.Parse(server)
		if err != nil {
			return err
		}
		u.Path = "/" + build
		cfg, err := pgx.ParseConfig(u.String())
		if err != nil {
			return err
		}
		db := stdlib.OpenDB(*cfg)
		err = migrations.Apply(ctx, db, migrations.Postgres)
		// No session may stay on the template: CREATE DATABASE … TEMPLATE
		// and the rename below refuse a database that has one.
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		return err
	}()
	// A closed session's server process may linger a moment: retry.
	for attempt := 1; err == nil; attempt++ {
		_, err = admin.Exec(ctx, "ALTER DATABASE "+build+" RENAME TO "+name)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt == 50 {
			break
		}
		err = nil
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+build+" WITH (FORCE)")
		return fmt.Errorf("pgtest: build template %s: %w", name, err)
	}
	return nil
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

// AwaitFeed waits until every transaction that began on the server of url
// before the call has ended, so that a read of the event feed (store/postgres
// ListEvents shows only events below the oldest running transaction's id,
// cluster-wide, so other tests' transactions hold it back) holds every event
// committed before the call. It polls every 10ms, bounded: t fails after
// 12 000 polls.
func AwaitFeed(t testing.TB, url string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: AwaitFeed: %v", err)
	}
	defer c.Close(ctx)
	var now string
	if err := c.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&now); err != nil {
		t.Fatalf("pgtest: AwaitFeed: %v", err)
	}
	for range 12000 {
		var past bool
		if err := c.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, now).Scan(&past); err != nil {
			t.Fatalf("pgtest: AwaitFeed: %v", err)
		}
		if past {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pgtest: AwaitFeed: transactions begun before txid %s still running after 12 000 polls", now)
}
