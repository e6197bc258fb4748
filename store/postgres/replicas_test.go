package postgres_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

// TestUnreachableReplicaServesNothing: a replica that does not answer does
// not stop the store from opening; it is out of rotation, every read goes
// to the primary, and a token the store did not make is ErrInvalidToken.
// (replicatest proves the rest with a real standby.)
func TestUnreachableReplicaServesNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now
	rc, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/x?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	primary, err := postgres.Open(t.Context(), withPoolSize(t, pgtest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.OpenReplicated(t.Context(), primary, postgres.ReplicaConfig{Replicas: []*pgxpool.Config{rc},
		CheckInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Stats()
	if r := st.Replicas[0]; r.InRotation || !strings.HasPrefix(r.Reason, "unreachable") {
		t.Fatalf("replica = %+v, want out of rotation as unreachable", r)
	}
	for range 4 {
		if _, err := s.ReadOrder(t.Context(), "tenant-a", "ord_missing", ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ReadOrder = %v, want ErrNotFound", err)
		}
		if _, err := s.ReadOrders(t.Context(), "tenant-a", order.Filter{Limit: 10}, ""); err != nil {
			t.Errorf("ReadOrders = %v", err)
		}
	}
	if st := s.Stats(); st.PrimaryReads != 8 || st.Replicas[0].Reads+st.Replicas[0].Misses != 0 {
		t.Errorf("stats = %+v, want all 8 reads on the primary", st)
	}
	if tok := s.ConsistencyToken(t.Context()); !strings.Contains(tok, "/") {
		t.Errorf("ConsistencyToken = %q, want a WAL position", tok)
	}
	if _, err := s.ReadOrder(t.Context(), "tenant-a", "ord_x", "not-a-token"); !errors.Is(err, store.ErrInvalidToken) {
		t.Errorf("ReadOrder with a bad token = %v, want ErrInvalidToken", err)
	}
}
