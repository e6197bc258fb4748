package payment

import (
	"context"
	"fmt"
)

// Lookup implements Gateway: it returns the Charge remembered under key
// (with its current Status), a copy of the remembered *DeclineError, or an
// error wrapping ErrChargeNotFound. Transient failures are never remembered,
// so a key whose only calls failed transiently is not found. A context that
// has ended yields a retryable *ProviderError.
func (s *Simulator) Lookup(ctx context.Context, key string) (Charge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		return Charge{}, cancelled(ctx)
	}
	e, ok := s.charges[key]
	switch {
	case !ok:
		return Charge{}, fmt.Errorf("%w: no charge has key %q", ErrChargeNotFound, key)
	case e.decline != nil:
		d := *e.decline
		return Charge{}, &d
	}
	return e.charge, nil
}
