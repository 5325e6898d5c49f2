package cloudevents

import (
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// formattedTimeLen is the length FormatTime gives, for whole seconds,
// nanoseconds with and without trailing zeros, other time zones and years
// outside 0000-9999.
func TestFormattedTimeLen(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 100, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120000000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 5, time.FixedZone("x", 5*3600+1800)),
		time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-5, 1, 1, 0, 0, 0, 10, time.UTC),
	} {
		if got, want := formattedTimeLen(tm), len(FormatTime(tm)); got != want {
			t.Errorf("%v: %d, want %d (%s)", tm, got, want, FormatTime(tm))
		}
	}
}

// BenchmarkSize is what ingest pays per event and route to size it
// against the sink's limits: the exact size, and the bound that spares it.
func BenchmarkSize(b *testing.B) {
	ev := &switchyard.Event{SpecVersion: "1.0", ID: "0191d0c4-6a1f-7c2e-9b3a-5f1e2d3c4b5a", Source: "/shop/checkout", Type: "order.created",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), DataContentType: "application/json",
		Extensions: []switchyard.Header{{Name: "partitionkey", Value: "customer-17"}, {Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}
	b.Run("Size", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			NATS.Size(ev)
		}
	})
	b.Run("SizeBound", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			NATS.SizeBound(ev)
		}
	})
}
