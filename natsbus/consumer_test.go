package natsbus_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// fakeMsg is a delivery of a command message that records how it was
// acknowledged. Each fakeMsg is one delivery; several with the same
// subject, headers and body are redeliveries.
type fakeMsg struct {
	jetstream.Msg // methods the consumer does not call panic
	subject       string
	header        nats.Header
	data          []byte
	mu            sync.Mutex
	acked, nakked bool
	termed        bool
	seq           uint64
}

func (m *fakeMsg) Subject() string { return m.subject }
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: "FAKE", Sequence: jetstream.SequencePair{Stream: m.seq}, Timestamp: time.Now()}, nil
}
func (m *fakeMsg) Headers() nats.Header { return m.header }
func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) DoubleAck(context.Context) error {
	m.mu.Lock()
	m.acked = true
	m.mu.Unlock()
	return nil
}
func (m *fakeMsg) NakWithDelay(time.Duration) error {
	m.mu.Lock()
	m.nakked = true
	m.mu.Unlock()
	return nil
}
func (m *fakeMsg) Term() error {
	m.mu.Lock()
	m.termed = true
	m.mu.Unlock()
	return nil
}

// fakeJS records dead letters instead of publishing them.
type fakeJS struct {
	jetstream.JetStream
	mu   sync.Mutex
	dead []*nats.Msg
}

func (j *fakeJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	j.mu.Lock()
	j.dead = append(j.dead, m)
	j.mu.Unlock()
	return &jetstream.PubAck{}, nil
}

