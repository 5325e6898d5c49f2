// Package history keeps the last minutes of a few Prometheus series in
// memory, for the operator console: counters become rates per interval
// (events in and out of each queue), histograms become percentiles over the
// window (fsync, publish and plugin latency).
//
// It reads the registry the router already exports, every Interval, from
// its own goroutine: the paths that count and observe pay nothing for it,
// and there is one source for /metrics and the console. See
// docs/decisions/console.md.
package history

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Defaults: 90 samples of 10 s, the 15 minutes the console charts.
const (
	DefaultInterval = 10 * time.Second
	DefaultKeep     = 90
)

// Series names a metric family to keep and the label its values are kept
// by ("" = the family as one series). Key, if set, renames a label value
// (an inbox name to its queue's name, say); series with equal keys add up.
type Series struct {
	Name   string // what the console calls it: "in", "out", "fsync" ...
	Family string // the Prometheus family, e.g. switchyard_published_total
	Label  string
	Key    func(value string) string
}

// Recorder samples a gatherer every Interval and keeps the last Keep
// samples.
type Recorder struct {
	g        prometheus.Gatherer
	counters []Series
	histos   []Series
	interval time.Duration
	keep     int

	mu      sync.Mutex
	samples []sample // oldest first
}

// sample is one reading of every kept series.
type sample struct {
	at       time.Time
	counters map[string]map[string]float64   // series name → key → value
	histos   map[string]map[string]histogram // series name → key → buckets
}

// histogram is a cumulative reading: count per upper bound, and the total.
type histogram struct {
	bounds []float64
	counts []uint64 // cumulative, as Prometheus keeps them
	total  uint64
}

// New returns a recorder of counters (shown as rates) and histograms
// (shown as percentiles). interval and keep ≤ 0 take the defaults.
func New(g prometheus.Gatherer, counters, histograms []Series, interval time.Duration, keep int) *Recorder {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if keep <= 0 {
		keep = DefaultKeep
	}
	return &Recorder{g: g, counters: counters, histos: histograms, interval: interval, keep: keep + 1}
}

// Run samples until ctx ends. The first sample is taken at once, so the
// first rate is known one interval after start.
func (r *Recorder) Run(ctx context.Context) {
	r.Sample(time.Now())
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.Sample(now)
		}
	}
}

// Sample reads the gatherer once and keeps the reading (Run calls it; a
// test may too). A gatherer error keeps what could be read.
func (r *Recorder) Sample(now time.Time) {
	s := r.read(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	if len(r.samples) > r.keep {
		r.samples = append(r.samples[:0], r.samples[len(r.samples)-r.keep:]...)
	}
}

func (r *Recorder) read(now time.Time) sample {
	s := sample{at: now, counters: map[string]map[string]float64{}, histos: map[string]map[string]histogram{}}
	families, _ := r.g.Gather() // a partial reading still has the families it could read
	byName := make(map[string]*dto.MetricFamily, len(families))
	for _, f := range families {
		byName[f.GetName()] = f
	}
	for _, sr := range r.counters {
		m := ensure(s.counters, sr.Name)
		for _, mt := range metricsOf(byName[sr.Family]) {
			v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue() + mt.GetUntyped().GetValue()
			m[sr.key(mt)] += v
		}
	}
	for _, sr := range r.histos {
		m := ensure(s.histos, sr.Name)
		for _, mt := range metricsOf(byName[sr.Family]) {
			k := sr.key(mt)
			m[k] = m[k].add(mt.GetHistogram())
		}
	}
	return s
}

func metricsOf(f *dto.MetricFamily) []*dto.Metric {
	if f == nil {
		return nil
	}
	return f.GetMetric()
}

func ensure[V any](m map[string]map[string]V, name string) map[string]V {
	if m[name] == nil {
		m[name] = map[string]V{}
	}
	return m[name]
}

func (sr Series) key(m *dto.Metric) string {
	v := ""
	if sr.Label != "" {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == sr.Label {
				v = lp.GetValue()
			}
		}
	}
	if sr.Key != nil {
		v = sr.Key(v)
	}
	return v
}

// add sums a Prometheus histogram into h (series with equal keys add up;
// their buckets are the same family's, so the bounds agree).
func (h histogram) add(p *dto.Histogram) histogram {
	bs := p.GetBucket()
	if h.bounds == nil {
		h.bounds = make([]float64, len(bs))
		h.counts = make([]uint64, len(bs))
		for i, b := range bs {
			h.bounds[i] = b.GetUpperBound()
		}
	}
	for i, b := range bs {
		if i < len(h.counts) {
			h.counts[i] += b.GetCumulativeCount()
		}
	}
	h.total += p.GetSampleCount()
	return h
}

