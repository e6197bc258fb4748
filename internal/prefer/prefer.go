// Package prefer reads the preferences of HTTP Prefer header fields
// (RFC 7240). It is apart from package api so that its fuzz target is
// built, instrumented, from a few standard packages only.
package prefer

import (
	"strconv"
	"strings"
	"time"
)

// MaxWait is the largest wait Wait returns: a larger (or overflowing)
// delta-seconds is MaxWait, above any cap a server applies.
const MaxWait = time.Hour

// Wait returns the wait preference of Prefer header field values (RFC 7240
// §4.3, "wait=<delta-seconds>"), from the first field that names it, 0 if
// absent or malformed. A preference's parameters after ";" are ignored
// (RFC 7240 §2); a quoted value is unquoted; anything but digits is
// malformed (RFC 9110 §5.6.7). Shape: 0 ≤ Wait ≤ MaxWait, in whole seconds.
func Wait(values []string) time.Duration {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			val, _, _ = strings.Cut(val, ";")
			val = strings.Trim(strings.TrimSpace(val), `"`)
			if val == "" || strings.Trim(val, "0123456789") != "" {
				return 0
			}
			n, err := strconv.Atoi(val)
			if err != nil || n > int(MaxWait/time.Second) {
				return MaxWait
			}
			return time.Duration(n) * time.Second
		}
	}
	return 0
}
