package main

import "testing"

func TestListenPprofOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true},
		{"[::1]:0", true},
		{"localhost:0", true},
		{"0.0.0.0:0", false},
		{":0", false},
		{"192.0.2.1:0", false},
		{"no-port", false},
	} {
		ln, err := listenPprof(tc.addr)
		if ln != nil {
			ln.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("listenPprof(%q): err = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}
