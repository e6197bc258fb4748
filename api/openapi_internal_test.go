package api

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// problemRow is one problem type as a source describes it.
type problemRow struct {
	Status int
	Title  string
}

// TestProblemTypesAgree: the problem table in problem.go, docs/problems.md
// and the OpenAPI document name the same problem types with the same status
// and title, and every response of the document that carries problems
// carries only problems of the status it is listed under.
func TestProblemTypesAgree(t *testing.T) {
	table := map[string]problemRow{}
	for code, k := range problems {
		table[string(code)] = problemRow{k.status, k.title}
	}

	doc := openAPIDocument(t)
	fromDoc := documentProblems(t, doc)
	if err := sameRows(table, fromDoc); err != nil {
		t.Errorf("api/openapi.yaml and the table in api/problem.go differ:\n%v", err)
	}
	fromMarkdown := markdownProblems(t, "../docs/problems.md")
	if err := sameRows(table, fromMarkdown); err != nil {
		t.Errorf("docs/problems.md and the table in api/problem.go differ:\n%v", err)
	}

	// Each status an operation lists may only answer problems of that
	// status, and every problem type is some response's.
	responses := node(doc, "components", "responses")
	answered := map[string]bool{}
	for _, resp := range responses {
		for _, code := range responseProblems(resp) {
			answered[code] = true
		}
	}
	for path, item := range node(doc, "paths") {
		for method, op := range asMap(item) {
			for status, resp := range node(asMap(op), "responses") {
				n, err := strconv.Atoi(status)
				if err != nil {
					t.Errorf("%s %s: response key %q is not a status code", method, path, status)
					continue
				}
				for _, code := range responseProblems(resolve(doc, resp)) {
					if fromDoc[code].Status != n {
						t.Errorf("%s %s lists problem %s (status %d) under %d", method, path, code, fromDoc[code].Status, n)
					}
				}
			}
		}
	}
	for code := range fromDoc {
		if !answered[code] {
			t.Errorf("problem %s is in no response under components.responses", code)
		}
	}
}

// TestProblemTypesAgreeFailsOnDrift proves that the comparison sees a
// changed status, title or a missing type.
func TestProblemTypesAgreeFailsOnDrift(t *testing.T) {
	base := map[string]problemRow{"a": {400, "A"}, "b": {409, "B"}}
	for name, other := range map[string]map[string]problemRow{
		"status": {"a": {401, "A"}, "b": {409, "B"}},
		"title":  {"a": {400, "a"}, "b": {409, "B"}},
		"type":   {"a": {400, "A"}},
	} {
		if sameRows(base, other) == nil {
			t.Errorf("a different %s went unnoticed", name)
		}
	}
	if sameRows(base, maps.Clone(base)) != nil {
		t.Error("equal rows were reported as different")
	}
}

// sameRows returns an error listing every difference of got from want.
func sameRows(want, got map[string]problemRow) error {
	var diffs []string
	for _, code := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[code]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("  %s is missing", code))
		case g != want[code]:
			diffs = append(diffs, fmt.Sprintf("  %s is %d %q, want %d %q", code, g.Status, g.Title, want[code].Status, want[code].Title))
		}
	}
	for _, code := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[code]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s is extra", code))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(diffs, "\n"))
}

// openAPIDocument returns the embedded document as generic YAML values.
func openAPIDocument(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// documentProblems returns the problem types of the document: the schemas
// under components.schemas whose type member is a constant under
// ProblemBaseURI.
func documentProblems(t *testing.T, doc map[string]any) map[string]problemRow {
	t.Helper()
	rows := map[string]problemRow{}
	for name, s := range node(doc, "components", "schemas") {
		props := node(asMap(s), "properties")
		uri, _ := asMap(props["type"])["const"].(string)
		code, ok := strings.CutPrefix(uri, ProblemBaseURI)
		if !ok {
			continue
		}
		if name != "Problem_"+code {
			t.Errorf("schema %s describes problem %s; name it Problem_%s", name, code, code)
		}
		status, _ := asMap(props["status"])["const"].(int)
		title, _ := asMap(props["title"])["const"].(string)
		rows[code] = problemRow{status, title}
	}
	return rows
}

// markdownRow matches a row of the table in docs/problems.md: code, status,
// title.
var markdownRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| (\\d{3}) \\| ([^|]+?) \\|")

// markdownProblems returns the problem types of the table in the markdown
// file at path.
func markdownProblems(t *testing.T, path string) map[string]problemRow {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]problemRow{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		m := markdownRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		status, _ := strconv.Atoi(m[2])
		rows[m[1]] = problemRow{status, m[3]}
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no rows `code` | status | title |", path)
	}
	return rows
}

// responseProblems returns the codes of the problem schemas a response
// object's application/problem+json content refers to (one, or a oneOf).
func responseProblems(resp any) []string {
	schema := node(asMap(resp), "content", "application/problem+json", "schema")
	refs := []any{schema}
	if one, ok := schema["oneOf"].([]any); ok {
		refs = one
	}
	var codes []string
	for _, r := range refs {
		ref, _ := asMap(r)["$ref"].(string)
		if code, ok := strings.CutPrefix(ref, "#/components/schemas/Problem_"); ok {
			codes = append(codes, code)
		}
	}
	return codes
}

// resolve follows a "$ref" to components of doc, if v is one.
func resolve(doc map[string]any, v any) any {
	ref, ok := asMap(v)["$ref"].(string)
	if !ok {
		return v
	}
	path := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
	var cur any = doc
	for _, p := range path {
		cur = asMap(cur)[p]
	}
	return cur
}

// node returns the map at the path of keys below m (nil where absent).
func node(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = asMap(m[k])
	}
	return m
}

// asMap returns v as a YAML mapping, or nil.
func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
