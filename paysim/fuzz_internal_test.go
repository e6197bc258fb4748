package paysim

import "testing"

// FuzzParseFaultHeader: the Paysim-Fault parser never panics, and what it
// accepts is one known fault kind at most and a latency from 0 to MaxDelay.
func FuzzParseFaultHeader(f *testing.F) {
	for _, seed := range []string{"", "drop", "timeout, latency=10ms", "latency=1h", "latency=-1s", "error,decline",
		"503, error", "latency=5m,latency=5m,latency=5m", " , ,", "latency=1e400s"} {
		f.Add(seed)
	}
	known := map[FaultKind]bool{"": true, FaultDrop: true, FaultError: true, FaultTimeout: true, FaultDecline: true}
	f.Fuzz(func(t *testing.T, v string) {
		rf, err := parseFaultHeader(v)
		if err != nil {
			return
		}
		if !known[rf.kind] || rf.latency < 0 || rf.latency > MaxDelay {
			t.Fatalf("parseFaultHeader(%q) = %+v, want a known kind and a latency in [0, %s]", v, rf, MaxDelay)
		}
	})
}
