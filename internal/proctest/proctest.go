// Package proctest adapts package spawn to tests: it builds Orderly's
// commands once per test binary (with -race when the tests have it), starts
// them as processes that are killed when the test ends, and fails the test
// instead of returning errors. It is used only by tests.
//
// A process started with Start must log a JSON line
// {"msg":"listening","addr":"host:port"} on stderr once it listens.
package proctest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/spawn"
)

// build is the result of building one package.
type build struct {
	once sync.Once
	bin  string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// Build builds the main package pkg (an import path) once per process, with
// -race when Race is set, and returns the binary's path.
//
// The binary is kept in a cache directory shared by every test process of
// this module (see CacheDir), not in one of its own: `go test ./...` runs
// several packages that start orderd, and go build relinks a binary only
// when it is out of date with its sources (it compares the build ID it
// would write with the file's), so the first package links it and the
// others find it up to date. Builds of one binary are serialized by a lock
// file, so packages starting at once link it once.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		var dir string
		if dir, b.err = CacheDir(); b.err != nil {
			return
		}
		var unlock func()
		if unlock, b.err = lockFile(filepath.Join(dir, path.Base(pkg)+".lock")); b.err != nil {
			return
		}
		defer unlock()
		b.bin, b.err = spawn.Build(context.Background(), pkg, dir, Race)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// CacheDir returns (making it) the directory Build keeps binaries in: one
// per module checkout and race setting, under the system's temporary
// directory, so that two work trees of the module never share binaries.
func CacheDir() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	kind := "norace"
	if Race {
		kind = "race"
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("orderly-proctest-%d", os.Getuid()), hex.EncodeToString(sum[:8])+"-"+kind)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("proctest: %w", err)
	}
	return dir, nil
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("proctest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Process is one running binary: a spawn.Process whose Stop and Kill fail
// the test.
type Process struct {
	*spawn.Process
}

// Start runs bin with args and env (the whole environment; nil inherits
// this process's) and waits, at most 60s, until it logs that it listens.
// Its stderr is kept as its log. The process is killed when t ends if it
// still runs. Unless env sets ORDERD_ADMIN_ADDR, orderd's admin listener
// takes a free port: tests run several orderd at once and never bind a
// fixed port.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	if env == nil {
		env = os.Environ()
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "ORDERD_ADMIN_ADDR=") }) {
		env = append(slices.Clip(env), "ORDERD_ADMIN_ADDR=127.0.0.1:0")
	}
	p, err := spawn.Start(spawn.Config{Bin: bin, Args: args, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	pp := &Process{Process: p}
	t.Cleanup(func() { pp.Kill(t) })
	return pp
}

// Stop sends SIGTERM and fails t unless the process exits cleanly within
// limit.
func (p *Process) Stop(t testing.TB, limit time.Duration) {
	t.Helper()
	if err := p.Process.Stop(limit); err != nil {
		t.Fatalf("%s: %v\n%s", p.Name(), err, p.Logs())
	}
}

// Kill sends SIGKILL (a no-op if the process has ended) and waits, at most
// 30s, for it to be gone.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.Process.Kill(); err != nil {
		t.Error(err)
	}
}
