package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/testmode"
)

// heldGateway holds every charge until the test lets it go: a charge sends
// on entered as it starts, then waits for a value on release (or for release
// to be closed) before it reaches the simulator underneath.
type heldGateway struct {
	payment.Gateway
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// heldEnv starts a stack with opt whose charges are held. Every held charge
// is let go when t ends, before the server closes (its Close waits for the
// requests in flight).
func heldEnv(t *testing.T, kind string, opt testenv.Options) (*testenv.Env, *heldGateway) {
	t.Helper()
	g := &heldGateway{entered: make(chan struct{}, 64), release: make(chan struct{})}
	opt.WrapGateway = func(gw payment.Gateway) payment.Gateway { g.Gateway = gw; return g }
	env := testenv.New(t, kind, opt)
	t.Cleanup(g.releaseAll) // cleanups run last-in first-out: before env's
	return env, g
}

// Confirm implements payment.Gateway, held: it waits for a release (or
// the end of ctx) before confirming.
func (g *heldGateway) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	g.entered <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return payment.Intent{}, ctx.Err()
	}
	return g.Gateway.Confirm(ctx, req)
}

// awaitEntered waits until one more charge has started. The timeout only
// turns a broken test into a failure instead of a hang.
func (g *heldGateway) awaitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal("no charge reached the provider within a minute")
	}
}

// releaseAll lets every held charge, current and future, go on.
func (g *heldGateway) releaseAll() { g.once.Do(func() { close(g.release) }) }

// payAsync sends an approved pay of o in a goroutine; its reply arrives on
// the returned channel.
func payAsync(env *testenv.Env, o order.Order, key string) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		r, err := send(env, call{Method: http.MethodPost, Path: eventPath(o.ID, order.EventPay), APIKey: testenv.KeyA,
			IdemKey: key, Body: payBody(o, testmode.MethodApproved)})
		if err != nil {
			r = reply{Status: -1, Body: []byte(err.Error())}
		}
		out <- r
	}()
	return out
}

// wantPaid fails the test unless r is the 200 of a paid order.
func wantPaid(t *testing.T, r reply) {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	if o := orderOf(t, r); o.State != order.Paid {
		t.Fatalf("pay answered an order in state %s: %s", o.State, r)
	}
}

// wantRetryAfter fails the test unless r's Retry-After is a whole number of
// seconds from lo to hi.
func wantRetryAfter(t *testing.T, r reply, lo, hi int) {
	t.Helper()
	v := r.Header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		t.Fatalf("Retry-After = %q, want delta-seconds from %d to %d (%s)", v, lo, hi, r)
	}
}

// TestAdmission fills the server's in-flight bound with pays held in their
// provider call; the next request is refused at once (the test only lets the
// held pays go after it has the answer, so a server that queued it would
// never answer), health probes still answer, and a slot freed by a finished
// request admits the next one.
func TestAdmission(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		const limit = 3
		env, held := heldEnv(t, kind, testenv.Options{MaxInFlight: limit})
		var orders []order.Order
		for range limit {
			orders = append(orders, create(t, env, testenv.KeyA, newKey(t), newCustomer(t)))
		}
		spare := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		var pays []<-chan reply
		for _, o := range orders {
			pays = append(pays, payAsync(env, o, newKey(t)))
		}
		for range limit {
			held.awaitEntered(t)
		}

		// The bound is reached: every slot is held by a pay in its charge.
		r := do(t, env, http.MethodGet, "/v1/orders/"+spare.ID, testenv.KeyA, "", nil)
		wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
		wantRetryAfter(t, r, 1, 2)
		refused := newCustomer(t)
		r = do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), orderBody(refused))
		wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
		for _, path := range []string{"/healthz", "/readyz"} {
			wantStatus(t, do(t, env, http.MethodGet, path, "", "", nil), http.StatusOK)
		}

		// One pay finishes; its slot admits the next request. (The slot is
		// released before the handler chain returns, and net/http sends a
		// small response only once it has returned.)
		held.release <- struct{}{}
		var first reply
		select {
		case first = <-pays[0]:
			pays = pays[1:]
		case first = <-pays[1]:
			pays = append(pays[:1], pays[2:]...)
		case first = <-pays[2]:
			pays = pays[:2]
		}
		wantPaid(t, first)
		wantStatus(t, do(t, env, http.MethodGet, "/v1/orders/"+spare.ID, testenv.KeyA, "", nil), http.StatusOK)

		held.releaseAll()
		for _, p := range pays {
			wantPaid(t, <-p)
		}
		wantOrders(t, env, testenv.KeyA, refused) // the refused create did nothing
	})
}

