package paysimclient_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/testmode"
)

// seam is one of the two adapters, as the classification tests see it.
type seam struct {
	name string
	// call makes the adapter's call that changes something (Confirm, Ship)
	// and its lookup (Find) against the server at url.
	call func(t *testing.T, url string) (callErr, lookupErr error)
	// isRetryable and isUnknown are the seam's IsRetryable and
	// IsUnknownOutcome.
	isRetryable, isUnknown func(error) bool
	// refusal is the seam's own final error (ErrDeclined, ErrOutOfStock),
	// and refuses the status the test's fake answers it for, 0 if none.
	refusal error
	refuses int
	// notFound is the error a Lookup's 404 wraps; a call that changes
	// something wraps it only when answered notFoundOn (0: never): a
	// Confirm's 404 names an unknown intent.
	notFound   error
	notFoundOn int
}

var seams = []seam{
	{
		name: "Intents",
		call: func(t *testing.T, url string) (error, error) {
			gw := newIntents(t, url)
			_, err := gw.Confirm(context.Background(), payment.ConfirmRequest{IdempotencyKey: "ord_1/pay/1/confirm",
				IntentID: "pi_1", PaymentMethod: testmode.MethodApproved, Reference: payRef("ord_1")})
			_, lerr := gw.Find(context.Background(), payRef("ord_1"))
			return err, lerr
		},
		isRetryable: payment.IsRetryable, isUnknown: payment.IsUnknownOutcome,
		refusal: payment.ErrDeclined, refuses: http.StatusPaymentRequired,
		notFound: payment.ErrNotFound, notFoundOn: http.StatusNotFound,
	},
	{
		name: "Warehouse",
		call: func(t *testing.T, url string) (error, error) {
			wh := newWarehouse(t, url)
			_, err := wh.Ship(context.Background(), shipReq("ord_1"))
			_, lerr := wh.Find(context.Background(), shipRef("ord_1"))
			return err, lerr
		},
		isRetryable: fulfillment.IsRetryable, isUnknown: fulfillment.IsUnknownOutcome,
		refusal:  fulfillment.ErrOutOfStock, // only for a 409 whose error type is out_of_stock
		notFound: fulfillment.ErrShipmentNotFound,
	},
}

// Both adapters class every answer the same way, but for the answers that
// only one of them has its own error for (a 402 is a decline).
func TestClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		status          int
		body            string
		wantRetry       bool // the call's error is retryable
		wantUnknown     bool // the call's outcome is unknown
		wantLookupRetry bool // Lookup's error is retryable
	}{
		{name: "500", status: 500, wantRetry: true, wantLookupRetry: true},
		{name: "500 with a body", status: 500, body: `{"error":{"type":"api_error"}}`, wantRetry: true, wantLookupRetry: true},
		{name: "503", status: 503, body: `{"error":{"type":"api_error"}}`, wantRetry: true, wantLookupRetry: true},
		{name: "503 without a body", status: 503, wantRetry: true, wantLookupRetry: true},
		{name: "400", status: 400, body: `{"error":{"type":"invalid_request_error","message":"bad"}}`},
		{name: "402 without a code", status: 402},
		{name: "404", status: 404},
		{name: "409 without out_of_stock", status: 409},
		{name: "429", status: 429, wantRetry: true, wantLookupRetry: true},
		{name: "200 with an unreadable body", status: 200, body: `{"id":`, wantUnknown: true, wantLookupRetry: true},
		{name: "201 with an unreadable body", status: 201, body: `[`, wantUnknown: true, wantLookupRetry: true},
		{name: "302 redirect", status: 302, wantUnknown: true, wantLookupRetry: true},
		{name: "307 redirect without a Location", status: 307, wantUnknown: true, wantLookupRetry: true},
	}
	for _, tt := range tests {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tt.status == 302 {
				w.Header().Set("Location", "/elsewhere")
			}
			w.WriteHeader(tt.status)
			_, _ = w.Write([]byte(tt.body))
		}))
		t.Cleanup(ts.Close)
		for _, s := range seams {
			t.Run(s.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				err, lerr := s.call(t, ts.URL)
				if err == nil {
					t.Fatal("the call succeeded")
				}
				if got := s.isRetryable(err); got != tt.wantRetry {
					t.Errorf("IsRetryable(%v) = %v, want %v", err, got, tt.wantRetry)
				}
				if got := s.isUnknown(err); got != tt.wantUnknown {
					t.Errorf("IsUnknownOutcome(%v) = %v, want %v", err, got, tt.wantUnknown)
				}
				if got, want := errors.Is(err, s.refusal), tt.status == s.refuses; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s.refusal, got, want)
				}
				if got, want := errors.Is(err, s.notFound), tt.status == s.notFoundOn; got != want {
					t.Errorf("a call answered %d: errors.Is(%v, %v) = %v, want %v", tt.status, err, s.notFound, got, want)
				}
				if got := s.isRetryable(lerr); lerr == nil || got != tt.wantLookupRetry || s.isUnknown(lerr) {
					t.Errorf("Lookup err = %v (retryable %v), want retryable %v and never unknown", lerr, got, tt.wantLookupRetry)
				}
			})
		}
	}
}

// A refused connection sent nothing: both adapters' calls are retryable and
// carry the dial error.
func TestConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	for _, s := range seams {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			err, lerr := s.call(t, url)
			var oe *net.OpError
			if !s.isRetryable(err) || s.isUnknown(err) || !errors.As(err, &oe) || oe.Op != "dial" {
				t.Errorf("err = %v, want a retryable error wrapping a dial error", err)
			}
			if !s.isRetryable(lerr) {
				t.Errorf("Lookup err = %v, want retryable", lerr)
			}
		})
	}
}
