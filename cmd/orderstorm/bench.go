package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/order"
)

// BenchRow is one line of the benchmark table: one operation at one client
// count, through the service and, where a script exists, through pgbench.
type BenchRow struct {
	Op             string  `json:"op"`
	Clients        int     `json:"clients"`
	ServiceOps     int64   `json:"service_ops"`
	ServiceErrors  int64   `json:"service_errors"`
	ServiceSeconds float64 `json:"service_seconds"`
	ServiceRPS     float64 `json:"service_req_per_s"`
	P50Ms          float64 `json:"service_p50_ms"`
	P99Ms          float64 `json:"service_p99_ms"`
	PgbenchScript  string  `json:"pgbench_script,omitempty"`
	PgbenchTPS     float64 `json:"pgbench_tps,omitempty"`
	PgbenchP50Ms   float64 `json:"pgbench_p50_ms,omitempty"`
	PgbenchP99Ms   float64 `json:"pgbench_p99_ms,omitempty"`
	PgbenchTxns    int64   `json:"pgbench_transactions,omitempty"`
	PgbenchFailed  string  `json:"pgbench_failed,omitempty"`
	Ratio          float64 `json:"ratio_service_over_pgbench,omitempty"`
}

// Label names the row in charts.
func (r BenchRow) Label() string { return fmt.Sprintf("%s c=%d", r.Op, r.Clients) }

// Bench measures create, replay and pay throughput and latency through the
// service, and the same SQL through pgbench.
type Bench struct {
	Send        *Sender
	RunID       string
	Clients     []int
	Duration    time.Duration
	DatabaseURL string
	Pgbench     string // pgbench binary; "" skips pgbench
	SQLDir      string // directory of create.sql, replay.sql, pay.sql and their setup files
	WorkDir     string
	Lat         *Latencies // all service samples, by op
	Log         io.Writer
}

type created struct {
	key string
	in  order.NewOrderInput
	id  string
}

// phase runs workers calls of job for d, each worker calling job(w, i) for
// its i-th call until d passes or job reports done; it returns the row.
func (b *Bench) phase(ctx context.Context, op string, workers int, d time.Duration,
	job func(ctx context.Context, w, i int) (ok, done bool)) BenchRow {
	lat := make([][]time.Duration, workers)
	var okN, errN atomic.Int64
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				t := time.Now()
				ok, done := job(ctx, w, i)
				if done {
					return
				}
				el := time.Since(t)
				if ok {
					okN.Add(1)
					lat[w] = append(lat[w], el)
					b.Lat.Add(fmt.Sprintf("%s c=%d", op, workers), el)
				} else {
					errN.Add(1)
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	st := Summarize(op, all)
	return BenchRow{Op: op, Clients: workers, ServiceOps: okN.Load(), ServiceErrors: errN.Load(), ServiceSeconds: round3(secs),
		ServiceRPS: round3(float64(okN.Load()) / secs), P50Ms: st.P50Ms, P99Ms: st.P99Ms}
}

// BenchOpsEnv, set to "create" in orderstorm's environment, makes Run
// measure new orders only (no replay, pay or pgbench phase): bench/run.sh
// uses it to compare orderd settings that only a create exercises.
const BenchOpsEnv = "ORDERSTORM_BENCH_OPS"

// Run runs every phase at every client count.
func (b *Bench) Run(ctx context.Context) ([]BenchRow, error) {
	createOnly := os.Getenv(BenchOpsEnv) == "create"
	var rows []BenchRow
	for _, c := range b.Clients {
		made := make([][]created, c)
		n := len(b.Send.clients)
		logf(b.Log, "bench: create with %d clients for %s", c, b.Duration)
		create := b.phase(ctx, book.KindCreate, c, b.Duration, func(ctx context.Context, w, i int) (bool, bool) {
			cl := b.Send.clients[(w+i)%n]
			in := order.NewOrderInput{CustomerID: fmt.Sprintf("bench-%s-c%d-w%d-%d", b.RunID, c, w, i), Currency: "USD",
				Items: []order.Item{{SKU: "sku_1", Quantity: 1 + int64(i%3), UnitPrice: 1250}}}
			key := fmt.Sprintf("bench-%s-c%d-w%d-%d", b.RunID, c, w, i)
			res, err := cl.CreateOrder(ctx, in, client.WithIdempotencyKey(key))
			if err != nil || res.StatusCode != http.StatusCreated || res.Replayed {
				return false, false
			}
			made[w] = append(made[w], created{key: key, in: in, id: res.Value.ID})
			return true, false
		})
		if createOnly {
			rows = append(rows, create)
			continue
		}
		logf(b.Log, "bench: replay with %d clients for %s", c, b.Duration)
		replay := b.phase(ctx, book.KindReplay, c, b.Duration, func(ctx context.Context, w, i int) (bool, bool) {
			if len(made[w]) == 0 {
				return false, true
			}
			m := made[w][i%len(made[w])]
			res, err := b.Send.clients[(w+i+1)%n].CreateOrder(ctx, m.in, client.WithIdempotencyKey(m.key))
			return err == nil && res.Replayed && res.Value.ID == m.id, false
		})
		logf(b.Log, "bench: pay with %d clients for %s", c, b.Duration)
		pay := b.phase(ctx, book.KindPay, c, b.Duration, func(ctx context.Context, w, i int) (bool, bool) {
			if i >= len(made[w]) {
				return false, true
			}
			m := made[w][i]
			var amount int64
			for _, it := range m.in.Items {
				amount += it.Quantity * it.UnitPrice
			}
			res, err := b.Send.clients[(w+i)%n].PayOrder(ctx, m.id, client.PayInput{Amount: amount, Currency: "USD", PaymentMethod: "pm_card_visa"},
				client.WithIdempotencyKey(m.key+"-pay"))
			return err == nil && res.Value.State == order.Paid && !res.Replayed, false
		})
		if b.Pgbench != "" {
			if err := b.pgbenchRow(ctx, &create, "create.sql", ""); err != nil {
				return nil, err
			}
			if err := b.pgbenchRow(ctx, &replay, "replay.sql", "replay_setup.sql"); err != nil {
				return nil, err
			}
			if err := b.pgbenchRow(ctx, &pay, "pay.sql", "pay_setup.sql"); err != nil {
				return nil, err
			}
		}
		rows = append(rows, create, replay, pay)
	}
	return rows, nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, time.Now().Format("15:04:05 ")+format+"\n", args...)
	}
}

