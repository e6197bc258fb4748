package replicatest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/store/postgres"
)

// replicaStats returns the one replica's stats and the primary's read count.
func replicaStats(s *stack) (postgres.ReplicaStats, int64) {
	st := s.store.Stats()
	return st.Replicas[0], st.PrimaryReads
}

// TestReadYourWrites: a client that presents the consistency token of its
// write reads that write — the created order, then the paid order — every
// time over 1,000 iterations, although the replica shows every commit only
// 2 s later; no tokened read was ever sent to a replica that had not
// replayed the token (no replica misses). Without a token a read of an order
// that exists is never a 404: a replica's miss is retried on the primary.
// Once the replica has replayed past a token, reads with it do go to the
// replica.
func TestReadYourWrites(t *testing.T) {
	p := sharedPair(t)
	s := newStack(t, p, newDatabase(t, p), 10*time.Second)
	eventually(t, "the replica enters rotation", func() bool { r, _ := replicaStats(s); return r.InRotation })

	const iterations = 1000
	var lastToken string
	t.Run("with the token", func(t *testing.T) {
		for i := range iterations {
			c := do(t, s.url, http.MethodPost, "/v1/orders", newKey(), "", orderBody)
			if c.status != http.StatusCreated || c.token == "" {
				t.Fatalf("iteration %d: create = %d, token %q: %s", i, c.status, c.token, c.body)
			}
			if g := do(t, s.url, http.MethodGet, "/v1/orders/"+c.id, "", c.token, nil); g.status != http.StatusOK || g.id != c.id {
				t.Fatalf("iteration %d: GET with the create's token = %d %s, want 200 %s", i, g.status, g.body, c.id)
			}
			pay := do(t, s.url, http.MethodPost, "/v1/orders/"+c.id+"/pay", newKey(), "", payBody)
			if pay.status != http.StatusOK || pay.token == "" {
				t.Fatalf("iteration %d: pay = %d, token %q: %s", i, pay.status, pay.token, pay.body)
			}
			if g := do(t, s.url, http.MethodGet, "/v1/orders/"+c.id, "", pay.token, nil); g.status != http.StatusOK ||
				g.state != "PAID" || g.version != pay.version {
				t.Fatalf("iteration %d: GET with the pay's token = %d %s, want PAID at version %d", i, g.status, g.body, pay.version)
			}
			lastToken = pay.token
		}
		if r, _ := replicaStats(s); r.Misses != 0 {
			t.Errorf("%d tokened reads went to a replica that had not replayed the token", r.Misses)
		}
	})

	t.Run("without a token never a 404", func(t *testing.T) {
		before, _ := replicaStats(s)
		for i := range iterations {
			c := do(t, s.url, http.MethodPost, "/v1/orders", newKey(), "", orderBody)
			if c.status != http.StatusCreated {
				t.Fatalf("iteration %d: create = %d: %s", i, c.status, c.body)
			}
			if g := do(t, s.url, http.MethodGet, "/v1/orders/"+c.id, "", "", nil); g.status != http.StatusOK || g.id != c.id {
				t.Fatalf("iteration %d: GET without a token = %d %s, want 200 %s", i, g.status, g.body, c.id)
			}
		}
		after, _ := replicaStats(s)
		// Reads alternate between the primary and the replica in rotation,
		// which lags 2 s: the replica missed, and the primary answered.
		if after.Misses == before.Misses {
			t.Errorf("no read missed on the lagging replica (misses %d → %d): the replica was never asked", before.Misses, after.Misses)
		}
	})

	t.Run("a replayed token goes to the replica", func(t *testing.T) {
		eventually(t, "the replica replays the last pay", func() bool {
			r, _ := replicaStats(s)
			return r.InRotation && lsnAtLeast(r.ReplayLSN, lastToken)
		})
		before, _ := replicaStats(s)
		for range 20 {
			if g := do(t, s.url, http.MethodGet, "/v1/orders?limit=5", "", lastToken, nil); g.status != http.StatusOK {
				t.Fatalf("list = %d %s", g.status, g.body)
			}
		}
		if after, _ := replicaStats(s); after.Reads == before.Reads {
			t.Errorf("no read with a replayed token went to the replica (reads %d → %d)", before.Reads, after.Reads)
		}
	})

	t.Run("a token the server did not make is a 400", func(t *testing.T) {
		for _, tok := range []string{"yesterday", "0/", "1/2/3", strings.Repeat("F", 20) + "/0"} {
			if g := do(t, s.url, http.MethodGet, "/v1/orders", "", tok, nil); g.status != http.StatusBadRequest {
				t.Errorf("token %q: list = %d %s, want 400", tok, g.status, g.body)
			}
		}
	})
}

