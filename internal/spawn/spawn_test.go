package spawn_test

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/spawn"
)

// The test binary is also the child the tests spawn: with SPAWN_CHILD set it
// acts as a small server instead of running the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("SPAWN_CHILD") {
	case "":
		os.Exit(m.Run())
	case "server":
		child()
	case "crash":
		fmt.Fprintln(os.Stderr, `{"msg":"cannot start","err":"no database"}`)
		os.Exit(3)
	case "mute":
		time.Sleep(time.Hour)
	}
}

// child listens on CHILD_ADDR (default a free loopback port), logs it, and
// exits 0 on SIGTERM.
func child() {
	addr := os.Getenv("CHILD_ADDR")
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, `{"msg":"listen failed","err":%q}`+"\n", err.Error())
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Fprintf(os.Stderr, `{"msg":"listening","addr":%q}`+"\n", ln.Addr().String())
	<-sig
	fmt.Fprintln(os.Stderr, `{"msg":"stopped"}`)
	os.Exit(0)
}

func config(t *testing.T, mode string) spawn.Config {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return spawn.Config{Bin: self, Name: "child", Env: append(os.Environ(), "SPAWN_CHILD="+mode), AddrEnv: "CHILD_ADDR",
		DieWithParent: true}
}

func start(t *testing.T, cfg spawn.Config) *spawn.Process {
	t.Helper()
	p, err := spawn.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

func listens(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("nothing listens on %s: %v", addr, err)
	}
	c.Close()
}

func TestStartReturnsOnceTheProcessListens(t *testing.T) {
	p := start(t, config(t, "server"))
	listens(t, p.Addr())
	if p.Exited() || p.Pid() <= 0 {
		t.Errorf("exited %v, pid %d: want a running process", p.Exited(), p.Pid())
	}
	if !strings.Contains(p.Logs(), `"msg":"listening"`) {
		t.Errorf("the log lacks the listening line:\n%s", p.Logs())
	}
}

func TestStopEndsTheProcessCleanly(t *testing.T) {
	p := start(t, config(t, "server"))
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !p.Exited() || !strings.Contains(p.Logs(), `"msg":"stopped"`) {
		t.Errorf("exited %v; log:\n%s", p.Exited(), p.Logs())
	}
}

// TestKillAndRestartOnTheSameAddress is the storm's chaos: SIGKILL, then
// the same process again where its clients expect it, its log appended.
func TestKillAndRestartOnTheSameAddress(t *testing.T) {
	cfg := config(t, "server")
	cfg.LogPath = filepath.Join(t.TempDir(), "child.log")
	p := start(t, cfg)
	addr, pid := p.Addr(), p.Pid()
	if err := p.Restart(); err == nil {
		t.Fatal("Restart of a running process succeeded")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	exited, err := p.Wait(0)
	if !exited || err == nil {
		t.Fatalf("after Kill: exited %v, err %v; want a process ended by a signal", exited, err)
	}
	if err := p.Kill(); err != nil {
		t.Errorf("Kill of an ended process: %v", err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr || p.Pid() == pid || p.Exited() {
		t.Errorf("restarted on %s as pid %d (exited %v); want %s and a new pid", p.Addr(), p.Pid(), p.Exited(), addr)
	}
	listens(t, p.Addr())
	if n := strings.Count(p.Logs(), `"msg":"listening"`); n != 2 {
		t.Errorf("the log file has %d listening lines, want 2 (one per run):\n%s", n, p.Logs())
	}
}

func TestStartFailsWhenTheProcessExitsFirst(t *testing.T) {
	_, err := spawn.Start(config(t, "crash"))
	if err == nil || !strings.Contains(err.Error(), "exited before listening") || !strings.Contains(err.Error(), "no database") {
		t.Errorf("Start: %v; want an error that carries the log", err)
	}
}

func TestStartFailsWhenTheProcessNeverListens(t *testing.T) {
	cfg := config(t, "mute")
	cfg.ReadyTimeout = 100 * time.Millisecond
	p, err := spawn.Start(cfg)
	if err == nil || !strings.Contains(err.Error(), "did not listen") {
		t.Fatalf("Start: %v; want a timeout", err)
	}
	if !p.Exited() {
		t.Error("the process that never listened was left running")
	}
}
