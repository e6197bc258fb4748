package prefer

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want time.Duration
	}{
		{nil, 0},
		{[]string{"wait=5"}, 5 * time.Second},
		{[]string{"respond-async, wait=10"}, 10 * time.Second},
		{[]string{`wait="3"`}, 3 * time.Second},
		{[]string{"wait=5;x=y"}, 5 * time.Second},
		{[]string{"WAIT = 7"}, 7 * time.Second},
		{[]string{"handling=lenient", "wait=2"}, 2 * time.Second},
		{[]string{"wait=-1"}, 0},
		{[]string{"wait=1.5"}, 0},
		{[]string{"wait"}, 0},
		{[]string{"wait="}, 0},
		{[]string{"wait=3601"}, MaxWait},
		{[]string{"wait=99999999999999999999"}, MaxWait},
	} {
		if got := Wait(c.in); got != c.want {
			t.Errorf("Wait(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// FuzzWait: the parser never panics and returns a wait from 0 to MaxWait;
// a plain "wait=N" within that range is N seconds.
func FuzzWait(f *testing.F) {
	for _, seed := range []string{"wait=5", "respond-async, wait=10", `wait="3"`, "wait=5;x=y", "wait=-1",
		"wait=99999999999999999999", "WAIT = 7", "wait", "wait=", "handling=lenient"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := Wait([]string{v})
		if d < 0 || d > MaxWait {
			t.Fatalf("Wait(%q) = %s, want 0 to %s", v, d, MaxWait)
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(v, "wait=")); err == nil && strings.HasPrefix(v, "wait=") &&
			strings.Trim(v[len("wait="):], "0123456789") == "" && n <= 3600 {
			if d != time.Duration(n)*time.Second {
				t.Fatalf("Wait(%q) = %s, want %ds", v, d, n)
			}
		}
	})
}
