package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkDecodeRequest is the HTTP layer's share of ingest, before the
// engine: a request's body decoded, each event checked and finished (id,
// time, trace context), for one structured event and for a batch of 100
// with client ids (as a client sends them) and without (as `router bench`
// sends them, the router assigning UUIDv7 ids).
func BenchmarkDecodeRequest(b *testing.B) {
	event := func(id string) string {
		idField := ""
		if id != "" {
			idField = `"id":"` + id + `",`
		}
		return `{"specversion":"1.0",` + idField + `"source":"/shop/checkout","type":"orders.created","subject":"order-1234","datacontenttype":"application/json","partitionkey":"customer-42","data":{"order":"1234","customer":"42","items":[{"sku":"A-1","qty":2}],"total":"44.48"}}`
	}
	batch := func(ids bool) string {
		evs := make([]string, 100)
		for i := range evs {
			id := ""
			if ids {
				id = fmt.Sprintf("0193b2b4-6a1e-7c3a-9d2f-%012d", i)
			}
			evs[i] = event(id)
		}
		return "[" + strings.Join(evs, ",") + "]"
	}
	header := func(ct string) http.Header {
		return http.Header{"Content-Type": {ct}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	}
	for _, c := range []struct {
		name, ct, body string
		events         int
	}{
		{"event", "application/cloudevents+json", event("0193b2b4-6a1e-7c3a-9d2f-4c1e2a3b4c5d"), 1},
		{"batch100-client-ids", "application/cloudevents-batch+json", batch(true), 100},
		{"batch100-router-ids", "application/cloudevents-batch+json", batch(false), 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			h, body := header(c.ct), []byte(c.body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				evs, _, err := decodeRequest(h, body, 1000, fixedNow)
				if err != nil || len(evs) != c.events {
					b.Fatalf("%d events, %v", len(evs), err)
				}
			}
		})
	}
}
