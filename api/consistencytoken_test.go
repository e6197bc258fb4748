package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
)

// tokenStore is a store with replicas as the API sees it: every
// ConsistencyToken call (a round trip to the primary on PostgreSQL) is
// counted, and reads go to the store itself.
type tokenStore struct {
	store.Store
	tokens atomic.Int64
}

func (s *tokenStore) ConsistencyToken(context.Context) string { s.tokens.Add(1); return "tok" }
func (s *tokenStore) ReadOrder(ctx context.Context, tenantID, id, _ string) (order.Order, error) {
	return s.GetOrder(ctx, tenantID, id)
}
func (s *tokenStore) ReadOrders(ctx context.Context, tenantID string, f order.Filter, _ string) ([]order.Order, error) {
	return s.ListOrders(ctx, tenantID, f)
}

// TestConsistencyTokenOnlyOnFreshWrites: with replicas configured, a
// create or a pay that has just succeeded carries Orderly-Consistency-Token
// and costs one token read; a replay of either, a 4xx (invalid body, an
// unknown order, a decline) and a GET carry none and read none (issue 19:
// the round trip only where a replica could serve the next read stale).
func TestConsistencyTokenOnlyOnFreshWrites(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		loc := t.TempDir()
		if kind == testenv.Postgres {
			loc = pgtest.NewDatabase(t)
		}
		st := &tokenStore{Store: testenv.Open(t, kind, loc)}
		t.Cleanup(func() { st.Close() })
		svc := service.New(st, simulator.NewIntentGateway(), simulator.NewWarehouse(), service.Config{})
		t.Cleanup(svc.Close)
		srv := httptest.NewServer(api.New(svc, api.Config{APIKeys: map[string]string{"sk_test_token_0001": "tenant_tok"}}))
		t.Cleanup(srv.Close)
		post := func(path, key, body string) (*http.Response, int64) {
			t.Helper()
			before := st.tokens.Load()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer sk_test_token_0001")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp, st.tokens.Load() - before
		}
		check := func(what string, resp *http.Response, reads int64, status int, token bool) {
			t.Helper()
			got := resp.Header.Get(api.ConsistencyTokenHeader) != ""
			if resp.StatusCode != status || got != token || (reads == 1) != token || reads > 1 {
				t.Errorf("%s: %d, token %v after %d token reads; want %d, token %v", what, resp.StatusCode, got, reads, status, token)
			}
		}
		body := `{"customer_id":"cus_tok","currency":"EUR","items":[{"sku":"S-1","quantity":1,"unit_price":500}]}`
		resp, n := post("/v1/orders", "k-create", body)
		check("create", resp, n, http.StatusCreated, true)
		id := strings.TrimPrefix(resp.Header.Get("Location"), "/v1/orders/")
		resp, n = post("/v1/orders", "k-create", body)
		check("create replay", resp, n, http.StatusCreated, false)
		resp, n = post("/v1/orders", "k-bad", `{"currency":"EUR"}`)
		check("invalid create", resp, n, http.StatusBadRequest, false)
		resp, n = post("/v1/orders/ord_nosuchorder/pay", "k-404", `{"amount":500,"currency":"EUR","payment_method":"`+testmode.MethodApproved+`"}`)
		check("pay of an unknown order", resp, n, http.StatusNotFound, false)
		pay := `{"amount":500,"currency":"EUR","payment_method":"` + testmode.MethodApproved + `"}`
		resp, n = post("/v1/orders/"+id+"/pay", "k-pay", pay)
		check("pay", resp, n, http.StatusOK, true)
		resp, n = post("/v1/orders/"+id+"/pay", "k-pay", pay)
		check("pay replay", resp, n, http.StatusOK, false)
	})
}
