package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/store/pgtest"
)

// hookReceiver is a loopback webhook endpoint: while hold is set it keeps
// every request waiting (a delivery in flight when orderd is killed);
// afterwards it records each event and answers 204.
type hookReceiver struct {
	*httptest.Server
	secret   string
	hold     atomic.Bool
	inFlight chan struct{} // gets a value when a held request arrives
	mu       sync.Mutex
	got      []event.Event
	badSigs  int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{inFlight: make(chan struct{}, 100)}
	h.hold.Store(true)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if h.hold.Load() {
			h.inFlight <- struct{}{}
			<-r.Context().Done() // until the sender is gone
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if event.Verify(h.secret, r.Header.Get(event.SignatureHeader), body, time.Now(), 5*time.Minute) != nil {
			h.badSigs++
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev event.Event
		_ = json.Unmarshal(body, &ev)
		h.got = append(h.got, ev)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

// TestEventsSurviveSIGKILL: orderd is killed with SIGKILL while creates and
// pays are in flight and while a webhook delivery is being sent. After a
// restart: every order that exists has one event per version and no event
// exists without its change (the outbox commits with the change), and
// every event is delivered, at least once, in each order's sequence, with
// valid signatures (the killed instance's leased delivery is taken over).
func TestEventsSurviveSIGKILL(t *testing.T) {
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			env := []string{
				"ORDERD_ADDR=127.0.0.1:0", "ORDERD_API_KEYS=" + tenant + ":" + apiKey, "ORDERD_LOG_LEVEL=info",
				"ORDERD_WEBHOOK_ALLOW_PRIVATE=true", "ORDERD_WEBHOOK_TIMEOUT=1s", "ORDERD_WEBHOOK_INTERVAL=100ms",
				"ORDERD_WEBHOOK_BACKOFF=100ms",
			}
			if kind == "postgres" {
				env = append(env, "ORDERD_DATABASE_URL="+pgtest.NewDatabase(t))
			} else {
				env = append(env, "ORDERD_DATA_DIR="+t.TempDir())
			}
			od := startProc(t, "orderd", "orderd", env...)
			api := &orderdAPI{base: "http://" + od.addr, hc: &http.Client{Timeout: 10 * time.Second}, ct: &countingTransport{}}
			ctx := context.Background()

			recv := newHookReceiver(t)
			r := api.do(ctx, http.MethodPost, "/v1/webhook-endpoints", "", map[string]any{"url": recv.URL + "/hook", "events": event.Types})
			if r.status != http.StatusCreated {
				t.Fatalf("create endpoint: %s %s", r, r.body)
			}
			var ep event.Endpoint
			_ = json.Unmarshal([]byte(r.body), &ep)
			recv.secret = ep.Secret

			// Traffic until the kill: creates and pays from a few clients.
			var stop atomic.Bool
			var wg sync.WaitGroup
			for c := range 4 {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						r := api.do(ctx, http.MethodPost, "/v1/orders", fmt.Sprintf("c%d-%d", c, i), map[string]any{
							"customer_id": "cus_kill", "currency": "USD",
							"items": []map[string]any{{"sku": "sku_fault", "quantity": 3, "unit_price": 999}}})
						if r.status == http.StatusCreated {
							api.do(ctx, http.MethodPost, "/v1/orders/"+r.order.ID+"/pay", fmt.Sprintf("p%d-%d", c, i), payBody("pm_card_visa"))
						}
					}
				})
			}
			select {
			case <-recv.inFlight: // a delivery is being sent
			case <-time.After(60 * time.Second):
				t.Fatal("no webhook delivery started")
			}
			od.signal(t, syscall.SIGKILL)
			stop.Store(true)
			wg.Wait()
			if exited, err := od.Wait(30 * time.Second); !exited {
				t.Fatalf("orderd did not die: %v", err)
			}
			recv.hold.Store(false)
			if err := od.Restart(); err != nil {
				t.Fatal(err)
			}
			api.base = "http://" + od.Addr()

			// Every order's events: 1..version, nothing more.
			orders := map[string]int64{}
			for cursor := ""; ; {
				q := url.Values{"limit": {"100"}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				r := api.do(ctx, http.MethodGet, "/v1/orders?"+q.Encode(), "", nil)
				var page struct {
					Data       []orderJSON `json:"data"`
					NextCursor string      `json:"next_cursor"`
				}
				if err := json.Unmarshal([]byte(r.body), &page); err != nil || r.status != 200 {
					t.Fatalf("list orders: %s", r.body)
				}
				for _, o := range page.Data {
					orders[o.ID] = o.Version
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			want := 0
			for _, v := range orders {
				want += int(v)
			}
			if len(orders) == 0 {
				t.Fatal("no order was created before the kill")
			}
			seqs := map[string][]int64{}
			deadline := time.Now().Add(60 * time.Second)
			for feedCursor, n := "", 0; n < want && time.Now().Before(deadline); {
				q := url.Values{"limit": {"100"}}
				if feedCursor != "" {
					q.Set("after", feedCursor)
				}
				r := api.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), "", nil)
				var page struct {
					Data       []event.Event `json:"data"`
					NextCursor string        `json:"next_cursor"`
				}
				if err := json.Unmarshal([]byte(r.body), &page); err != nil || r.status != 200 {
					t.Fatalf("feed: %s", r.body)
				}
				for _, e := range page.Data {
					seqs[e.OrderID] = append(seqs[e.OrderID], e.Sequence)
				}
				n += len(page.Data)
				feedCursor = page.NextCursor
				if len(page.Data) == 0 {
					time.Sleep(50 * time.Millisecond)
				}
			}
			for id, v := range orders {
				if got := fmt.Sprint(seqs[id]); got != fmt.Sprint(sequence(v)) {
					t.Errorf("order %s at version %d has events %s", id, v, got)
				}
			}
			for id := range seqs {
				if _, ok := orders[id]; !ok {
					t.Errorf("events %v for order %s, which does not exist", seqs[id], id)
				}
			}

			// Delivery completes after the restart.
			for time.Now().Before(deadline.Add(60 * time.Second)) {
				recv.mu.Lock()
				n := len(recv.got)
				recv.mu.Unlock()
				if n >= want {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			recv.mu.Lock()
			defer recv.mu.Unlock()
			if recv.badSigs > 0 {
				t.Errorf("%d deliveries with a bad signature", recv.badSigs)
			}
			delivered := map[string][]int64{}
			for _, e := range recv.got {
				if s := delivered[e.OrderID]; len(s) > 0 && e.Sequence < s[len(s)-1] {
					t.Errorf("order %s: sequence %d delivered after %d", e.OrderID, e.Sequence, s[len(s)-1])
				}
				delivered[e.OrderID] = append(delivered[e.OrderID], e.Sequence)
			}
			for id, v := range orders {
				seen := map[int64]bool{}
				for _, s := range delivered[id] {
					seen[s] = true
				}
				for s := int64(1); s <= v; s++ {
					if !seen[s] {
						t.Errorf("order %s: event %d never delivered (delivered %v)", id, s, delivered[id])
					}
				}
			}
			t.Logf("%s: %d orders, %d events, %d deliveries after a SIGKILL", kind, len(orders), want, len(recv.got))
		})
	}
}

func sequence(n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}
