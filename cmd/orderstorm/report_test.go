package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/check"
	"github.com/orderly/orderly/paysim"
)

func TestPercentileNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 95: 95 * time.Millisecond,
		99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 0: time.Millisecond} {
		if got := Percentile(s, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

func TestSummarizeBuckets(t *testing.T) {
	samples := []time.Duration{50 * time.Microsecond, time.Millisecond, time.Millisecond, 3 * time.Millisecond, 5 * time.Minute}
	st := Summarize("create", samples)
	total := 0
	for _, b := range st.Buckets {
		total += b.Count
	}
	if st.Count != 5 || total != 5 {
		t.Fatalf("count %d, buckets hold %d: %+v", st.Count, total, st.Buckets)
	}
	if st.Buckets[0].UpToMs > 0.13 || st.Buckets[len(st.Buckets)-1].UpToMs != -1 {
		t.Errorf("the smallest sample is not in the first bucket or the largest not in the overflow bucket: %+v", st.Buckets)
	}
	if st.P50Ms != 1 || st.MaxMs != 300000 {
		t.Errorf("p50 %v max %v", st.P50Ms, st.MaxMs)
	}
	shares := decadeShares(st)
	if shares[0] != 60 || shares[1] != 20 || shares[5] != 20 {
		t.Errorf("decade shares %v, want 60%% ≤1ms, 20%% ≤10ms, 20%% >10s", shares)
	}
}

// TestReportOutputs writes the summary, the JSON and the SVG of a made-up
// run: the SVG must be well-formed XML, the JSON must parse.
func TestReportOutputs(t *testing.T) {
	lat := NewLatencies()
	for i := range 200 {
		lat.Add(book.KindCreate, time.Duration(1+i%7)*time.Millisecond)
		lat.Add(book.KindPay, time.Duration(5+i%50)*time.Millisecond)
		lat.Add(book.KindReplay, time.Duration(1+i%3)*time.Millisecond)
	}
	rep := check.Report{ByKind: map[string]int{}, DBStates: map[string]int{"PAID": 3}}
	rep.Add(check.AnomalyDoubleCapture, "storm-x-1/ord_1", "the provider captured the order 2 times")
	r := &Result{Mode: "storm", RunID: "abc", Instances: 2, Shoppers: 4, Store: "postgres", LogicalOps: 600,
		LogicalByKind: map[string]int{book.KindCreate: 200}, HTTP: HTTPTotals{ByStatus: map[string]int64{"201": 200}},
		Duplicates: map[string]int64{book.ViaDoubleClick: 3}, Faults: FaultTotals{Paysim: map[string]int64{"drop": 2}},
		Check: &rep, Latency: lat.Stats(),
		Bench: []BenchRow{{Op: book.KindCreate, Clients: 4, ServiceRPS: 900, PgbenchTPS: 2000, Ratio: 0.45}}}
	var out bytes.Buffer
	PrintSummary(&out, r)
	for _, want := range []string{"FAIL", "double_capture", "p99 ms", "≤10ms", "RESULT: FAIL (1 anomalies)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	dir := t.TempDir()
	if err := WriteJSON(filepath.Join(dir, "r.json"), r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "r.json"))
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil || back["pass"] != false {
		t.Errorf("JSON %v: %s", err, b)
	}
	svg := filepath.Join(dir, "r.svg")
	if err := WriteSVG(svg, "a <title> & more", r.Latency, r.Bench); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(svg)
	defer f.Close()
	dec := xml.NewDecoder(f)
	elements := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if _, ok := tok.(xml.StartElement); ok {
			elements++
		}
	}
	if elements < 20 {
		t.Errorf("only %d SVG elements", elements)
	}
}

// TestFaultTallyAcrossRestarts: paysim's counters restart from zero when it
// does; the tally keeps the run's total.
func TestFaultTallyAcrossRestarts(t *testing.T) {
	st := func(drop, timeout int64) paysim.Stats {
		return paysim.Stats{FaultsInjected: map[paysim.FaultKind]int64{paysim.FaultDrop: drop, paysim.FaultTimeout: timeout}}
	}
	tally := newFaultTally(st(100, 50)) // counters before the run
	tally.fold(st(110, 52))             // before a kill
	tally.restarted()
	tally.fold(st(4, 1)) // at the end, after the restart
	got := tally.total()
	if got["drop"] != 14 || got["timeout"] != 3 {
		t.Errorf("tally %v, want drop 14, timeout 3", got)
	}
}
