package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/testmode"
)

// TestOneTenantStormSees429s: tenant A fills its own in-flight bound with
// pays held in their provider call, then sends 200 requests at once (creates,
// reads, pays): every one is a 429 too_many_requests with Retry-After,
// never a 5xx, and did nothing; tenant B, on the same instance, is served
// all along. Without a per-tenant bound A's storm takes the server's last
// slots and the rest are 503 overloaded, for A and B alike.
func TestOneTenantStormSees429s(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		const tenantLimit = 4
		env, held := heldEnv(t, kind, testenv.Options{MaxInFlight: 2 * tenantLimit, TenantMaxInFlight: tenantLimit})
		var pays []<-chan reply
		var orders []order.Order
		for range tenantLimit {
			o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
			orders = append(orders, o)
			pays = append(pays, payAsync(env, o, newKey(t)))
		}
		for range tenantLimit {
			held.awaitEntered(t)
		}
		stormer := newCustomer(t)
		spare := create(t, env, testenv.KeyB, newKey(t), newCustomer(t))
		replies := together(t, 200, func(i int) (reply, error) {
			c := call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA, IdemKey: newKey(t), Body: orderBody(stormer)}
			switch i % 3 {
			case 1:
				c = call{Method: http.MethodGet, Path: "/v1/orders/" + orders[0].ID, APIKey: testenv.KeyA}
			case 2:
				c = call{Method: http.MethodPost, Path: eventPath(orders[i%tenantLimit].ID, order.EventPay), APIKey: testenv.KeyA,
					IdemKey: newKey(t), Body: payBody(orders[i%tenantLimit], testmode.MethodApproved)}
			}
			return send(env, c)
		})
		for i, r := range replies {
			if r.Status >= 500 {
				t.Fatalf("storm request %d answered %d: one tenant's excess must never be a 5xx\n%s", i, r.Status, r)
			}
			wantProblem(t, r, http.StatusTooManyRequests, "too_many_requests")
			wantRetryAfter(t, r, 1, 2)
		}
		// B has its own slots: served while A is at its bound.
		wantStatus(t, do(t, env, http.MethodGet, "/v1/orders/"+spare.ID, testenv.KeyB, "", nil), http.StatusOK)
		create(t, env, testenv.KeyB, newKey(t), newCustomer(t))
		held.releaseAll()
		for _, p := range pays {
			wantPaid(t, <-p)
		}
		wantOrders(t, env, testenv.KeyA, stormer) // no refused create did anything
		for _, o := range orders {
			if n := env.Gateway.Captures(o.ID); n != 1 {
				t.Fatalf("order %s captured %d times, want 1", o.ID, n)
			}
		}
	})
}

// slowBody opens a connection to env, sends a POST to path with headers
// (CRLF-terminated lines) and Expect: 100-continue, and returns once the
// server has started reading the body (it answered 100 Continue) — the
// connection then trickles nothing more — or, when the server answers
// first, that answer's status.
func slowBody(t *testing.T, env *testenv.Env, path, headers string) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.Server.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n", path, headers)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // a hang becomes a failure
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the headers of a slow body to %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusContinue {
		_, _ = conn.Write([]byte(`{"customer_id":`)) // the start of the body, then nothing
		return conn, 0
	}
	return conn, resp.StatusCode
}

// TestSlowBodiesHoldNoSlot: requests whose bodies trickle in hold no
// in-flight slot, neither their tenant's nor the server's: with more of them
// than the server has slots, both tenants are still served. Each slow
// request is known to be in the server, reading its body (it answered
// 100 Continue), before the others are sent. Without the fix the slots are
// taken before the body is read and every other request is a 503.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{MaxInFlight: 2, TenantMaxInFlight: 1, RequestTimeout: 2 * time.Minute})
		for i := range 6 {
			if _, st := slowBody(t, env, "/v1/orders", "Authorization: Bearer "+testenv.KeyA+"\r\n"); st != 0 {
				t.Fatalf("slow body %d answered %d before its body", i, st)
			}
		}
		create(t, env, testenv.KeyB, newKey(t), newCustomer(t))
		create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
	})
}

// TestProviderWebhookHeaderBeforeBody: a delivery to the provider webhook
// without a well-formed, fresh signature header is a 401 before its body is
// read (the server never asks for it: no 100 Continue); with one, its slow
// body holds no slot.
func TestProviderWebhookHeaderBeforeBody(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec_test_0123456789")
	env := testenv.New(t, testenv.SQLite, testenv.Options{MaxInFlight: 1, TenantMaxInFlight: 1, RequestTimeout: 2 * time.Minute,
		ProviderWebhook: paysimclient.Webhooks{Secret: secret}})
	stale := paysim.Sign(secret, time.Now().Add(-time.Hour), []byte("{}"))
	for name, h := range map[string]string{
		"no signature":        "",
		"malformed signature": paysim.SignatureHeader + ": v1=zz\r\n",
		"stale signature":     paysim.SignatureHeader + ": " + stale + "\r\n",
	} {
		if _, st := slowBody(t, env, api.ProviderWebhookPath, h); st != http.StatusUnauthorized {
			t.Fatalf("%s: answered %d before the body, want 401", name, st)
		}
	}
	fresh := paysim.SignatureHeader + ": " + paysim.Sign(secret, time.Now(), []byte("{}")) + "\r\n"
	for i := range 3 {
		if _, st := slowBody(t, env, api.ProviderWebhookPath, fresh); st != 0 {
			t.Fatalf("slow webhook %d answered %d before its body", i, st)
		}
	}
	create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
}
