package stripepay_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
)

// stripeMock finds stripe-mock (go install github.com/stripe/stripe-mock@v0.203.0)
// on PATH or in $(go env GOPATH)/bin.
func stripeMock(t *testing.T) string {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = string(regexp.MustCompile(`\s+$`).ReplaceAll(out, nil))
		}
	}
	if p := filepath.Join(gopath, "bin", "stripe-mock"); gopath != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("ORDERLY_REQUIRE_STRIPE_MOCK") == "1" {
		t.Fatal("stripe-mock is not installed (go install github.com/stripe/stripe-mock@v0.203.0) and ORDERLY_REQUIRE_STRIPE_MOCK=1")
	}
	t.Skip("stripe-mock is not installed: go install github.com/stripe/stripe-mock@v0.203.0")
	return ""
}

// statusRecorder records the status of every answer.
type statusRecorder struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (s *statusRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := s.rt.RoundTrip(r)
	if err == nil {
		s.mu.Lock()
		s.seen = append(s.seen, fmt.Sprintf("%s %s → %d", r.Method, r.URL.Path, res.StatusCode))
		s.mu.Unlock()
	}
	return res, err
}

// TestRequestShapesAcceptedByStripeMock sends every request the adapter
// makes to stripe-mock, Stripe's mock built from its OpenAPI description,
// which refuses unknown parameters and wrong types (400) but is stateless
// and always succeeds otherwise: it checks the shapes only. It listens on
// loopback only (-http-addr and -https-addr).
func TestRequestShapesAcceptedByStripeMock(t *testing.T) {
	bin := stripeMock(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Listening for HTTP at address: (\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatal("stripe-mock did not report its address")
	}
	rec := &statusRecorder{rt: http.DefaultTransport}
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_123", APIBase: base, HTTPClient: &http.Client{Transport: rec, Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ref := payment.Reference{OrderID: "ord_1", Key: "ord_1/pay/1"}
	in, err := gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_1/pay/1/prepare", Reference: ref, Amount: 1250, Currency: "EUR"})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if in.ID == "" {
		t.Fatal("Prepare: no id")
	}
	if _, err := gw.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: "ord_1/pay/1/confirm", IntentID: in.ID, PaymentMethod: "pm_card_visa", Reference: ref}); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if _, err := gw.Retrieve(ctx, in.ID); err != nil {
		t.Fatalf("Retrieve: %v", err)
	}
	// stripe-mock's fixtures carry no orderly metadata: a miss is the answer.
	if _, err := gw.Find(ctx, ref); err != nil && !errors.Is(err, payment.ErrNotFound) && !payment.IsRetryable(err) {
		t.Fatalf("Find: %v", err)
	}
	if _, err := gw.Refund(ctx, payment.RefundRequest{IdempotencyKey: "ord_1/refund", IntentID: in.ID, Amount: 1250,
		Reference: payment.Reference{OrderID: "ord_1", Key: "ord_1/refund"}}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if _, err := gw.FindRefund(ctx, in.ID, payment.Reference{OrderID: "ord_1", Key: "ord_1/refund"}); err != nil && !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("FindRefund: %v", err)
	}
	if _, err := gw.Cancel(ctx, payment.CancelRequest{IdempotencyKey: "ord_1/cancel", IntentID: in.ID}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	// Authorize, then capture: capture_method=manual and amount_to_capture.
	mref := payment.Reference{OrderID: "ord_2", Key: "ord_2/pay/1"}
	auth, err := gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_2/pay/1/prepare", Reference: mref, Amount: 1250,
		Currency: "EUR", CaptureMode: payment.CaptureManual})
	if err != nil {
		t.Fatalf("Prepare (manual capture): %v", err)
	}
	if _, err := gw.Capture(ctx, payment.CaptureRequest{IdempotencyKey: "ord_2/capture", IntentID: auth.ID, Amount: 1000, Reference: mref}); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range rec.seen {
		if !regexp.MustCompile(`→ 2\d\d$`).MatchString(s) {
			t.Errorf("stripe-mock refused: %s", s)
		}
	}
	if len(rec.seen) < 10 {
		t.Fatalf("only %d requests: %v", len(rec.seen), rec.seen)
	}
	t.Logf("stripe-mock accepted: %v", rec.seen)
}
