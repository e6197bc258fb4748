package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
	"github.com/orderly/orderly/store/sqlite"
)

// roundTrips counts what the service costs PostgreSQL: round trips (a
// statement sent alone, or a pipelined batch of them), statements, and
// commits (explicit COMMITs, a statement that wrote outside a transaction,
// and a batch that wrote outside one: PostgreSQL runs a batch as one
// implicit transaction). Statement preparations are counted as round trips
// too; pgx caches them per connection, so they vanish in the average.
type roundTrips struct {
	trips, statements, commits atomic.Int64
	mu                         sync.Mutex
	inTx                       map[*pgx.Conn]bool
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.trips.Add(1)
	r.statements.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.account(c, []string{d.SQL})
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.trips.Add(1)
	sqls := make([]string, 0, d.Batch.Len())
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.statements.Add(int64(len(sqls)))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.account(c, sqls)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.trips.Add(1)
	return ctx
}

func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// account counts the commits of statements sent together on c (r.mu held).
func (r *roundTrips) account(c *pgx.Conn, sqls []string) {
	wrote := false
	for _, q := range sqls {
		q = strings.ToLower(strings.TrimSpace(q))
		switch {
		case strings.HasPrefix(q, "begin"):
			r.inTx[c] = true
		case strings.HasPrefix(q, "commit"):
			r.inTx[c] = false
			r.commits.Add(1)
		case strings.HasPrefix(q, "rollback"):
			r.inTx[c] = false
		case !r.inTx[c] && !strings.HasPrefix(q, "select"):
			wrote = true
		}
	}
	if wrote {
		r.commits.Add(1)
	}
}

func (r *roundTrips) reset() { r.trips.Store(0); r.statements.Store(0); r.commits.Store(0) }

func (r *roundTrips) report(b *testing.B) {
	if r == nil {
		return
	}
	b.ReportMetric(float64(r.trips.Load())/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(r.statements.Load())/float64(b.N), "statements/op")
	b.ReportMetric(float64(r.commits.Load())/float64(b.N), "commits/op")
}

// benchStores runs bench on PostgreSQL (with the round-trip tracer) and on
// the embedded SQLite store (no round trips: it is in-process; ns/op is what
// its transactions and fsyncs cost).
func benchStores(b *testing.B, cfg service.Config, bench func(b *testing.B, svc *service.Service, rt *roundTrips)) {
	b.Run("postgres", func(b *testing.B) {
		pc, err := pgxpool.ParseConfig(pgtest.NewDatabase(b))
		if err != nil {
			b.Fatal(err)
		}
		rt := &roundTrips{inTx: map[*pgx.Conn]bool{}}
		pc.ConnConfig.Tracer = rt
		st, err := postgres.OpenConfig(context.Background(), pc)
		if err != nil {
			b.Fatal(err)
		}
		bench(b, newBenchService(b, st, cfg), rt)
	})
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		bench(b, newBenchService(b, st, cfg), nil)
	})
}

func newBenchService(b *testing.B, st store.Store, cfg service.Config) *service.Service {
	svc := service.New(st, simulator.NewIntentGateway(), simulator.NewWarehouse(), cfg)
	b.Cleanup(func() { svc.Close(); st.Close() })
	return svc
}

func (r *roundTrips) start(b *testing.B) {
	if r != nil {
		r.reset()
	}
	b.ResetTimer()
}

var benchInput = order.NewOrderInput{CustomerID: "cus_bench", Currency: "USD",
	Items: []order.Item{{SKU: "sku_1", Quantity: 2, UnitPrice: 1250}}}

var benchPay = service.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: testmode.MethodApproved}

func benchKey(i int) idempotency.Key {
	return idempotency.Key{Value: fmt.Sprintf("bench-%d", i), Fingerprint: fmt.Sprintf("fp-%d", i)}
}

// createOrders makes n orders outside the timer and the count.
func createOrders(b *testing.B, svc *service.Service, n, keyBase int) []string {
	ids := make([]string, n)
	for i := range n {
		res, err := svc.Create(context.Background(), "t", benchKey(keyBase+i), benchInput)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = res.Order.ID
	}
	return ids
}

