package main

import (
	"math"
	"math/bits"
	"time"
)

// histSubBits sets the histogram's precision: 2^histSubBits buckets per
// power of two, so a recorded value is off by less than 1/128 (0.8%).
const histSubBits = 7

// histBuckets covers every non-negative int64.
const histBuckets = (64-histSubBits)<<histSubBits + 1<<histSubBits

// Histogram records durations in log-linear buckets (HDR style): constant
// memory, ~1% precision, exact count, min and max. The zero value is ready
// to use. It is not safe for concurrent use: give each goroutine its own
// and Merge them.
type Histogram struct {
	counts   []uint64
	n        uint64
	sum      float64
	min, max time.Duration
}

// histIndex maps v >= 0 to its bucket. Values below 2^(histSubBits+1) have a
// bucket each; above, a bucket spans 2^shift values.
func histIndex(v uint64) int {
	if v < 1<<(histSubBits+1) {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	return shift<<histSubBits + int(v>>shift)
}

// histLow is the smallest value of bucket i; histLow(i+1)-1 is the largest.
func histLow(i int) uint64 {
	if i < 1<<(histSubBits+1) {
		return uint64(i)
	}
	shift := i>>histSubBits - 1
	return uint64(i-shift<<histSubBits) << shift
}

// Record adds one value; negative values count as zero.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	h.counts[histIndex(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += float64(d)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value (exact).
func (h *Histogram) Max() time.Duration { return h.max }

// Min is the smallest recorded value (exact).
func (h *Histogram) Min() time.Duration { return h.min }

// Mean is the average of the recorded values.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below or at which a fraction q (0..1) of the
// recorded values fall: the middle of the bucket that holds the
// ceil(q·n)-th smallest value, clamped to the exact min and max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		lo, hi := histLow(i), histLow(i+1)-1
		v := time.Duration(lo + (hi-lo)/2)
		return min(max(v, h.min), h.max)
	}
	return h.max
}

// Summary is a histogram's headline numbers, for reports.
type Summary struct {
	Count uint64        `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize computes the Summary.
func (h *Histogram) Summarize() Summary {
	return Summary{
		Count: h.n,
		Mean:  h.Mean(),
		P50:   h.Quantile(0.50),
		P90:   h.Quantile(0.90),
		P99:   h.Quantile(0.99),
		P999:  h.Quantile(0.999),
		Max:   h.max,
	}
}
