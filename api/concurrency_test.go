package api_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// racers is how many identical or competing requests the race tests send at
// the same instant.
const racers = 50

// wantNo5xx fails the test if any reply is a server error.
func wantNo5xx(t *testing.T, replies []reply) {
	t.Helper()
	for i, r := range replies {
		if r.Status >= 500 {
			t.Fatalf("request %d: %s, want no 5xx", i, r)
		}
	}
}

// wantInProgress fails the test unless r is the retryable "in progress"
// conflict a concurrent duplicate may get instead of the replay.
func wantInProgress(t *testing.T, i int, r reply) {
	t.Helper()
	p := wantProblem(t, r, http.StatusConflict, apperr.EKeyInProgress)
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("request %d: 409 %s without Retry-After", i, p.Type)
	}
}

// wantOneCreated checks the replies of racing creates of the same request:
// each is the 201 of one and the same order (exactly one of them fresh, the
// rest replays with Location) or a retryable 409; and the tenant has exactly
// that one order.
func wantOneCreated(t *testing.T, env *testenv.Env, customer string, replies []reply) {
	t.Helper()
	wantNo5xx(t, replies)
	var id string
	fresh := 0
	for i, r := range replies {
		if r.Status == http.StatusConflict {
			wantInProgress(t, i, r)
			continue
		}
		wantStatus(t, r, http.StatusCreated)
		o := orderOf(t, r)
		if id == "" {
			id = o.ID
		}
		if o.ID != id {
			t.Fatalf("request %d created order %s, another created %s", i, o.ID, id)
		}
		if loc := r.Header.Get("Location"); loc != "/v1/orders/"+id {
			t.Fatalf("request %d: Location = %q, want /v1/orders/%s", i, loc, id)
		}
		if !r.replayed() {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d responses lack Idempotency-Replayed: true, want exactly 1", fresh)
	}
	if ids := ordersOf(t, env, testenv.KeyA, customer); len(ids) != 1 || ids[0] != id {
		t.Fatalf("tenant has orders %v, want only %s", ids, id)
	}
}

func TestConcurrentCreateSameKey(t *testing.T) {
	t.Parallel()
	eachStoreGroupCommit(t, func(t *testing.T, kind string, opt testenv.Options) {
		env := testenv.New(t, kind, opt)
		customer, key := newCustomer(t), newKey(t)
		replies := together(t, racers, func(int) (reply, error) {
			return send(env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA,
				IdemKey: key, Body: orderBody(customer)})
		})
		wantOneCreated(t, env, customer, replies)
		if ids := ordersOf(t, env, testenv.KeyA, ""); len(ids) != 1 {
			t.Fatalf("GET /v1/orders lists %d orders, want 1", len(ids))
		}
	})
}

func TestConcurrentCreateDerivedKey(t *testing.T) {
	t.Parallel()
	eachStoreGroupCommit(t, func(t *testing.T, kind string, opt testenv.Options) {
		env := testenv.New(t, kind, opt)
		customer := newCustomer(t)
		replies := together(t, racers, func(int) (reply, error) {
			return send(env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA,
				Body: orderBody(customer)})
		})
		wantOneCreated(t, env, customer, replies)
	})
}

// wantPaidOnce checks the replies of racing pays of one order: all 200 with
// the order PAID at version 2 (or a retryable 409), one capture, and the
// stored order PAID at version 2.
func wantPaidOnce(t *testing.T, env *testenv.Env, o order.Order, replies []reply) {
	t.Helper()
	wantNo5xx(t, replies)
	for i, r := range replies {
		if r.Status == http.StatusConflict {
			wantInProgress(t, i, r)
			continue
		}
		wantStatus(t, r, http.StatusOK)
		if got := orderOf(t, r); got.ID != o.ID || got.State != order.Paid || got.Version != 2 {
			t.Fatalf("request %d answered %s %s v%d, want %s PAID v2", i, got.ID, got.State, got.Version, o.ID)
		}
	}
	if n := env.Gateway.Captures(o.ID); n != 1 {
		t.Fatalf("gateway captured %d charges for the order, want 1", n)
	}
	if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Paid || got.Version != 2 {
		t.Fatalf("order is %s v%d, want PAID v2", got.State, got.Version)
	}
}

func TestConcurrentPaySameKey(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		o := orderIn(t, env, order.Received)
		key := newKey(t)
		replies := together(t, racers, func(int) (reply, error) {
			return send(env, call{Method: http.MethodPost, Path: eventPath(o.ID, order.EventPay), APIKey: testenv.KeyA,
				IdemKey: key, Body: payBody(o, testmode.MethodApproved)})
		})
		wantPaidOnce(t, env, o, replies)
		fresh := 0
		for _, r := range replies {
			if r.Status == http.StatusOK && !r.replayed() {
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("%d pay responses lack Idempotency-Replayed: true, want exactly 1", fresh)
		}
	})
}

func TestConcurrentPayDistinctKeys(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		o := orderIn(t, env, order.Received)
		keys := make([]string, racers)
		for i := range keys {
			keys[i] = newKey(t)
		}
		replies := together(t, racers, func(i int) (reply, error) {
			return send(env, call{Method: http.MethodPost, Path: eventPath(o.ID, order.EventPay), APIKey: testenv.KeyA,
				IdemKey: keys[i], Body: payBody(o, testmode.MethodApproved)})
		})
		wantPaidOnce(t, env, o, replies)
		for i, r := range replies {
			if r.replayed() {
				t.Fatalf("request %d with its own key was answered as a replay", i)
			}
		}
	})
}

