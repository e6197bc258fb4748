package stripepay_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	t     *testing.T
	sim   *stripesim.Server
	ts    *httptest.Server
	gw    *stripepay.Gateway
	clock *clock // the adapter's and the simulator's
}

func start(t *testing.T, c stripesim.Config) *env {
	t.Helper()
	ctx := context.Background()
	l, err := paysim.OpenLedger(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	native, err := paysim.NewServer(l, paysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now().UTC()}
	c.Now = clk.Now
	sim, err := stripesim.New(ctx, l, native, c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { sim.StopDelays(); ts.Close(); l.Close() })
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_orderly", APIBase: ts.URL, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, sim: sim, ts: ts, gw: gw, clock: clk}
}

func (e *env) prepare(order string, amount int64) payment.Intent {
	e.t.Helper()
	in, err := e.gw.Prepare(context.Background(), payment.PrepareRequest{IdempotencyKey: order + "/pay/1/prepare",
		Reference: payment.Reference{OrderID: order, Key: order + "/pay/1"}, Amount: amount, Currency: "EUR"})
	if err != nil {
		e.t.Fatalf("Prepare: %v", err)
	}
	return in
}

func (e *env) confirm(in payment.Intent, key, pm string) (payment.Intent, error) {
	return e.gw.Confirm(context.Background(), payment.ConfirmRequest{IdempotencyKey: key, IntentID: in.ID, PaymentMethod: pm, Reference: in.Reference})
}

func (e *env) captures(order string) int {
	e.t.Helper()
	s, err := paysim.NewAdminClient(e.ts.URL).Ledger(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, c := range s.Charges {
		if c.OrderID == order && c.Status != paysim.ChargeFailed {
			n++
		}
	}
	return n
}

func TestPrepareConfirmRetrieveRefund(t *testing.T) {
	e := start(t, stripesim.Config{})
	ctx := context.Background()
	in := e.prepare("o1", 1250)
	if in.ID == "" || in.Status != payment.IntentRequiresPaymentMethod || in.Currency != "EUR" || in.Reference.Key != "o1/pay/1" {
		t.Fatalf("prepared %+v", in)
	}
	again := e.prepare("o1", 1250)
	if again.ID != in.ID {
		t.Fatalf("repeated Prepare made %s, then %s", in.ID, again.ID)
	}
	got, err := e.confirm(in, "o1/pay/1/confirm", "pm_card_visa")
	if err != nil || got.Status != payment.IntentSucceeded || got.AmountReceived != 1250 {
		t.Fatalf("Confirm: %+v, %v", got, err)
	}
	rf, err := e.gw.Refund(ctx, payment.RefundRequest{IdempotencyKey: "o1/refund", IntentID: in.ID, Amount: 1250,
		Reference: payment.Reference{OrderID: "o1", Key: "o1/refund"}})
	if err != nil || rf.Status != payment.RefundSucceeded || rf.IntentID != in.ID {
		t.Fatalf("Refund: %+v, %v", rf, err)
	}
	found, err := e.gw.FindRefund(ctx, in.ID, payment.Reference{OrderID: "o1", Key: "o1/refund"})
	if err != nil || found.ID != rf.ID {
		t.Fatalf("FindRefund: %+v, %v", found, err)
	}
	if _, err := e.gw.FindRefund(ctx, in.ID, payment.Reference{OrderID: "o1", Key: "o1/other"}); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("FindRefund of another reference: %v", err)
	}
	r, err := e.gw.Retrieve(ctx, in.ID)
	if err != nil || r.AmountRefunded != 1250 || r.Status != payment.IntentSucceeded {
		t.Fatalf("Retrieve: %+v, %v", r, err)
	}
	if _, err := e.gw.Retrieve(ctx, "pi_unknown"); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Retrieve unknown: %v", err)
	}
}

