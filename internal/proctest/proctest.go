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
	"os"
	"path"
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
	dir  string
	bin  string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// Build builds the main package pkg (an import path) once per process, with
// -race when Race is set, and returns the binary's path.
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
		if b.dir, b.err = os.MkdirTemp("", path.Base(pkg)+"-bin"); b.err == nil {
			b.bin, b.err = spawn.Build(context.Background(), pkg, b.dir, Race)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// RemoveBuilt removes the binaries Build made. Call it from TestMain after
// the tests have run.
func RemoveBuilt() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for _, b := range builds {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
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
