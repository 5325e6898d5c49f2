package engine

import (
	"time"

	"github.com/switchyard-router/switchyard"
)

// passThrough are headers that travel under their own names, not as ce-
// attributes (W3C trace context).
var passThrough = map[string]bool{"traceparent": true, "tracestate": true}

// BindingHeaders returns the CloudEvents binary-mode headers of e with the
// given attribute prefix ("ce-" for NATS and HTTP, "ce_" for Kafka), plus
// content-type and the pass-through trace headers. Sinks add their own
// (Nats-Msg-Id) on top.
func BindingHeaders(e *switchyard.Event, prefix string) []switchyard.Header {
	h := make([]switchyard.Header, 0, 8+len(e.Extensions))
	eachBinding(e, prefix, func(namePrefix, name, value string) {
		h = append(h, switchyard.Header{Name: namePrefix + name, Value: value})
	})
	return h
}

// BindingSize is what BindingHeaders(e, prefix) adds up to, without
// building it: the bytes of every header's name and value, and how many
// headers there are. Ingest sizes an event against its routes with it
// (switchyard.Fitter) for every event, so it allocates nothing but the time.
func BindingSize(e *switchyard.Event, prefix string) (bytes, headers int) {
	eachBinding(e, prefix, func(namePrefix, name, value string) {
		bytes += len(namePrefix) + len(name) + len(value)
		headers++
	})
	return bytes, headers
}

// eachBinding calls add for every binary-mode header of e that has a
// value, its name in two parts (the attribute prefix, or "" for
// content-type and the pass-through headers).
func eachBinding(e *switchyard.Event, prefix string, add func(namePrefix, name, value string)) {
	attr := func(name, value string) {
		if value != "" {
			add(prefix, name, value)
		}
	}
	attr("specversion", e.SpecVersion)
	attr("id", e.ID)
	attr("source", e.Source)
	attr("type", e.Type)
	attr("subject", e.Subject)
	attr("dataschema", e.DataSchema)
	if !e.Time.IsZero() {
		attr("time", e.Time.UTC().Format(time.RFC3339Nano))
	}
	if e.DataContentType != "" {
		add("", "content-type", e.DataContentType)
	}
	for _, x := range e.Extensions {
		switch {
		case x.Value == "":
		case passThrough[x.Name]:
			add("", x.Name, x.Value)
		default:
			add(prefix, x.Name, x.Value)
		}
	}
}