// TestSaved500AfterCaptureIsUnknownAndRetrieveShowsSucceeded: the capture
// happened, Stripe saved a 500 under the key; every resend under the key is
// the same 500 (an unknown outcome, never a decline, never retryable under a
// new key); Retrieve shows the truth; one capture.
func TestSaved500AfterCaptureIsUnknownAndRetrieveShowsSucceeded(t *testing.T) {
	e := start(t, stripesim.Config{})
	in := e.prepare("o2", 700)
	for i := range 3 {
		_, err := e.confirm(in, "o2/pay/1/confirm", stripesim.MethodFaultCommit500)
		if !payment.IsUnknownOutcome(err) || payment.IsRetryable(err) || errors.Is(err, payment.ErrDeclined) {
			t.Fatalf("try %d: %v", i, err)
		}
		if i > 0 && !strings.Contains(err.Error(), "replayed 500") {
			t.Fatalf("try %d not a replay: %v", i, err)
		}
	}
	r, err := e.gw.Retrieve(context.Background(), in.ID)
	if err != nil || r.Status != payment.IntentSucceeded || r.AmountReceived != 700 {
		t.Fatalf("Retrieve: %+v, %v", r, err)
	}
	if n := e.captures("o2"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

// TestCommitThenDropIsUnknownNotResent: the connection closes after the
// capture; the adapter reports an unknown outcome — net/http did not resend
// the POST on the reused keep-alive connection (it would have, and got the
// replayed 200, without NoResend) — and Retrieve shows succeeded.
func TestCommitThenDropIsUnknownNotResent(t *testing.T) {
	e := start(t, stripesim.Config{})
	in := e.prepare("o3", 900) // leaves a keep-alive connection to reuse
	_, err := e.confirm(in, "o3/pay/1/confirm", stripesim.MethodFaultDropAfterCommit)
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Confirm after a drop: %v; want an unknown outcome", err)
	}
	r, err := e.gw.Retrieve(context.Background(), in.ID)
	if err != nil || r.Status != payment.IntentSucceeded {
		t.Fatalf("Retrieve: %+v, %v", r, err)
	}
	if got, err := e.confirm(in, "o3/pay/1/confirm", stripesim.MethodFaultDropAfterCommit); err != nil || got.Status != payment.IntentSucceeded {
		t.Fatalf("resend under the key: %+v, %v", got, err)
	}
	if n := e.captures("o3"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

// TestInUseIsRetryableUnderTheSameKey: while the first confirm still runs
// (held by a timeout fault) a second one under its key is a retryable 409;
// the first ends unknown; the key then pays once.
func TestInUseIsRetryableUnderTheSameKey(t *testing.T) {
	e := start(t, stripesim.Config{Faults: paysim.Faults{TimeoutDelay: paysim.MaxDelay}})
	in := e.prepare("o4", 300)
	first := make(chan error, 1)
	go func() {
		_, err := e.confirm(in, "o4/pay/1/confirm", stripesim.MethodFaultTimeout)
		first <- err
	}()
	admin := paysim.NewAdminClient(e.ts.URL)
	for {
		st, err := admin.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.FaultsInjected[paysim.FaultTimeout] > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := e.confirm(in, "o4/pay/1/confirm", stripesim.MethodFaultTimeout)
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || !pe.Retryable || pe.Code != "idempotency_key_in_use" || payment.IsUnknownOutcome(err) {
		t.Fatalf("while in use: %v", err)
	}
	e.sim.StopDelays()
	if err := <-first; !payment.IsUnknownOutcome(err) {
		t.Fatalf("held request: %v", err)
	}
	var got payment.Intent
	for {
		got, err = e.confirm(in, "o4/pay/1/confirm", stripesim.MethodFaultTimeout)
		if !payment.IsRetryable(err) {
			break
		}
	}
	if err != nil || got.Status != payment.IntentSucceeded {
		t.Fatalf("after: %+v, %v", got, err)
	}
	if n := e.captures("o4"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

func TestDeclinesMapToDeclineErrors(t *testing.T) {
	e := start(t, stripesim.Config{})
	in := e.prepare("o5", 100)
	cases := map[string]string{
		stripesim.MethodDeclined:          payment.DeclineCardDeclined,
		stripesim.MethodInsufficientFunds: payment.DeclineInsufficientFunds,
		stripesim.MethodLostCard:          "lost_card",
		stripesim.MethodExpiredCard:       "expired_card",
	}
	i := 0
	for pm, code := range cases {
		i++
		_, err := e.confirm(in, "o5/pay/"+string(rune('0'+i)), pm)
		var de *payment.DeclineError
		if !errors.As(err, &de) || de.Code != code || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
			t.Fatalf("%s: %v", pm, err)
		}
		r, err := e.gw.Retrieve(context.Background(), in.ID)
		if err != nil || r.Status != payment.IntentRequiresPaymentMethod || r.LastDecline == nil || r.LastDecline.Code != code {
			t.Fatalf("%s: Retrieve %+v, %v", pm, r, err)
		}
	}
	if got, err := e.confirm(in, "o5/pay/ok", "pm_card_visa"); err != nil || got.Status != payment.IntentSucceeded {
		t.Fatalf("another method: %+v, %v", got, err)
	}
}

// TestFindHonoursTheSearchLag: an intent created a moment ago is found
// although the search index lags (the consistent list of recent intents);
// a Prepare whose create never happened is a retryable search_lag miss while
// younger than the lag, then ErrNotFound.
func TestFindHonoursTheSearchLag(t *testing.T) {
	e := start(t, stripesim.Config{SearchLag: time.Minute})
	ctx := context.Background()
	in := e.prepare("o6", 100)
	got, err := e.gw.Find(ctx, in.Reference)
	if err != nil || got.ID != in.ID {
		t.Fatalf("Find at once: %+v, %v", got, err)
	}
	e.clock.Advance(5 * time.Minute) // now in the search index, out of the recent list
	if got, err = e.gw.Find(ctx, in.Reference); err != nil || got.ID != in.ID {
		t.Fatalf("Find later: %+v, %v", got, err)
	}
	if _, err := e.gw.Find(ctx, payment.Reference{OrderID: "other", Key: in.Reference.Key}); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Find with another order id: %v", err)
	}
	// A create that got no answer (the connection closed after a hold,
	// nothing created) is a lagging miss while young, then ErrNotFound; a
	// create that answered a saved 500 is ErrNotFound at once (it finished).
	if err := e.sim.SetFaults(paysim.Faults{TimeoutRate: 1, TimeoutDelay: time.Millisecond}, 0, 0); err != nil {
		t.Fatal(err)
	}
	ref := payment.Reference{OrderID: "o7", Key: "o7/pay/1"}
	_, err = e.gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "o7/pay/1/prepare", Reference: ref, Amount: 100, Currency: "EUR"})
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Prepare without an answer: %v", err)
	}
	_, err = e.gw.Find(ctx, ref)
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || !pe.Retryable || pe.Code != "search_lag" || errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Find while young: %v", err)
	}
	e.clock.Advance(time.Minute)
	if _, err := e.gw.Find(ctx, ref); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Find after the lag: %v", err)
	}
	if err := e.sim.SetFaults(paysim.Faults{ErrorRate: 1}, 0, 0); err != nil {
		t.Fatal(err)
	}
	ref8 := payment.Reference{OrderID: "o8", Key: "o8/pay/1"}
	_, err = e.gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "o8/pay/1/prepare", Reference: ref8, Amount: 100, Currency: "EUR"})
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Prepare with a saved 500: %v", err)
	}
	if _, err := e.gw.Find(ctx, ref8); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Find after a saved 500: %v", err)
	}
}

