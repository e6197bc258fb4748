package postgres

import (
	"testing"
	"time"
)

func TestParseLSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0/0", 0, true},
		{"0/3000148", 0x3000148, true},
		{"16/B374D848", 0x16_B374D848, true},
		{"FFFFFFFF/FFFFFFFF", ^uint64(0), true},
		{"", 0, false},
		{"3000148", 0, false},
		{"0/", 0, false},
		{"/1", 0, false},
		{"1/2/3", 0, false},
		{"g/1", 0, false},
		{"100000000/0", 0, false},
		{"-1/0", 0, false},
		{"+1/0", 0, false},
	} {
		got, err := parseLSN(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseLSN(%q) = %X, %v; want %X, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && formatLSN(got) != tc.in {
			t.Errorf("formatLSN(%X) = %q, want %q", got, formatLSN(got), tc.in)
		}
	}
}

// TestLagOf: a replica's lag is the age of the oldest primary sample it has
// not replayed, so an idle primary means no lag however old the last write,
// a replica that stopped replaying grows older with every sample, one behind
// every sample has an unknown lag, and the
// page header of an insert position at a page's start is forgiven.
func TestLagOf(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := []positionSample{{at(0), 1000}, {at(1), 2000}, {at(2), 3000}, {at(3), 3000}, {at(4), 8192*2 + 24}}
	for _, tc := range []struct {
		name   string
		replay uint64
		now    time.Time
		want   time.Duration
		known  bool
	}{
		{"caught up with the newest sample", 8192*2 + 24, at(4.5), 0, true},
		{"at the page boundary before the newest sample's header", 8192 * 2, at(4.5), 0, true},
		{"missing the newest sample only", 3000, at(4.5), 500 * time.Millisecond, true},
		{"missing the samples from 1s on", 1500, at(4.5), 3500 * time.Millisecond, true},
		{"behind every sample: at least as old as the oldest, maybe older", 10, at(4.5), 4500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, known := lagOf(samples, tc.replay, tc.now); got != tc.want || known != tc.known {
				t.Errorf("lagOf(replay %d) = %s, known %v; want %s, %v", tc.replay, got, known, tc.want, tc.known)
			}
		})
	}
	if got, known := lagOf(nil, 0, at(9)); got != 0 || !known {
		t.Errorf("lagOf with no samples = %s, want 0", got)
	}
}

// TestEligible: a replica serves a read only in rotation, within the bound
// counting the time since its last check, and, for a read with a token,
// once it has replayed past the token.
func TestEligible(t *testing.T) {
	now := time.Now()
	rep := &replica{inRotation: true, lag: 2 * time.Second, checkedAt: now.Add(-time.Second)}
	rep.replayed.Store(5000)
	for _, tc := range []struct {
		name  string
		after uint64
		bound time.Duration
		want  bool
	}{
		{"no token, within the bound", 0, 5 * time.Second, true},
		{"token replayed", 5000, 5 * time.Second, true},
		{"token not replayed", 5001, 5 * time.Second, false},
		{"lag plus time since the check beyond the bound", 0, 2500 * time.Millisecond, false},
	} {
		if got := rep.eligible(now, tc.after, tc.bound); got != tc.want {
			t.Errorf("%s: eligible = %v, want %v", tc.name, got, tc.want)
		}
	}
	rep.inRotation = false
	if rep.eligible(now, 0, time.Minute) {
		t.Error("a replica out of rotation is eligible")
	}
}