// TestPausedReplayLeavesRotation: with the replica's replay paused while
// the primary keeps writing, the replica's lag passes the bound, it leaves
// rotation with a log line, and reads move to the primary; resumed, it
// catches up, returns with a log line, and serves reads again.
func TestPausedReplayLeavesRotation(t *testing.T) {
	p := sharedPair(t)
	db := newDatabase(t, p)
	const bound = 4 * time.Second
	s := newStack(t, p, db, bound)
	eventually(t, "the replica enters rotation", func() bool { r, _ := replicaStats(s); return r.InRotation })

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the primary keeps writing, so a paused replica falls behind
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			do(t, s.url, http.MethodPost, "/v1/orders", newKey(), "", orderBody)
		}
	}()
	defer func() { close(stop); <-done }()
	c := do(t, s.url, http.MethodPost, "/v1/orders", newKey(), "", orderBody)

	standbyExec(t, p, db, "SELECT pg_wal_replay_pause()")
	t.Cleanup(func() { standbyExec(t, p, db, "SELECT pg_wal_replay_resume()") })
	eventually(t, "the paused replica leaves rotation", func() bool { r, _ := replicaStats(s); return !r.InRotation })
	r, _ := replicaStats(s)
	if !strings.Contains(r.Reason, "lag above "+bound.String()) {
		t.Errorf("out of rotation because %q, want the lag bound", r.Reason)
	}
	if !strings.Contains(s.log(t), `"msg":"replica rotation"`) ||
		!strings.Contains(s.log(t), `"in_rotation":false`) {
		t.Errorf("no log line for leaving rotation:\n%s", s.log(t))
	}
	before, primaryBefore := replicaStats(s)
	for range 20 {
		if g := do(t, s.url, http.MethodGet, "/v1/orders/"+c.id, "", "", nil); g.status != http.StatusOK {
			t.Fatalf("GET = %d %s", g.status, g.body)
		}
	}
	after, primaryAfter := replicaStats(s)
	if after.Reads+after.Misses != before.Reads+before.Misses || primaryAfter-primaryBefore != 20 {
		t.Errorf("out of rotation: replica reads %d → %d, primary reads %d → %d; want the primary to serve all 20",
			before.Reads+before.Misses, after.Reads+after.Misses, primaryBefore, primaryAfter)
	}

	standbyExec(t, p, db, "SELECT pg_wal_replay_resume()")
	eventually(t, "the resumed replica returns to rotation", func() bool { r, _ := replicaStats(s); return r.InRotation })
	if n := strings.Count(s.log(t), `"in_rotation":true`); n < 2 {
		t.Errorf("%d log lines of entering rotation, want the first and the return:\n%s", n, s.log(t))
	}
	before, _ = replicaStats(s)
	for range 20 {
		do(t, s.url, http.MethodGet, "/v1/orders?limit=1", "", "", nil)
	}
	if after, _ := replicaStats(s); after.Reads == before.Reads {
		t.Errorf("back in rotation, the replica served no list (reads %d → %d)", before.Reads, after.Reads)
	}
}

// lsnAtLeast reports whether WAL position a ("X/Y") is at or past b.
func lsnAtLeast(a, b string) bool {
	pa, pb := splitLSN(a), splitLSN(b)
	return pa[0] > pb[0] || (pa[0] == pb[0] && pa[1] >= pb[1])
}

func splitLSN(s string) [2]uint64 {
	hi, lo, _ := strings.Cut(s, "/")
	var out [2]uint64
	for i, part := range []string{hi, lo} {
		for _, c := range part {
			out[i] = out[i]*16 + uint64(strings.IndexRune("0123456789ABCDEF", c))
		}
	}
	return out
}
