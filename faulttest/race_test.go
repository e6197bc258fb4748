//go:build race

package faulttest

// raceEnabled says whether the test binary has the race detector, so the
// processes it starts are built the same way.
const raceEnabled = true