func payJSON(o order.Order) []byte {
	b, _ := json.Marshal(map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": testmode.MethodApproved})
	return b
}

// apiKeys are the keys the consumers under test know: testenv's.
var apiKeys = map[string]string{testenv.KeyA: testenv.TenantA, testenv.KeyB: testenv.TenantB}

// keyOf is the API key a test signs tenant's commands with ("" for an
// unknown tenant: the command is signed with a made-up key).
func keyOf(tenant string) string {
	for k, t := range apiKeys {
		if t == tenant {
			return k
		}
	}
	return "sk_not_a_key_of_" + tenant
}

var fakeSeq atomic.Uint64

// command is a delivery of tenant's op command signed with the tenant's key.
func command(tenant, op, orderID, key string, body []byte) *fakeMsg {
	m := nats.NewMsg(natsbus.CommandSubject(natsbus.DefaultRoot, tenant, op))
	m.Header.Set(natsbus.OrderIDHeader, orderID)
	m.Header.Set(nats.MsgIdHdr, key)
	m.Data = body
	natsbus.Sign(m, keyOf(tenant), time.Now())
	return &fakeMsg{subject: m.Subject, header: m.Header, data: body, seq: fakeSeq.Add(1)}
}

// httpPay pays o over HTTP with key.
func httpPay(env *testenv.Env, o order.Order, key string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/v1/orders/"+o.ID+"/pay", strings.NewReader(string(payJSON(o))))
	req.Header.Set("Authorization", "Bearer "+testenv.KeyA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// httpGet GETs path as the tenant of apiKey and returns the status.
func httpGet(env *testenv.Env, apiKey, path string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, env.Server.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func createOrder(t *testing.T, env *testenv.Env) order.Order {
	t.Helper()
	return createOrderOf(t, env, testenv.TenantA)
}

func createOrderOf(t *testing.T, env *testenv.Env, tenant string) order.Order {
	t.Helper()
	res, err := env.Service.Create(t.Context(), tenant, idempotency.Key{}, order.NewOrderInput{
		CustomerID: "cus_bus", Currency: "EUR", Items: []order.Item{{SKU: "sku", Quantity: 1, UnitPrice: 900}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Order
}

func newConsumer(env *testenv.Env, js jetstream.JetStream) *natsbus.Consumer {
	return natsbus.New(js, env.Service, natsbus.Config{APIKeys: apiKeys})
}

// TestRedeliveriesAndHTTPTwinTakeEffectOnce: one pay command delivered ten
// times and sent five times over HTTP with the same key, all at once in a
// shuffled order: one capture, one transition; every delivery is acked or
// Nak'd for a retry, none dead-lettered.
func TestRedeliveriesAndHTTPTwinTakeEffectOnce(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t, kind, testenv.Options{})
			js := &fakeJS{}
			c := newConsumer(env, js)
			o := createOrder(t, env)
			key := "bus-" + uuid.NewString()
			var msgs []*fakeMsg
			var jobs []func()
			for range 10 {
				m := command(testenv.TenantA, "pay", o.ID, key, payJSON(o))
				msgs = append(msgs, m)
				jobs = append(jobs, func() { c.Handle(t.Context(), m) })
			}
			for range 5 {
				jobs = append(jobs, func() {
					if st, err := httpPay(env, o, key); err != nil || (st != 200 && st != 409) {
						t.Errorf("HTTP twin: %d, %v", st, err)
					}
				})
			}
			rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
			var wg sync.WaitGroup
			for _, j := range jobs {
				wg.Go(j)
			}
			wg.Wait()
			for i, m := range msgs {
				if m.termed || (!m.acked && !m.nakked) {
					t.Errorf("delivery %d: acked=%v nakked=%v termed=%v", i, m.acked, m.nakked, m.termed)
				}
			}
			// A Nak'd delivery comes back: the redelivery replays the outcome.
			again := command(testenv.TenantA, "pay", o.ID, key, payJSON(o))
			c.Handle(t.Context(), again)
			if !again.acked {
				t.Fatalf("a redelivery after the effect was not acked: %+v", again)
			}
			got, _ := env.Service.Get(t.Context(), testenv.TenantA, o.ID)
			if got.State != order.Paid || got.Version != o.Version+1 {
				t.Fatalf("order %s v%d, want PAID v%d", got.State, got.Version, o.Version+1)
			}
			if n := env.Gateway.Captures(o.ID); n != 1 {
				t.Fatalf("captures = %d, want 1", n)
			}
			if len(js.dead) != 0 {
				t.Fatalf("%d dead letters, want none", len(js.dead))
			}
		})
	}
}

// httpRefund asks over HTTP for a partial refund of amount of o with key.
func httpRefund(env *testenv.Env, o order.Order, key string, amount int64) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/v1/orders/"+o.ID+"/refunds", strings.NewReader(string(refundJSON(o, amount))))
	req.Header.Set("Authorization", "Bearer "+testenv.KeyA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func refundJSON(o order.Order, amount int64) []byte {
	b, _ := json.Marshal(map[string]any{"amount": amount, "currency": o.Currency, "reason": "returned"})
	return b
}

// TestRefundCommandsTakeEffectOnce (issue 16): a partial refund sent as a
// bus command (subject …commands.refund), delivered eight times and sent
// three times over HTTP with the same key, all at once: one refund at the
// provider, 300 refunded, every delivery acked or Nak'd, none
// dead-lettered; a refund command above what is left is dead-lettered
// refund_exceeds_captured and refunds nothing.
func TestRefundCommandsTakeEffectOnce(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t, kind, testenv.Options{})
			js := &fakeJS{}
			c := newConsumer(env, js)
			o := createOrder(t, env)
			if st, err := httpPay(env, o, "pay-"+uuid.NewString()); err != nil || st != 200 {
				t.Fatalf("HTTP pay: %d %v", st, err)
			}
			key := "bus-refund-" + uuid.NewString()
			var msgs []*fakeMsg
			var jobs []func()
			for range 8 {
				m := command(testenv.TenantA, "refund", o.ID, key, refundJSON(o, 300))
				msgs = append(msgs, m)
				jobs = append(jobs, func() { c.Handle(t.Context(), m) })
			}
			for range 3 {
				jobs = append(jobs, func() {
					if st, err := httpRefund(env, o, key, 300); err != nil || (st != 200 && st != 409) {
						t.Errorf("HTTP twin: %d, %v", st, err)
					}
				})
			}
			rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
			var wg sync.WaitGroup
			for _, j := range jobs {
				wg.Go(j)
			}
			wg.Wait()
			for i, m := range msgs {
				if m.termed || (!m.acked && !m.nakked) {
					t.Errorf("delivery %d: acked=%v nakked=%v termed=%v", i, m.acked, m.nakked, m.termed)
				}
			}
			again := command(testenv.TenantA, "refund", o.ID, key, refundJSON(o, 300))
			c.Handle(t.Context(), again)
			if !again.acked {
				t.Fatalf("a redelivery after the refund was not acked: %+v", again)
			}
			if st, err := httpRefund(env, o, key, 300); err != nil || st != 200 {
				t.Fatalf("HTTP replay of the bus refund: %d %v", st, err)
			}
			if n := env.Gateway.Refunds(o.ID); n != 1 {
				t.Fatalf("provider refunds = %d, want 1", n)
			}
			got, err := env.Service.Get(t.Context(), testenv.TenantA, o.ID)
			if err != nil || got.State != order.Paid || got.AmountRefunded == nil || *got.AmountRefunded != 300 {
				t.Fatalf("order = %+v, %v; want PAID with 300 refunded", got, err)
			}
			if len(js.dead) != 0 {
				t.Fatalf("%d dead letters, want none", len(js.dead))
			}
			over := command(testenv.TenantA, "refund", o.ID, "bus-over-"+uuid.NewString(), refundJSON(o, o.Amount))
			c.Handle(t.Context(), over)
			if !over.termed || over.acked || len(js.dead) != 1 || js.dead[0].Header.Get(natsbus.ReasonHeader) != "refund_exceeds_captured" {
				t.Fatalf("refund above what is left: termed %v acked %v, %d dead letters; want one refund_exceeds_captured", over.termed, over.acked, len(js.dead))
			}
			if got := js.dead[0].Subject; got != natsbus.DeadLetterSubject(natsbus.DefaultRoot, testenv.TenantA, "refund") {
				t.Fatalf("dead letter subject %q", got)
			}
			if n := env.Gateway.Refunds(o.ID); n != 1 {
				t.Fatalf("provider refunds after the refused command = %d, want 1", n)
			}
		})
	}
}

