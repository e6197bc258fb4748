package main

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
)

// Latencies keeps every sample per operation kind. A storm or a benchmark
// phase makes at most a few hundred thousand calls, so exact percentiles
// from the samples cost little memory and need no approximation.
type Latencies struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	seen    []string // kinds in the order of their first sample
}

// NewLatencies returns an empty recorder.
func NewLatencies() *Latencies {
	return &Latencies{samples: map[string][]time.Duration{}}
}

// Add records one sample of kind.
func (l *Latencies) Add(kind string, d time.Duration) {
	l.mu.Lock()
	if _, ok := l.samples[kind]; !ok {
		l.seen = append(l.seen, kind)
	}
	l.samples[kind] = append(l.samples[kind], d)
	l.mu.Unlock()
}

// Stats summarises the samples of every kind, in kindOrder first and then
// in the order of their first sample.
func (l *Latencies) Stats() []LatencyStats {
	l.mu.Lock()
	kinds := slices.Clone(l.seen)
	copies := map[string][]time.Duration{}
	for k, s := range l.samples {
		copies[k] = slices.Clone(s)
	}
	l.mu.Unlock()
	slices.SortStableFunc(kinds, compareKinds)
	out := make([]LatencyStats, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, Summarize(k, copies[k]))
	}
	return out
}

// kindOrder is the display order of the usual kinds.
var kindOrder = []string{book.KindCreate, book.KindPay, book.KindFulfill, book.KindCancel, book.KindReplay}

func compareKinds(a, b string) int {
	ia, ib := slices.Index(kindOrder, a), slices.Index(kindOrder, b)
	switch {
	case ia >= 0 && ib >= 0:
		return ia - ib
	case ia >= 0:
		return -1
	case ib >= 0:
		return 1
	}
	return 0
}

// LatencyStats summarises the samples of one kind. Durations are in
// milliseconds in JSON.
type LatencyStats struct {
	Kind    string   `json:"kind"`
	Count   int      `json:"count"`
	MeanMs  float64  `json:"mean_ms"`
	P50Ms   float64  `json:"p50_ms"`
	P95Ms   float64  `json:"p95_ms"`
	P99Ms   float64  `json:"p99_ms"`
	MaxMs   float64  `json:"max_ms"`
	Buckets []Bucket `json:"histogram"`
}

// Bucket counts the samples in (previous bucket's UpToMs, UpToMs].
type Bucket struct {
	UpToMs float64 `json:"le_ms"`
	Count  int     `json:"count"`
}

// Histogram bounds: log-spaced buckets, bucketsPerDecade per power of ten,
// from histMinMs to histMaxMs; the last bucket takes everything above.
const (
	histMinMs        = 0.1
	histMaxMs        = 100_000
	bucketsPerDecade = 10
)

// bucketBounds returns the upper bounds of the histogram buckets.
func bucketBounds() []float64 {
	decades := math.Log10(histMaxMs / histMinMs)
	n := int(math.Round(decades * bucketsPerDecade))
	out := make([]float64, 0, n+1)
	for i := 1; i <= n; i++ {
		out = append(out, histMinMs*math.Pow(10, float64(i)/bucketsPerDecade))
	}
	return append(out, math.Inf(1))
}

// Summarize computes the stats of samples (which it sorts in place).
func Summarize(kind string, samples []time.Duration) LatencyStats {
	st := LatencyStats{Kind: kind, Count: len(samples)}
	if len(samples) == 0 {
		return st
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	st.MeanMs = ms(sum / time.Duration(len(samples)))
	st.P50Ms = ms(Percentile(samples, 50))
	st.P95Ms = ms(Percentile(samples, 95))
	st.P99Ms = ms(Percentile(samples, 99))
	st.MaxMs = ms(samples[len(samples)-1])
	bounds := bucketBounds()
	counts := make([]int, len(bounds))
	i := 0
	for _, s := range samples { // sorted, so the bucket index only grows
		v := ms(s)
		for v > bounds[i] {
			i++
		}
		counts[i]++
	}
	for j, b := range bounds {
		if counts[j] > 0 {
			up := b
			if math.IsInf(up, 1) {
				up = -1 // JSON has no infinity: -1 means "above the last bound"
			}
			st.Buckets = append(st.Buckets, Bucket{UpToMs: round3(up), Count: counts[j]})
		}
	}
	return st
}

// Percentile returns the nearest-rank p-th percentile of sorted samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
