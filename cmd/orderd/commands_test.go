package main

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// TestCommandsAreAuthorizedByOrderd: the audit's reproduction on orderd as
// it runs (Run: one gate, the commands consumer, the API): with no
// credentials, a pay and then a cancel of tenant A's order were applied.
// Now both are dead-lettered "unauthorized" and the order does not move; the
// same pay signed with A's key is applied. A storm of 200 concurrent
// requests of one tenant on the default bounds is answered with 2xx and
// 429s, never a 5xx.
func TestCommandsAreAuthorizedByOrderd(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			s := startFloodStack(t, kind)
			js, err := jetstream.New(s.nc)
			if err != nil {
				t.Fatal(err)
			}
			dead, err := js.OrderedConsumer(t.Context(), s.stream, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{natsbus.DeadLetterSubject(s.root, "*", "*")}})
			if err != nil {
				t.Fatal(err)
			}
			o := s.post(t, "/v1/orders", keyA, uuid.NewString(), s.orderBody())
			for _, op := range []string{"pay", "cancel"} {
				m := nats.NewMsg(natsbus.CommandSubject(s.root, tenantA, op))
				m.Header.Set(nats.MsgIdHdr, "forged-"+uuid.NewString())
				m.Header.Set(natsbus.OrderIDHeader, o)
				if op == "pay" {
					m.Data = []byte(payBodyOf(testmode.MethodApproved))
				}
				if _, err := js.PublishMsg(t.Context(), m); err != nil {
					t.Fatal(err)
				}
				dl, err := dead.Next(jetstream.FetchMaxWait(2 * time.Minute))
				if err != nil {
					t.Fatalf("no dead letter for the unsigned %s: %v", op, err)
				}
				if r := dl.Headers().Get(natsbus.ReasonHeader); r != "unauthorized" || dl.Headers().Get(natsbus.OrderIDHeader) != o {
					t.Fatalf("dead letter of the unsigned %s: reason %q order %q", op, r, dl.Headers().Get(natsbus.OrderIDHeader))
				}
				if st := s.state(t, keyA, o); st != string(order.Received) {
					t.Fatalf("an unsigned %s moved the order to %s", op, st)
				}
			}
			s.publishPay(t, tenantA, keyA, o, testmode.MethodApproved)
			s.awaitPaid(t, keyA, o)

			var mu sync.Mutex
			statuses := map[int]int{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 200 {
				wg.Go(func() {
					<-start
					st, _ := s.do(http.MethodPost, "/v1/orders", keyA, uuid.NewString(), s.orderBody())
					mu.Lock()
					statuses[st]++
					mu.Unlock()
				})
			}
			close(start)
			wg.Wait()
			for st, n := range statuses {
				if st != http.StatusCreated && st != http.StatusTooManyRequests {
					t.Fatalf("one tenant's storm: %d answers %d (all: %v); want only 201 and 429", n, st, statuses)
				}
			}
		})
	}
}

// state returns the state of the tenant's order id.
func (s *floodStack) state(t *testing.T, apiKey, id string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.api+"/v1/orders/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := floodClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o struct{ State string }
	if err := jsonDecode(resp, &o); err != nil {
		t.Fatal(err)
	}
	return o.State
}