// TestRejectedCommandsAreDeadLettered: a key reused for another request, an
// unknown tenant, malformed money: dead-lettered with the reason, Term'd,
// and never applied.
func TestRejectedCommandsAreDeadLettered(t *testing.T) {
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	js := &fakeJS{}
	c := newConsumer(env, js)
	o := createOrder(t, env)
	key := "bus-" + uuid.NewString()
	if st, err := httpPay(env, o, key); err != nil || st != 200 {
		t.Fatalf("HTTP pay: %d %v", st, err)
	}
	other := createOrder(t, env)
	for _, tc := range []struct {
		name, reason string
		m            *fakeMsg
	}{
		{"key reused for another order", "idempotency_key_reused", command(testenv.TenantA, "pay", other.ID, key, payJSON(other))},
		{"unknown tenant", "unknown_tenant", command("mallory", "cancel", other.ID, "k-"+uuid.NewString(), nil)},
		{"amount missing", "invalid", command(testenv.TenantA, "pay", other.ID, "k-"+uuid.NewString(), []byte(`{"currency":"EUR","payment_method":"pm_card_visa"}`))},
		{"unknown operation", "unknown_operation", command(testenv.TenantA, "ship", other.ID, "k-"+uuid.NewString(), nil)},
		{"refund amount missing", "invalid", command(testenv.TenantA, "refund", o.ID, "k-"+uuid.NewString(), []byte(`{"currency":"EUR"}`))},
		{"no key", "missing_idempotency_key", command(testenv.TenantA, "cancel", other.ID, "", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(js.dead)
			c.Handle(t.Context(), tc.m)
			if !tc.m.termed || tc.m.acked {
				t.Fatalf("termed %v acked %v, want Term", tc.m.termed, tc.m.acked)
			}
			if len(js.dead) != before+1 || !strings.HasPrefix(js.dead[before].Header.Get(natsbus.ReasonHeader), tc.reason) {
				t.Fatalf("dead letters: %d (want %d) reason %q", len(js.dead), before+1, js.dead[len(js.dead)-1].Header.Get(natsbus.ReasonHeader))
			}
		})
	}
	if got, _ := env.Service.Get(t.Context(), testenv.TenantA, other.ID); got.State != order.Received || got.Version != other.Version {
		t.Fatalf("a rejected command changed the order: %s v%d", got.State, got.Version)
	}
}

// TestJetStreamEndToEnd: commands published to a real stream are applied
// once (a duplicate publish is dropped by the stream, an HTTP twin replays),
// and a reused key lands on the dead-letter subject with its reason.
func TestJetStreamEndToEnd(t *testing.T) {
	js := testenv.JetStream(t)
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	root, stream := "test"+id, "TEST_COMMANDS_"+id
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := natsbus.EnsureStream(ctx, js, stream, root, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	c := natsbus.New(js, env.Service, natsbus.Config{
		Root: root, Stream: stream, Durable: "orderd-" + id, APIKeys: apiKeys})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	o, other := createOrder(t, env), createOrder(t, env)
	key := "bus-" + uuid.NewString()
	publish := func(orderID string, body []byte) {
		m := nats.NewMsg(natsbus.CommandSubject(root, testenv.TenantA, "pay"))
		m.Header.Set(natsbus.OrderIDHeader, orderID)
		m.Header.Set(nats.MsgIdHdr, key)
		m.Data = body
		natsbus.Sign(m, testenv.KeyA, time.Now())
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		publish(o.ID, payJSON(o))
	}
	for {
		if got, _ := env.Service.Get(ctx, testenv.TenantA, o.ID); got.State == order.Paid {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err := httpPay(env, o, key); err != nil || st != 200 {
		t.Fatalf("HTTP twin: %d, %v", st, err)
	}
	// A key first used over HTTP for o, then sent on the bus for another
	// order: the stream has not seen it, the ledger has — dead-lettered.
	reused := "http-" + uuid.NewString()
	if st, err := httpPay(env, other, reused); err != nil || st != 200 {
		t.Fatalf("HTTP pay of the other order: %d, %v", st, err)
	}
	dead, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{natsbus.DeadLetterSubject(root, "*", "*")}})
	if err != nil {
		t.Fatal(err)
	}
	third := createOrder(t, env)
	key = reused
	publish(third.ID, payJSON(third))
	dl, err := dead.Next(jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if r := dl.Headers().Get(natsbus.ReasonHeader); r != "idempotency_key_reused" {
		t.Fatalf("dead letter reason %q, want idempotency_key_reused", r)
	}
	// The rejected command is terminated, not left pending: a server that
	// ignored the termination would redeliver it (and dead-letter it
	// again) every AckWait.
	cons, err := js.Consumer(ctx, stream, "orderd-"+id)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	for range 300 {
		if info, err = cons.Info(ctx); err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("the consumer still holds commands after the dead letter: %+v, %v", info, err)
	}
	if got, _ := env.Service.Get(ctx, testenv.TenantA, third.ID); got.State != order.Received {
		t.Fatalf("the rejected command paid the order: %s", got.State)
	}
	if n := env.Gateway.Captures(o.ID); n != 1 {
		t.Fatalf("captures of the order = %d, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