// execSQLFile runs a setup script (several statements) on the database.
func (b *Bench) execSQLFile(ctx context.Context, name string) error {
	sql, err := os.ReadFile(filepath.Join(b.SQLDir, name))
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, string(sql), pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbenchRow runs script with the row's client count for the bench
// duration (after setup, if any) and fills in the pgbench columns.
func (b *Bench) pgbenchRow(ctx context.Context, row *BenchRow, script, setup string) error {
	row.PgbenchScript = filepath.Join(filepath.Base(b.SQLDir), script)
	if setup != "" {
		if err := b.execSQLFile(ctx, setup); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp(b.WorkDir, "pgbench-")
	if err != nil {
		return err
	}
	prefix := filepath.Join(dir, strings.TrimSuffix(script, ".sql"))
	secs := max(1, int(b.Duration.Seconds()))
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(row.Clients), "-j", strconv.Itoa(min(row.Clients, 2)),
		"-T", strconv.Itoa(secs), "-f", filepath.Join(b.SQLDir, script), "-l", "--log-prefix=" + prefix, b.DatabaseURL}
	logf(b.Log, "bench: pgbench %s", strings.Join(args[:len(args)-1], " "))
	cmd := exec.CommandContext(ctx, b.Pgbench, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if m := tpsLine.FindSubmatch(out); m != nil {
		row.PgbenchTPS, _ = strconv.ParseFloat(string(m[1]), 64)
		row.PgbenchTPS = round3(row.PgbenchTPS)
	}
	if err != nil || row.PgbenchTPS == 0 {
		row.PgbenchFailed = shorten(strings.TrimSpace(string(out)))
		if row.PgbenchTPS == 0 {
			return fmt.Errorf("pgbench %s: %v\n%s", script, err, out)
		}
	}
	lats, err := readPgbenchLogs(dir)
	if err != nil {
		return err
	}
	st := Summarize("pgbench "+row.Op, lats)
	row.PgbenchP50Ms, row.PgbenchP99Ms, row.PgbenchTxns = st.P50Ms, st.P99Ms, int64(st.Count)
	if row.PgbenchTPS > 0 {
		row.Ratio = round3(row.ServiceRPS / row.PgbenchTPS)
	}
	return nil
}

// readPgbenchLogs reads the per-transaction logs (-l) in dir: the third
// field of each line is the latency in microseconds.
func readPgbenchLogs(dir string) ([]time.Duration, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fs[2], 10, 64)
			if err != nil {
				continue
			}
			out = append(out, time.Duration(us)*time.Microsecond)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, errors.New("pgbench wrote no transaction log")
	}
	return out, nil
}

