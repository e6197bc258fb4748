package main

import (
	"strings"
	"testing"

	"github.com/orderly/orderly/paysim/simulator"
)

// TestRefund: orderctl refund refunds part of a fulfilled order under one
// key (a retry with the key replays), refuses to default money (usage),
// and a refund past the captured amount exits as a conflict.
func TestRefund(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	id := s.create("cus_refund")
	s.ok("pay", id, "--method", "pm_card_visa")
	s.ok("fulfill", id)
	if o := s.run("refund", id, "--amount", "500"); o.code != exitUsage {
		t.Fatalf("refund without --currency: %s, want exit %d", o, exitUsage)
	}
	out := s.ok("--idempotency-key", "ret-1", "refund", id, "--amount", "500", "--currency", "USD", "--reason", "one book back")
	if !strings.Contains(out.stdout, "refunded 5.00 USD of order "+id) || !strings.Contains(out.stdout, "5.00 USD of 25.00 USD captured refunded") {
		t.Fatalf("refund printed %q", out.stdout)
	}
	out = s.ok("--idempotency-key", "ret-1", "refund", id, "--amount", "500", "--currency", "USD", "--reason", "one book back")
	if !strings.Contains(out.stdout, "(replayed)") {
		t.Fatalf("refund with the same key printed %q, want (replayed)", out.stdout)
	}
	if o := s.run("refund", id, "--amount", "2001", "--currency", "USD"); o.code != exitConflict {
		t.Fatalf("refund past the captured amount: %s, want exit %d", o, exitConflict)
	}
	if n := s.env.Gateway.Refunds(id); n != 1 {
		t.Fatalf("%d refunds at the provider, want 1", n)
	}
}

// TestPayPendingShowsThePayment (issue 16): a pay that needs 3-D Secure
// exits 0 and prints the order (RCVD) and its pending payment with the
// next action; --json carries the payment member; after the customer
// authenticates, the same key settles it PAID with one capture.
func TestPayPendingShowsThePayment(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	id := s.create("cus_3ds")
	out := s.ok("--idempotency-key", "pay-3ds", "pay", id, "--method", simulator.MethodThreeDSecure)
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "RCVD") ||
		!strings.HasPrefix(lines[1], "  payment requires_action ") || !strings.Contains(lines[1], "next action redirect_to_url ") {
		t.Fatalf("pending pay printed %q", out.stdout)
	}
	intent := strings.Fields(lines[1])[2]
	js := s.ok("--json", "--idempotency-key", "pay-3ds", "pay", id, "--method", simulator.MethodThreeDSecure)
	if !strings.Contains(js.stdout, `"intent_id": "`+intent+`"`) && !strings.Contains(js.stdout, `"intent_id":"`+intent+`"`) {
		t.Fatalf("--json pending pay printed %q, want the payment member with intent %s", js.stdout, intent)
	}
	if err := s.env.Gateway.Authenticate(intent, true); err != nil {
		t.Fatal(err)
	}
	out = s.ok("--idempotency-key", "pay-3ds", "pay", id, "--method", simulator.MethodThreeDSecure)
	if _, state, _, _, _ := line(t, out.stdout); state != "PAID" || strings.Contains(out.stdout, "payment ") {
		t.Fatalf("pay after authentication printed %q", out.stdout)
	}
	if n := s.env.Gateway.Captures(id); n != 1 {
		t.Fatalf("%d captures, want 1", n)
	}
}
