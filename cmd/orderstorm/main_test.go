package main

import "testing"

func TestLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"", "http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:8080", "http://127.3.2.1:9",
		"postgres://postgres@127.0.0.1:5432/test", "sqlite:/tmp/x.db", "postgres:///test"} {
		if err := loopbackOnly(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:8080", "http://example.com", "postgres://u@192.168.1.2/db", "http://8.8.8.8"} {
		if loopbackOnly(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
