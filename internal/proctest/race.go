//go:build race

package proctest

// Race says whether this binary has the race detector, so the binaries
// Build makes are built the same way.
const Race = true
