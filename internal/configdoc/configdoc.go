// Package configdoc checks a command's configuration table in the README
// against the command's flags, so that a setting cannot be added without
// being documented, nor documented with a wrong default.
//
// A command documents its settings in a table under the header Header
// whose first column is the environment variable of each flag (PREFIX_ and the flag's name in upper
// case, dashes as underscores) and whose second column begins with the
// default in backquotes, or says in words that there is none.
package configdoc

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Flag is one flag of a command as its -h output lists it.
type Flag struct {
	Name    string // without the dash: "admin-addr"
	Default string // as -h prints it ("127.0.0.1:9090", "24h0m0s"); "" for the zero value
}

// Env returns the environment variable of f under prefix ("ORDERD"):
// ORDERD_ADMIN_ADDR.
func (f Flag) Env(prefix string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
}

var (
	flagLine    = regexp.MustCompile(`^  -([a-z0-9-]+)`)
	defaultText = regexp.MustCompile(`\(default (".*"|[^)]*)\)$`)
)

// ParseUsage returns the flags that the usage text of a flag.FlagSet (its
// PrintDefaults, as -h shows it) lists, in order. A flag's default is the
// "(default …)" that PrintDefaults appends to a non-zero default, so a
// usage string must not itself end with such words.
func ParseUsage(usage string) []Flag {
	var flags []Flag
	sc := bufio.NewScanner(strings.NewReader(usage))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags = append(flags, Flag{Name: m[1]})
			continue
		}
		if len(flags) == 0 {
			continue
		}
		if m := defaultText.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			d := m[1]
			if u, err := strconv.Unquote(d); err == nil {
				d = u
			}
			flags[len(flags)-1].Default = d
		}
	}
	return flags
}

// Row is one row of a configuration table: the variable and its default
// cell.
type Row struct {
	Env, Default string
}

// Header is the header row of a configuration table.
const Header = "| variable | default | meaning |"

var rowLine = regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\| ([^|]*) \\|")

// Rows returns the rows of readme's configuration tables (those under
// Header) whose variable begins with prefix and an underscore. Tables with
// other headers, which may name variables too, are not configuration
// tables.
func Rows(readme, prefix string) []Row {
	var rows []Row
	in := false
	for _, line := range strings.Split(readme, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == Header:
			in = true
		case !strings.HasPrefix(line, "|"):
			in = false
		case in:
			if m := rowLine.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[1], prefix+"_") {
				rows = append(rows, Row{Env: m[1], Default: strings.TrimSpace(m[2])})
			}
		}
	}
	return rows
}

// Check returns one line for every disagreement between the flags and the
// README's rows under prefix: a flag without a row, a row without a flag, a
// variable with two rows, and a row whose default is not the flag's (when
// the flag has one: durations are compared as durations, so `24h` is
// 24h0m0s). It returns nil when they agree.
func Check(flags []Flag, readme, prefix string) []string {
	var problems []string
	rows := map[string]Row{}
	for _, r := range Rows(readme, prefix) {
		if _, dup := rows[r.Env]; dup {
			problems = append(problems, fmt.Sprintf("%s has two rows in the README", r.Env))
		}
		rows[r.Env] = r
	}
	known := map[string]bool{}
	for _, f := range flags {
		env := f.Env(prefix)
		known[env] = true
		r, ok := rows[env]
		if !ok {
			problems = append(problems, fmt.Sprintf("-%s (%s) has no row in the README's configuration table", f.Name, env))
			continue
		}
		if f.Default != "" && !sameDefault(f.Default, r.Default) {
			problems = append(problems, fmt.Sprintf("%s: the README says the default is %q, the flag's is %q", env, r.Default, f.Default))
		}
	}
	for env := range rows {
		if !known[env] {
			problems = append(problems, fmt.Sprintf("%s has a row in the README but is no flag of the command", env))
		}
	}
	return problems
}

// sameDefault reports whether the README's default cell begins with the
// flag's default in backquotes.
func sameDefault(flagDefault, cell string) bool {
	if !strings.HasPrefix(cell, "`") {
		return false
	}
	doc, _, ok := strings.Cut(cell[1:], "`")
	if !ok {
		return false
	}
	if doc == flagDefault {
		return true
	}
	a, errA := time.ParseDuration(doc)
	b, errB := time.ParseDuration(flagDefault)
	return errA == nil && errB == nil && a == b
}
