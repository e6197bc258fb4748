package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// faultDelta is after's injected faults minus before's, by kind.
func faultDelta(before, after paysim.Stats) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after.FaultsInjected {
		out[string(k)] = v - before.FaultsInjected[k]
	}
	return out
}