// PrintBench writes the benchmark table.
func PrintBench(w io.Writer, rows []BenchRow) {
	fmt.Fprintf(w, "\n  %-8s %7s %10s %9s %9s %12s %10s %10s %10s\n", "op", "clients", "req/s", "p50 ms", "p99 ms",
		"pgbench tps", "pgb p50", "pgb p99", "ratio")
	for _, r := range rows {
		pg, p50, p99, ratio := "—", "—", "—", "—"
		if r.PgbenchTPS > 0 {
			pg = fmt.Sprintf("%.0f", r.PgbenchTPS)
			p50, p99 = fmt.Sprintf("%.2f", r.PgbenchP50Ms), fmt.Sprintf("%.2f", r.PgbenchP99Ms)
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		fmt.Fprintf(w, "  %-8s %7d %10.0f %9.2f %9.2f %12s %10s %10s %10s", r.Op, r.Clients, r.ServiceRPS, r.P50Ms, r.P99Ms, pg, p50, p99, ratio)
		if r.ServiceErrors > 0 {
			fmt.Fprintf(w, "  (%d errors)", r.ServiceErrors)
		}
		fmt.Fprintln(w)
	}
}

// runBench runs the load benchmark.
func runBench(ctx context.Context, cfg Config, runID string, bases []string, work string, progress io.Writer) (*Result, error) {
	res := &Result{Mode: "bench", RunID: runID, StartedAt: time.Now().UTC(), Instances: len(bases), Store: storeOf(cfg.DatabaseURL), Config: cfg}
	if cfg.Pgbench != "" && !strings.HasPrefix(cfg.DatabaseURL, "postgres") {
		return nil, errors.New("-pgbench needs a postgres:// -database-url (the deployment's database)")
	}
	maxC := 0
	for _, c := range cfg.BenchClients {
		maxC = max(maxC, c)
	}
	lat := NewLatencies()
	sender, err := NewSender(SenderConfig{Bases: bases, APIKey: cfg.APIKey, Attempts: cfg.Attempts, Backoff: cfg.Backoff,
		MaxBackoff: cfg.MaxBackoff, AttemptTimeout: cfg.AttemptTO, Conns: maxC * 2}, nil)
	if err != nil {
		return nil, err
	}
	defer sender.CloseIdle()
	sqlDir, err := filepath.Abs(cfg.BenchSQL)
	if err != nil {
		return nil, err
	}
	cfg.BenchSQL = sqlDir
	b := &Bench{Send: sender, RunID: runID, Clients: cfg.BenchClients, Duration: cfg.BenchDuration, DatabaseURL: cfg.DatabaseURL,
		Pgbench: cfg.Pgbench, SQLDir: cfg.BenchSQL, WorkDir: work, Lat: lat, Log: progress}
	start := time.Now()
	rows, err := b.Run(ctx)
	if err != nil {
		return nil, err
	}
	res.Seconds = round3(time.Since(start).Seconds())
	res.Bench = rows
	res.Latency = lat.Stats()
	res.HTTP = HTTPTotals{ClientRequests: sender.counter.requests.Load(), ClientRetries: sender.retries.Load(),
		NetworkErrors: sender.counter.neterrs.Load(), ByStatus: sender.counter.Statuses()}
	res.Pass = true
	for _, r := range rows {
		if r.ServiceErrors > 0 {
			res.Pass = false
			res.Notes = append(res.Notes, fmt.Sprintf("%s c=%d: %d errors", r.Op, r.Clients, r.ServiceErrors))
		}
	}
	return res, nil
}
