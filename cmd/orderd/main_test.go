package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/internal/proctest"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/service"
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
		"ORDERD_ADDR=127.0.0.1:0", "ORDERD_ADMIN_ADDR=127.0.0.1:0", "ORDERD_API_KEYS=tenant_p:" + testKey,
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
		if c.CommandsRoot != "orderly" || c.CommandsDuplicateWindow != 2*time.Minute {
			t.Errorf("commands root %q, duplicate window %s; want orderly, 2m", c.CommandsRoot, c.CommandsDuplicateWindow)
		}
	})
	t.Run("commands subject root and duplicate window", func(t *testing.T) {
		t.Setenv("ORDERD_COMMANDS_SUBJECT_ROOT", "storm1")
		t.Setenv("ORDERD_COMMANDS_DUPLICATE_WINDOW", "500ms")
		c, err := ParseConfig(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.CommandsRoot != "storm1" || c.CommandsDuplicateWindow != 500*time.Millisecond {
			t.Errorf("commands root %q, duplicate window %s", c.CommandsRoot, c.CommandsDuplicateWindow)
		}
	})
	t.Run("capture mode", func(t *testing.T) {
		c, err := ParseConfig(nil, io.Discard)
		if err != nil || c.Capture != service.CaptureAtPay || c.CaptureMargin != service.DefaultCaptureMargin {
			t.Fatalf("default capture = %q, margin %s, err %v; want at_pay, 24h", c.Capture, c.CaptureMargin, err)
		}
		t.Setenv("ORDERD_CAPTURE", "at_fulfilment")
		if c, err = ParseConfig(nil, io.Discard); err != nil || c.Capture != service.CaptureAtFulfilment {
			t.Fatalf("ORDERD_CAPTURE=at_fulfilment: capture = %q, err %v", c.Capture, err)
		}
		t.Setenv("ORDERD_CAPTURE", "later")
		_, err = ParseConfig(nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-capture (ORDERD_CAPTURE) must be at_pay or at_fulfilment, not \"later\"") {
			t.Fatalf("ORDERD_CAPTURE=later: err = %v", err)
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
	t.Run("operator keys from the environment and a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "operators")
		if err := os.WriteFile(file, []byte("reader:rita:reader-token-00000001\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("ORDERD_OPERATOR_KEYS", "operator:olga:operator-token-000001")
		t.Setenv("ORDERD_OPERATOR_KEYS_FILE", file)
		c, err := ParseConfig(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.OperatorKeys) != 2 || c.OperatorKeys[0].Name != "olga" || c.OperatorKeys[0].Role != operator.RoleOperator ||
			c.OperatorKeys[1].Name != "rita" || c.OperatorKeys[1].Role != operator.RoleReader {
			t.Errorf("operator keys = %+v", c.OperatorKeys)
		}
	})
	emptyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(emptyFile, []byte("\n  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"bad policy":                      {"-idempotency-policy", "maybe"},
		"bad capture mode":                {"-capture", "at_shipping"},
		"zero capture margin":             {"-capture-margin", "0s"},
		"short api key":                   {"-api-keys", "acme:short"},
		"missing tenant":                  {"-api-keys", ":sk_live_acme_123"},
		"not postgres url":                {"-database-url", "mysql://x"},
		"bad log level":                   {"-log-level", "loud"},
		"negative body limit":             {"-max-body-bytes", "-1"},
		"zero body limit":                 {"-max-body-bytes", "0"},
		"huge body limit":                 {"-max-body-bytes", "1000000000"},
		"zero shutdown timeout":           {"-shutdown-timeout", "0s"},
		"negative max wait":               {"-max-wait", "-1s"},
		"negative tenant rate":            {"-tenant-rate-limit", "-1"},
		"zero tenant burst":               {"-tenant-burst", "0"},
		"negative auth failures":          {"-auth-failures-per-minute", "-1"},
		"address without port":            {"-addr", "127.0.0.1"},
		"empty keys file":                 {"-api-keys-file", emptyFile},
		"keys that are only commas":       {"-api-keys", " , ,"},
		"dev key on all interfaces":       {"-addr", ":8080"},
		"dev key on a public address":     {"-addr", "192.0.2.1:8080", "-payment-url", "http://127.0.0.1:1"},
		"simulator on all interfaces":     {"-addr", "0.0.0.0:8080", "-api-keys", "acme:sk_live_acme_123"},
		"commands root with a dot":        {"-commands-subject-root", "a.b"},
		"commands root wildcard":          {"-commands-subject-root", "*"},
		"commands duplicate window short": {"-commands-duplicate-window", "10ms"},
		// Tenant names are NATS subject tokens: "a.b" and "a_b" must never
		// share a subject, nor a tenant widen one.
		"tenant with a dot":                 {"-api-keys", "a.b:sk_live_acme_123"},
		"tenant wildcard":                   {"-api-keys", "*:sk_live_acme_123"},
		"tenant full wildcard":              {"-api-keys", ">:sk_live_acme_123"},
		"tenant with a space":               {"-api-keys", "a b:sk_live_acme_123"},
		"tenant not ASCII":                  {"-api-keys", "caf\u00e9:sk_live_acme_123"},
		"tenant too long":                   {"-api-keys", strings.Repeat("t", 65) + ":sk_live_acme_123"},
		"commands signature tolerance 0":    {"-commands-signature-tolerance", "0s"},
		"commands signature past key TTL":   {"-commands-signature-tolerance", "48h"},
		"tenant in-flight above the server": {"-tenant-max-in-flight", "65"},
		"negative tenant in-flight":         {"-tenant-max-in-flight", "-1"},
		"operator key with a bad role":      {"-operator-keys", "admin:olga:operator-token-000001"},
		"operator key too short":            {"-operator-keys", "operator:olga:short"},
		"operator key without a name":       {"-operator-keys", "operator::operator-token-000001"},
		"operator key twice":                {"-operator-keys", "operator:olga:operator-token-000001,reader:olga:operator-token-000002"},
		"operator key is a tenant key":      {"-api-keys", "acme:sk_live_acme_123456", "-operator-keys", "operator:olga:sk_live_acme_123456"},
		"empty operator keys file":          {"-operator-keys-file", emptyFile},
		"operator base path not a path":     {"-operator-base-path", "ops"},
		"operator base path with ..":        {"-operator-base-path", "/ops/../x"},
		"operator base path with a host":    {"-operator-base-path", "//evil.example"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseConfig(args, io.Discard); err == nil {
				t.Errorf("ParseConfig(%q) succeeded, want an error", args)
			}
		})
	}
}

// TestFailClosed: the development key and the built-in simulators are
// allowed on a loopback address or with -dev-mode, never by default on an
// address other machines reach; the error names what to configure.
func TestFailClosed(t *testing.T) {
	keys := []string{"-api-keys", "acme:sk_live_acme_123"}
	provider := []string{"-payment-url", "http://127.0.0.1:8090"}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" for success, else a part of the error
	}{
		{"loopback with the development key and simulators", []string{"-addr", "127.0.0.1:8080"}, ""},
		{"::1", []string{"-addr", "[::1]:0"}, ""},
		{"localhost", []string{"-addr", "localhost:8080"}, ""},
		{"all interfaces, nothing configured", []string{"-addr", ":8080"}, "ORDERD_API_KEYS"},
		{"public, keys but no provider", append([]string{"-addr", "0.0.0.0:8080"}, keys...), "ORDERD_PAYMENT_URL"},
		{"public, provider but no keys", append([]string{"-addr", "0.0.0.0:8080"}, provider...), "ORDERD_API_KEYS"},
		{"public, all configured", append(append([]string{"-addr", "0.0.0.0:8080"}, keys...), provider...), ""},
		{"public in dev mode", []string{"-addr", "0.0.0.0:8080", "-dev-mode"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.args, io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ParseConfig: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ORDERD_DEV_MODE=true")):
				t.Fatalf("ParseConfig = %v, want an error naming %s and ORDERD_DEV_MODE=true", err, tc.want)
			}
		})
	}
	t.Run("ORDERD_DEV_MODE in the environment", func(t *testing.T) {
		t.Setenv("ORDERD_DEV_MODE", "true")
		if _, err := ParseConfig([]string{"-addr", ":8080"}, io.Discard); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDevelopmentModeLogsJSON: the development banner and the simulator
// warning are JSON lines like every other line orderd writes.
func TestDevelopmentModeLogsJSON(t *testing.T) {
	var buf bytes.Buffer
	c, err := ParseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.logDevelopmentMode(slog.New(slog.NewJSONHandler(&buf, nil)))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want the key's and the simulators':\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Level != "WARN" {
			t.Errorf("line %q is not a JSON warning: %v", l, err)
		}
	}
	if !strings.Contains(lines[0], DevAPIKey) || !strings.Contains(lines[1], `"simulated":["payment","warehouse"]`) {
		t.Errorf("lines = %q, want the key, then both simulators", lines)
	}
}

// TestSecondOrderdOnOneDataDirectoryRefusesToStart: the embedded store is
// single-node; a second orderd on its data directory exits at once, saying
// the directory is in use.
func TestSecondOrderdOnOneDataDirectoryRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	first := start(t, "ORDERD_DATA_DIR="+dir)
	defer first.stop(t)
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/orderd")
	// The deadline only guards against a second orderd that starts and
	// serves: one that refuses exits at once, whatever the machine's load.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "ORDERD_ADDR=127.0.0.1:0", "ORDERD_DATA_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("second orderd: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "data directory is in use by another process") {
		t.Errorf("output = %q, want it to say the directory is in use", out)
	}
}

// TestParseConfigLoadBounds: the admission bound, the deadlines and the pool
// size have working defaults, the pool size follows the in-flight bound, and
// a value that would bound nothing is refused with a message naming it.
func TestParseConfigLoadBounds(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		c, err := ParseConfig(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.TenantMaxInFlight != 32 {
			t.Errorf("TenantMaxInFlight = %d, want 32 (half of -max-in-flight)", c.TenantMaxInFlight)
		}
		if c.MaxInFlight != 64 || c.RequestTimeout != 15*time.Second || c.DBMaxConns != 32 ||
			c.DBStatementTimeout != 5*time.Second || c.DBLockTimeout != 2*time.Second {
			t.Errorf("load bounds = in-flight %d, request %s, pool %d, statement %s, lock %s; want 64, 15s, 32, 5s, 2s",
				c.MaxInFlight, c.RequestTimeout, c.DBMaxConns, c.DBStatementTimeout, c.DBLockTimeout)
		}
	})
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantPool int
	}{
		{"a small in-flight bound sizes the pool", map[string]string{"ORDERD_MAX_IN_FLIGHT": "8"}, 8},
		{"a large in-flight bound is capped", map[string]string{"ORDERD_MAX_IN_FLIGHT": "500"}, 32},
		{"an explicit pool size wins", map[string]string{"ORDERD_MAX_IN_FLIGHT": "8", "ORDERD_DB_MAX_CONNS": "50"}, 50},
		{"zero derives", map[string]string{"ORDERD_MAX_IN_FLIGHT": "16", "ORDERD_DB_MAX_CONNS": "0"}, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := ParseConfig(nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.DBMaxConns != tc.wantPool {
				t.Errorf("DBMaxConns = %d, want %d", c.DBMaxConns, tc.wantPool)
			}
		})
	}
	for _, tc := range []struct {
		name, env, value string
	}{
		{"no requests admitted", "ORDERD_MAX_IN_FLIGHT", "0"},
		{"negative in-flight bound", "ORDERD_MAX_IN_FLIGHT", "-1"},
		{"no request deadline", "ORDERD_REQUEST_TIMEOUT", "0s"},
		{"negative request deadline", "ORDERD_REQUEST_TIMEOUT", "-5s"},
		{"request deadline within max-wait", "ORDERD_REQUEST_TIMEOUT", "10s"},
		{"negative pool size", "ORDERD_DB_MAX_CONNS", "-1"},
		{"no statement timeout", "ORDERD_DB_STATEMENT_TIMEOUT", "0s"},
		{"sub-millisecond statement timeout", "ORDERD_DB_STATEMENT_TIMEOUT", "500us"},
		{"no lock timeout", "ORDERD_DB_LOCK_TIMEOUT", "0s"},
		{"negative lock timeout", "ORDERD_DB_LOCK_TIMEOUT", "-1s"},
		{"lock timeout not below statement timeout", "ORDERD_DB_LOCK_TIMEOUT", "5s"},
		{"unresolved age within a lease", "ORDERD_UNRESOLVED_AFTER", "30s"},
		{"no completer worker", "ORDERD_COMPLETER_PARALLEL", "0"},
		// Two provider calls (a lookup, then the call) must fit in a lease.
		{"lease within two provider timeouts", "ORDERD_LEASE", "20s"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, err := ParseConfig(nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.env) {
				t.Errorf("%s=%s: err = %v, want an error naming %s", tc.env, tc.value, err, tc.env)
			}
		})
	}
}