func TestRateLimitAndKeyReuse(t *testing.T) {
	e := start(t, stripesim.Config{})
	ctx := context.Background()
	in := e.prepare("o8", 100)
	_, err := e.gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "o8/pay/1/prepare",
		Reference: payment.Reference{OrderID: "o8", Key: "o8/pay/1"}, Amount: 101, Currency: "EUR"})
	if !errors.Is(err, payment.ErrIdempotencyKeyReused) || payment.IsRetryable(err) {
		t.Fatalf("other parameters: %v", err)
	}
	if err := e.sim.SetFaults(paysim.Faults{}, 0, 1); err != nil {
		t.Fatal(err)
	}
	_, err = e.confirm(in, "o8/pay/1/confirm", "pm_card_visa")
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || !pe.Retryable || pe.Code != "lock_timeout" {
		t.Fatalf("429: %v", err)
	}
	if err := e.sim.SetFaults(paysim.Faults{}, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := e.confirm(in, "o8/pay/1/confirm", "pm_card_visa"); err != nil || got.Status != payment.IntentSucceeded {
		t.Fatalf("after the 429, same key: %+v, %v", got, err)
	}
}

func TestCancel(t *testing.T) {
	e := start(t, stripesim.Config{})
	ctx := context.Background()
	in := e.prepare("o9", 100)
	for i, key := range []string{"o9/cancel", "o9/cancel", "o9/cancel/2"} {
		got, err := e.gw.Cancel(ctx, payment.CancelRequest{IdempotencyKey: key, IntentID: in.ID})
		if err != nil || got.Status != payment.IntentCanceled {
			t.Fatalf("cancel %d: %+v, %v", i, got, err)
		}
	}
	paid := e.prepare("o10", 100)
	if _, err := e.confirm(paid, "o10/pay", "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
	_, err := e.gw.Cancel(ctx, payment.CancelRequest{IdempotencyKey: "o10/cancel", IntentID: paid.ID})
	if err == nil || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Fatalf("cancel of a paid intent: %v", err)
	}
}

