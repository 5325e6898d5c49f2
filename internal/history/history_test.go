package history

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newRegistry(t *testing.T) (*prometheus.Registry, *prometheus.CounterVec, *prometheus.HistogramVec) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "in_total", Help: "h"}, []string{"type"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "took_seconds", Help: "h", Buckets: []float64{0.001, 0.002, 0.004, 0.008}}, []string{"sink"})
	reg.MustRegister(c, h)
	return reg, c, h
}

// Counters read at each sample become per-second rates per interval, per
// label value, with renamed keys adding up.
func TestRates(t *testing.T) {
	reg, c, _ := newRegistry(t)
	r := New(reg, []Series{{Name: "in", Family: "in_total", Label: "type", Key: func(v string) string {
		if v == "b2" {
			return "b"
		}
		return v
	}}}, nil, 10*time.Second, 3)
	t0 := time.Unix(1000, 0)
	r.Sample(t0)
	c.WithLabelValues("a").Add(50)
	r.Sample(t0.Add(10 * time.Second))
	c.WithLabelValues("a").Add(100)
	c.WithLabelValues("b").Add(20)
	c.WithLabelValues("b2").Add(10)
	r.Sample(t0.Add(20 * time.Second))
	c.WithLabelValues("a").Add(10) // in the interval running now
	v := r.View(t0.Add(25 * time.Second))
	if got := v.Rates["in"]["a"]; len(got) != 3 || got[0] != 5 || got[1] != 10 || got[2] != 2 {
		t.Fatalf("rates of a = %v, want [5 10 2] (the last over the 5 s since the last sample)", got)
	}
	if got := v.Rates["in"]["b"]; len(got) != 3 || got[0] != 0 || got[1] != 3 {
		t.Fatalf("rates of b (b and b2 added) = %v, want [0 3 0]", got)
	}
	if len(v.Times) != 3 || !v.Times[1].Equal(t0.Add(20*time.Second)) || !v.Times[2].Equal(t0.Add(25*time.Second)) {
		t.Fatalf("times = %v", v.Times)
	}
	// Keep 3 intervals: after more samples the oldest go.
	for i := 3; i < 8; i++ {
		r.Sample(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	if got := r.View(t0.Add(70 * time.Second)).Rates["in"]["a"]; len(got) != 3 {
		t.Fatalf("kept %d intervals, want 3", len(got))
	}
}

// Percentiles cover only what was observed in the window, interpolated in
// the bucket that holds them.
func TestLatency(t *testing.T) {
	reg, _, h := newRegistry(t)
	r := New(reg, nil, []Series{{Name: "publish", Family: "took_seconds", Label: "sink"}}, 10*time.Second, 2)
	for range 1000 {
		h.WithLabelValues("s").Observe(0.0075) // before the window: not counted
	}
	t0 := time.Unix(1000, 0)
	r.Sample(t0)
	for range 90 {
		h.WithLabelValues("s").Observe(0.0005)
	}
	for range 10 {
		h.WithLabelValues("s").Observe(0.003)
	}
	q := r.View(t0.Add(time.Second)).Latency["publish"]["s"]
	if q.Count != 100 {
		t.Fatalf("count = %d, want 100 (the observations before the first sample are outside the window)", q.Count)
	}
	if q.P50 <= 0 || q.P50 > 0.001 {
		t.Fatalf("p50 = %v, want in the first bucket (0, 1ms]", q.P50)
	}
	if q.P99 <= 0.002 || q.P99 > 0.004 {
		t.Fatalf("p99 = %v, want in (2ms, 4ms]", q.P99)
	}
}