// BenchmarkCreate is a new order with a new key: the claim and the insert
// are one statement, one commit.
func BenchmarkCreate(b *testing.B) {
	benchStores(b, service.Config{}, func(b *testing.B, svc *service.Service, rt *roundTrips) {
		ctx := context.Background()
		rt.start(b)
		for i := range b.N {
			if _, err := svc.Create(ctx, "t", benchKey(i), benchInput); err != nil {
				b.Fatal(err)
			}
		}
		rt.report(b)
	})
}

// BenchmarkCreateReplay repeats one create: the claim finds the key held and
// returns the record with the order, in the same statement.
func BenchmarkCreateReplay(b *testing.B) {
	benchStores(b, service.Config{}, func(b *testing.B, svc *service.Service, rt *roundTrips) {
		ctx := context.Background()
		createOrders(b, svc, 1, 0)
		rt.start(b)
		for range b.N {
			res, err := svc.Create(ctx, "t", benchKey(0), benchInput)
			if err != nil || !res.Replayed {
				b.Fatalf("replay = %+v, %v", res, err)
			}
		}
		rt.report(b)
	})
}

// BenchmarkPay pays a fresh order with a new key each time: phase 1 (one
// batch) and phase 3 (one batch) around the built-in simulator's charge.
func BenchmarkPay(b *testing.B) {
	benchStores(b, service.Config{}, func(b *testing.B, svc *service.Service, rt *roundTrips) {
		ctx := context.Background()
		ids := createOrders(b, svc, b.N, 0)
		rt.start(b)
		for i := range b.N {
			res, err := svc.Pay(ctx, service.Call{TenantID: "t", OrderID: ids[i], Key: benchKey(b.N + i)}, benchPay)
			if err != nil || res.Order.State != order.Paid {
				b.Fatalf("pay = %+v, %v", res, err)
			}
		}
		rt.report(b)
	})
}

// BenchmarkPayNoOp pays a PAID order again with a new key: phase 1 finds
// nothing to charge, and the key is completed with the current order.
func BenchmarkPayNoOp(b *testing.B) {
	benchStores(b, service.Config{}, func(b *testing.B, svc *service.Service, rt *roundTrips) {
		ctx := context.Background()
		id := createOrders(b, svc, 1, 0)[0]
		if _, err := svc.Pay(ctx, service.Call{TenantID: "t", OrderID: id, Key: benchKey(1)}, benchPay); err != nil {
			b.Fatal(err)
		}
		rt.start(b)
		for i := range b.N {
			res, err := svc.Pay(ctx, service.Call{TenantID: "t", OrderID: id, Key: benchKey(2 + i)}, benchPay)
			if err != nil || res.Replayed || res.Order.State != order.Paid {
				b.Fatalf("no-op pay = %+v, %v", res, err)
			}
		}
		rt.report(b)
	})
}

// BenchmarkPayReplay repeats one pay with its key: phase 1 finds the key
// completed and returns it with the order.
func BenchmarkPayReplay(b *testing.B) {
	benchStores(b, service.Config{}, func(b *testing.B, svc *service.Service, rt *roundTrips) {
		ctx := context.Background()
		id := createOrders(b, svc, 1, 0)[0]
		call := service.Call{TenantID: "t", OrderID: id, Key: benchKey(1)}
		if _, err := svc.Pay(ctx, call, benchPay); err != nil {
			b.Fatal(err)
		}
		rt.start(b)
		for range b.N {
			res, err := svc.Pay(ctx, call, benchPay)
			if err != nil || !res.Replayed || res.Order.State != order.Paid {
				b.Fatalf("pay replay = %+v, %v", res, err)
			}
		}
		rt.report(b)
	})
}

// BenchmarkCreateParallel creates orders from 16 goroutines per core, with
// group commit off and on: with it on, concurrent creates share statements
// and commits (commits/op below 1).
func BenchmarkCreateParallel(b *testing.B) {
	for _, gc := range []bool{false, true} {
		b.Run(fmt.Sprintf("groupcommit=%t", gc), func(b *testing.B) {
			benchStores(b, service.Config{GroupCommit: gc}, func(b *testing.B, svc *service.Service, rt *roundTrips) {
				ctx := context.Background()
				var n atomic.Int64
				rt.start(b)
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := svc.Create(ctx, "t", benchKey(int(n.Add(1))), benchInput); err != nil {
							b.Error(err)
							return
						}
					}
				})
				rt.report(b)
			})
		})
	}
}
