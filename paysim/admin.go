package paysim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminClient talks to a running paysim's admin endpoints: the ledger, its
// counts and the run-level faults. It is what harnesses (orderstorm, the
// fault tests) use to set faults and read what paysim did.
type AdminClient struct {
	base string
	hc   *http.Client
}

// NewAdminClient returns an admin client for the paysim at base (an http://
// URL).
func NewAdminClient(base string) *AdminClient {
	return &AdminClient{base: strings.TrimSuffix(base, "/"), hc: &http.Client{Timeout: 30 * time.Second}}
}

// Stats returns GET /admin/stats: the ledger's counts and the injected faults.
func (p *AdminClient) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	return s, p.do(ctx, http.MethodGet, "/admin/stats", nil, &s)
}

// Ledger returns GET /admin/ledger: every charge, refund and shipment.
func (p *AdminClient) Ledger(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	return s, p.do(ctx, http.MethodGet, "/admin/ledger", nil, &s)
}

// Faults returns GET /admin/faults: the run-level fault settings.
func (p *AdminClient) Faults(ctx context.Context) (Faults, error) {
	var f Faults
	return f, p.do(ctx, http.MethodGet, "/admin/faults", nil, &f)
}

// SetFaults replaces the run-level fault settings (PUT /admin/faults).
func (p *AdminClient) SetFaults(ctx context.Context, f Faults) error {
	return p.do(ctx, http.MethodPut, "/admin/faults", f, nil)
}

func (p *AdminClient) do(ctx context.Context, method, path string, in, out any) error {
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
