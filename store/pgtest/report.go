package pgtest

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// skips counts the PostgreSQL tests this test binary skipped, with the
// first reason given.
var skips struct {
	mu     sync.Mutex
	n      int
	reason string
}

// Skip skips t because PostgreSQL is not available for the reason msg, or
// fails it when Required, and counts the skip for Report. Every skip of a
// PostgreSQL test goes through it (ServerURL does), so that a run without a
// server says how many tests it did not run.
func Skip(t testing.TB, msg string) {
	t.Helper()
	skip(t, msg, msg)
}

// skip is Skip with a shorter reason for Report's line than the test's
// own message.
func skip(t testing.TB, msg, summary string) {
	t.Helper()
	if Required() {
		t.Fatal(msg)
	}
	skips.mu.Lock()
	skips.n++
	if skips.reason == "" {
		skips.reason = summary
	}
	skips.mu.Unlock()
	t.Skip(msg)
}

// Run runs m's tests, then reports the PostgreSQL tests they skipped
// (Report), and returns m's exit code. Every package whose tests may use
// PostgreSQL calls it from its TestMain (a test in this package checks):
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
func Run(m *testing.M) int {
	code := m.Run()
	Report(os.Stdout)
	return code
}

// Report says, in one line, how many PostgreSQL tests of this test binary
// were skipped, why, and how to run them; nothing when none was. go test
// shows the output of a package that passed only with -v (or when run in
// the package's directory without arguments), so without -v the line goes
// to the terminal (/dev/tty) when there is one, and to out (standard
// output: shown when the package fails) when there is none.
func Report(out io.Writer) {
	line := skipLine()
	if line == "" {
		return
	}
	if !testing.Verbose() {
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			_, err = io.WriteString(tty, line)
			_ = tty.Close()
			if err == nil {
				return
			}
		}
	}
	_, _ = io.WriteString(out, line)
}

// skipLine is Report's line, "" when no test was skipped.
func skipLine() string {
	skips.mu.Lock()
	defer skips.mu.Unlock()
	if skips.n == 0 {
		return ""
	}
	tests := "tests"
	if skips.n == 1 {
		tests = "test"
	}
	return fmt.Sprintf("pgtest: %d PostgreSQL %s skipped in %s (go test -v lists them): %s\n", skips.n, tests, packageDir(), skips.reason)
}

// packageDir names the package under test by its directory relative to the
// module root ("./api"): go test runs a test binary in its package's
// directory. It is the absolute directory when no go.mod is found above.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "this package"
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return wd
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// Parallel makes n the number of parallel tests (t.Parallel) this test
// binary runs at once, unless the command line chose one (-parallel, or
// -test.parallel); call it from TestMain before Run. go test's default is
// GOMAXPROCS (2 on a 2-core machine), which leaves a suite whose tests
// mostly wait on PostgreSQL (cloning, then dropping, a database each;
// round trips) idle between them; n at or below GOMAXPROCS changes
// nothing. Each parallel test holds its own connections, so n times a
// test's pool must stay well under the server's max_connections (100 by
// default), with room for the other packages go test runs at once.
func Parallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	cur := flag.Lookup("test.parallel")
	if set || cur == nil {
		return
	}
	var have int
	if _, err := fmt.Sscan(cur.Value.String(), &have); err == nil && have >= n {
		return
	}
	_ = flag.Set("test.parallel", fmt.Sprint(n))
}
