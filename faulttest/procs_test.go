package faulttest

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/proctest"
)

// proc is one running orderd or paysim.
type proc struct {
	*proctest.Process
	name string
	addr string // host:port it listens on
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
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/"+binary)
	pp := proctest.Start(t, bin, append(baseEnv(), env...))
	p := &proc{Process: pp, name: name, addr: pp.Addr()}
	t.Cleanup(func() {
		p.Kill(t)
		if t.Failed() {
			t.Logf("--- last lines of %s's log:\n%s", p.name, p.tail(40))
		}
	})
	return p
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// tail returns the last n lines of the process's log, without the access
// log lines of GET requests (the tests' polling).
func (p *proc) tail(n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(p.Logs(), "\n"), "\n") {
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
	return strings.Contains(p.Logs(), s)
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
		"ORDERD_ADMIN_ADDR=127.0.0.1:0",
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
