package natsbus_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// TestUnauthenticatedCommandsAreRefused: a command that does not prove its
// tenant — unsigned, signed with another tenant's key, tampered with after
// signing (body, order, key, subject), or signed too long before the stream
// stored it — is dead-lettered as unauthorized and terminated, and never
// pays or cancels the order. (The audit's reproduction: with no
// credentials an order of tenant A was paid, then cancelled.)
func TestUnauthenticatedCommandsAreRefused(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t, kind, testenv.Options{})
			js := &fakeJS{}
			c := newConsumer(env, js)
			o := createOrder(t, env)
			signed := func(tenant, op, apiKey string, at time.Time, edit func(*nats.Msg)) *fakeMsg {
				m := nats.NewMsg(natsbus.CommandSubject(natsbus.DefaultRoot, tenant, op))
				m.Header.Set(natsbus.OrderIDHeader, o.ID)
				m.Header.Set(nats.MsgIdHdr, "k-"+uuid.NewString())
				if op == "pay" {
					m.Data = payJSON(o)
				}
				if apiKey != "" {
					natsbus.Sign(m, apiKey, at)
				}
				if edit != nil {
					edit(m)
				}
				return &fakeMsg{subject: m.Subject, header: m.Header, data: m.Data, seq: fakeSeq.Add(1)}
			}
			other := createOrder(t, env)
			now := time.Now()
			for _, tc := range []struct {
				name string
				m    *fakeMsg
			}{
				{"unsigned pay", signed(testenv.TenantA, "pay", "", now, nil)},
				{"unsigned cancel", signed(testenv.TenantA, "cancel", "", now, nil)},
				{"signed with tenant B's key", signed(testenv.TenantA, "pay", testenv.KeyB, now, nil)},
				{"body changed", signed(testenv.TenantA, "pay", testenv.KeyA, now, func(m *nats.Msg) { m.Data = []byte(`{"amount":1}`) })},
				{"order changed", signed(testenv.TenantA, "cancel", testenv.KeyA, now, func(m *nats.Msg) { m.Header.Set(natsbus.OrderIDHeader, other.ID) })},
				{"key changed", signed(testenv.TenantA, "cancel", testenv.KeyA, now, func(m *nats.Msg) { m.Header.Set(nats.MsgIdHdr, "k-other") })},
				{"moved to another operation", signed(testenv.TenantA, "fulfill", testenv.KeyA, now, func(m *nats.Msg) {
					m.Subject = natsbus.CommandSubject(natsbus.DefaultRoot, testenv.TenantA, "cancel")
				})},
				{"signed an hour before it was stored", signed(testenv.TenantA, "cancel", testenv.KeyA, now.Add(-time.Hour), nil)},
				{"signed an hour ahead", signed(testenv.TenantA, "cancel", testenv.KeyA, now.Add(time.Hour), nil)},
				{"malformed signature", signed(testenv.TenantA, "cancel", testenv.KeyA, now, func(m *nats.Msg) {
					m.Header.Set(natsbus.SignatureHeader, "v1=00")
				})},
			} {
				t.Run(tc.name, func(t *testing.T) {
					before := len(js.dead)
					c.Handle(t.Context(), tc.m)
					if !tc.m.termed || tc.m.acked || tc.m.nakked {
						t.Fatalf("termed %v acked %v nakked %v, want Term", tc.m.termed, tc.m.acked, tc.m.nakked)
					}
					if len(js.dead) != before+1 || js.dead[before].Header.Get(natsbus.ReasonHeader) != "unauthorized" {
						t.Fatalf("dead letters %d (want %d), reason %q, want unauthorized", len(js.dead), before+1,
							js.dead[len(js.dead)-1].Header.Get(natsbus.ReasonHeader))
					}
				})
			}
			for _, id := range []string{o.ID, other.ID} {
				if got, _ := env.Service.Get(t.Context(), testenv.TenantA, id); got.State != order.Received {
					t.Fatalf("an unauthenticated command moved order %s to %s", id, got.State)
				}
			}
			if n := env.Gateway.Captures(o.ID); n != 0 {
				t.Fatalf("%d captures, want none", n)
			}
			// The same pay, signed with the tenant's key, is applied.
			ok := command(testenv.TenantA, "pay", o.ID, "k-"+uuid.NewString(), payJSON(o))
			c.Handle(t.Context(), ok)
			if !ok.acked {
				t.Fatalf("a signed pay was not applied: %+v", ok)
			}
		})
	}
}

