package main

import (
	"sync"

	"github.com/orderly/orderly/paysim"
)

// faultTally adds up paysim's injected-fault counters over a run in which
// paysim may restart (a restart zeroes them).
type faultTally struct {
	mu   sync.Mutex
	acc  map[string]int64
	base map[paysim.FaultKind]int64
}

func newFaultTally(start paysim.Stats) *faultTally {
	return &faultTally{acc: map[string]int64{}, base: start.FaultsInjected}
}

// fold adds what the counters gained since the last fold.
func (t *faultTally) fold(now paysim.Stats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range now.FaultsInjected {
		t.acc[string(k)] += v - t.base[k]
	}
	t.base = now.FaultsInjected
}

// restarted records that paysim restarted: its counters start from zero.
func (t *faultTally) restarted() {
	t.mu.Lock()
	t.base = nil
	t.mu.Unlock()
}

// total returns the faults injected so far, by kind.
func (t *faultTally) total() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.acc))
	for k, v := range t.acc {
		out[k] = v
	}
	return out
}