// TestPoolConfig: the PostgreSQL pool gets orderd's size and per-session
// timeouts, and what the URL sets itself wins.
func TestPoolConfig(t *testing.T) {
	const base = "postgres://orderly@127.0.0.1:5432/orderly?sslmode=disable"
	for _, tc := range []struct {
		name                string
		url                 string
		env                 map[string]string
		maxConns, minConns  int32
		statement, lockWait string
	}{
		{name: "defaults", url: base, maxConns: 32, minConns: 2, statement: "5000ms", lockWait: "2000ms"},
		{name: "sized from the in-flight bound", url: base, env: map[string]string{"ORDERD_MAX_IN_FLIGHT": "1"},
			maxConns: 1, minConns: 1, statement: "5000ms", lockWait: "2000ms"},
		{name: "configured", url: base, env: map[string]string{"ORDERD_DB_MAX_CONNS": "12",
			"ORDERD_DB_STATEMENT_TIMEOUT": "1500ms", "ORDERD_DB_LOCK_TIMEOUT": "250ms"},
			maxConns: 12, minConns: 2, statement: "1500ms", lockWait: "250ms"},
		{name: "rounded up to whole milliseconds", url: base, env: map[string]string{"ORDERD_DB_LOCK_TIMEOUT": "1.2ms"},
			maxConns: 32, minConns: 2, statement: "5000ms", lockWait: "2ms"},
		{name: "the URL's settings win", url: base + "&pool_max_conns=7&pool_min_conns=3&statement_timeout=900&lock_timeout=100",
			env:      map[string]string{"ORDERD_DB_MAX_CONNS": "12"},
			maxConns: 7, minConns: 3, statement: "900", lockWait: "100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ORDERD_DATABASE_URL", tc.url)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := ParseConfig(nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			pc, err := poolConfig(c, c.DatabaseURL, "-database-url")
			if err != nil {
				t.Fatal(err)
			}
			rp := pc.ConnConfig.RuntimeParams
			if pc.MaxConns != tc.maxConns || pc.MinConns != tc.minConns ||
				rp["statement_timeout"] != tc.statement || rp["lock_timeout"] != tc.lockWait {
				t.Errorf("pool = max %d, min %d, statement_timeout %q, lock_timeout %q; want %d, %d, %q, %q",
					pc.MaxConns, pc.MinConns, rp["statement_timeout"], rp["lock_timeout"],
					tc.maxConns, tc.minConns, tc.statement, tc.lockWait)
			}
		})
	}
}