// TestRequestDeadline: the per-request deadline ends a request that waits
// on the database with a 503 and Retry-After, and does not cut short a
// provider call the service has started.
func TestRequestDeadline(t *testing.T) {
	t.Parallel()

	t.Run("a request still waiting on the database at its deadline is a 503 with Retry-After", func(t *testing.T) {
		t.Parallel()
		setup := testenv.New(t, testenv.Postgres, testenv.Options{})
		o := create(t, setup, testenv.KeyA, newKey(t), newCustomer(t))
		env := testenv.New(t, testenv.Postgres, testenv.Options{Location: setup.Location, RequestTimeout: 200 * time.Millisecond})

		// Another session holds the orders table, so a read waits for it;
		// the test's store sets no lock_timeout, so only the request's
		// deadline can end the wait.
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, setup.Location)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		r := do(t, env, http.MethodGet, "/v1/orders/"+o.ID, testenv.KeyA, "", nil)
		p := wantProblem(t, r, http.StatusServiceUnavailable, apperr.EUnavailable)
		wantRetryAfter(t, r, 2, 4)
		if !strings.Contains(p.Detail, "timed out") {
			t.Errorf("detail = %q, want it to say the request timed out", p.Detail)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if got := get(t, setup, testenv.KeyA, o.ID); got.ID != o.ID {
			t.Fatalf("got order %s, want %s", got.ID, o.ID)
		}
	})

	// A client that hangs up does not cancel its request: the create blocked
	// behind a lock completes once the lock goes, so the client's retry
	// replays it (and no pool connection is lost to an interrupted
	// statement).
	t.Run("a client that goes away does not cancel its request", func(t *testing.T) {
		t.Parallel()
		env := testenv.New(t, testenv.Postgres, testenv.Options{RequestTimeout: time.Minute, NoGroupCommit: true})
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, env.Location)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		key, customer := newKey(t), newCustomer(t)
		hangUp, cancelClient := context.WithCancel(ctx)
		sent := make(chan error, 1)
		go func() {
			body, _ := json.Marshal(orderBody(customer))
			req, _ := http.NewRequestWithContext(hangUp, http.MethodPost, env.Server.URL+"/v1/orders", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testenv.KeyA)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			sent <- err
		}()
		// The create is inside the store, waiting for the lock, once its key
		// row's insert waits on the locked table: wait for that lock wait.
		for {
			var waiting bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'orders'::regclass)`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancelClient()
		if err := <-sent; err == nil {
			t.Fatal("the client's request finished; want it cut off by the client")
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// The hung-up request goes on: its order appears without any retry
		// (waited for, bounded; a cancelled request never makes one) …
		for deadline := time.Now().Add(time.Minute); len(ordersOf(t, env, testenv.KeyA, customer)) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the hung-up create never completed: the client's hang-up cancelled it")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// … and the retry replays it.
		r, err := send(env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA, IdemKey: key, Body: orderBody(customer)})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, http.StatusCreated)
		if !r.replayed() {
			t.Fatalf("retry was not a replay: the hung-up create did not complete")
		}
	})

	t.Run("a provider call started before the deadline finishes past it", func(t *testing.T) {
		t.Parallel()
		eachStore(t, func(t *testing.T, kind string) {
			t.Parallel()
			// deadline only needs to outlast one statement (the key's
			// claim) before the charge; the test then waits it out.
			const deadline = 3 * time.Second
			env, held := heldEnv(t, kind, testenv.Options{RequestTimeout: deadline})
			o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
			paid := payAsync(env, o, newKey(t))
			held.awaitEntered(t)
			// The deadline was set when the pay was admitted, before its
			// charge started: it has passed once this sleep ends.
			time.Sleep(deadline)
			held.release <- struct{}{}
			wantPaid(t, <-paid)
			if n := env.Gateway.Captures(o.ID); n != 1 {
				t.Fatalf("%d captures, want 1", n)
			}
		})
	})
}

// wantTrickled408 sends env a POST to path with headers (CRLF-terminated
// lines) and the first bytes of a 100-byte body, then nothing more, and
// checks the answer is 408 request_timeout: the request deadline bounds
// reading the body.
func wantTrickled408(t *testing.T, env *testenv.Env, path, headers, start string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.Server.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 100\r\n\r\n%s", path, headers, start)
	// Generous: without the read deadline the server would wait forever.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body to %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(raw), "request_timeout") {
		t.Fatalf("trickled body to %s answered %d %s; want 408 request_timeout", path, resp.StatusCode, raw)
	}
}

// TestSlowBodyEndsAtTheDeadline: a client that sends its headers and then
// trickles its body does not hold its admission slot past the request
// deadline: it gets 408 request_timeout.
func TestSlowBodyEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{RequestTimeout: 300 * time.Millisecond, MaxInFlight: 1})
	wantTrickled408(t, env, "/v1/orders", "Authorization: Bearer "+testenv.KeyA+"\r\n", `{"customer_id":`)
	// The slot is free again: the next request is served.
	wantStatus(t, do(t, env, http.MethodGet, "/v1/orders", testenv.KeyA, "", nil), http.StatusOK)
}

// TestProviderWebhookBodyLimits: the provider webhook endpoint reads its
// body as every other endpoint does: a body that does not arrive within
// the request deadline is a 408 request_timeout (not a 413), one past the
// size limit a 413.
func TestProviderWebhookBodyLimits(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{RequestTimeout: 300 * time.Millisecond, MaxBodyBytes: 1024,
		ProviderWebhook: paysimclient.Webhooks{Secret: []byte("whsec_test")}})
	sig := paysim.Sign([]byte("whsec_test"), time.Now(), []byte(`{"id":"x"}`))
	wantTrickled408(t, env, api.ProviderWebhookPath, paysim.SignatureHeader+": "+sig+"\r\n", `{"id":`)
	big := exchange(t, env, call{Method: http.MethodPost, Path: api.ProviderWebhookPath,
		Header: http.Header{paysim.SignatureHeader: {sig}},
		Body:   []byte(`{"pad":"` + strings.Repeat("x", 2048) + `"}`)})
	wantStatus(t, big, http.StatusRequestEntityTooLarge)
}