// streamEnv is a real commands stream of the test's own (deleted at the
// end) and a consumer of it running until the test ends.
type streamEnv struct {
	js           jetstream.JetStream
	root, stream string
	env          *testenv.Env
}

func newStreamEnv(t *testing.T, env *testenv.Env, cfg natsbus.Config) *streamEnv {
	t.Helper()
	js := testenv.JetStream(t)
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	s := &streamEnv{js: js, root: "test" + id, stream: "TEST_COMMANDS_" + id, env: env}
	if err := natsbus.EnsureStream(t.Context(), js, s.stream, s.root, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), s.stream) })
	cfg.Root, cfg.Stream, cfg.Durable, cfg.APIKeys = s.root, s.stream, "orderd-"+id, apiKeys
	c := natsbus.New(js, env.Service, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

// publish publishes a signed command and returns its stream sequence.
func (s *streamEnv) publish(t *testing.T, tenant, op, orderID, key string, body []byte) uint64 {
	t.Helper()
	m := nats.NewMsg(natsbus.CommandSubject(s.root, tenant, op))
	m.Header.Set(natsbus.OrderIDHeader, orderID)
	m.Header.Set(nats.MsgIdHdr, key)
	m.Data = body
	natsbus.Sign(m, keyOf(tenant), time.Now())
	ack, err := s.js.PublishMsg(t.Context(), m)
	if err != nil || ack.Duplicate {
		t.Fatalf("publish: %+v %v", ack, err)
	}
	return ack.Sequence
}

// awaitState waits (generously) until tenant's order id is in state.
func awaitState(t *testing.T, env *testenv.Env, tenant, id string, state order.State) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if got, _ := env.Service.Get(t.Context(), tenant, id); got.State == state {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("order %s never reached %s", id, state)
}

// TestForgedDeadLetterAhead: dead letters published in advance under the
// ids a real command's dead letter would get (the old "<key>/dead", and
// the stream sequences next in line) do not stand in for it: the command
// is terminated only once its own dead letter, with the true reason, is in
// the stream.
func TestForgedDeadLetterAhead(t *testing.T) {
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	s := newStreamEnv(t, env, natsbus.Config{})
	o, other := createOrder(t, env), createOrder(t, env)
	key := "bus-" + uuid.NewString()
	// The key is used for o over HTTP; the bus command reuses it for other.
	if st, err := httpPay(env, o, key); err != nil || st != 200 {
		t.Fatalf("HTTP pay: %d %v", st, err)
	}
	const forged = 10
	for i := range forged {
		m := nats.NewMsg(natsbus.DeadLetterSubject(s.root, testenv.TenantA, "pay"))
		m.Header.Set(natsbus.ReasonHeader, "forged")
		m.Header.Set(natsbus.OrderIDHeader, other.ID)
		id := key + "/dead"
		if i > 0 {
			// The forgeries take sequences 1..10; the command comes next.
			id = "dead:" + s.stream + ":" + strconv.Itoa(forged+i)
		}
		m.Header.Set(nats.MsgIdHdr, id)
		if _, err := s.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	seq := s.publish(t, testenv.TenantA, "pay", other.ID, key, payJSON(other))
	if seq <= forged || seq >= 2*forged {
		t.Fatalf("the command got sequence %d, not one a forgery named", seq)
	}
	dead, err := s.js.OrderedConsumer(t.Context(), s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{natsbus.DeadLetterSubject(s.root, "*", "*")}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for !found {
		m, err := dead.Next(jetstream.FetchMaxWait(2 * time.Minute))
		if err != nil {
			t.Fatalf("no dead letter with the true reason: %v", err)
		}
		found = m.Headers().Get(natsbus.ReasonHeader) == "idempotency_key_reused" &&
			m.Headers().Get(natsbus.SequenceHeader) == strconv.FormatUint(seq, 10)
	}
	if got, _ := env.Service.Get(t.Context(), testenv.TenantA, other.ID); got.State != order.Received {
		t.Fatalf("the rejected command moved the order to %s", got.State)
	}
}

// heldPays holds the charges of the orders in hold until release is
// closed; others go through at once.
type heldPays struct {
	payment.Gateway
	mu      sync.Mutex
	hold    map[string]bool
	entered chan string
	release chan struct{}
}

func (h *heldPays) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	h.mu.Lock()
	held := h.hold[req.Reference.OrderID]
	h.mu.Unlock()
	if held {
		h.entered <- req.Reference.OrderID
		<-h.release
	}
	return h.Gateway.Confirm(ctx, req)
}

// TestSlowCommandsHoldOnlyTheirTenant: five pays of tenant A held in their
// provider call do not delay tenant B's pay (the audit measured 0.9 s
// becoming 7.9 s when commands ran one at a time): B's is applied while
// A's are still held. A's commands share its HTTP slots: with A at its
// bound, A's HTTP request is a 429 and B's is served. Without per-tenant
// concurrency B's pay would wait for A's and the test would time out.
func TestSlowCommandsHoldOnlyTheirTenant(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			h := &heldPays{hold: map[string]bool{}, entered: make(chan string, 16), release: make(chan struct{})}
			gate := admission.New(admission.Config{MaxInFlight: 16, TenantMaxInFlight: 3})
			env := testenv.New(t, kind, testenv.Options{Gate: gate,
				WrapGateway: func(g payment.Gateway) payment.Gateway { h.Gateway = g; return h }})
			var released sync.Once
			release := func() { released.Do(func() { close(h.release) }) }
			s := newStreamEnv(t, env, natsbus.Config{Gate: gate})
			t.Cleanup(release) // before the consumer stops: it waits for the held pays
			var slow []order.Order
			for range 5 {
				o := createOrder(t, env)
				h.mu.Lock()
				h.hold[o.ID] = true
				h.mu.Unlock()
				slow = append(slow, o)
				s.publish(t, testenv.TenantA, "pay", o.ID, "slow-"+uuid.NewString(), payJSON(o))
			}
			for range 3 { // A's bound: three held at once, the others Nak'd for later
				select {
				case <-h.entered:
				case <-time.After(2 * time.Minute):
					t.Fatal("A's pays never reached the provider")
				}
			}
			b := createOrderOf(t, env, testenv.TenantB)
			s.publish(t, testenv.TenantB, "pay", b.ID, "fast-"+uuid.NewString(), payJSON(b))
			awaitState(t, env, testenv.TenantB, b.ID, order.Paid)
			for _, o := range slow {
				if got, _ := env.Service.Get(t.Context(), testenv.TenantA, o.ID); got.State != order.Received {
					t.Fatalf("a held pay of A finished before its release: %s", got.State)
				}
			}
			// A's commands hold A's slots, which its HTTP requests share.
			if st, err := httpGet(env, testenv.KeyA, "/v1/orders/"+slow[0].ID); err != nil || st != 429 {
				t.Fatalf("A's HTTP request with A's slots held by commands: %d %v, want 429", st, err)
			}
			if st, err := httpGet(env, testenv.KeyB, "/v1/orders/"+b.ID); err != nil || st != 200 {
				t.Fatalf("B's HTTP request: %d %v, want 200", st, err)
			}
			release()
			for _, o := range slow {
				awaitState(t, env, testenv.TenantA, o.ID, order.Paid)
				if n := env.Gateway.Captures(o.ID); n != 1 {
					t.Fatalf("captures of %s = %d, want 1", o.ID, n)
				}
			}
		})
	}
}
