package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/proctest"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/paysim"
)

// process is one running paysim.
type process struct {
	*proctest.Process
	addr string
}

// startProcess runs paysim on a loopback port with its ledger in dataDir and
// waits until it listens.
func startProcess(t *testing.T, dataDir string, env ...string) *process {
	t.Helper()
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/paysim")
	p := proctest.Start(t, bin, append(os.Environ(), append([]string{"PAYSIM_ADDR=127.0.0.1:0", "PAYSIM_DATA_DIR=" + dataDir}, env...)...))
	return &process{Process: p, addr: p.Addr()}
}

// stop sends SIGTERM and waits for a clean exit within limit.
func (p *process) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	p.Stop(t, limit)
}

// post sends a JSON POST with an Idempotency-Key on a fresh connection.
func (p *process) post(t *testing.T, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return p.send(t, req)
}

func (p *process) get(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p.send(t, req)
}

var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

func (p *process) send(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

const chargeBody = `{"order_id":"ord_1","amount":4200,"currency":"USD","payment_method":"pm_card_visa"}`

func TestProcessChargeSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startProcess(t, dir)
	status, _, body := p.post(t, "/v1/charges", "ord_1/pay", chargeBody)
	var first paysim.Charge
	if status != http.StatusCreated || json.Unmarshal(body, &first) != nil || first.Status != paysim.ChargeCaptured {
		t.Fatalf("charge = %d %s, want 201 captured", status, body)
	}
	p.stop(t, 30*time.Second)
	if _, err := os.Stat(filepath.Join(dir, paysim.FileName)); err != nil {
		t.Fatalf("ledger file: %v", err)
	}

	p = startProcess(t, dir)
	status, hdr, body := p.post(t, "/v1/charges", "ord_1/pay", chargeBody)
	var again paysim.Charge
	if status != http.StatusOK || hdr.Get("Idempotent-Replayed") != "true" || json.Unmarshal(body, &again) != nil || again != first {
		t.Fatalf("replay after restart = %d %s (replayed %q), want 200 with %+v", status, body, hdr.Get("Idempotent-Replayed"), first)
	}
	status, _, body = p.get(t, "/admin/stats")
	var st paysim.Stats
	if status != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("stats = %d %s", status, body)
	}
	if st.Charges != 1 || st.CapturesByOrder["ord_1"] != 1 || st.MaxCapturesPerOrder != 1 {
		t.Errorf("stats after restart = %+v, want one capture", st.Counts)
	}
	p.stop(t, 30*time.Second)
}

func TestProcessFaultsFromEnvironmentAndShutdownDuringATimeout(t *testing.T) {
	t.Parallel()
	p := startProcess(t, t.TempDir(), "PAYSIM_TIMEOUT_RATE=1", "PAYSIM_TIMEOUT_DELAY=4m")
	status, _, body := p.get(t, "/admin/faults")
	var f paysim.Faults
	if status != http.StatusOK || json.Unmarshal(body, &f) != nil || f.TimeoutRate != 1 || f.TimeoutDelay != 4*time.Minute {
		t.Fatalf("faults = %d %s, want timeout_rate 1 and timeout_delay 4m", status, body)
	}
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/v1/charges", strings.NewReader(chargeBody))
		req.Header.Set("Idempotency-Key", "ord_1/pay")
		resp, err := client.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Logs(), `"fault injected"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the timeout fault never fired\n%s", p.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.stop(t, 20*time.Second) // far less than the 4m delay
	if got := <-answered; got != http.StatusGatewayTimeout {
		t.Errorf("the held request was answered %d, want 504", got)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(Config) bool
		wantErr string
	}{
		{name: "defaults", check: func(c Config) bool {
			return c.Addr == "127.0.0.1:8090" && c.DataDir == "paysim-data" && c.Faults == paysim.Faults{TimeoutDelay: paysim.DefaultTimeoutDelay}
		}},
		{name: "flags", args: []string{"-addr", "127.0.0.1:0", "-data-dir", "d", "-latency", "5ms", "-error-rate", "0.1",
			"-decline-rate", "0.2", "-timeout-rate", "0.3", "-timeout-delay", "1s", "-drop-rate", "0.4", "-seed", "9"},
			check: func(c Config) bool {
				return c.Addr == "127.0.0.1:0" && c.DataDir == "d" && c.Faults == paysim.Faults{Latency: 5 * time.Millisecond,
					ErrorRate: 0.1, DeclineRate: 0.2, TimeoutRate: 0.3, TimeoutDelay: time.Second, DropRate: 0.4, Seed: 9}
			}},
		{name: "environment", env: map[string]string{"PAYSIM_ADDR": "127.0.0.1:1", "PAYSIM_DATA_DIR": "e", "PAYSIM_DROP_RATE": "1"},
			check: func(c Config) bool { return c.Addr == "127.0.0.1:1" && c.DataDir == "e" && c.Faults.DropRate == 1 }},
		{name: "rate above 1", args: []string{"-error-rate", "1.5"}, wantErr: "error_rate"},
		{name: "rates summing above 1", args: []string{"-error-rate", "0.6", "-drop-rate", "0.6"}, wantErr: "at most 1"},
		{name: "delay above the bound", args: []string{"-timeout-delay", "1h"}, wantErr: "timeout_delay"},
		{name: "empty data dir", args: []string{"-data-dir", ""}, wantErr: "-data-dir"},
		{name: "bad log level", args: []string{"-log-level", "loud"}, wantErr: "-log-level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := ParseConfig(tt.args, io.Discard)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
			case err != nil:
				t.Errorf("ParseConfig: %v", err)
			case !tt.check(c):
				t.Errorf("config = %+v", c)
			}
		})
	}
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]string{"-addr", "127.0.0.1:0", "-data-dir", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, &logs) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), `"msg":"listening"`) {
		if time.Now().After(deadline) {
			t.Fatalf("Run did not listen\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("logs lack the stop line:\n%s", logs.String())
	}
}

// TestHelpListsEnvironmentVariables: paysim -h names the PAYSIM_* variable
// of every flag.
func TestHelpListsEnvironmentVariables(t *testing.T) {
	var out strings.Builder
	if _, err := ParseConfig([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseConfig(-h) = %v, want flag.ErrHelp", err)
	}
	for _, env := range []string{"PAYSIM_ADDR", "PAYSIM_DATA_DIR", "PAYSIM_LATENCY", "PAYSIM_DROP_RATE", "PAYSIM_SEED", "PAYSIM_LOG_LEVEL", "PAYSIM_SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(out.String(), "(env "+env+")") {
			t.Errorf("help does not name %s:\n%s", env, out.String())
		}
	}
}

func TestParseConfigStripeMode(t *testing.T) {
	c, err := ParseConfig([]string{"-api", "stripe", "-webhook-url", "http://127.0.0.1:1/hook", "-stripe-webhook-secret", "whsec_a_0123456789, whsec_b_0123456789",
		"-stripe-search-lag", "5s", "-commit-500-rate", "0.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.API != "stripe" || len(c.Stripe.Webhooks.Secrets) != 2 || c.Stripe.Webhooks.URL == "" || c.Webhooks.URL != "" ||
		c.Stripe.SearchLag != 5*time.Second || c.Stripe.Commit500Rate != 0.1 {
		t.Fatalf("%+v", c)
	}
	for _, args := range [][]string{
		{"-api", "stripe", "-webhook-url", "http://127.0.0.1:1/hook"},
		{"-api", "stripe", "-stripe-secret-key", "sk_live_x"},
		{"-api", "soap"},
	} {
		if _, err := ParseConfig(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
