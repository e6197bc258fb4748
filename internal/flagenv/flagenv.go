// Package flagenv names a command's settings in its errors both ways they
// can be given: as a flag and as the environment variable that sets it
// (PREFIX_ and the flag's name in upper case, dashes as underscores, as
// github.com/peterbourgon/ff reads them).
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Env returns the environment variable of flag name under prefix:
// Env("ORDERD", "admin-addr") is ORDERD_ADMIN_ADDR.
func Env(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Namer rewrites errors of one command. The zero value knows no flags; a
// Namer is safe for concurrent use once recorded.
type Namer struct {
	prefix string
	once   sync.Once
	names  map[string]bool
	// kinds says what each typed flag takes ("a duration: ..."), for
	// the value a flag or variable could not be parsed as.
	kinds map[string]string
}

// NewNamer returns a Namer for the command whose variables begin with
// prefix ("ORDERD").
func NewNamer(prefix string) *Namer { return &Namer{prefix: prefix} }

// Record records the flags of fs as the command's settings; only the first
// call counts (every parse defines the same flags).
func (n *Namer) Record(fs *flag.FlagSet) {
	n.once.Do(func() {
		n.names, n.kinds = map[string]bool{}, map[string]string{}
		fs.VisitAll(func(f *flag.Flag) {
			n.names[f.Name] = true
			if k := kindOf(f.Value); k != "" {
				n.kinds[f.Name] = k
			}
		})
	})
}

// mention matches "-name" where a flag's name may start: at the start,
// after a space, an opening parenthesis, a comma or a quote.
var mention = regexp.MustCompile(`(^|[\s(,"])-([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)

// named is an error whose message names its settings both ways; it
// unwraps to the error it rewrites.
type named struct {
	msg string
	err error
}

func (e *named) Error() string { return e.msg }
func (e *named) Unwrap() error { return e.err }

// Name returns err with every recorded flag its message mentions ("-lease")
// followed by its environment variable ("-lease (ORDERD_LEASE)") unless the
// message names that variable already. err is returned as it is when there
// is nothing to add (nil, flag.ErrHelp, a message without a flag);
// errors.Is and errors.As see through the rewrite.
func (n *Namer) Name(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if out, ok := n.unparsable(msg); ok {
		return &named{msg: out, err: err}
	}
	out := mention.ReplaceAllStringFunc(msg, func(m string) string {
		name := mention.FindStringSubmatch(m)[2]
		env := Env(n.prefix, name)
		if !n.names[name] || strings.Contains(msg, env) {
			return m
		}
		return m + " (" + env + ")"
	})
	if out == msg {
		return err
	}
	return &named{msg: out, err: err}
}

// kindOf says what a flag of the standard library's typed values takes, or
// "" for a string or a custom value.
func kindOf(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration: a number with a unit, such as 30s, 1m30s or 24h"
	case bool:
		return "true or false"
	case int, int64:
		return "an integer"
	case uint, uint64:
		return "a non-negative integer"
	case float64:
		return "a number"
	}
	return ""
}

// The two errors a typed flag's bad value gives, whose reason the flag
// package reduces to "parse error" or "value out of range": ff's for an
// environment variable (the value is not in it) and the flag package's for
// an argument.
var (
	envUnparsable = regexp.MustCompile(`error setting flag "([a-z][a-z0-9-]*)" from environment variable "([A-Z0-9_]+)": (parse error|value out of range)`)
	argUnparsable = regexp.MustCompile(`invalid value ("(?:[^"\\]|\\.)*") for flag -([a-z][a-z0-9-]*): (parse error|value out of range)`)
)

// unparsable rewrites the error of a typed flag's value that could not be
// parsed into one naming the flag, its variable, the value and what the
// flag takes: -lease (ORDERD_LEASE): "30" is not a duration: a number with
// a unit, such as 30s, 1m30s or 24h.
func (n *Namer) unparsable(msg string) (string, bool) {
	var name, value, reason string
	if m := envUnparsable.FindStringSubmatch(msg); m != nil {
		name, reason = m[1], m[3]
		value = os.Getenv(m[2])
	} else if m := argUnparsable.FindStringSubmatch(msg); m != nil {
		v, err := strconv.Unquote(m[1])
		if err != nil {
			return "", false
		}
		name, value, reason = m[2], v, m[3]
	} else {
		return "", false
	}
	kind, ok := n.kinds[name]
	if !ok {
		return "", false
	}
	setting := "-" + name + " (" + Env(n.prefix, name) + ")"
	if reason == "value out of range" {
		return fmt.Sprintf("%s: %q is out of range for %s", setting, value, kind), true
	}
	return fmt.Sprintf("%s: %q is not %s", setting, value, kind), true
}
