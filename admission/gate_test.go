package admission_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/apperr"
)

func code(err error) apperr.Code {
	var e *apperr.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestTenantSlotsBeforeGlobal: a tenant at its bound gets too_many_requests
// while another tenant still enters; the server's bound answers overloaded
// only when the tenants together reach it; a release gives both back.
func TestTenantSlotsBeforeGlobal(t *testing.T) {
	g := admission.New(admission.Config{MaxInFlight: 3, TenantMaxInFlight: 2})
	var rel []func()
	for range 2 {
		r, err := g.Enter("a")
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	if _, err := g.Enter("a"); code(err) != admission.CodeTooManyRequests {
		t.Fatalf("third of a: %v, want too_many_requests", err)
	}
	rb, err := g.Enter("b")
	if err != nil {
		t.Fatalf("b refused while a is at its own bound: %v", err)
	}
	if _, err := g.Enter("c"); code(err) != admission.CodeOverloaded {
		t.Fatalf("c at the server's bound: %v, want overloaded", err)
	}
	if g.InFlight("c") != 0 {
		t.Fatal("a refused global slot kept c's tenant slot")
	}
	rel[0]()
	rel[0]() // a second release is a no-op
	if _, err := g.Enter("c"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if g.InFlight("a") != 1 || g.InFlight("b") != 1 {
		t.Fatalf("in flight a=%d b=%d, want 1 and 1", g.InFlight("a"), g.InFlight("b"))
	}
	rb()
}

// TestEnterConcurrent: many goroutines of one tenant never hold more than
// its bound at once.
func TestEnterConcurrent(t *testing.T) {
	g := admission.New(admission.Config{MaxInFlight: 100, TenantMaxInFlight: 5})
	var mu sync.Mutex
	held, peak := 0, 0
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			r, err := g.Enter("a")
			if err != nil {
				if code(err) != admission.CodeTooManyRequests {
					t.Errorf("refusal %v, want too_many_requests", err)
				}
				return
			}
			mu.Lock()
			held++
			peak = max(peak, held)
			mu.Unlock()
			mu.Lock()
			held--
			mu.Unlock()
			r()
		})
	}
	wg.Wait()
	if peak > 5 || g.InFlight("a") != 0 {
		t.Fatalf("peak %d (bound 5), left %d", peak, g.InFlight("a"))
	}
}

func TestValidTenant(t *testing.T) {
	for name, want := range map[string]bool{
		"acme": true, "tenant_a": true, "A-1": true, "": false, "a.b": false, "a*": false, ">": false,
		"a b": false, "é": false, admission.ProviderTenant: false, string(make([]byte, 65)): false,
		"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd": true,
	} {
		if got := admission.ValidTenant(name); got != want {
			t.Errorf("ValidTenant(%q) = %v, want %v", name, got, want)
		}
	}
}
