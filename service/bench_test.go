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

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

// roundTrips counts statements sent to PostgreSQL (each a round trip) and
// commits: explicit COMMITs plus statements that ran outside a transaction
// and wrote (autocommit).
type roundTrips struct {
	statements, commits atomic.Int64
	mu                  sync.Mutex
	inTx                map[*pgx.Conn]bool
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.statements.Add(1)
	sql := strings.ToLower(strings.TrimSpace(d.SQL))
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case strings.HasPrefix(sql, "begin"):
		r.inTx[c] = true
	case strings.HasPrefix(sql, "commit"):
		r.inTx[c] = false
		r.commits.Add(1)
	case strings.HasPrefix(sql, "rollback"):
		r.inTx[c] = false
	case !r.inTx[c] && !strings.HasPrefix(sql, "select"):
		r.commits.Add(1)
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) reset() { r.statements.Store(0); r.commits.Store(0) }

func (r *roundTrips) report(b *testing.B) {
	b.ReportMetric(float64(r.statements.Load())/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(r.commits.Load())/float64(b.N), "commits/op")
}

func newBenchService(b *testing.B) (*service.Service, *roundTrips) {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	rt := &roundTrips{inTx: map[*pgx.Conn]bool{}}
	cfg.ConnConfig.Tracer = rt
	st, err := postgres.OpenConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc := service.New(st, simulator.NewGateway(), simulator.NewWarehouse(), service.Config{StatusOf: api.StatusOf})
	return svc, rt
}

var benchInput = order.NewOrderInput{CustomerID: "cus_bench", Currency: "USD",
	Items: []order.Item{{SKU: "sku_1", Quantity: 2, UnitPrice: 1250}}}

func benchKey(i int) idempotency.Key {
	return idempotency.Key{Value: fmt.Sprintf("bench-%d", i), Fingerprint: fmt.Sprintf("fp-%d", i)}
}

// BenchmarkCreate is a new order with a new key: the claim and the insert
// are one statement, one commit.
func BenchmarkCreate(b *testing.B) {
	svc, rt := newBenchService(b)
	ctx := context.Background()
	rt.reset()
	b.ResetTimer()
	for i := range b.N {
		if _, err := svc.Create(ctx, "t", benchKey(i), benchInput); err != nil {
			b.Fatal(err)
		}
	}
	rt.report(b)
}

// BenchmarkCreateReplay repeats one create: the claim finds the key held,
// then the record and the order are read.
func BenchmarkCreateReplay(b *testing.B) {
	svc, rt := newBenchService(b)
	ctx := context.Background()
	if _, err := svc.Create(ctx, "t", benchKey(0), benchInput); err != nil {
		b.Fatal(err)
	}
	rt.reset()
	b.ResetTimer()
	for range b.N {
		res, err := svc.Create(ctx, "t", benchKey(0), benchInput)
		if err != nil || !res.Replayed {
			b.Fatalf("replay = %+v, %v", res, err)
		}
	}
	rt.report(b)
}

// BenchmarkPay pays a fresh order with a new key each time (the order is
// created outside the timer and the count).
func BenchmarkPay(b *testing.B) {
	svc, rt := newBenchService(b)
	ctx := context.Background()
	ids := make([]string, b.N)
	for i := range b.N {
		res, err := svc.Create(ctx, "t", benchKey(i), benchInput)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = res.Order.ID
	}
	in := service.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: testmode.MethodApproved}
	rt.reset()
	b.ResetTimer()
	for i := range b.N {
		res, err := svc.Pay(ctx, service.Call{TenantID: "t", OrderID: ids[i], Key: benchKey(b.N + i)}, in)
		if err != nil || res.Order.State != order.Paid {
			b.Fatalf("pay = %+v, %v", res, err)
		}
	}
	rt.report(b)
}

// BenchmarkCreateParallel creates orders from 16 goroutines per core.
func BenchmarkCreateParallel(b *testing.B) {
	svc, rt := newBenchService(b)
	ctx := context.Background()
	var n atomic.Int64
	rt.reset()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.Create(ctx, "t", benchKey(int(n.Add(1))), benchInput); err != nil {
				b.Error(err)
				return
			}
		}
	})
	rt.report(b)
}
