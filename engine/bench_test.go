package engine_test

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkEndToEnd measures ingest → JetStream ack → committed for one
// type, with the loop running as in production: events are ingested in
// batches of 1000 while the loop drains them.
func BenchmarkEndToEnd(b *testing.B) {
	h := newHarness(b, oneRoute, false)
	b.ResetTimer()
	var ids []string
	for n := b.N; n > 0; n -= 1000 {
		ids = append(ids, h.ingest("t.order", min(n, 1000))...)
	}
	deadline := time.Now().Add(time.Minute)
	for pending := -1; pending != 0; {
		stats, _ := h.eng.Stats()
		pending = 0
		for _, s := range stats {
			pending += s.Pending
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d events still pending", pending)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	h.waitDelivered(ids, time.Minute)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkInboxReceive measures an inbox storing new events, a batch of
// 100 per transaction as a source hands them over: the dedup lookups,
// the insert and the remembered id (per event: ns/op / 100).
func BenchmarkInboxReceive(b *testing.B) {
	h := newHarness(b, pullInbox, false)
	ctx := context.Background()
	msgs := inbound(make([]string, 100)...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range msgs {
			msgs[j].Event.ID = strconv.Itoa(i*100 + j)
		}
		if res, err := h.eng.Receive(ctx, "pay", msgs); err != nil || res.Stored != len(msgs) {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "events/s")
}
