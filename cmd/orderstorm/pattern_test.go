package main

import (
	"math/rand/v2"
	"testing"
)

// TestNoParallelDuplicatesWithOneInstance: with one instance every draw that
// would send parallel duplicates sends the operation singly; with two, the
// parallel share is drawn.
func TestNoParallelDuplicatesWithOneInstance(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	one := &Storm{Instances: 1, Mix: Mix{Parallel: 1}}
	for range 100 {
		if p := one.pattern(rng); p != single {
			t.Fatalf("pattern = %d with one instance, want single", p)
		}
	}
	two := &Storm{Instances: 2, Mix: Mix{Parallel: 1}}
	if p := two.pattern(rng); p != parallel {
		t.Fatalf("pattern = %d with two instances, want parallel", p)
	}
}
