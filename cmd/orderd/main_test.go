package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/internal/proctest"
	"github.com/orderly/orderly/store/pgtest"
)

const testKey = "sk_test_process_0001"

// process is one running orderd.
type process struct {
	*proctest.Process
	addr string
}

// start runs orderd with env and waits until it listens.
func start(t *testing.T, env ...string) *process {
	t.Helper()
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/orderd")
	p := proctest.Start(t, bin, append(os.Environ(), append([]string{
		"ORDERD_ADDR=127.0.0.1:0", "ORDERD_API_KEYS=tenant_p:" + testKey,
	}, env...)...))
	return &process{Process: p, addr: p.Addr()}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.Stop(t, 30*time.Second)
	if !strings.Contains(p.Logs(), `"msg":"stopped"`) {
		t.Errorf("no graceful stop logged")
	}
}

type reply struct {
	status   int
	replayed bool
	id       string
	state    string
}

func post(t *testing.T, addr, path, key, body string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var o struct{ ID, State string }
	_ = json.Unmarshal(b, &o)
	return reply{resp.StatusCode, resp.Header.Get("Idempotency-Replayed") == "true", o.ID, o.State}
}

const orderBody = `{"customer_id":"cus_proc","currency":"USD","items":[{"sku":"sku_1","quantity":3,"unit_price":999}]}`

// TestTwoProcessesOneDatabase runs two orderd processes on one PostgreSQL
// database and splits 50 concurrent duplicates of one create between them:
// there must be exactly one order, and every answer is its 201 or a replay.
// The same holds for duplicates without a key (derived key).
func TestTwoProcessesOneDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a := start(t, "ORDERD_DATABASE_URL="+url)
	b := start(t, "ORDERD_DATABASE_URL="+url)

	for _, key := range []string{"storm-key-1", ""} {
		name := "key " + key
		if key == "" {
			name = "derived key"
		}
		t.Run(name, func(t *testing.T) {
			body := strings.Replace(orderBody, "cus_proc", "cus_"+strings.ReplaceAll(name, " ", "_"), 1)
			const n = 50
			replies := make([]reply, n)
			var wg sync.WaitGroup
			gate := make(chan struct{})
			for i := range n {
				addr := a.addr
				if i%2 == 1 {
					addr = b.addr
				}
				wg.Go(func() {
					<-gate
					replies[i] = post(t, addr, "/v1/orders", key, body)
				})
			}
			close(gate)
			wg.Wait()
			originals := 0
			for i, r := range replies {
				if r.status != http.StatusCreated || r.id != replies[0].id {
					t.Fatalf("reply %d = %+v, want 201 for order %s", i, r, replies[0].id)
				}
				if !r.replayed {
					originals++
				}
			}
			if originals != 1 {
				t.Errorf("%d replies were not replays, want exactly 1", originals)
			}
			if got := countOrders(t, url, body); got != 1 {
				t.Errorf("database holds %d orders for the body, want 1", got)
			}
		})
	}
	a.stop(t)
	b.stop(t)
}

func countOrders(t *testing.T, url, body string) int {
	t.Helper()
	var in struct {
		CustomerID string `json:"customer_id"`
	}
	_ = json.Unmarshal([]byte(body), &in)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM orders WHERE customer_id = $1`, in.CustomerID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRestartReplaysNotReexecutes stops orderd between an original request
// and its retry: the retry replays from the embedded store's file.
func TestRestartReplaysNotReexecutes(t *testing.T) {
	dir := t.TempDir()
	p := start(t, "ORDERD_DATA_DIR="+dir)
	first := post(t, p.addr, "/v1/orders", "restart-key", orderBody)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("create = %+v", first)
	}
	paid := post(t, p.addr, "/v1/orders/"+first.id+"/pay", "restart-pay",
		`{"amount":2997,"currency":"USD","payment_method":"pm_card_visa"}`)
	if paid.status != http.StatusOK || paid.state != "PAID" {
		t.Fatalf("pay = %+v", paid)
	}
	p.stop(t)

	p = start(t, "ORDERD_DATA_DIR="+dir)
	again := post(t, p.addr, "/v1/orders", "restart-key", orderBody)
	if again.status != http.StatusCreated || !again.replayed || again.id != first.id || again.state != "PAID" {
		t.Errorf("retry after restart = %+v, want a replay of %s in its current state PAID", again, first.id)
	}
	repay := post(t, p.addr, "/v1/orders/"+first.id+"/pay", "restart-pay",
		`{"amount":2997,"currency":"USD","payment_method":"pm_card_visa"}`)
	if repay.status != http.StatusOK || !repay.replayed {
		t.Errorf("pay retry after restart = %+v, want a 200 replay", repay)
	}
	p.stop(t)
}

func TestParseConfig(t *testing.T) {
	t.Run("defaults select the embedded store and a development key", func(t *testing.T) {
		c, err := ParseConfig(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.Addr != "127.0.0.1:8080" || c.DatabaseURL != "" || c.APIKeys[DevAPIKey] != DevTenant || !c.usingDevelopmentKey {
			t.Errorf("defaults = %+v", c)
		}
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv("ORDERD_API_KEYS", "acme:sk_live_acme_123,globex:sk_live_globex_456")
		t.Setenv("ORDERD_IDEMPOTENCY_POLICY", "require")
		t.Setenv("ORDERD_ADDR", "127.0.0.1:9999")
		c, err := ParseConfig(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.APIKeys["sk_live_acme_123"] != "acme" || c.APIKeys["sk_live_globex_456"] != "globex" || c.usingDevelopmentKey ||
			c.Policy != "require" || c.Addr != "127.0.0.1:9999" {
			t.Errorf("config = %+v", c)
		}
	})
	for name, args := range map[string][]string{
		"bad policy":       {"-idempotency-policy", "maybe"},
		"short api key":    {"-api-keys", "acme:short"},
		"missing tenant":   {"-api-keys", ":sk_live_acme_123"},
		"not postgres url": {"-database-url", "mysql://x"},
		"bad log level":    {"-log-level", "loud"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseConfig(args, io.Discard); err == nil {
				t.Errorf("ParseConfig(%q) succeeded, want an error", args)
			}
		})
	}
}
