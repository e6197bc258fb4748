package replicatest

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/internal/proctest"
	"github.com/orderly/orderly/paysim"
)

// orderd is one orderd process and its base URL.
type orderd struct {
	*proctest.Process
	url string
}

// startProcess runs the command cmd (orderd or paysim) with env on top of
// this process's environment less ORDERD_* and PAYSIM_* variables.
func startProcess(t *testing.T, cmd string, env ...string) *orderd {
	t.Helper()
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORDERD_") && !strings.HasPrefix(kv, "PAYSIM_") {
			base = append(base, kv)
		}
	}
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/"+cmd)
	p := proctest.Start(t, bin, append(base, env...))
	return &orderd{Process: p, url: "http://" + p.Addr()}
}

// TestRacesAcrossTwoInstancesWithALaggingReplica: two orderd processes
// share the primary and both have the standby (2 s behind) as their read
// replica. 50 concurrent identical creates split across them make one
// order; 50 concurrent pays of it (half with one key, half each with its
// own) make one capture; meanwhile reads of the order without a token are
// never a 404. Then, with both stopped (their sessions' statistics
// flushed), the standby's statistics show reads of orders but not one scan
// of idempotency_keys or provider_attempts: the replica never answered a
// decision.
func TestRacesAcrossTwoInstancesWithALaggingReplica(t *testing.T) {
	p := sharedPair(t)
	db := newDatabase(t, p)
	ps := startProcess(t, "paysim", "PAYSIM_ADDR=127.0.0.1:0", "PAYSIM_DATA_DIR="+t.TempDir())
	env := []string{"ORDERD_ADDR=127.0.0.1:0", "ORDERD_DATABASE_URL=" + p.PrimaryURL(db),
		"ORDERD_DATABASE_REPLICA_URLS=" + p.StandbyURL(db), "ORDERD_DATABASE_REPLICA_MAX_LAG=10s",
		"ORDERD_API_KEYS=" + tenant + ":" + apiKey, "ORDERD_PAYMENT_URL=" + ps.url,
		"ORDERD_PROVIDER_TIMEOUT=2s", "ORDERD_LEASE=6s", "ORDERD_DB_MAX_CONNS=16"}
	a := startProcess(t, "orderd", env...)
	b := startProcess(t, "orderd", env...)
	instances := []*orderd{a, b}
	for _, o := range instances {
		eventually(t, "orderd logs its replica in rotation", func() bool {
			return strings.Contains(o.Logs(), `"msg":"replica rotation"`) && strings.Contains(o.Logs(), `"in_rotation":true`)
		})
	}

	const racers = 50
	createKey := newKey()
	creates := make([]reply, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			creates[i] = do(t, instances[i%2].url, http.MethodPost, "/v1/orders", createKey, "", orderBody)
		}()
	}
	wg.Wait()
	id := creates[0].id
	for i, c := range creates {
		if c.status != http.StatusCreated || c.id != id {
			t.Fatalf("create %d = %d %s, want 201 with order %s", i, c.status, c.body, id)
		}
	}

	// Reads without a token, racing the pays: never a 404.
	stopReads := make(chan struct{})
	var reads sync.WaitGroup
	var readCount atomic.Int64
	for i := range 4 {
		reads.Add(1)
		go func() {
			defer reads.Done()
			for {
				select {
				case <-stopReads:
					return
				default:
				}
				readCount.Add(1)
				if g := do(t, instances[i%2].url, http.MethodGet, "/v1/orders/"+id, "", "", nil); g.status != http.StatusOK {
					t.Errorf("GET of an existing order = %d %s", g.status, g.body)
					return
				}
			}
		}()
	}
	payKey := newKey()
	pays := make([]reply, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := payKey
			if i%2 == 1 {
				key = newKey()
			}
			// A 503 (an answer lost on a loaded machine, a slot not free) is
			// retryable: a client sends the same key again, as here (bounded).
			for range 50 {
				pays[i] = do(t, instances[i%2].url, http.MethodPost, "/v1/orders/"+id+"/pay", key, "", payBody, "Prefer", "wait=10")
				if pays[i].status != http.StatusServiceUnavailable {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stopReads)
	reads.Wait()
	t.Logf("%d reads without a token raced the pays", readCount.Load())
	for i, r := range pays {
		busy := r.status == http.StatusConflict && (strings.Contains(r.body, "order_busy") || strings.Contains(r.body, "in_progress"))
		if !(r.status == http.StatusOK && r.state == "PAID") && !busy {
			t.Errorf("pay %d = %d %s, want 200 PAID or a 409 busy", i, r.status, r.body)
		}
	}
	st, err := paysim.NewAdminClient(ps.url).Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CapturesByOrder[id]; n != 1 || st.Charges != 1 {
		t.Errorf("paysim: %d captures of the order, %d charges in all; want 1 and 1", n, st.Charges)
	}
	var orders int
	countOrders(t, p.PrimaryURL(db), &orders)
	if orders != 1 {
		t.Errorf("%d orders in the database, want 1", orders)
	}

	// Stop both, so their standby sessions end and flush their statistics.
	for _, o := range instances {
		o.Stop(t, 30*time.Second)
	}
	eventually(t, "the standby counts the reads of orders", func() bool {
		return scans(t, p.StandbyURL(db), "orders") > 0
	})
	for _, table := range []string{"idempotency_keys", "provider_attempts"} {
		if n := scans(t, p.StandbyURL(db), table); n != 0 {
			t.Errorf("the standby scanned %s %d times: a decision read a replica", table, n)
		}
	}
}

// countOrders counts the orders in the database at url.
func countOrders(t *testing.T, url string, n *int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(n); err != nil {
		t.Fatal(err)
	}
}

// scans returns how often statements on the server at url scanned table
// (sequential and index scans, pg_stat_user_tables).
func scans(t *testing.T, url, table string) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(context.Background(),
		`SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
