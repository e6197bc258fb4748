package main

import (
	"strings"
	"testing"
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
