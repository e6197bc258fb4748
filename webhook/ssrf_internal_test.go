package webhook

import (
	"errors"
	"testing"
)

// TestCheckDialAllowsOnlyGlobalUnicast runs the dialer's check on the
// addresses a resolver may hand back: only global unicast ones connect.
// Regression: the hand-written filter let IPv4-compatible, NAT64, 6to4 and
// Teredo forms of loopback, 192.0.0.0/24, 198.18.0.0/15, 240.0.0.0/4,
// 255.255.255.255 and 192.0.2.0/24 through.
func TestCheckDialAllowsOnlyGlobalUnicast(t *testing.T) {
	for _, tc := range []struct {
		network, address string
		ok               bool
	}{
		{"tcp4", "93.184.216.34:443", true},
		{"tcp6", "[2606:2800:220:1:248:1893:25c8:1946]:8443", true},
		{"tcp4", "127.0.0.1:80", false},
		{"tcp4", "10.0.0.1:80", false},
		{"tcp4", "169.254.169.254:80", false},
		{"tcp4", "192.0.0.8:80", false},
		{"tcp4", "192.0.2.10:80", false},
		{"tcp4", "198.19.255.1:80", false},
		{"tcp4", "240.0.0.1:80", false},
		{"tcp4", "255.255.255.255:80", false},
		{"tcp4", "100.100.100.200:80", false},
		{"tcp6", "[::1]:80", false},
		{"tcp6", "[::127.0.0.1]:80", false},
		{"tcp6", "[::ffff:127.0.0.1]:80", false},
		{"tcp6", "[64:ff9b::7f00:1]:80", false},
		{"tcp6", "[2002:7f00:1::]:80", false},
		{"tcp6", "[2001:0:4136:e378:8000:63bf:80ff:fffe]:80", false},
		{"tcp6", "[fd12::1]:80", false},
		{"tcp6", "[fe80::1]:80", false},
		{"udp4", "93.184.216.34:53", false},
	} {
		err := checkDial(tc.network, tc.address, nil)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrPrivateTarget)) {
			t.Errorf("checkDial(%s, %s) = %v, want allowed %v", tc.network, tc.address, err, tc.ok)
		}
	}
}
