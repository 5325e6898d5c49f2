package engine

import (
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// A resend after the idempotency window is the stored event when only the
// trace context, the time's zone, or (when the router filled it in) the
// time differ; any attribute, extension or data byte makes it another.
func TestSameEvent(t *testing.T) {
	at := time.Date(2026, 12, 2, 5, 0, 0, 123, time.UTC)
	stored := switchyard.Event{ID: "a", Source: "/s", Type: "t", SpecVersion: "1.0", Time: at,
		DataContentType: "application/json", Data: []byte(`{"n":1}`),
		Extensions: []switchyard.Header{{Name: "partitionkey", Value: "k"}, {Name: "traceparent", Value: "00-aa-bb-01"}}}
	with := func(change func(e *switchyard.Event)) *switchyard.Event {
		e := stored
		e.Extensions = append([]switchyard.Header(nil), stored.Extensions...)
		change(&e)
		return &e
	}
	for _, c := range []struct {
		name     string
		sent     *switchyard.Event
		withTime bool
		same     bool
	}{
		{"identical", with(func(*switchyard.Event) {}), true, true},
		{"another traceparent and a tracestate", with(func(e *switchyard.Event) {
			e.Extensions[1].Value = "00-cc-dd-01"
			e.Extensions = append(e.Extensions, switchyard.Header{Name: "tracestate", Value: "x=1"})
		}), true, true},
		{"the same instant in another zone", with(func(e *switchyard.Event) { e.Time = at.In(time.FixedZone("", 2*3600)) }), true, true},
		{"another time", with(func(e *switchyard.Event) { e.Time = at.Add(time.Nanosecond) }), true, false},
		{"another time the router filled in", with(func(e *switchyard.Event) { e.Time = at.Add(time.Hour) }), false, true},
		{"another extension value", with(func(e *switchyard.Event) { e.Extensions[0].Value = "j" }), true, false},
		{"one more extension", with(func(e *switchyard.Event) {
			e.Extensions = append(e.Extensions, switchyard.Header{Name: "region", Value: "eu"})
		}), true, false},
		{"another data byte", with(func(e *switchyard.Event) { e.Data = []byte(`{"n":2}`) }), true, false},
		{"no data", with(func(e *switchyard.Event) { e.Data = nil }), true, false},
		{"another subject", with(func(e *switchyard.Event) { e.Subject = "s" }), true, false},
	} {
		if got := sameEvent(&stored, c.sent, c.withTime); got != c.same {
			t.Errorf("%s: sameEvent = %v, want %v", c.name, got, c.same)
		}
	}
}
