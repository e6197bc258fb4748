package pgtest_test

import (
	"bytes"
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// helperEnv marks the child process of TestSkippedTestsAreCounted.
const helperEnv = "PGTEST_REPORT_HELPER"

// TestReportHelper is the child of TestSkippedTestsAreCounted: three
// PostgreSQL tests that skip and one that runs.
func TestReportHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("the child process of TestSkippedTestsAreCounted")
	}
	for _, name := range []string{"a", "b", "c"} {
		t.Run(name, func(t *testing.T) { pgtest.Skip(t, "no server in this test") })
	}
	t.Run("runs", func(t *testing.T) {})
}

// TestSkippedTestsAreCounted runs TestReportHelper in a process of its own
// without a terminal, as go test runs a package: it must pass and end with
// the line that counts its skipped PostgreSQL tests and says why; with
// ORDERLY_REQUIRE_POSTGRES=1 the same tests fail instead.
func TestSkippedTestsAreCounted(t *testing.T) {
	if os.Getenv(helperEnv) == "1" {
		t.Skip("in the child")
	}
	run := func(require bool) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReportHelper$", "-test.count=1") //nolint:gosec // this very test binary
		var env []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			if k != "CI" && k != pgtest.EnvRequire && k != pgtest.EnvURL {
				env = append(env, kv)
			}
		}
		env = append(env, helperEnv+"=1")
		if require {
			env = append(env, pgtest.EnvRequire+"=1")
		}
		cmd.Env = env
		// A session of its own has no controlling terminal, so the report
		// goes to standard output, as it does for go test without a terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(false)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "pgtest: 3 PostgreSQL tests skipped in ./store/pgtest (go test -v lists them): no server in this test\n"
	if !strings.Contains(out, want) {
		t.Errorf("child output %q does not contain %q", out, want)
	}
	out, err = run(true)
	if err == nil || strings.Contains(out, "pgtest: ") || strings.Count(out, "--- FAIL: TestReportHelper/") != 3 {
		t.Errorf("with %s=1 the child = %v, want three failures and no skip line:\n%s", pgtest.EnvRequire, err, out)
	}
}

// helpers are the packages through which a test reaches PostgreSQL.
var helpers = []string{
	"github.com/orderly/orderly/store/pgtest",
	"github.com/orderly/orderly/internal/testenv",
	"github.com/orderly/orderly/store/storetest",
	"github.com/orderly/orderly/internal/pgpair",
}

// TestEveryPostgreSQLPackageReportsSkips: every package with a test that
// imports one of the helpers runs its tests through pgtest.Run, so a run
// without PostgreSQL says in every such package how many tests it skipped.
func TestEveryPostgreSQLPackageReportsSkips(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	uses, reports := map[string]bool{}, map[string]bool{}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); slices.Contains(helpers, p) {
				uses[dir] = true
			}
		}
		if bytes.Contains(src, []byte("pgtest.Run(m)")) {
			reports[dir] = true
		}
	}
	if len(uses) < 10 {
		t.Fatalf("found %d packages using PostgreSQL helpers; the scan of %s is broken", len(uses), root)
	}
	for dir := range uses {
		if !reports[dir] {
			t.Errorf("./%s uses PostgreSQL in its tests but does not report skips: add\n\tfunc TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }", dir)
		}
	}
}
