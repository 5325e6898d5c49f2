package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every latency falls in the one histogram bucket whose bounds hold it, up
// to the largest, and consecutive values land in the same or the next
// bucket.
func TestHistogramBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 257, 511, 512, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		i := histIndex(v)
		if i >= histBuckets {
			t.Fatalf("value %d: bucket %d out of %d", v, i, histBuckets)
		}
		if lo, next := histLow(i), histLow(i+1); v < lo || v >= next {
			t.Errorf("value %d: bucket %d is [%d, %d)", v, i, lo, next)
		}
	}
	// Buckets are contiguous: consecutive values land in the same or the
	// next bucket.
	prev := 0
	for v := uint64(1); v < 1<<18; v++ {
		i := histIndex(v)
		if i != prev && i != prev+1 {
			t.Fatalf("value %d: bucket %d after %d", v, i, prev)
		}
		prev = i
	}
}

// Histograms merged from halves of 100,000 latencies give their exact
// count, min and max, and each quantile within 1%; an empty one sums up
// as all zeros.
func TestHistogramQuantiles(t *testing.T) {
	var a, b, all Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		vals[i] = time.Duration(rand.ExpFloat64() * float64(time.Millisecond))
		if i%2 == 0 {
			a.Record(vals[i])
		} else {
			b.Record(vals[i])
		}
	}
	all.Merge(&a)
	all.Merge(&b)
	slices.Sort(vals)
	if all.Count() != uint64(len(vals)) || all.Min() != vals[0] || all.Max() != vals[len(vals)-1] {
		t.Fatalf("count %d min %v max %v; want %d %v %v", all.Count(), all.Min(), all.Max(), len(vals), vals[0], vals[len(vals)-1])
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := all.Quantile(q)
		if rel := float64(got-want) / float64(want); rel > 0.01 || rel < -0.01 {
			t.Errorf("quantile %v: %v, want %v ± 1%%", q, got, want)
		}
	}
	var empty Histogram
	if s := empty.Summarize(); s != (Summary{}) {
		t.Errorf("empty histogram: %+v", s)
	}
}
