// Package flagenv names a command's settings in its errors both ways they
// can be given: as a flag and as the environment variable that sets it
// (PREFIX_ and the flag's name in upper case, dashes as underscores, as
// github.com/peterbourgon/ff reads them).
package flagenv

import (
	"flag"
	"regexp"
	"strings"
	"sync"
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
}

// NewNamer returns a Namer for the command whose variables begin with
// prefix ("ORDERD").
func NewNamer(prefix string) *Namer { return &Namer{prefix: prefix} }

// Record records the flags of fs as the command's settings; only the first
// call counts (every parse defines the same flags).
func (n *Namer) Record(fs *flag.FlagSet) {
	n.once.Do(func() {
		n.names = map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { n.names[f.Name] = true })
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
