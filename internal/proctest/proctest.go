// Package proctest builds Orderly's commands and runs them as processes for
// tests. It is used only by tests.
//
// A process started with Start must log a JSON line
// {"msg":"listening","addr":"host:port"} on stderr once it listens.
package proctest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
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
		dir, err := os.MkdirTemp("", path.Base(pkg)+"-bin")
		if err != nil {
			b.err = err
			return
		}
		b.dir = dir
		bin := filepath.Join(dir, path.Base(pkg))
		args := []string{"build", "-o", bin}
		if Race {
			args = append(args, "-race")
		}
		args = append(args, pkg)
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		b.bin = bin
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

// Process is one running binary.
type Process struct {
	name string
	cmd  *exec.Cmd
	addr string

	mu   sync.Mutex
	logs bytes.Buffer

	done chan struct{} // closed once the process has exited
	err  error         // its exit error; set before done is closed
}

// Start runs bin with args and env (the whole environment; nil inherits
// this process's) and waits, at most 60s, until it logs that it listens.
// Its stderr is kept as its log. The process is killed when t ends if it
// still runs.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{name: filepath.Base(bin), cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.Addr != "" {
				select {
				case addrc <- l.Addr:
				default:
				}
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.Kill(t) })
	select {
	case p.addr = <-addrc:
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", p.name, p.err, p.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not listen within 60s\n%s", p.name, p.Logs())
	}
	return p
}

// Addr is the host:port the process listens on.
func (p *Process) Addr() string { return p.addr }

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Logs returns what the process has logged so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits, at most limit, for the process to end and returns its exit
// error; exited is false if it still runs.
func (p *Process) Wait(limit time.Duration) (exited bool, err error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(limit):
		return false, nil
	}
}

// Stop sends SIGTERM and fails t unless the process exits cleanly within
// limit.
func (p *Process) Stop(t testing.TB, limit time.Duration) {
	t.Helper()
	_ = p.Signal(syscall.SIGTERM)
	exited, err := p.Wait(limit)
	if !exited {
		t.Fatalf("%s did not stop within %s of SIGTERM\n%s", p.name, limit, p.Logs())
	}
	if err != nil {
		t.Fatalf("%s exited with %v after SIGTERM\n%s", p.name, err, p.Logs())
	}
}

// Kill sends SIGKILL (a no-op if the process has ended) and waits, at most
// 30s, for it to be gone.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGKILL)
	if exited, _ := p.Wait(30 * time.Second); !exited {
		t.Errorf("%s (pid %d) still runs 30s after SIGKILL", p.name, p.Pid())
	}
}
