package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
)

// loseFirstPayReply is a RoundTripper that delivers the first pay request
// to the server, then throws its reply away and reports a reset connection:
// the case where the client cannot know whether the money moved.
type loseFirstPayReply struct {
	lost atomic.Bool
}

func (l *loseFirstPayReply) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/pay") || l.lost.Swap(true) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, io.ErrUnexpectedEOF
}

func TestIntegrationPayRetriedAfterALostReplyChargesOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	sl := &sleeps{}
	c, err := client.New(env.Server.URL, testenv.KeyA, client.WithSleep(sl.sleep),
		client.WithHTTPClient(&http.Client{Transport: &loseFirstPayReply{}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	created, err := c.CreateOrder(ctx, newInput)
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	o := created.Value
	if created.StatusCode != http.StatusCreated || o.State != order.Received || o.Amount != 2500 || created.KeyExpiresAt.IsZero() {
		t.Fatalf("created %d %+v (key expires %v)", created.StatusCode, o, created.KeyExpiresAt)
	}

	paid, err := c.PayOrder(ctx, o.ID, client.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatalf("PayOrder: %v", err)
	}
	if paid.Attempts != 2 || !paid.Replayed || paid.Value.State != order.Paid || len(sl.delays()) != 1 {
		t.Fatalf("pay: %d attempts, replayed %v, state %s, slept %v; want 2, true, PAID, one wait",
			paid.Attempts, paid.Replayed, paid.Value.State, sl.delays())
	}
	if n := env.Gateway.Captures(o.ID); n != 1 {
		t.Fatalf("gateway captured %d charges, want 1", n)
	}

	// The same operation later, with the key from the Response: still one charge.
	again, err := c.PayOrder(ctx, o.ID, client.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: "pm_card_visa"},
		client.WithIdempotencyKey(paid.IdempotencyKey))
	if err != nil || !again.Replayed {
		t.Fatalf("replayed pay: %v (replayed %v)", err, again.Replayed)
	}
	if n := env.Gateway.Captures(o.ID); n != 1 {
		t.Fatalf("gateway captured %d charges after the replay, want 1", n)
	}

	// A key with characters that need sf-string escaping reaches the real server intact.
	if _, err := c.FulfillOrder(ctx, o.ID, client.WithIdempotencyKey(`ship"\001`)); err != nil {
		t.Fatalf("FulfillOrder: %v", err)
	}
	_, err = c.CancelOrder(ctx, o.ID)
	if !client.IsInvalidTransition(err) {
		t.Fatalf("cancel of a fulfilled order: %v, want invalid_transition", err)
	}
	_, err = c.GetOrder(ctx, "ord_00000000000000000000000000000000")
	var apiErr *client.Error
	if !client.IsNotFound(err) || !errors.As(err, &apiErr) || apiErr.Code != client.CodeNotFound {
		t.Fatalf("get unknown: %v, want not_found", err)
	}
}

// TestIntegrationThreeDSecurePayIsTyped (issue 16): against a real server on
// each store, a pay that needs 3-D Secure answers 202 with the typed
// pending payment (status, intent id, client secret, next action) and the
// order still RCVD; after the customer authenticates, the retry under the
// Response's idempotency key is 200 PAID with no pending payment and one
// capture.
func TestIntegrationThreeDSecurePayIsTyped(t *testing.T) {
	t.Parallel()
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t, kind, testenv.Options{})
			c, err := client.New(env.Server.URL, testenv.KeyA)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			created, err := c.CreateOrder(ctx, newInput)
			if err != nil {
				t.Fatal(err)
			}
			o := created.Value
			in := client.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: simulator.MethodThreeDSecure}
			res, err := c.PayOrder(ctx, o.ID, in)
			if err != nil {
				t.Fatalf("PayOrder: %v", err)
			}
			p := res.Value.Payment
			if res.StatusCode != http.StatusAccepted || !res.Value.Pending() || res.Value.State != order.Received ||
				p.Status != client.PaymentRequiresAction || p.IntentID == "" || p.ClientSecret == "" ||
				p.NextAction == nil || p.NextAction.Type != "redirect_to_url" || p.NextAction.RedirectToURL == nil ||
				p.NextAction.RedirectToURL.URL == "" {
				t.Fatalf("pay = %d %+v, payment %+v; want 202 RCVD with a typed requires_action payment", res.StatusCode, res.Value.Order, p)
			}
			if err := env.Gateway.Authenticate(p.IntentID, true); err != nil {
				t.Fatal(err)
			}
			done, err := c.PayOrder(ctx, o.ID, in, client.WithIdempotencyKey(res.IdempotencyKey))
			if err != nil {
				t.Fatalf("PayOrder after authentication: %v", err)
			}
			if done.StatusCode != http.StatusOK || done.Value.Pending() || done.Value.State != order.Paid {
				t.Fatalf("retry after authentication = %d %+v; want 200 PAID, no pending payment", done.StatusCode, done.Value)
			}
			if n := env.Gateway.Captures(o.ID); n != 1 {
				t.Fatalf("gateway captured %d charges, want 1", n)
			}
		})
	}
}