// View is what the console shows: rates per interval over the window, and
// percentiles over the whole window.
type View struct {
	Interval time.Duration `json:"-"`
	// Times are the ends of the intervals the rates are for, oldest first.
	Times []time.Time `json:"times"`
	// Rates[series][key] is the per-second rate in each interval.
	Rates map[string]map[string][]float64 `json:"rates"`
	// Latency[series][key] are percentiles of what was observed in the
	// window (from the oldest sample to now).
	Latency map[string]map[string]Quantiles `json:"latency"`
	// Window is how far back the view reaches.
	Window time.Duration `json:"-"`
}

// Quantiles of the observations in a window, in seconds. A percentile is
// interpolated in its bucket, as PromQL's histogram_quantile does, so it
// is as precise as the buckets.
type Quantiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
}

// View returns the kept window up to now: a fresh reading ends it, so the
// last rate and the percentiles count what happened since the last sample.
func (r *Recorder) View(now time.Time) View {
	fresh := r.read(now)
	r.mu.Lock()
	samples := append([]sample(nil), r.samples...)
	r.mu.Unlock()
	v := View{Interval: r.interval, Rates: map[string]map[string][]float64{}, Latency: map[string]map[string]Quantiles{}}
	// The interval running now is a point too (over the seconds it has
	// lasted), so the charts move between samples.
	if len(samples) == 0 || now.Sub(samples[len(samples)-1].at) >= time.Second {
		samples = append(samples, fresh)
	}
	v.Window = now.Sub(samples[0].at)
	for i := 1; i < len(samples); i++ {
		v.Times = append(v.Times, samples[i].at)
	}
	for _, sr := range r.counters { // series of one name are read into one map: once each
		if _, done := v.Rates[sr.Name]; !done {
			v.Rates[sr.Name] = rates(samples, sr.Name)
		}
	}
	for _, sr := range r.histos {
		if _, done := v.Latency[sr.Name]; !done {
			v.Latency[sr.Name] = latency(samples[0].histos[sr.Name], fresh.histos[sr.Name])
		}
	}
	return v
}

// rates turns consecutive readings of a counter into per-second rates; a
// key that appears later starts at zero, a counter that went back (a
// series that was reset) counts from zero.
func rates(samples []sample, name string) map[string][]float64 {
	keys := map[string]bool{}
	for _, s := range samples {
		for k := range s.counters[name] {
			keys[k] = true
		}
	}
	out := make(map[string][]float64, len(keys))
	for k := range keys {
		rs := make([]float64, 0, len(samples)-1)
		for i := 1; i < len(samples); i++ {
			prev, cur := samples[i-1].counters[name][k], samples[i].counters[name][k]
			d := cur - prev
			if d < 0 {
				d = cur
			}
			secs := samples[i].at.Sub(samples[i-1].at).Seconds()
			if secs <= 0 {
				secs = 1
			}
			rs = append(rs, round(d/secs))
		}
		out[k] = rs
	}
	return out
}

// latency is the percentiles of what was observed between two readings.
func latency(old, cur map[string]histogram) map[string]Quantiles {
	out := make(map[string]Quantiles, len(cur))
	for k, h := range cur {
		d := h.minus(old[k])
		if d.total == 0 {
			out[k] = Quantiles{}
			continue
		}
		out[k] = Quantiles{Count: int64(d.total), P50: d.quantile(0.5), P90: d.quantile(0.9), P99: d.quantile(0.99)}
	}
	return out
}

func (h histogram) minus(o histogram) histogram {
	if len(o.counts) != len(h.counts) || o.total > h.total { // new, or reset
		return h
	}
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), total: h.total - o.total}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - min(o.counts[i], h.counts[i])
	}
	return d
}

// quantile interpolates linearly inside the bucket that holds rank q; a
// rank beyond the last finite bound is that bound (as histogram_quantile).
func (h histogram) quantile(q float64) float64 {
	rank := q * float64(h.total)
	i := sort.Search(len(h.counts), func(i int) bool { return float64(h.counts[i]) >= rank })
	if i == len(h.counts) {
		if len(h.bounds) == 0 {
			return 0
		}
		return h.bounds[len(h.bounds)-1]
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.bounds[i-1], h.counts[i-1]
	}
	in := h.counts[i] - below
	if in == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-float64(below))/float64(in)
}

func round(f float64) float64 { return math.Round(f*100) / 100 }
