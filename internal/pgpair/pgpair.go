// Package pgpair starts a PostgreSQL primary and a streaming standby of it
// as processes of their own, for the tests and CI lanes of read replicas.
//
// The primary is made with initdb in a temporary directory and listens on
// a free loopback port; the standby is a pg_basebackup -R of it on another
// free port, started with recovery_min_apply_delay so that its lag is large
// and deterministic. Neither touches the machine's shared server. PostgreSQL
// refuses to run as root, so when this process is root the server programs
// run as the OS user postgres (runuser). Close stops both and removes the
// directory.
package pgpair

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvBinDir names the environment variable that points at PostgreSQL's
// server programs (initdb, pg_ctl, pg_basebackup) when they are not in
// DefaultBinDir or on PATH.
const EnvBinDir = "ORDERLY_PG_BINDIR"

// DefaultBinDir is where Debian's postgresql-15 package puts the server
// programs.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// Options configures Start.
type Options struct {
	// ApplyDelay is the standby's recovery_min_apply_delay: how long after
	// a commit on the primary the standby makes it visible. Zero applies at
	// once.
	ApplyDelay time.Duration
	// MaxConnections is each server's max_connections (default 200).
	MaxConnections int
}

// Pair is a running primary and standby. URLs name the database postgres as
// the superuser postgres, with trust authentication on loopback only.
type Pair struct {
	dir         string
	bin         string
	primaryPort int
	standbyPort int
	started     []string // data directories of the servers running
}

// BinDir returns the directory of the PostgreSQL server programs, or an
// error saying what is missing.
func BinDir() (string, error) {
	for _, dir := range []string{os.Getenv(EnvBinDir), DefaultBinDir} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("PostgreSQL server programs (initdb, pg_ctl, pg_basebackup) not found in $%s, %s or PATH; "+
		"install postgresql-15 (Debian: apt-get install postgresql-15)", EnvBinDir, DefaultBinDir)
}

// Start makes and starts a primary and its standby. The standby has
// replayed the primary's state as of Start when Start returns.
func Start(ctx context.Context, opt Options) (p *Pair, err error) {
	if opt.MaxConnections == 0 {
		opt.MaxConnections = 200
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "orderly-pgpair-")
	if err != nil {
		return nil, err
	}
	p = &Pair{dir: dir, bin: bin}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	if err := p.giveToPostgres(dir); err != nil {
		return nil, err
	}
	if p.primaryPort, err = freePort(); err != nil {
		return nil, err
	}
	if p.standbyPort, err = freePort(); err != nil {
		return nil, err
	}
	primary, standby := filepath.Join(dir, "primary"), filepath.Join(dir, "standby")
	if err := p.run(ctx, "initdb", "-D", primary, "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	// fsync off: these servers are thrown away with the test, and on a
	// shared machine fsync would only measure the disk.
	if err := p.appendConf(primary, map[string]string{
		"port": strconv.Itoa(p.primaryPort), "listen_addresses": "'127.0.0.1'",
		"unix_socket_directories": "'" + dir + "'", "max_connections": strconv.Itoa(opt.MaxConnections),
		"wal_level": "replica", "max_wal_senders": "4", "fsync": "off", "full_page_writes": "off",
		"shared_buffers": "32MB",
	}); err != nil {
		return nil, err
	}
	if err := p.startServer(ctx, primary, p.primaryPort); err != nil {
		return nil, err
	}
	if err := p.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primaryPort), "-U", "postgres",
		"-D", standby, "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return nil, err
	}
	if err := p.appendConf(standby, map[string]string{
		"port": strconv.Itoa(p.standbyPort), "recovery_min_apply_delay": "'" + strconv.FormatInt(opt.ApplyDelay.Milliseconds(), 10) + "ms'",
		"hot_standby": "on", "hot_standby_feedback": "on", "wal_receiver_status_interval": "1s",
	}); err != nil {
		return nil, err
	}
	if err := p.startServer(ctx, standby, p.standbyPort); err != nil {
		return nil, err
	}
	return p, nil
}

// PrimaryURL returns the URL of database db on the primary.
func (p *Pair) PrimaryURL(db string) string { return url(p.primaryPort, db) }

// StandbyURL returns the URL of database db on the standby.
func (p *Pair) StandbyURL(db string) string { return url(p.standbyPort, db) }

func url(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, db)
}

// CreateDatabase creates db on the primary and waits, at most a minute,
// until the standby has replayed it and accepts connections to it.
func (p *Pair) CreateDatabase(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, p.PrimaryURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := pgx.Connect(ctx, p.StandbyURL(db))
		if err == nil {
			return c.Close(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby did not replay CREATE DATABASE %s: %w", db, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close stops both servers (immediate shutdown) and removes their
// directory. It is safe to call more than once.
func (p *Pair) Close() {
	for i := len(p.started) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = p.run(ctx, "pg_ctl", "-D", p.started[i], "-m", "immediate", "-w", "stop")
		cancel()
	}
	p.started = nil
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
		p.dir = ""
	}
}

// startServer starts the server in dataDir and waits until it accepts
// connections.
func (p *Pair) startServer(ctx context.Context, dataDir string, port int) error {
	if err := p.run(ctx, "pg_ctl", "-D", dataDir, "-l", filepath.Join(p.dir, filepath.Base(dataDir)+".log"),
		"-w", "-t", "120", "start"); err != nil {
		return err
	}
	p.started = append(p.started, dataDir)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := pgx.Connect(ctx, url(port, "postgres"))
		if err == nil {
			return c.Close(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not accept connections: %w", dataDir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log returns the server log of "primary" or "standby", for a failing
// test's message.
func (p *Pair) Log(which string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, which+".log"))
	return string(b)
}

// appendConf appends settings to dataDir's postgresql.conf.
func (p *Pair) appendConf(dataDir string, settings map[string]string) error {
	var b strings.Builder
	b.WriteString("\n# orderly pgpair\n")
	for k, v := range settings {
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	f, err := os.OpenFile(filepath.Join(dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run runs one of the server programs, as the user postgres when this
// process is root.
func (p *Pair) run(ctx context.Context, prog string, args ...string) error {
	path := filepath.Join(p.bin, prog)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", prog, strings.Join(args, " "), err, out)
	}
	return nil
}

// giveToPostgres hands dir to the OS user postgres when this process is
// root (the servers run as postgres and must own their directories).
func (p *Pair) giveToPostgres(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return errors.New("running as root, PostgreSQL needs the OS user postgres to run as: " + err.Error())
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
