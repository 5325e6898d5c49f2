package main

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestHistogramIndex(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 257, 511, 512, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		i := histIndex(v)
		if lo, hi := histLow(i), histLow(i+1); v < lo || v >= hi {
			t.Errorf("v=%d idx=%d [%d,%d)", v, i, lo, hi)
		}
		if i >= histBuckets {
			t.Errorf("v=%d idx %d >= %d", v, i, histBuckets)
		}
	}
	prev := -1
	for v := uint64(0); v < 1<<16; v++ {
		i := histIndex(v)
		if i != prev && i != prev+1 {
			t.Fatalf("gap at %d", v)
		}
		prev = i
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h Histogram
	vals := make([]time.Duration, 100000)
	for i := range vals {
		vals[i] = time.Duration(rand.ExpFloat64() * float64(time.Millisecond))
		h.Record(vals[i])
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if d := float64(got-want) / float64(want); d > 0.01 || d < -0.01 {
			t.Errorf("q%v: got %v want %v", q, got, want)
		}
	}
	if h.Max() != vals[len(vals)-1] {
		t.Errorf("max")
	}
}