func TestConcurrentMixedEvents(t *testing.T) {
	t.Parallel()
	// An instant provider lets pays win most races; a slow one holds each pay
	// between reading RCVD and writing PAID, so cancels overtake pays that
	// have already charged, and those charges must be refunded.
	providers := []struct {
		name  string
		delay time.Duration
	}{{"instant provider", 0}, {"slow provider", 2 * time.Millisecond}}
	const rounds = 3
	eachStore(t, func(t *testing.T, kind string) {
		for _, provider := range providers {
			t.Run(provider.name, func(t *testing.T) {
				env := testenv.New(t, kind, testenv.Options{})
				env.Gateway.Delay = provider.delay // before the gateway's first use
				for round := range rounds {
					seed := uint64(round + 1)
					t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
						mixedRace(t, env, rand.New(rand.NewPCG(seed, 0x0de71)))
					})
				}
			})
		}
	})
}

// mixedRace sends racers pay, fulfil and cancel requests, drawn from rng,
// each with its own key, at one RCVD order at the same instant, and checks
// the outcome.
func mixedRace(t *testing.T, env *testenv.Env, rng *rand.Rand) {
	t.Helper()
	o := orderIn(t, env, order.Received)
	events := make([]order.Event, racers)
	keys := make([]string, racers)
	for i := range events {
		events[i] = order.Events[rng.IntN(len(order.Events))]
		keys[i] = newKey(t)
	}
	replies := together(t, racers, func(i int) (reply, error) {
		c := call{Method: http.MethodPost, Path: eventPath(o.ID, events[i]), APIKey: testenv.KeyA, IdemKey: keys[i]}
		if events[i] == order.EventPay {
			c.Body = payBody(o, testmode.MethodApproved)
		}
		return send(env, c)
	})
	wantMixedOutcome(t, env, get(t, env, testenv.KeyA, o.ID), events, replies)
}

// wantMixedOutcome checks the end of a race of mixed events on one order:
// a legal final state; money moved at most once and, for a cancelled order,
// moved back; at most one shipment, exactly when fulfilled; and every reply
// a 200 that agrees with the final state or an invalid-transition 409.
func wantMixedOutcome(t *testing.T, env *testenv.Env, final order.Order, events []order.Event, replies []reply) {
	t.Helper()
	wantNo5xx(t, replies)
	captures, refunds, shipments := env.Gateway.Captures(final.ID), env.Gateway.Refunds(final.ID), env.Warehouse.Shipments(final.ID)
	t.Logf("final %s v%d: %d captures, %d refunds, %d shipments", final.State, final.Version, captures, refunds, shipments)
	if captures > 1 {
		t.Fatalf("%d captures, want at most 1", captures)
	}
	switch final.State {
	case order.Cancelled:
		if captures != refunds {
			t.Fatalf("cancelled order: %d captures but %d refunds; the customer's money was kept", captures, refunds)
		}
	case order.Paid, order.Fulfilled:
		if captures != 1 || refunds != 0 {
			t.Fatalf("%s order: %d captures and %d refunds, want 1 and 0", final.State, captures, refunds)
		}
	case order.Received:
		if captures != 0 {
			t.Fatalf("unpaid order: %d captures, want 0", captures)
		}
	default:
		t.Fatalf("illegal final state %q", final.State)
	}
	if want := map[bool]int{true: 1, false: 0}[final.State == order.Fulfilled]; shipments != want {
		t.Fatalf("%s order: %d shipments, want %d", final.State, shipments, want)
	}
	// What a 200 for each event says the order became, given the final state.
	// A pay that succeeded may since have been cancelled (and refunded,
	// checked above).
	agrees := map[order.Event][]order.State{
		order.EventPay:     {order.Paid, order.Fulfilled, order.Cancelled},
		order.EventFulfill: {order.Fulfilled},
		order.EventCancel:  {order.Cancelled},
	}
	for i, r := range replies {
		switch r.Status {
		case http.StatusOK:
			got := orderOf(t, r)
			if !slices.Contains(agrees[events[i]], got.State) || !slices.Contains(agrees[events[i]], final.State) {
				t.Fatalf("request %d (%s) succeeded with the order %s, but it ended %s", i, events[i], got.State, final.State)
			}
		case http.StatusConflict:
			// Either the machine refused the event, or another provider
			// call on the order was in flight (retryable: Retry-After).
			if r.Problem != nil && r.Problem.Type == api.ProblemBaseURI+string(apperr.EOrderBusy) {
				if r.Header.Get("Retry-After") == "" {
					t.Fatalf("request %d: order_busy without Retry-After", i)
				}
				continue
			}
			wantProblem(t, r, http.StatusConflict, apperr.EInvalidTransition)
		default:
			t.Fatalf("request %d (%s): %s, want 200 or 409", i, events[i], r)
		}
	}
}

// eachStoreGroupCommit runs fn on each store with group commit on (orderd's
// default) and off: a create's outcome must not depend on it.
func eachStoreGroupCommit(t *testing.T, fn func(t *testing.T, kind string, opt testenv.Options)) {
	t.Helper()
	eachStore(t, func(t *testing.T, kind string) {
		for _, off := range []bool{false, true} {
			t.Run(map[bool]string{false: "groupcommit", true: "onebyone"}[off], func(t *testing.T) {
				fn(t, kind, testenv.Options{NoGroupCommit: off})
			})
		}
	})
}