// TestRefusesToStartWithBadLoadBounds runs orderd with a meaningless
// setting: it exits 2 before listening, with a message naming the setting.
func TestRefusesToStartWithBadLoadBounds(t *testing.T) {
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/orderd")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ORDERD_ADDR=127.0.0.1:0", "ORDERD_MAX_IN_FLIGHT=0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("orderd with ORDERD_MAX_IN_FLIGHT=0: %v, want exit status 2\n%s", err, out)
	}
	if want := "orderd: -max-in-flight (ORDERD_MAX_IN_FLIGHT) must be at least 1"; !strings.Contains(string(out), want) {
		t.Errorf("output = %q, want %q", out, want)
	}
}

// TestDatabaseTimeoutsAre503s runs orderd on PostgreSQL with short session
// timeouts and makes a cancel's write wait on the database: for a row lock
// another session holds (lock_timeout must fire), then in a slow trigger
// (statement_timeout must fire). Each is a 503 problem with Retry-After
// whose detail names the SQLSTATE, so it is known which bound ended the wait
// (the lease, which also bounds that write, is longer). Nothing final is
// stored: once the key's lease has lapsed, the retry with the same key
// cancels the order.
func TestDatabaseTimeoutsAre503s(t *testing.T) {
	url := pgtest.NewDatabase(t)
	p := start(t, "ORDERD_DATABASE_URL="+url, "ORDERD_DB_LOCK_TIMEOUT=200ms", "ORDERD_DB_STATEMENT_TIMEOUT=2s",
		"ORDERD_PROVIDER_TIMEOUT=1s", "ORDERD_LEASE=8s", "ORDERD_COMPLETER_INTERVAL=1h")
	t.Cleanup(func() { p.stop(t) }) // after the parallel subtests
	ctx := context.Background()
	// An update of an order listed in test_slow_orders sleeps in a trigger.
	// This test's own database gets them before any traffic, so that no
	// DDL lock gets in the way of the subtests' statements.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `
		CREATE TABLE test_slow_orders (id text PRIMARY KEY);
		CREATE FUNCTION test_slow_update() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM test_slow_orders WHERE id = OLD.id) THEN
				PERFORM pg_sleep(60);
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_slow_update BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION test_slow_update();`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, sqlstate string
		// obstruct gets in the way of a write of order id through conn;
		// the returned function removes the obstacle.
		obstruct func(t *testing.T, conn *pgx.Conn, id string) func()
	}{
		{"a row lock held elsewhere ends with lock_timeout", "55P03", func(t *testing.T, conn *pgx.Conn, id string) func() {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1 FROM orders WHERE id = $1 FOR UPDATE`, id); err != nil {
				t.Fatal(err)
			}
			return func() { _ = tx.Rollback(ctx) }
		}},
		{"a slow statement ends with statement_timeout", "57014", func(t *testing.T, conn *pgx.Conn, id string) func() {
			if _, err := conn.Exec(ctx, `INSERT INTO test_slow_orders VALUES ($1)`, id); err != nil {
				t.Fatal(err)
			}
			return func() {
				if _, err := conn.Exec(ctx, `DELETE FROM test_slow_orders WHERE id = $1`, id); err != nil {
					t.Error(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			body := strings.Replace(orderBody, "cus_proc", "cus_timeout_"+tc.sqlstate, 1) // an order of its own
			created := post(t, p.addr, "/v1/orders", "", body)
			if created.status != http.StatusCreated || created.replayed {
				t.Fatalf("create = %+v, want a fresh 201", created)
			}
			key := "cancel-" + tc.sqlstate
			remove := tc.obstruct(t, conn, created.id)
			r := postProblem(t, p.addr, "/v1/orders/"+created.id+"/cancel", key)
			remove()
			if r.status != http.StatusServiceUnavailable || r.contentType != "application/problem+json" ||
				r.problemType != "https://orderly.dev/problems/unavailable" || r.retryAfter == "" ||
				!strings.Contains(r.detail, tc.sqlstate) {
				t.Fatalf("cancel = %+v, want a 503 unavailable problem with Retry-After naming %s", r, tc.sqlstate)
			}
			// The failed write leaves the key held until its lease lapses:
			// until then a retry is told to come back later.
			for deadline := time.Now().Add(time.Minute); ; {
				r = postProblem(t, p.addr, "/v1/orders/"+created.id+"/cancel", key)
				if r.status != http.StatusConflict || r.problemType != "https://orderly.dev/problems/idempotency_key_in_progress" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the key is still in progress a minute later: %+v", r)
				}
				secs, _ := strconv.Atoi(r.retryAfter)
				time.Sleep(time.Duration(max(secs, 1)) * time.Second)
			}
			if r.status != http.StatusOK || r.state != "CANCELLED" {
				t.Errorf("retry = %+v, want 200 CANCELLED", r)
			}
		})
	}
}

