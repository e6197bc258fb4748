package simulator

import (
	"sync"
	"testing"
)

// oneID runs call in n goroutines released at once, as n clients retrying
// one request with one idempotency key, and fails the test unless every
// call succeeded with the same id.
func oneID(t *testing.T, n int, call func() (id string, err error)) {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ids[i], errs[i] = call()
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("goroutine %d got id %q, goroutine 0 got %q", i, ids[i], ids[0])
		}
	}
}
