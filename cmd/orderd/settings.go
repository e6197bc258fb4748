package main

import (
	"flag"
	"regexp"
	"strings"
	"sync"
)

// settingNames holds the names of orderd's flags, recorded by the first
// ParseConfig, so that errors can name both spellings of a setting.
var settingNames struct {
	once  sync.Once
	names map[string]bool
}

// recordSettings records the flags of fs as orderd's settings (once).
func recordSettings(fs *flag.FlagSet) {
	settingNames.once.Do(func() {
		settingNames.names = map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { settingNames.names[f.Name] = true })
	})
}

// flagMention matches "-name" where a flag's name may start: at the start,
// after a space, an opening parenthesis, a comma or a quote.
var flagMention = regexp.MustCompile(`(^|[\s(,"])-([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)

// namedSettingError is an error whose message names each setting it
// mentions as a flag and as an environment variable; it unwraps to the
// error it rewrites.
type namedSettingError struct {
	msg string
	err error
}

func (e *namedSettingError) Error() string { return e.msg }
func (e *namedSettingError) Unwrap() error { return e.err }

// nameSettings returns err with every orderd flag its message mentions
// ("-lease") followed by its environment variable ("-lease (ORDERD_LEASE)")
// unless the message already names it, so that a start-up or configuration
// error says what to change however orderd is configured. err is returned
// as it is when there is nothing to add (nil, flag.ErrHelp, a message
// without a flag); errors.Is and errors.As see through the rewrite.
func nameSettings(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := flagMention.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagMention.FindStringSubmatch(m)
		name := sub[2]
		if !settingNames.names[name] || strings.Contains(msg, envName(name)) {
			return m
		}
		return m + " (" + envName(name) + ")"
	})
	if out == msg {
		return err
	}
	return &namedSettingError{msg: out, err: err}
}
