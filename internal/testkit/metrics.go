package testkit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricSum is the sum of the values of reg's series of the family name
// whose labels include every pair of labels (nil: every series): a
// counter's or a gauge's value, a histogram's count of observations.
func MetricSum(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range series(t, reg, name, labels) {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

// MetricSeries is how many series of the family name reg has whose labels
// include every pair of labels (nil: every series).
func MetricSeries(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) int {
	t.Helper()
	return len(series(t, reg, name, labels))
}

func series(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					match++
				}
			}
			if match == len(labels) {
				out = append(out, m)
			}
		}
	}
	return out
}
