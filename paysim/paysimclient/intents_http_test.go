package paysimclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/testmode"
)

// A decline is a final *payment.DeclineError with paysim's code and
// message; the intent stays open with the decline recorded, nothing moved.
func TestIntentsDecline(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newIntents(t, p.URL+"/")
	ctx := context.Background()
	for _, tt := range []struct{ method, code string }{
		{testmode.MethodDeclined, payment.DeclineCardDeclined},
		{testmode.MethodInsufficientFunds, payment.DeclineInsufficientFunds},
	} {
		t.Run(tt.method, func(t *testing.T) {
			orderID := "ord_" + tt.code
			in := prepare(t, gw, orderID)
			_, err := gw.Confirm(ctx, confirmReq(orderID, in, tt.method))
			var de *payment.DeclineError
			if !errors.As(err, &de) || de.Code != tt.code || de.Message == "" {
				t.Fatalf("err = %v, want a DeclineError %s with a message", err, tt.code)
			}
			if !errors.Is(err, payment.ErrDeclined) || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
				t.Errorf("err = %v: want a final decline", err)
			}
			got, err := gw.Retrieve(ctx, in.ID)
			if err != nil || got.Status != payment.IntentRequiresPaymentMethod || got.LastDecline == nil ||
				got.LastDecline.Code != tt.code || got.AmountReceived != 0 {
				t.Errorf("Retrieve = %+v, %v; want the intent open with the decline %s, nothing received", got, err, tt.code)
			}
		})
	}
}

// A 503 commits nothing: the confirm is retryable, the intent shows
// nothing received, and a retry under the same key captures once.
func TestIntents503IsRetryable(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newIntents(t, p.URL)
	ctx := context.Background()
	in := prepare(t, gw, "ord_1")
	req := confirmReq("ord_1", in, paysim.MethodFault503)
	_, err := gw.Confirm(ctx, req)
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || !payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Fatalf("err = %v, want a retryable ProviderError", err)
	}
	if got, err := gw.Retrieve(ctx, in.ID); err != nil || got.AmountReceived != 0 {
		t.Errorf("Retrieve after a 503 = %+v, %v; want nothing received", got, err)
	}
	if got, err := gw.Confirm(ctx, req); err != nil || got.Status != payment.IntentSucceeded {
		t.Errorf("retry = %+v, %v; want a capture", got, err)
	}
	if n := p.captures(t, "ord_1"); n != 1 {
		t.Errorf("captures = %d, want 1", n)
	}
}

// A reply dropped after paysim committed the confirm is an unknown outcome
// (never resent by net/http, even on a reused keep-alive connection);
// Retrieve shows the money moved, and a repeat under the key replays it.
func TestIntentsDropAfterCommitIsUnknownThenRetrieveShowsIt(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newIntents(t, p.URL)
	ctx := context.Background()
	in := prepare(t, gw, "ord_1") // leaves an idle connection the confirm reuses
	req := confirmReq("ord_1", in, paysim.MethodFaultDropAfterCommit)
	_, err := gw.Confirm(ctx, req)
	if !payment.IsUnknownOutcome(err) || payment.IsRetryable(err) {
		t.Fatalf("err = %v, want an unknown outcome that is not retryable", err)
	}
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || pe.Retryable {
		t.Errorf("err = %v, want it carried by a non-retryable ProviderError", err)
	}
	got, err := gw.Retrieve(ctx, in.ID)
	if err != nil || got.Status != payment.IntentSucceeded || got.AmountReceived != 4200 {
		t.Fatalf("Retrieve = %+v, %v; want the intent succeeded with 4200 received", got, err)
	}
	again, err := gw.Confirm(ctx, req)
	if err != nil || again.ID != in.ID || again.Status != payment.IntentSucceeded {
		t.Errorf("repeat = %+v, %v; want the saved success", again, err)
	}
	if n := p.captures(t, "ord_1"); n != 1 {
		t.Errorf("captures = %d, want 1", n)
	}
}

// A confirm whose deadline ends after it was sent is an unknown outcome;
// paysim's timeout fault commits nothing, so the intent shows nothing
// received and a repeat under the key pays.
func TestIntentsTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{TimeoutDelay: paysimTimeoutDelay})
	ctx := context.Background()
	// Each try uses a new order: paysim's timeout fault fires once per key.
	for i, d := range timeouts() {
		orderID := fmt.Sprintf("ord_%d", i)
		in := prepare(t, newIntents(t, p.URL), orderID)
		gw := newIntents(t, p.URL, paysimclient.WithTimeout(d))
		req := confirmReq(orderID, in, paysim.MethodFaultTimeout)
		_, err := gw.Confirm(ctx, req)
		if payment.IsRetryable(err) && errors.Is(err, context.DeadlineExceeded) {
			t.Logf("timeout %s ended the call before the request was written; doubling it", d)
			continue
		}
		if !payment.IsUnknownOutcome(err) || payment.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want an unknown outcome caused by the deadline", err)
		}
		if got, err := gw.Retrieve(ctx, in.ID); err != nil || got.AmountReceived != 0 {
			t.Errorf("Retrieve = %+v, %v; want nothing received (a timeout commits nothing)", got, err)
		}
		if got, err := gw.Confirm(ctx, req); err != nil || got.Status != payment.IntentSucceeded {
			t.Errorf("retry = %+v, %v; want a capture", got, err)
		}
		return
	}
	t.Fatal("no timeout let the request be written before it ended the call")
}

// A context that ended before the call sends nothing: retryable, nothing
// moved.
func TestIntentsCancelledContextIsRetryable(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newIntents(t, p.URL)
	in := prepare(t, gw, "ord_1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := gw.Confirm(ctx, confirmReq("ord_1", in, testmode.MethodApproved))
	if !payment.IsRetryable(err) || !errors.Is(err, context.Canceled) || payment.IsUnknownOutcome(err) {
		t.Errorf("err = %v, want a retryable error wrapping context.Canceled", err)
	}
	if n := p.captures(t, "ord_1"); n != 0 {
		t.Errorf("captures = %d, want 0", n)
	}
}

// A Find by a reference nothing was prepared under wraps payment.ErrNotFound
// and is final.
func TestIntentsFindUnknownReference(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	_, err := newIntents(t, p.URL).Find(context.Background(), payRef("nope"))
	if !errors.Is(err, payment.ErrNotFound) || payment.IsRetryable(err) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
}

func TestNewIntentsRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8090", "ftp://127.0.0.1", "http://", "://x"} {
		if _, err := paysimclient.NewIntents(u); err == nil {
			t.Errorf("NewIntents(%q) succeeded", u)
		}
	}
}