// TestNoResendOnAClosedKeepAliveConnection: a server that reads a POST and
// closes the reused connection without answering sees it once; without
// NoResend net/http sends it a second time.
func TestNoResendOnAClosedKeepAliveConnection(t *testing.T) {
	for _, wrap := range []bool{true, false} {
		var posts atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				_, _ = io.WriteString(w, "ok")
				return
			}
			posts.Add(1)
			_, _ = io.ReadAll(r.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		var rt http.RoundTripper = &http.Transport{}
		if wrap {
			rt = stripepay.NoResend(rt)
		}
		hc := &http.Client{Transport: rt}
		res, err := hc.Get(srv.URL) // opens the keep-alive connection
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("amount=1"))
		req.Header.Set("Idempotency-Key", "k")
		if _, err := hc.Do(req); err == nil {
			t.Fatal("answered")
		}
		want := int64(1)
		if !wrap {
			want = 2
		}
		if n := posts.Load(); n != want {
			t.Fatalf("wrapped %v: the POST arrived %d times, want %d", wrap, n, want)
		}
		srv.Close()
	}
}

func TestConnectionRefusedIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_x", APIBase: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = gw.Prepare(context.Background(), payment.PrepareRequest{IdempotencyKey: "k", Reference: payment.Reference{OrderID: "o", Key: "o/pay/1"}, Amount: 1, Currency: "EUR"})
	if !payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Fatalf("refused: %v", err)
	}
}

// TestRequestsPinTheAPIVersionAndSendOnce: every request carries
// Stripe-Version = stripe-go v85's pinned version and the caller's key; a
// 500 is not retried by stripe-go (MaxNetworkRetries 0).
func TestRequestsPinTheAPIVersionAndSendOnce(t *testing.T) {
	var n atomic.Int64
	var version, key, auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		version.Store(r.Header.Get("Stripe-Version"))
		key.Store(r.Header.Get("Idempotency-Key"))
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"type":"api_error","message":"boom"}}`)
	}))
	defer srv.Close()
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_pin", APIBase: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = gw.Prepare(context.Background(), payment.PrepareRequest{IdempotencyKey: "o/pay/1/prepare",
		Reference: payment.Reference{OrderID: "o", Key: "o/pay/1"}, Amount: 5, Currency: "USD"})
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("500: %v", err)
	}
	if n.Load() != 1 || version.Load() != stripe.APIVersion || key.Load() != "o/pay/1/prepare" || auth.Load() != "Bearer sk_test_pin" {
		t.Fatalf("%d requests, Stripe-Version %v, key %v, auth %v", n.Load(), version.Load(), key.Load(), auth.Load())
	}
}

func TestUnknownPaymentMethodIsADecline(t *testing.T) {
	e := start(t, stripesim.Config{})
	in := e.prepare("o11", 100)
	_, err := e.confirm(in, "o11/pay/1/confirm", "pm_nonsense")
	var de *payment.DeclineError
	if !errors.As(err, &de) || de.Code != payment.DeclineInvalidPaymentMethod {
		t.Fatalf("unknown method: %v", err)
	}
}
