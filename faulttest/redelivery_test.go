package faulttest

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store/pgtest"
)

// Knobs of TestRedeliveriesTakeEffectOnce.
const (
	// redeliveries is N: how many times every provider webhook and every
	// bus command is delivered again, in each round.
	redeliveries = 4
	// httpTwins is how many clients send each operation over HTTP, with
	// the bus command's key, while the bus copies arrive.
	httpTwins = 2
	// redeliveryOrders is how many orders each store gets.
	redeliveryOrders = 8
	// commandsDupWindow is the commands stream's duplicate window: short,
	// so that the copies a test publishes reach orderd (and its ledger)
	// instead of being dropped by the stream.
	commandsDupWindow = 200 * time.Millisecond
	// patience bounds every wait for a condition; generous, since two
	// shared cores run the race-built processes.
	patience = 3 * time.Minute
)

// TestRedeliveriesTakeEffectOnce is issue 8's duplicate test end to end,
// with real processes (orderd and paysim) on both stores and the machine's
// NATS JetStream. Every pay, fulfil and cancel is sent as a bus command
// (Nats-Msg-Id = idempotency key) redeliveries times, shuffled, while
// httpTwins clients send the same operation over HTTP with the same key;
// paysim sends signed webhooks with its fault knobs on (duplicates, delay,
// reorder, drops) through a tap that delivers every one of them to orderd
// redeliveries more times, concurrently. orderd is killed with SIGKILL while
// the pays are in flight and restarted (one orderd at a time: the embedded
// store is single-process). After the traffic, every webhook and every
// command is delivered redeliveries times again, shuffled, with HTTP
// retries of every operation.
//
// Partial refunds (issue 16) go the same way: of a PAID order before its
// cancel (which refunds the rest) and of a FULFILLED one (a return).
//
// Then, for every order: one capture (none after a decline), one shipment
// and the refunds as planned, paysim's ledger agreeing (their count and
// sum, and the order's amount_refunded); the order at the
// planned state and version; its events exactly the planned changes,
// sequence 1…version, and nothing else in the feed; every provider event
// taken in at most once (applied, already settled, unmatched or ignored;
// every other delivery a "duplicate"); every HTTP answer the operation's one outcome; the only
// dead letters the declined pay's copies.
func TestRedeliveriesTakeEffectOnce(t *testing.T) {
	js := testenv.JetStream(t)
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := startRedeliveryStack(t, kind, js)
			s.run(t)
		})
	}
}

// plannedOp is one operation of the test: sent on the bus and over HTTP
// with one key and one body; status is the one answer it must get.
type plannedOp struct {
	orderID string
	op      string // pay, fulfill, cancel or refund (a partial refund, issue 16)
	key     string
	body    map[string]any // nil for fulfil and cancel
	status  int

	accepted atomic.Int64 // bus copies the stream took in (not dropped as duplicates)
	mu       sync.Mutex
	answers  map[string]int // HTTP final answers: "status replayed?" → count
}

// path is op's HTTP route: a refund's is POST /v1/orders/{id}/refunds.
func (op *plannedOp) path() string {
	if op.op == "refund" {
		return "/v1/orders/" + op.orderID + "/refunds"
	}
	return "/v1/orders/" + op.orderID + "/" + op.op
}

// plannedOrder is one order and what must become of it.
type plannedOrder struct {
	id       string
	method   string // the pay's payment method
	second   string // fulfill or cancel
	events   []event.Type
	state    string
	captures int
	refunds  int
	refunded int64 // what the ledger's refunds of the order sum to (minor units)
	shipped  int
}

// redeliveryStack is the processes and the bus of one store's run.
type redeliveryStack struct {
	kind    string
	js      jetstream.JetStream
	root    string // the commands' subject root, the run's own
	stream  string
	durable string
	secret  string
	od      *proc
	addr    atomic.Pointer[string] // orderd's current address
	psa     *paysimAdmin
	tap     *webhookTap
	hc      *http.Client
}

