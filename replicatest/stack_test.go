package replicatest

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/internal/pgpair"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store/postgres"
)

const (
	tenant = "tenant_r"
	apiKey = "sk_test_replicas_0001"
)

// stack is one in-process orderd: API, service and a Replicated store over
// the pair's database.
type stack struct {
	store *postgres.Replicated
	url   string
	logs  string // the path of its JSON log
}

// log returns what the stack has logged so far.
func (s *stack) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(s.logs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newStack opens database db of p with its standby as the one replica,
// under the staleness bound maxLag, and serves the API; all is closed when
// t ends.
func newStack(t *testing.T, p *pgpair.Pair, db string, maxLag time.Duration) *stack {
	t.Helper()
	primary, err := postgres.OpenConfig(t.Context(), poolConfig(t, p.PrimaryURL(db), 8))
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(t.TempDir(), "orderd.log")
	f, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	log := slog.New(slog.NewJSONHandler(f, nil))
	st, err := postgres.OpenReplicated(t.Context(), primary, postgres.ReplicaConfig{
		Replicas: []*pgxpool.Config{poolConfig(t, p.StandbyURL(db), 8)},
		MaxLag:   maxLag, CheckInterval: 50 * time.Millisecond, Logger: log,
	})
	if err != nil {
		primary.Close()
		t.Fatal(err)
	}
	svc := service.New(st, simulator.NewIntentGateway(), simulator.NewWarehouse(), service.Config{Logger: log, GroupCommit: true})
	srv := httptest.NewServer(api.New(svc, api.Config{APIKeys: map[string]string{apiKey: tenant}, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() {
		srv.Close()
		svc.Close()
		st.Close()
	})
	return &stack{store: st, url: srv.URL, logs: logs}
}

// reply is an HTTP answer as the tests look at it.
type reply struct {
	status  int
	token   string
	id      string
	state   string
	version int64
	body    string
}

// do sends one request to the API at base with the test's API key, key as
// Idempotency-Key ("" for none), token as the consistency token ("" for
// none) and body JSON-encoded (nil for none).
func do(t *testing.T, base, method, path, key, token string, body any, header ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if token != "" {
		req.Header.Set(api.ConsistencyTokenHeader, token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var o struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Version int64  `json:"version"`
	}
	_ = json.Unmarshal(b, &o)
	return reply{status: resp.StatusCode, token: resp.Header.Get(api.ConsistencyTokenHeader),
		id: o.ID, state: o.State, version: o.Version, body: strings.TrimSpace(string(b))}
}

var orderBody = map[string]any{"customer_id": "cus_replica", "currency": "EUR",
	"items": []map[string]any{{"sku": "book", "quantity": 2, "unit_price": 1250}}}

var payBody = map[string]any{"amount": 2500, "currency": "EUR", "payment_method": "pm_card_visa"}

func newKey() string { return uuid.NewString() }
