package engine

import (
	"time"

	"github.com/switchyard-router/switchyard/storage"
)

// passThrough are headers that travel under their own names, not as ce-
// attributes (W3C trace context).
var passThrough = map[string]bool{"traceparent": true, "tracestate": true}

// BindingHeaders returns the CloudEvents binary-mode headers of e with the
// given attribute prefix ("ce-" for NATS and HTTP, "ce_" for Kafka), plus
// content-type and the pass-through trace headers. Sinks add their own
// (Nats-Msg-Id) on top.
func BindingHeaders(e *storage.Event, prefix string) []storage.Header {
	h := make([]storage.Header, 0, 8+len(e.Extensions))
	add := func(name, value string) {
		if value != "" {
			h = append(h, storage.Header{Name: name, Value: value})
		}
	}
	add(prefix+"specversion", e.SpecVersion)
	add(prefix+"id", e.ID)
	add(prefix+"source", e.Source)
	add(prefix+"type", e.Type)
	add(prefix+"subject", e.Subject)
	add(prefix+"dataschema", e.DataSchema)
	if !e.Time.IsZero() {
		add(prefix+"time", e.Time.UTC().Format(time.RFC3339Nano))
	}
	add("content-type", e.DataContentType)
	for _, x := range e.Extensions {
		if passThrough[x.Name] {
			add(x.Name, x.Value)
		} else {
			add(prefix+x.Name, x.Value)
		}
	}
	return h
}
