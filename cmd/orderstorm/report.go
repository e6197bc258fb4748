package main

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/check"
	"github.com/orderly/orderly/cmd/orderstorm/internal/faultproxy"
	"github.com/orderly/orderly/paysim"
)

// Result is everything a run reports; it is written as JSON by -json.
type Result struct {
	Mode      string    `json:"mode"`
	RunID     string    `json:"run_id"`
	Pass      bool      `json:"pass"`
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"storm_seconds"`
	Instances int       `json:"instances"`
	Shoppers  int       `json:"shoppers"`
	Store     string    `json:"store"`
	Config    any       `json:"config"`

	LogicalOps    int64                `json:"logical_operations"`
	LogicalByKind map[string]int       `json:"logical_by_kind"`
	Orders        int                  `json:"orders"`
	HTTP          HTTPTotals           `json:"http"`
	Duplicates    map[string]int64     `json:"duplicates_sent"`
	Faults        FaultTotals          `json:"faults_injected"`
	Reconcile     ReconcileTotals      `json:"reconcile"`
	Check         *check.Report        `json:"check,omitempty"`
	Webhooks      *check.WebhookReport `json:"webhooks,omitempty"`
	Bus           *BusResult           `json:"bus,omitempty"`
	Reads         *check.ReadReport    `json:"reads,omitempty"`
	// ProviderWebhooks are paysim's webhook counters (since its last
	// start), when it sends webhooks.
	ProviderWebhooks *paysim.WebhookStats `json:"provider_webhooks,omitempty"`
	Latency          []LatencyStats       `json:"latency"`
	Bench            []BenchRow           `json:"bench,omitempty"`
	Notes            []string             `json:"notes,omitempty"`
}

// BusResult is what the bus sent and what its check looked at.
type BusResult struct {
	BusTotals
	Check check.BusReport `json:"check"`
}

// HTTPTotals counts requests.
type HTTPTotals struct {
	ClientRequests int64            `json:"client_requests"`
	ServerSide     int64            `json:"requests_through_proxies"`
	ClientRetries  int64            `json:"client_retries"`
	NetworkErrors  int64            `json:"network_errors"`
	ByStatus       map[string]int64 `json:"by_status"`
}

// FaultTotals counts injected faults.
type FaultTotals struct {
	Proxy         faultproxy.Stats `json:"proxy"`
	Paysim        map[string]int64 `json:"paysim"`
	Planned       map[string]int64 `json:"planned_by_harness"`
	OrderdKilled  int64            `json:"orderd_sigkill"`
	PaysimKilled  int64            `json:"paysim_sigkill"`
	DBConnsKilled int64            `json:"db_connections_terminated"`
}

// ReconcileTotals counts operations left without a definitive answer.
type ReconcileTotals struct {
	Before int `json:"unresolved_after_storm"`
	After  int `json:"unresolved_after_reconcile"`
	// OpenAttempts counts the run's provider attempts still pending or
	// unknown after the reconcile, before the wait for them to settle.
	OpenAttempts int `json:"open_attempts_after_reconcile"`
}

// WriteJSON writes r to path.
func WriteJSON(path string, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// PrintSummary writes the storm summary table.
func PrintSummary(w io.Writer, r *Result) {
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\norderstorm %s run %s: %d instance(s), %d shoppers, %s store, %.1fs — %s\n",
		r.Mode, r.RunID, r.Instances, r.Shoppers, r.Store, r.Seconds, verdict)
	line := func(label string, v any, detail string) {
		fmt.Fprintf(w, "  %-38s %10v  %s\n", label, v, detail)
	}
	fmt.Fprintln(w, "  "+strings.Repeat("-", 96))
	var kinds []string
	for _, k := range []string{book.KindCreate, book.KindPay, book.KindFulfill, book.KindCancel} {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.LogicalByKind[k]))
	}
	line("logical operations", r.LogicalOps, strings.Join(kinds, "  "))
	states := ""
	if r.Check != nil {
		var ss []string
		for _, s := range []string{"RCVD", "PAID", "FULFILLED", "CANCELLED"} {
			ss = append(ss, fmt.Sprintf("%s %d", s, r.Check.DBStates[s]))
		}
		states = "in the database: " + strings.Join(ss, "  ")
	}
	line("orders (logical creates)", r.Orders, states)
	var st []string
	for _, k := range sortedKeys(r.HTTP.ByStatus) {
		st = append(st, fmt.Sprintf("%s:%d", k, r.HTTP.ByStatus[k]))
	}
	line("HTTP requests sent by clients", r.HTTP.ClientRequests, strings.Join(st, " ")+fmt.Sprintf(" net-err:%d", r.HTTP.NetworkErrors))
	if r.HTTP.ServerSide > 0 {
		line("  requests through the proxies", r.HTTP.ServerSide, "(includes net/http's own resends of keyed requests)")
	}
	line("  client retries (same key)", r.HTTP.ClientRetries, "")
	var dupTotal int64
	for _, v := range r.Duplicates {
		dupTotal += v
	}
	line("duplicates sent", dupTotal, "")
	for _, k := range sortedKeys(r.Duplicates) {
		line("  "+k, r.Duplicates[k], "")
	}
	f := r.Faults
	line("faults injected: proxy", f.Proxy.Faults(), fmt.Sprintf("dropped replies %d, cut %d, truncated %d (of %d requests; %d backend dial failures)",
		f.Proxy.Dropped, f.Proxy.Cut, f.Proxy.Truncated, f.Proxy.Requests, f.Proxy.DialFailed))
	if f.Paysim != nil {
		var ps []string
		var total int64
		for _, k := range sortedKeys(f.Paysim) {
			ps = append(ps, fmt.Sprintf("%s %d", k, f.Paysim[k]))
			total += f.Paysim[k]
		}
		line("faults injected: paysim", total, strings.Join(ps, ", "))
	}
	for _, k := range sortedKeys(f.Planned) {
		line("  planned: "+k, f.Planned[k], "")
	}
	if f.OrderdKilled > 0 {
		line("orderd SIGKILLed and restarted", f.OrderdKilled, "")
	}
	if f.PaysimKilled > 0 {
		line("paysim SIGKILLed and restarted", f.PaysimKilled, "")
	}
	if f.DBConnsKilled > 0 {
		line("orderd's DB connections terminated", f.DBConnsKilled, "(pg_terminate_backend)")
	}
	line("unresolved after storm → reconcile", fmt.Sprintf("%d → %d", r.Reconcile.Before, r.Reconcile.After), "(re-sent with the same key, faults off)")
	if r.Reconcile.OpenAttempts > 0 {
		line("  provider attempts open then", r.Reconcile.OpenAttempts, "(waited for the completer, retries and provider webhooks to settle them; any still open is an anomaly)")
	}
	if c := r.Check; c != nil {
		ledger := "provider ledger not checked (no -paysim)"
		if c.LedgerChecked {
			ledger = fmt.Sprintf("ledger: %d captures, %d refunds, %d shipments, max captures/order %d",
				c.LedgerCaptures, c.LedgerRefunds, c.LedgerShipments, c.MaxCaptures)
		}
		line("checked", fmt.Sprintf("%d orders", c.DBOrders), fmt.Sprintf("%d keys, %d attempts; %s", c.KeysChecked, c.AttemptsChecked, ledger))
		if w := r.Webhooks; w != nil {
			line("webhooks", fmt.Sprintf("%d events", w.Events), fmt.Sprintf("%d deliveries received (%d redeliveries); outbox, order, signatures checked", w.Deliveries, w.Redelivery))
		}
		if p := r.ProviderWebhooks; p != nil {
			line("provider webhooks", fmt.Sprintf("%d events", p.Events), fmt.Sprintf("paysim → orderd: %d duplicated, %d dropped, %d delivered, %d failed tries, %d given up",
				p.Duplicated, p.Dropped, p.Delivered, p.Failed, p.GaveUp))
		}
		if b := r.Bus; b != nil {
			line("bus commands", fmt.Sprintf("%d commands", b.Commands), fmt.Sprintf("%d copies (%d taken in by the stream, %d late), %d raced by HTTP; %d read back; %d declined keys, %d payment_failed events",
				b.Published, b.Accepted, b.Late, b.Twins, b.Check.ReadBack, b.Check.DeclinedKeys, b.Check.DeclineEvents))
		}
		if len(c.Invariants) > 0 {
			fmt.Fprintln(w, "  invariants:")
			for _, iv := range c.Invariants {
				kinds := ""
				if len(iv.Kinds) > 0 {
					var ks []string
					for _, k := range sortedKeys(iv.Kinds) {
						ks = append(ks, fmt.Sprintf("%s %d", k, iv.Kinds[k]))
					}
					kinds = " [" + strings.Join(ks, ", ") + "]"
				}
				fmt.Fprintf(w, "    %-7s %-37s %s; %d anomalies%s\n", iv.Status, iv.Name, iv.Counts, iv.Anomalies, kinds)
			}
		}
		if len(c.Seconds) > 0 {
			var ts []string
			for _, k := range sortedKeys(c.Seconds) {
				if k != "total" {
					ts = append(ts, fmt.Sprintf("%s %.1fs", k, c.Seconds[k]))
				}
			}
			line("checks' time", fmt.Sprintf("%.1fs", c.Seconds["total"]), strings.Join(ts, ", "))
		}
		line("ANOMALIES", c.Total, "")
		for _, k := range sortedKeys(c.ByKind) {
			line("  "+k, c.ByKind[k], "")
		}
		for i, a := range c.Anomalies {
			if i == 20 {
				fmt.Fprintf(w, "    … %d more in the JSON\n", len(c.Anomalies)-20)
				break
			}
			fmt.Fprintf(w, "    %s %s: %s\n", a.Kind, a.Ref, a.Detail)
		}
	}
	fmt.Fprintln(w, "  "+strings.Repeat("-", 96))
	PrintLatency(w, r.Latency)
	for _, n := range r.Notes {
		fmt.Fprintln(w, "  note: "+n)
	}
	fmt.Fprintf(w, "RESULT: %s (%d anomalies)\n", verdict, anomalies(r))
}

func anomalies(r *Result) int {
	if r.Check == nil {
		return 0
	}
	return r.Check.Total
}

// decades are the columns of the text histogram: the share of calls whose
// latency is at most each bound (ms), the last column everything above.
var decades = []struct {
	label string
	upTo  float64
}{{"≤1ms", 1}, {"≤10ms", 10}, {"≤100ms", 100}, {"≤1s", 1000}, {"≤10s", 10000}, {">10s", math.Inf(1)}}

// decadeShares folds s's histogram into the decade columns, in percent.
func decadeShares(s LatencyStats) []float64 {
	out := make([]float64, len(decades))
	if s.Count == 0 {
		return out
	}
	for _, b := range s.Buckets {
		up := b.UpToMs
		if up < 0 {
			up = math.Inf(1)
		}
		for i, d := range decades {
			if up <= d.upTo*1.0001 {
				out[i] += float64(b.Count) * 100 / float64(s.Count)
				break
			}
		}
	}
	return out
}

// PrintLatency writes the latency table: percentiles, and a histogram by
// decade (share of calls).
func PrintLatency(w io.Writer, stats []LatencyStats) {
	fmt.Fprintf(w, "  %-11s %7s %8s %8s %8s %8s  |", "latency", "count", "p50 ms", "p95 ms", "p99 ms", "max ms")
	for _, d := range decades {
		fmt.Fprintf(w, " %6s", d.label)
	}
	fmt.Fprintln(w)
	for _, s := range stats {
		fmt.Fprintf(w, "  %-11s %7d %8.2f %8.2f %8.2f %8.1f  |", s.Kind, s.Count, s.P50Ms, s.P95Ms, s.P99Ms, s.MaxMs)
		for _, v := range decadeShares(s) {
			switch {
			case v == 0:
				fmt.Fprintf(w, " %6s", "·")
			case v < 0.05:
				fmt.Fprintf(w, " %6s", "<0.1%")
			default:
				fmt.Fprintf(w, " %5.1f%%", v)
			}
		}
		fmt.Fprintln(w)
	}
}

// Chart geometry.
const (
	svgW      = 960
	plotLeft  = 90
	plotRight = 930
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// xLog maps a latency in ms to the x coordinate of the log axis.
func xLog(v float64) float64 {
	lo, hi := math.Log10(histMinMs), math.Log10(histMaxMs)
	v = math.Max(v, histMinMs)
	f := (math.Log10(v) - lo) / (hi - lo)
	return plotLeft + math.Min(math.Max(f, 0), 1)*(plotRight-plotLeft)
}

// WriteSVG writes a latency chart: the distribution of each kind on a log
// axis, its p50–p95–p99, and, for a benchmark, the throughput of the
// service beside pgbench's.
func WriteSVG(path, title string, stats []LatencyStats, bench []BenchRow) error {
	var b strings.Builder
	histTop, histH := 60.0, 260.0
	pctTop := histTop + histH + 70
	pctH := float64(len(stats))*30 + 20
	benchTop := pctTop + pctH + 50
	benchH := 0.0
	if len(bench) > 0 {
		benchH = float64(len(bench))*44 + 40
	}
	height := benchTop + benchH + 20
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif" font-size="12">`+"\n",
		svgW, height, svgW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, html.EscapeString(title))

	// Distribution: share of calls per log bucket.
	maxShare := 0.0
	for _, s := range stats {
		for _, bk := range s.Buckets {
			maxShare = math.Max(maxShare, float64(bk.Count)/float64(max(s.Count, 1)))
		}
	}
	if maxShare == 0 {
		maxShare = 1
	}
	yShare := func(v float64) float64 { return histTop + histH - v/maxShare*histH }
	fmt.Fprintf(&b, `<text x="%d" y="%.0f">share of calls per latency bucket (log scale, 10 buckets per decade)</text>`+"\n", plotLeft, histTop-10)
	axis(&b, histTop, histH)
	for i := 0; i <= 4; i++ {
		v := maxShare * float64(i) / 4
		y := yShare(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n",
			plotLeft, y, plotRight, y, plotLeft-6, y+4, v*100)
	}
	bounds := bucketBounds()
	for i, s := range stats {
		if s.Count == 0 {
			continue
		}
		color := palette[i%len(palette)]
		counts := map[float64]int{}
		for _, bk := range s.Buckets {
			counts[bk.UpToMs] = bk.Count
		}
		var pts []string
		prev := histMinMs
		for _, up := range bounds {
			if math.IsInf(up, 1) {
				break
			}
			c := counts[round3(up)]
			mid := math.Sqrt(prev * up)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xLog(mid), yShare(float64(c)/float64(s.Count))))
			prev = up
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		lx := plotRight - 170
		ly := histTop + 14 + float64(i)*16
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="12" height="4" fill="%s"/><text x="%d" y="%.0f">%s (%d calls)</text>`+"\n",
			lx, ly-4, color, lx+18, ly, html.EscapeString(s.Kind), s.Count)
	}

	// Percentiles: p50 to p99 on the same axis.
	fmt.Fprintf(&b, `<text x="%d" y="%.0f">percentiles per operation: ● p50, ◆ p95, ▲ p99 (ms, log scale)</text>`+"\n", plotLeft, pctTop-10)
	axis(&b, pctTop, pctH)
	for i, s := range stats {
		color := palette[i%len(palette)]
		y := pctTop + 20 + float64(i)*30
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%s</text>`+"\n", plotLeft-6, y+4, html.EscapeString(s.Kind))
		if s.Count == 0 {
			continue
		}
		x50, x95, x99 := xLog(s.P50Ms), xLog(s.P95Ms), xLog(s.P99Ms)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="%s" stroke-width="3"/>`+"\n", x50, y, x99, y, color)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.0f" r="5" fill="%s"/>`, x50, y, color)
		fmt.Fprintf(&b, `<path d="M%.1f %.0f l6 6 l-6 6 l-6 -6 z" fill="%s"/>`, x95, y-6, color)
		fmt.Fprintf(&b, `<path d="M%.1f %.0f l6 10 h-12 z" fill="%s"/>`+"\n", x99, y-5, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="#333">p50 %.2f · p95 %.2f · p99 %.2f</text>`+"\n", x99+10, y+4, s.P50Ms, s.P95Ms, s.P99Ms)
	}

	if len(bench) > 0 {
		maxRate := 0.0
		for _, r := range bench {
			maxRate = math.Max(maxRate, math.Max(r.ServiceRPS, r.PgbenchTPS))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">throughput: service req/s (blue) beside pgbench tps of the same SQL (grey)</text>`+"\n", plotLeft, benchTop-10)
		for i, r := range bench {
			y := benchTop + 10 + float64(i)*44
			w1 := r.ServiceRPS / maxRate * (plotRight - plotLeft - 160)
			w2 := r.PgbenchTPS / maxRate * (plotRight - plotLeft - 160)
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%s</text>`+"\n", plotLeft-6, y+16, html.EscapeString(r.Label()))
			fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.1f" height="16" fill="#1f77b4"/><text x="%.1f" y="%.0f">%.0f req/s</text>`+"\n",
				plotLeft, y, w1, plotLeft+w1+6, y+12, r.ServiceRPS)
			if r.PgbenchTPS > 0 {
				fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.1f" height="16" fill="#999"/><text x="%.1f" y="%.0f">%.0f tps</text>`+"\n",
					plotLeft, y+18, w2, plotLeft+w2+6, y+30, r.PgbenchTPS)
			}
		}
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// axis draws the log latency axis under a panel.
func axis(b *strings.Builder, top, h float64) {
	y := top + h
	fmt.Fprintf(b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#333"/>`+"\n", plotLeft, y, plotRight, y)
	for v := histMinMs; v <= histMaxMs*1.0001; v *= 10 {
		x := xLog(v)
		label := fmt.Sprintf("%g ms", v)
		if v >= 1000 {
			label = fmt.Sprintf("%g s", v/1000)
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/><text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n",
			x, top, x, y+4, x, y+18, label)
	}
}
