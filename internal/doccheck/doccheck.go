// Package doccheck checks the repository's Markdown: that every relative
// link names a file that exists and every #anchor a heading of its target,
// with GitHub's anchors (Slug).
package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Slug returns the anchor GitHub gives a heading's text: lower case, every
// character but letters, digits, spaces, hyphens and underscores dropped,
// spaces as hyphens ("Idempotency rules (for client authors)" is
// "idempotency-rules-for-client-authors").
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Headings returns the headings of the Markdown text md (ATX headings
// outside fenced code blocks), in order, without their #s.
func Headings(md string) []string {
	var hs []string
	for _, line := range prose(md) {
		if m := headingLine.FindStringSubmatch(line); m != nil {
			hs = append(hs, m[1])
		}
	}
	return hs
}

var (
	headingLine = regexp.MustCompile(`^#{1,6} +(.+?)\s*#*\s*$`)
	link        = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode  = regexp.MustCompile("`[^`]*`")
)

// prose returns md's lines outside fenced code blocks.
func prose(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the anchors of md's headings, numbered as GitHub numbers
// repeated ones (-1, -2, …).
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, h := range Headings(md) {
		s := Slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Links returns one line for every relative link of the Markdown file path
// (relative to root) that does not resolve: a file that does not exist, or
// an anchor that is no heading of the Markdown file it points into. Links
// with a scheme (https:, mailto:) are not checked; neither is text in code.
func Links(root, path string) ([]string, error) {
	src, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, line := range prose(string(src)) {
		for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			resolved := path
			if file != "" {
				resolved = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
					problems = append(problems, fmt.Sprintf("%s: link %s: %s does not exist", path, target, resolved))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(resolved, ".md") {
				problems = append(problems, fmt.Sprintf("%s: link %s: an anchor into a file that is not Markdown", path, target))
				continue
			}
			md, err := os.ReadFile(filepath.Join(root, resolved))
			if err != nil {
				return nil, err
			}
			if !anchors(string(md))[anchor] {
				problems = append(problems, fmt.Sprintf("%s: link %s: %s has no heading with the anchor #%s", path, target, resolved, anchor))
			}
		}
	}
	return problems, nil
}