// problemReply is a response as TestDatabaseTimeoutsAre503s inspects it:
// a problem's type and detail, or an order's state.
type problemReply struct {
	status                  int
	problemType, detail     string
	retryAfter, contentType string
	state                   string
}

// postProblem posts an empty body to path with key, through a client whose
// timeout fails a request that hangs.
func postProblem(t *testing.T, addr, path, key string) problemReply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var p struct{ Type, Detail, State string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return problemReply{resp.StatusCode, p.Type, p.Detail, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), p.State}
}

// TestBackgroundStopWaitsForWorkers: stopping the workers (before the store
// closes) waits for a pass that is still running, such as a completer pass
// in the middle of a provider call. Deterministic with testing/synctest:
// once every goroutine of the bubble is durably blocked (the worker on its
// release, stop either waiting for it or returned), stop must not have
// returned; released, the worker finishes and only then does stop return.
func TestBackgroundStopWaitsForWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBackground(context.Background())
		release := make(chan struct{})
		var finished atomic.Bool
		ran := false
		b.every(time.Hour, func(ctx context.Context) {
			if ran {
				return
			}
			ran = true
			<-ctx.Done() // stop was called; a provider call would carry on
			<-release
			finished.Store(true)
		})
		synctest.Wait() // the worker's first pass is running
		stopped := make(chan bool, 1)
		go func() {
			b.stop()
			stopped <- finished.Load()
		}()
		synctest.Wait() // the worker holds on release; stop has returned or waits
		select {
		case <-stopped:
			close(release)
			t.Fatal("stop returned while a worker was still running")
		default:
		}
		close(release)
		if !<-stopped {
			t.Fatal("stop returned before the worker finished")
		}
	})
}

