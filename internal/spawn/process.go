package spawn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// DefaultReadyTimeout bounds the wait for the listening line when
// Config.ReadyTimeout is zero.
const DefaultReadyTimeout = 60 * time.Second

// killTimeout bounds the wait for a process to be gone after SIGKILL.
const killTimeout = 30 * time.Second

// Config describes a process to Start. Only Bin is required.
type Config struct {
	// Bin is the binary to run.
	Bin string
	// Args are its arguments.
	Args []string
	// Env is its whole environment; nil inherits this process's.
	Env []string
	// Name names the process in errors; empty means the binary's base name.
	Name string
	// LogPath, if set, is the file the process's stderr is appended to,
	// across restarts; Logs reads it back. Empty keeps the log in memory.
	LogPath string
	// AddrEnv is the variable that sets the process's listen address, such
	// as ORDERD_ADDR: Restart sets it to the address the process had, so it
	// comes back where its clients expect it.
	AddrEnv string
	// DieWithParent has the kernel SIGKILL the process when this one ends,
	// however it ends (Linux only).
	DieWithParent bool
	// ReadyTimeout bounds the wait for the listening line; zero means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Process is one binary that Start ran, and the runs Restart adds. Its
// methods are safe for concurrent use.
type Process struct {
	cfg Config

	mu   sync.Mutex
	addr string
	cur  *run         // the latest run
	logs bytes.Buffer // the log, without Config.LogPath
}

// run is one execution of the binary.
type run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // its exit error; set before done is closed
}

// Start runs the process cfg describes and waits, at most cfg.ReadyTimeout,
// until it logs that it listens. On error nothing is left running, and the
// error carries the log (or names the log file).
func Start(cfg Config) (*Process, error) {
	if cfg.Name == "" {
		cfg.Name = filepath.Base(cfg.Bin)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	p := &Process{cfg: cfg}
	return p, p.start(nil)
}

// start begins a run with extra added to the environment.
func (p *Process) start(extra []string) error {
	// The process outlives any caller's context; Stop and Kill end it.
	cmd := exec.Command(p.cfg.Bin, p.cfg.Args...) //nolint:noctx // see above
	cmd.Env = p.cfg.Env
	if len(extra) > 0 {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(slices.Clip(cmd.Env), extra...)
	}
	if p.cfg.DieWithParent {
		cmd.SysProcAttr = dieWithParent()
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	var logFile *os.File
	if p.cfg.LogPath != "" {
		if logFile, err = os.OpenFile(p.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return fmt.Errorf("%s: %w", p.cfg.Name, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	p.mu.Lock()
	p.cur = r
	p.mu.Unlock()
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.log(logFile, line)
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.Addr != "" {
				select {
				case addrc <- l.Addr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // after an overlong line: never block the child
		if logFile != nil {
			logFile.Close()
		}
		r.err = cmd.Wait()
		close(r.done)
	}()
	t := time.NewTimer(p.cfg.ReadyTimeout)
	defer t.Stop()
	select {
	case a := <-addrc:
		p.mu.Lock()
		p.addr = a
		p.mu.Unlock()
		return nil
	case <-r.done:
		return fmt.Errorf("%s exited before listening: %v%s", p.cfg.Name, r.err, p.logHint())
	case <-t.C:
		_ = cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("%s did not listen within %s%s", p.cfg.Name, p.cfg.ReadyTimeout, p.logHint())
	}
}

func (p *Process) log(f *os.File, line string) {
	if f != nil {
		fmt.Fprintln(f, line)
		return
	}
	p.mu.Lock()
	p.logs.WriteString(line + "\n")
	p.mu.Unlock()
}

// logHint is what an error adds so the reader can see why: the log, or the
// log file's name.
func (p *Process) logHint() string {
	if p.cfg.LogPath != "" {
		return " (log: " + p.cfg.LogPath + ")"
	}
	return "\n" + p.Logs()
}

func (p *Process) current() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// Name is the process's name in errors.
func (p *Process) Name() string { return p.cfg.Name }

// Addr is the host:port the process listens on.
func (p *Process) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Pid is the id of the process's latest run.
func (p *Process) Pid() int { return p.current().cmd.Process.Pid }

// Logs returns what the process has logged so far, over every run.
func (p *Process) Logs() string {
	if p.cfg.LogPath != "" {
		b, _ := os.ReadFile(p.cfg.LogPath)
		return string(b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Signal sends sig to the process (an error once it has exited).
func (p *Process) Signal(sig os.Signal) error { return p.current().cmd.Process.Signal(sig) }

// Exited reports whether the process's latest run has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.current().done:
		return true
	default:
		return false
	}
}

// Wait waits, at most limit, for the process to end and returns its exit
// error; exited is false if it still runs.
func (p *Process) Wait(limit time.Duration) (exited bool, err error) {
	r := p.current()
	select {
	case <-r.done: // an ended process is reported as such even with limit 0
		return true, r.err
	default:
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-r.done:
		return true, r.err
	case <-t.C:
		return false, nil
	}
}

// Stop sends SIGTERM and waits, at most limit, for the process to end; it
// returns the exit error (nil for a clean exit). A process still running
// after limit is killed, and Stop reports that it did not stop.
func (p *Process) Stop(limit time.Duration) error {
	_ = p.Signal(syscall.SIGTERM)
	exited, err := p.Wait(limit)
	if exited {
		return err
	}
	if kerr := p.Kill(); kerr != nil {
		return kerr
	}
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.cfg.Name, limit)
}

// Kill sends SIGKILL (nothing, if the process has ended) and waits for it to
// be gone; it fails if the process still runs 30s later.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGKILL)
	if exited, _ := p.Wait(killTimeout); !exited {
		return fmt.Errorf("%s (pid %d) still runs %s after SIGKILL", p.cfg.Name, p.Pid(), killTimeout)
	}
	return nil
}

// Restart runs the process again, after it has ended (Kill it first), on
// the address it had if Config.AddrEnv names the variable that sets it, and
// waits until it listens. The port may take a moment to be free: callers
// retry.
func (p *Process) Restart() error {
	if !p.Exited() {
		return errors.New(p.cfg.Name + " still runs")
	}
	var extra []string
	if a := p.Addr(); p.cfg.AddrEnv != "" && a != "" {
		extra = []string{p.cfg.AddrEnv + "=" + a}
	}
	return p.start(extra)
}