// startRedeliveryStack starts paysim (webhooks on, through the tap, with
// its fault knobs) and orderd (provider webhooks and bus commands on, on a
// stream of the test's own that is deleted at the end).
func startRedeliveryStack(t *testing.T, kind string, js jetstream.JetStream) *redeliveryStack {
	var rb [5]byte
	_, _ = crand.Read(rb[:])
	id := hex.EncodeToString(rb[:])
	s := &redeliveryStack{kind: kind, js: js, root: "ft" + id, stream: "FT_COMMANDS_" + id, durable: "orderd-ft-" + id,
		secret: "whsec_fault_" + id, hc: &http.Client{Timeout: 20 * time.Second}}
	// Registered first, so it runs after orderd is gone.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, s.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Logf("deleting stream %s: %v", s.stream, err)
		}
	})
	s.tap = newWebhookTap(t, s)
	ps := startProc(t, "paysim", "paysim", "PAYSIM_ADDR=127.0.0.1:0", "PAYSIM_DATA_DIR="+t.TempDir(), "PAYSIM_LOG_LEVEL=info",
		"PAYSIM_WEBHOOK_URL="+s.tap.URL+"/provider/webhooks", "PAYSIM_WEBHOOK_SECRET="+s.secret,
		"PAYSIM_WEBHOOK_DUPLICATE_RATE=0.5", "PAYSIM_WEBHOOK_DROP_RATE=0.2",
		"PAYSIM_WEBHOOK_DELAY=100ms", "PAYSIM_WEBHOOK_REORDER_WINDOW=1s")
	s.psa = newPaysimAdmin(ps.addr)
	env := []string{
		"ORDERD_ADDR=127.0.0.1:0", "ORDERD_API_KEYS=" + tenant + ":" + apiKey, "ORDERD_LOG_LEVEL=info",
		"ORDERD_PAYMENT_URL=http://" + ps.addr, "ORDERD_WAREHOUSE_URL=http://" + ps.addr,
		"ORDERD_PROVIDER_TIMEOUT=1s", "ORDERD_LEASE=3s", "ORDERD_COMPLETER_INTERVAL=1s",
		"ORDERD_MAX_WAIT=2s", "ORDERD_REQUEST_TIMEOUT=5s", // the bus's ack wait is lease + request timeout
		"ORDERD_PROVIDER_WEBHOOK_SECRET=" + s.secret,
		"ORDERD_COMMANDS_NATS_URL=" + js.Conn().ConnectedUrl(), "ORDERD_COMMANDS_STREAM=" + s.stream,
		"ORDERD_COMMANDS_CONSUMER=" + s.durable, "ORDERD_COMMANDS_SUBJECT_ROOT=" + s.root,
		"ORDERD_COMMANDS_DUPLICATE_WINDOW=" + commandsDupWindow.String(),
	}
	if kind == "postgres" {
		env = append(env, "ORDERD_DATABASE_URL="+pgtest.NewDatabase(t))
	} else {
		env = append(env, "ORDERD_DATA_DIR="+t.TempDir())
	}
	s.od = startProc(t, "orderd", "orderd", env...)
	s.setAddr(s.od.addr)
	return s
}

func (s *redeliveryStack) setAddr(a string) { s.addr.Store(&a) }

// api is a client of orderd at its current address.
func (s *redeliveryStack) api() *orderdAPI {
	return &orderdAPI{base: "http://" + *s.addr.Load(), hc: s.hc, ct: &countingTransport{}}
}

// webhookTap stands between paysim and orderd's provider webhook endpoint:
// it forwards paysim's deliveries (answering what orderd answered, so paysim
// retries what failed), keeps every event, and delivers each one
// redeliveries more times on its own, at random moments.
type webhookTap struct {
	*httptest.Server
	s  *redeliveryStack
	wg sync.WaitGroup

	mu       sync.Mutex
	bodies   map[string][]byte         // event id → body
	types    map[string]string         // event id → type
	outcomes map[string]map[string]int // event id → orderd's answers (outcome, or the status) → count
}

func newWebhookTap(t *testing.T, s *redeliveryStack) *webhookTap {
	w := &webhookTap{s: s, bodies: map[string][]byte{}, types: map[string]string{}, outcomes: map[string]map[string]int{}}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var ev paysim.WebhookEvent
		if err == nil {
			err = json.Unmarshal(body, &ev)
		}
		if err != nil || ev.ID == "" {
			t.Errorf("paysim sent a webhook the tap cannot read: %v %q", err, body)
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		_, seen := w.bodies[ev.ID]
		w.bodies[ev.ID], w.types[ev.ID] = body, ev.Type
		w.mu.Unlock()
		if !seen {
			w.redeliver(ev.ID, body, 2*time.Second)
		}
		rw.WriteHeader(w.forward(ev.ID, body, r.Header.Get(paysim.SignatureHeader)))
	}))
	t.Cleanup(func() { w.wg.Wait(); w.Close() })
	return w
}

