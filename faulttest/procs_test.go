package faulttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds orderd and paysim once per test binary (with -race when
// the tests have it) and returns the directory holding both.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "orderly-faulttest-bin")
		if err != nil {
			buildErr = err
			return
		}
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/orderly/orderly/cmd/orderd", "github.com/orderly/orderly/cmd/paysim")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		binDir = dir
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// TestMain removes the built binaries after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is one running orderd or paysim.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port it listens on

	mu   sync.Mutex
	logs bytes.Buffer

	done   chan struct{} // closed once the process has exited
	exitMu sync.Mutex
	exit   error
}

// baseEnv is the test's environment without ORDERD_* and PAYSIM_*
// variables, so a developer's settings cannot leak into the processes.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ORDERD_") || strings.HasPrefix(kv, "PAYSIM_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startProc runs binary (orderd or paysim) with env and waits, at most 60s,
// until it logs {"msg":"listening","addr":…}. The process is killed when t
// ends if it still runs; its log is printed if t failed.
func startProc(t *testing.T, name, binary string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), binary))
	cmd.Env = append(baseEnv(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
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
		err := cmd.Wait()
		p.exitMu.Lock()
		p.exit = err
		p.exitMu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("--- last lines of %s's log:\n%s", p.name, p.tail(40))
		}
	})
	select {
	case p.addr = <-addrc:
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.exitErr(), p.tail(40))
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not listen within 60s\n%s", name, p.tail(40))
	}
	return p
}

func (p *proc) exitErr() error {
	p.exitMu.Lock()
	defer p.exitMu.Unlock()
	return p.exit
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// kill sends SIGKILL (a no-op if the process has ended) and waits, at most
// 30s, for it to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s (pid %d) still runs 30s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// tail returns the last n lines of the process's log, without the access
// log lines of GET requests (the tests' polling).
func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(p.logs.String(), "\n"), "\n") {
		if !strings.Contains(l, `"msg":"request","method":"GET"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logContains reports whether the process logged s.
func (p *proc) logContains(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Contains(p.logs.String(), s)
}

// startPaysim runs paysim with its ledger in a temporary directory.
func startPaysim(t *testing.T) *proc {
	t.Helper()
	return startProc(t, "paysim", "paysim", "PAYSIM_ADDR=127.0.0.1:0", "PAYSIM_DATA_DIR="+t.TempDir(), "PAYSIM_LOG_LEVEL=info")
}

// orderdTimings are the durations an orderd runs with.
type orderdTimings struct {
	providerTimeout time.Duration
	lease           time.Duration
	completer       time.Duration
}

// fastTimings are the defaults of these tests: a provider that does not
// answer within 1s has an unknown outcome, a lease lapses after 3s, and the
// completer looks for abandoned keys five times a second.
var fastTimings = orderdTimings{providerTimeout: time.Second, lease: 3 * time.Second, completer: 200 * time.Millisecond}

// startOrderd runs orderd on the PostgreSQL database dbURL with paysim as
// its payment provider and warehouse.
func startOrderd(t *testing.T, name, dbURL string, paysimAddr string, tm orderdTimings) *proc {
	t.Helper()
	return startProc(t, name, "orderd",
		"ORDERD_ADDR=127.0.0.1:0",
		"ORDERD_DATABASE_URL="+dbURL,
		"ORDERD_API_KEYS="+tenant+":"+apiKey,
		"ORDERD_PAYMENT_URL=http://"+paysimAddr,
		"ORDERD_WAREHOUSE_URL=http://"+paysimAddr,
		"ORDERD_PROVIDER_TIMEOUT="+tm.providerTimeout.String(),
		"ORDERD_LEASE="+tm.lease.String(),
		"ORDERD_COMPLETER_INTERVAL="+tm.completer.String(),
		"ORDERD_SWEEP_INTERVAL=1m",
		"ORDERD_LOG_LEVEL=info",
	)
}
