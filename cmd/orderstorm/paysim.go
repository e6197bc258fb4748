package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/orderly/orderly/paysim"
)

// PaysimAdmin talks to paysim's admin endpoints: the ledger, its counts and
// the run-level faults.
type PaysimAdmin struct {
	base string
	hc   *http.Client
}

// NewPaysimAdmin returns an admin client for the paysim at base.
func NewPaysimAdmin(base string) *PaysimAdmin {
	return &PaysimAdmin{base: strings.TrimSuffix(base, "/"), hc: &http.Client{Timeout: 30 * time.Second}}
}

// Stats is GET /admin/stats.
func (p *PaysimAdmin) Stats(ctx context.Context) (paysim.Stats, error) {
	var s paysim.Stats
	return s, p.do(ctx, http.MethodGet, "/admin/stats", nil, &s)
}

// Ledger is GET /admin/ledger.
func (p *PaysimAdmin) Ledger(ctx context.Context) (paysim.Snapshot, error) {
	var s paysim.Snapshot
	return s, p.do(ctx, http.MethodGet, "/admin/ledger", nil, &s)
}

// Faults is GET /admin/faults.
func (p *PaysimAdmin) Faults(ctx context.Context) (paysim.Faults, error) {
	var f paysim.Faults
	return f, p.do(ctx, http.MethodGet, "/admin/faults", nil, &f)
}

// SetFaults is PUT /admin/faults.
func (p *PaysimAdmin) SetFaults(ctx context.Context, f paysim.Faults) error {
	return p.do(ctx, http.MethodPut, "/admin/faults", f, nil)
}

func (p *PaysimAdmin) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("paysim %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 512<<20))
	if err != nil {
		return fmt.Errorf("paysim %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("paysim %s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("paysim %s %s: %w", method, path, err)
	}
	return nil
}

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