// forward delivers body to orderd once, with signature sig, records the
// answer, and returns its status (503 when orderd did not answer).
func (w *webhookTap) forward(id string, body []byte, sig string) int {
	req, _ := http.NewRequest(http.MethodPost, "http://"+*w.s.addr.Load()+"/provider/webhooks", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(paysim.SignatureHeader, sig)
	resp, err := w.s.hc.Do(req)
	if err != nil {
		w.record(id, noAnswer)
		return http.StatusServiceUnavailable
	}
	defer resp.Body.Close()
	var out struct{ Outcome string }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	answer := out.Outcome
	if resp.StatusCode != http.StatusOK {
		answer = fmt.Sprint(resp.StatusCode)
	}
	w.record(id, answer)
	return resp.StatusCode
}

// noAnswer is what the tap records for a delivery orderd did not answer
// (killed, or not listening yet).
const noAnswer = "no_answer"

func (w *webhookTap) record(id, answer string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.outcomes[id] == nil {
		w.outcomes[id] = map[string]int{}
	}
	w.outcomes[id][answer]++
}

// redeliver delivers body redeliveries times in the background, each at a
// random moment within spread, each signed afresh (as a provider's retry
// is) and resent until orderd answers 200.
func (w *webhookTap) redeliver(id string, body []byte, spread time.Duration) {
	for range redeliveries {
		w.wg.Go(func() {
			time.Sleep(rand.N(spread))
			for range 1000 { // bounded: orderd answers within a few restarts' time
				if w.forward(id, body, paysim.Sign([]byte(w.s.secret), time.Now(), body)) == http.StatusOK {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// snapshot returns the events the tap has seen.
func (w *webhookTap) snapshot() map[string][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]byte, len(w.bodies))
	for id, b := range w.bodies {
		out[id] = b
	}
	return out
}

// publish publishes op as a bus command until the stream takes it in (a
// copy within the duplicate window of the previous one is dropped by the
// stream and published again after a pause), so every copy reaches orderd.
func (s *redeliveryStack) publish(t *testing.T, op *plannedOp) {
	var body []byte
	if op.body != nil {
		body, _ = json.Marshal(op.body)
	}
	for range 1000 {
		m := nats.NewMsg(natsbus.CommandSubject(s.root, tenant, op.op))
		m.Header.Set(nats.MsgIdHdr, op.key)
		m.Header.Set(natsbus.OrderIDHeader, op.orderID)
		m.Data = body
		natsbus.Sign(m, apiKey, time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ack, err := s.js.PublishMsg(ctx, m)
		cancel()
		if err == nil && !ack.Duplicate {
			op.accepted.Add(1)
			return
		}
		time.Sleep(commandsDupWindow / 4)
	}
	t.Errorf("command %s %s was never taken in by the stream", op.op, op.key)
}

// sendUntilFinal sends op over HTTP with its key until the answer is final
// (not a network error, a 5xx, or a 409 in progress), and records it.
func (s *redeliveryStack) sendUntilFinal(t *testing.T, op *plannedOp) {
	path := op.path()
	var body any
	if op.body != nil {
		body = op.body
	}
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		r := s.api().do(context.Background(), http.MethodPost, path, op.key, body)
		if !retryable(r) {
			op.mu.Lock()
			op.answers[fmt.Sprintf("%d replayed=%v", r.status, r.replayed)]++
			op.mu.Unlock()
			if r.status != op.status {
				t.Errorf("%s %s with key %s = %v %s, want %d", op.op, op.orderID, op.key, r, r.body, op.status)
			}
			return
		}
		time.Sleep(time.Duration(100+rand.IntN(150)) * time.Millisecond)
	}
	t.Errorf("%s %s with key %s got no final answer in %s", op.op, op.orderID, op.key, patience)
}

// storm sends every op redeliveries times on the bus and httpTwins times
// over HTTP, all at once at random moments, in the background; the function
// it returns waits until every HTTP client has its final answer and every
// copy is published.
func (s *redeliveryStack) storm(t *testing.T, ops []*plannedOp) (wait func()) {
	var wg sync.WaitGroup
	for _, op := range ops {
		for range redeliveries {
			wg.Go(func() {
				time.Sleep(rand.N(time.Second))
				s.publish(t, op)
			})
		}
		for range httpTwins {
			wg.Go(func() {
				time.Sleep(rand.N(time.Second))
				s.sendUntilFinal(t, op)
			})
		}
	}
	return wg.Wait
}

// killAndRestart SIGKILLs orderd once paysim has captured at least one
// charge and the tap has seen a webhook (so commands, webhooks and HTTP
// pays are in flight), then restarts it.
func (s *redeliveryStack) killAndRestart(t *testing.T) {
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if st := s.psa.stats(t); st.Charges >= 1 && len(s.tap.snapshot()) >= 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.od.signal(t, syscall.SIGKILL)
	if exited, _ := s.od.Wait(30 * time.Second); !exited {
		t.Fatal("orderd did not die after SIGKILL")
	}
	var err error
	for range 10 {
		if err = s.od.Restart(); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restarting orderd: %v", err)
	}
	s.setAddr(s.od.Addr())
	t.Logf("%s: orderd killed with SIGKILL and restarted at %s", s.kind, s.od.Addr())
}

// await polls cond every 100ms until it holds or patience passes; it
// reports whether it held.
func await(cond func() bool) bool {
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func (s *redeliveryStack) run(t *testing.T) {
	ctx := context.Background()
	// The orders: a pay, then a fulfil or a cancel, and partial refunds
	// (issue 16): of a PAID order before its cancel (which refunds the
	// rest), and of a FULFILLED one (a return).
	var orders []*plannedOrder
	var pays, seconds, before, after []*plannedOp
	partial := func(o *plannedOrder, amount int64) *plannedOp {
		return &plannedOp{orderID: o.id, op: "refund", key: newKey("redeliver-refund"), status: http.StatusOK,
			body: map[string]any{"amount": amount, "currency": "USD", "reason": "returned"}, answers: map[string]int{}}
	}
	for i := range redeliveryOrders {
		o := &plannedOrder{id: s.api().create(t, newKey("redeliver-create")).ID, method: "pm_card_visa", second: "cancel",
			state: "CANCELLED", captures: 1, refunds: 1, refunded: orderAmount}
		payStatus := http.StatusOK
		switch i % 4 {
		case 0: // paid and shipped, then refunded in part (a return)
			o.second, o.state, o.refunds, o.refunded, o.shipped = "fulfill", "FULFILLED", 1, 1000, 1
			o.events = []event.Type{event.OrderCreated, event.OrderPaid, event.OrderFulfilled, event.OrderRefunded}
			after = append(after, partial(o, 1000))
		case 1: // the pay's reply is lost: the webhook (or a retry) resolves it; then refunded
			o.method = paysim.MethodFaultDropAfterCommit
			o.events = []event.Type{event.OrderCreated, event.OrderPaid, event.OrderCancelled}
		case 2: // paid, refunded in part, then cancelled: the cancel refunds the rest
			o.refunds = 2
			o.events = []event.Type{event.OrderCreated, event.OrderPaid, event.OrderRefunded, event.OrderCancelled}
			before = append(before, partial(o, 700))
		case 3: // declined, then cancelled without a refund
			o.method, o.captures, o.refunds, o.refunded, payStatus = paysim.MethodDeclined, 0, 0, 0, http.StatusPaymentRequired
			o.events = []event.Type{event.OrderCreated, event.OrderPaymentFailed, event.OrderCancelled}
		}
		orders = append(orders, o)
		pays = append(pays, &plannedOp{orderID: o.id, op: "pay", key: newKey("redeliver-pay"), status: payStatus,
			body: map[string]any{"amount": orderAmount, "currency": "USD", "payment_method": o.method}, answers: map[string]int{}})
		seconds = append(seconds, &plannedOp{orderID: o.id, op: o.second, key: newKey("redeliver-" + o.second),
			status: http.StatusOK, answers: map[string]int{}})
	}
	all := slices.Concat(pays, before, seconds, after)

	// The pays, with orderd killed while they are in flight; then the
	// partial refunds of PAID orders, the fulfils and cancels, and the
	// partial refunds of FULFILLED ones.
	wait := s.storm(t, pays)
	s.killAndRestart(t)
	wait()
	s.storm(t, before)()
	s.storm(t, seconds)()
	s.storm(t, after)()

	// Every webhook paysim will ever send has been sent (each delivered
	// or dropped), and the tap's own redeliveries have been answered.
	if !await(func() bool {
		w := s.psa.stats(t).Webhooks
		return w.Events > 0 && w.Delivered+w.GaveUp+w.Dropped == w.Events+w.Duplicated
	}) {
		t.Fatalf("paysim's webhooks did not settle: %+v", s.psa.stats(t).Webhooks)
	}
	s.tap.wg.Wait()

	// After the kill, everything once more: every webhook and every
	// command redeliveries times, with HTTP retries of every operation.
	hooks := s.tap.snapshot()
	ids := make([]string, 0, len(hooks))
	for id := range hooks {
		ids = append(ids, id)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		s.tap.redeliver(id, hooks[id], time.Second)
	}
	s.storm(t, all)()
	s.tap.wg.Wait()

	// The bus is drained: every command copy was handled and acknowledged
	// (or dead-lettered).
	if !await(func() bool {
		c, err := s.js.Consumer(ctx, s.stream, s.durable)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}) {
		var info *jetstream.ConsumerInfo
		if c, err := s.js.Consumer(ctx, s.stream, s.durable); err == nil {
			info, _ = c.Info(ctx)
		}
		logs := s.od.Logs()
		t.Fatalf("orderd did not drain the commands stream: %+v; orderd logged %d applied, %d retried later, %d dead-lettered",
			info, strings.Count(logs, `"msg":"command applied"`), strings.Count(logs, `"msg":"command retried later"`),
			strings.Count(logs, `"msg":"command dead-lettered"`))
	}

	s.checkLedger(t, orders)
	s.checkOrdersAndEvents(t, orders)
	s.checkWebhooks(t, hooks)
	s.checkCommands(t, ctx, all, pays)
}

// checkLedger: paysim captured each paid order once, refunded and shipped
// each as planned, and nothing for a decline.
func (s *redeliveryStack) checkLedger(t *testing.T, orders []*plannedOrder) {
	st := s.psa.stats(t)
	led := s.psa.ledger(t)
	refunds := map[string]int{}
	refunded := map[string]int64{}
	for _, r := range led.Refunds {
		refunds[strings.SplitN(r.ChargeKey, "/", 2)[0]]++
		refunded[strings.SplitN(r.ChargeKey, "/", 2)[0]] += r.Amount
	}
	for _, o := range orders {
		if got := st.CapturesByOrder[o.id]; got != o.captures {
			t.Errorf("order %s (%s): %d captures, want %d", o.id, o.method, got, o.captures)
		}
		if got := refunds[o.id]; got != o.refunds {
			t.Errorf("order %s: %d refunds, want %d", o.id, got, o.refunds)
		}
		if got := refunded[o.id]; got != o.refunded {
			t.Errorf("order %s: the ledger's refunds sum to %d, want %d", o.id, got, o.refunded)
		}
		if got := st.ShipmentsByOrder[o.id]; got != o.shipped {
			t.Errorf("order %s: %d shipments, want %d", o.id, got, o.shipped)
		}
	}
}

// checkOrdersAndEvents: each order is at its planned state and version, and
// the feed holds exactly its planned events, sequence 1…version, and no
// other event.
func (s *redeliveryStack) checkOrdersAndEvents(t *testing.T, orders []*plannedOrder) {
	got := map[string][]event.Event{}
	total := 0
	for cursor := ""; ; {
		q := url.Values{"limit": {"100"}}
		if cursor != "" {
			q.Set("after", cursor)
		}
		r := s.api().do(context.Background(), http.MethodGet, "/v1/events?"+q.Encode(), "", nil)
		var page struct {
			Data       []event.Event `json:"data"`
			NextCursor string        `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(r.body), &page); err != nil || r.status != http.StatusOK {
			t.Fatalf("feed: %v %s", r, r.body)
		}
		for _, e := range page.Data {
			got[e.OrderID] = append(got[e.OrderID], e)
		}
		total += len(page.Data)
		if len(page.Data) == 0 {
			break
		}
		cursor = page.NextCursor
	}
	want := 0
	for _, o := range orders {
		want += len(o.events)
		r := s.api().getOrder(o.id)
		if r.status != http.StatusOK || r.order.State != o.state || r.order.Version != int64(len(o.events)) {
			t.Errorf("order %s (%s then %s) = %v version %d, want %s version %d", o.id, o.method, o.second, r, r.order.Version, o.state, len(o.events))
		}
		if r.status == http.StatusOK && (r.order.AmountRefunded == nil || *r.order.AmountRefunded != o.refunded) {
			t.Errorf("order %s (%s then %s): amount_refunded %v, want %d", o.id, o.method, o.second, r.order.AmountRefunded, o.refunded)
		}
		var types []event.Type
		for i, e := range got[o.id] {
			types = append(types, e.Type)
			if e.Sequence != int64(i+1) || e.OrderVersion != e.Sequence {
				t.Errorf("order %s: event %d has sequence %d, version %d", o.id, i+1, e.Sequence, e.OrderVersion)
			}
			if e.Type == event.OrderCancelled && (e.Refunded == nil || *e.Refunded != (o.refunds > 0)) {
				t.Errorf("order %s: order.cancelled with refunded %v, want %v", o.id, e.Refunded, o.refunds > 0)
			}
		}
		if !slices.Equal(types, o.events) {
			t.Errorf("order %s (%s then %s): events %v, want %v", o.id, o.method, o.second, types, o.events)
		}
	}
	if total != want {
		t.Errorf("the feed holds %d events, want %d (one per change)", total, want)
	}
}

// checkWebhooks: every provider event the tap saw was answered 200 at
// least 2×redeliveries times (the tap's own redeliveries), and took effect
// (applied, already_settled or unmatched) exactly once: every other
// delivery was a duplicate. Once is "at most once" for an event one of
// whose deliveries orderd did not answer: it may have committed it just
// before it was killed.
func (s *redeliveryStack) checkWebhooks(t *testing.T, hooks map[string][]byte) {
	s.tap.mu.Lock()
	defer s.tap.mu.Unlock()
	byType := map[string]int{}
	tally := map[string]int{}
	for id := range hooks {
		byType[s.tap.types[id]]++
		oks, effects := 0, 0
		for answer, n := range s.tap.outcomes[id] {
			tally[answer] += n
			switch answer {
			case "applied", "already_settled", "unmatched", "ignored":
				// "ignored": recorded with no effect (an event type that
				// means nothing to Orderly). A partial refund's
				// refund.succeeded is applied or already_settled
				// (service.applyPartialRefundEvent).
				effects += n
				oks += n
			case "duplicate":
				oks += n
			}
		}
		unanswered := s.tap.outcomes[id][noAnswer] > 0
		if effects > 1 || (effects == 0 && !unanswered) || oks < 2*redeliveries {
			t.Errorf("provider event %s (%s): answers %v; want one taking effect and at least %d 200s in all",
				id, s.tap.types[id], s.tap.outcomes[id], 2*redeliveries)
		}
	}
	if byType[paysim.EventChargeSucceeded] == 0 {
		t.Errorf("the tap saw provider events %v; want charge.succeeded among them", byType)
	}
	t.Logf("%s: provider events seen %v; orderd's answers %v; paysim %+v", s.kind, byType, tally, s.psa.stats(t).Webhooks)
}

// checkCommands: every bus copy reached the stream, the HTTP answers of an
// operation are its one outcome (the first may be original, every other a
// replay), and the only dead letters are the declined pays' copies.
func (s *redeliveryStack) checkCommands(t *testing.T, ctx context.Context, all, pays []*plannedOp) {
	declined := map[string]bool{}
	for _, op := range pays {
		if op.status == http.StatusPaymentRequired {
			declined[op.orderID] = true
		}
	}
	copies := int64(0)
	for _, op := range all {
		copies += op.accepted.Load()
		if n := op.accepted.Load(); n != 2*redeliveries {
			t.Errorf("%s %s: %d bus copies taken in by the stream, want %d", op.op, op.key, n, 2*redeliveries)
		}
		originals := 0
		for answer, n := range op.answers {
			if strings.HasSuffix(answer, "replayed=false") {
				originals += n
			}
		}
		if originals > 1 {
			t.Errorf("%s %s: %d original (not replayed) HTTP answers for one key: %v", op.op, op.key, originals, op.answers)
		}
	}
	cons, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{natsbus.DeadLetterSubject(s.root, "*", "*")}})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break
		}
		reason := m.Headers().Get(natsbus.ReasonHeader)
		reasons[reason]++
		if id := m.Headers().Get(natsbus.OrderIDHeader); reason != "payment_declined" || !declined[id] {
			t.Errorf("dead letter %s for order %s: only the declined pays' copies may be dead-lettered", reason, id)
		}
	}
	if reasons["payment_declined"] == 0 {
		t.Error("no dead letter for the declined pay's copies")
	}
	t.Logf("%s: %d bus copies of %d commands handled; dead letters %v", s.kind, copies, len(all), reasons)
}
