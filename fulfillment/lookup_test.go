package fulfillment

import (
	"context"
	"errors"
	"testing"
)

func TestSimulatorLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewSimulator()
	sh, err := s.Ship(ctx, req("ord_1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, "ord_1/fulfill"); err != nil || got != sh {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, sh)
	}
	if _, err := s.Ship(ctx, req("ord_2", SKUOutOfStock)); !errors.Is(err, ErrOutOfStock) {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, "ord_2/fulfill"); !errors.Is(err, ErrOutOfStock) || IsRetryable(err) {
		t.Errorf("Lookup of an out-of-stock key = %v, want the remembered final error", err)
	}
	s.FailNext(1)
	if _, err := s.Ship(ctx, req("ord_3")); !IsRetryable(err) {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, "ord_3/fulfill"); !errors.Is(err, ErrShipmentNotFound) {
		t.Errorf("Lookup after a transient failure = %v, want ErrShipmentNotFound", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Lookup(cctx, "ord_1/fulfill"); !IsRetryable(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup with an ended context = %v, want retryable", err)
	}
}

func TestIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	err := unknownOutcome(context.DeadlineExceeded)
	if !IsUnknownOutcome(err) || IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unknownOutcome: %v: want unknown, not retryable, matching its cause", err)
	}
	for _, e := range []error{nil, &WarehouseError{Retryable: true}, &WarehouseError{Err: ErrOutOfStock}, ErrShipmentNotFound} {
		if IsUnknownOutcome(e) {
			t.Errorf("IsUnknownOutcome(%v) = true", e)
		}
	}
}
