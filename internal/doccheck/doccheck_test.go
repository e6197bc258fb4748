package doccheck_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orderly/orderly/internal/doccheck"
)

const root = "../.."

// markdown returns the repository's Markdown files that are documentation:
// the README, BENCHMARKS.md and docs/.
func markdown(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "BENCHMARKS.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	return files
}

// TestLinksResolve: every relative link of the documentation names a file
// that exists and, with an anchor, a heading there.
func TestLinksResolve(t *testing.T) {
	for _, f := range markdown(t) {
		problems, err := doccheck.Links(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEContentsListsEverySection: the table of contents at the top of
// the README links every section (##) and subsection (###), so a newcomer
// finds each from the top.
func TestREADMEContentsListsEverySection(t *testing.T) {
	readme := read(t, "README.md")
	_, contents, ok := strings.Cut(readme, "\n## Contents\n")
	if !ok {
		t.Fatal("README.md has no ## Contents")
	}
	contents, _, _ = strings.Cut(contents, "\n## ")
	for _, line := range strings.Split(readme, "\n") {
		h, ok := strings.CutPrefix(line, "## ")
		if !ok {
			h, ok = strings.CutPrefix(line, "### ")
		}
		if !ok || h == "Contents" {
			continue
		}
		if !strings.Contains(contents, "(#"+doccheck.Slug(h)+")") {
			t.Errorf("README.md's Contents does not link the section %q (#%s)", h, doccheck.Slug(h))
		}
	}
	if !slices.Contains(doccheck.Headings(readme), "Security") {
		t.Error("README.md has no Security section")
	}
}

// TestREADMECommands: the README's two commands are there word for word,
// each alone on a line of a shell block, and CI runs the test command.
func TestREADMECommands(t *testing.T) {
	readme := read(t, "README.md")
	for _, cmd := range []string{"go run ./cmd/orderd", "go test -race -count=1 ./..."} {
		if !strings.Contains(readme, "```sh\n"+cmd+"\n```") {
			t.Errorf("README.md lacks the shell block with exactly %q", cmd)
		}
	}
	ci := read(t, ".ci/run")
	if !strings.Contains(ci, "\ngo test -race -count=1 ./...\n") || !strings.Contains(ci, "(README: go test -race -count=1 ./...)") {
		t.Error(".ci/run does not run the README's test command, go test -race -count=1 ./..., under its label")
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Idempotency rules (for client authors)": "idempotency-rules-for-client-authors",
		"One clock for leases: the database's":   "one-clock-for-leases-the-databases",
		"Tests, storms and benchmarks":           "tests-storms-and-benchmarks",
		"`orderd` flags":                         "orderd-flags",
	} {
		if got := doccheck.Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}