// TestDurationFloors: every duration setting below its floor is refused at
// start with a message naming the setting, its variable and the floor.
// Regression: 1ns intervals, webhook timeout and window, and a 3ms lease
// were accepted and left a service that answered 503 forever.
func TestDurationFloors(t *testing.T) {
	c, err := ParseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.durationFloors() {
		if f.value < f.floor {
			t.Errorf("the default of -%s (%s) is below its floor %s", f.flag, f.value, f.floor)
		}
		t.Run(f.flag, func(t *testing.T) {
			below := f.floor - time.Nanosecond
			if f.floor == 0 {
				below = -time.Second
			}
			env := envName(f.flag)
			t.Setenv(env, below.String())
			_, err := ParseConfig(nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "-"+f.flag+" ("+env+")") || !strings.Contains(err.Error(), "at least "+f.floor.String()) {
				t.Errorf("%s=%s: err = %v, want one naming -%s, %s and its floor %s", env, below, err, f.flag, env, f.floor)
			}
		})
	}
	for _, tc := range []struct{ env, value string }{
		{"ORDERD_LEASE", "3ms"}, {"ORDERD_WEBHOOK_TIMEOUT", "1ns"}, {"ORDERD_WEBHOOK_RETRY_WINDOW", "1ns"},
		{"ORDERD_WEBHOOK_INTERVAL", "1ns"}, {"ORDERD_COMPLETER_INTERVAL", "1ns"}, {"ORDERD_SWEEP_INTERVAL", "1ns"},
		{"ORDERD_PUBLISH_INTERVAL", "1ns"}, {"ORDERD_PROVIDER_TIMEOUT", "1ns"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			if _, err := ParseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), tc.env) {
				t.Errorf("%s=%s: err = %v, want one naming %s", tc.env, tc.value, err, tc.env)
			}
		})
	}
}

// TestParseConfigUnparsableValue: a value orderd cannot parse at all (a
// duration without its unit, a word for a number) stops it with a message
// naming the flag, its variable, the value and what it takes, as every
// other setting orderd cannot use does (README "Quick start"), not ff's
// "parse error".
func TestParseConfigUnparsableValue(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"ORDERD_LEASE", "30", `-lease (ORDERD_LEASE): "30" is not a duration`},
		{"ORDERD_MAX_IN_FLIGHT", "lots", `-max-in-flight (ORDERD_MAX_IN_FLIGHT): "lots" is not an integer`},
		{"ORDERD_GROUP_COMMIT", "maybe", `-group-commit (ORDERD_GROUP_COMMIT): "maybe" is not true or false`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, err := ParseConfig(nil, io.Discard)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%s=%s: err = %v, want one starting %s", tc.env, tc.value, err, tc.want)
			}
		})
	}
}
