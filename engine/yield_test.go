package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
)

// While delivery yields to ingest, a loop rests between batches but keeps
// delivering: every event the producers stored reaches the stream, once;
// with outbox.yield_lag = "0s" the loop never rests
// (docs/decisions/ingest-first.md).
func TestDeliveryYieldsToIngest(t *testing.T) {
	for _, lag := range []string{"10s", "0s"} {
		t.Run("yield_lag="+lag, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newHarness(t, fmt.Sprintf(`
outbox { yield_lag = %q }
storage { min_free = "1MiB" } # roomy on a nearly full test disk too
event "t.yield" {
  batch_size = 20
  route {
    to      = "nats.local"
    subject = "t.yield"
  }
}
`, lag), false, harnessOption(func(o *engine.Options) {
				o.Registerer = reg
				o.Saturated = func() bool { return true }
			}))
			engine.ForceYield(h.eng, time.Minute)

			// Producers that are always in Ingest, as closed-loop clients are.
			var ids []string
			var mu sync.Mutex
			ctx, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer stop()
			errs := make(chan error, 4)
			var wg sync.WaitGroup
			for p := range 4 {
				wg.Go(func() {
					for n := 0; ctx.Err() == nil; n++ {
						got, err := ingestNamed(h.eng, "t.yield", fmt.Sprintf("p%d-%d", p, n), 10)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						ids = append(ids, got...)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			h.waitDelivered(ids, 60*time.Second)

			msgs := h.streamMessages()
			seen := make(map[string]bool, len(msgs))
			for _, m := range msgs {
				seen[m.Header.Get("ce-id")] = true
			}
			if len(msgs) != len(ids) || len(seen) != len(ids) {
				t.Fatalf("stream has %d messages (%d ids), want the %d events stored, once each", len(msgs), len(seen), len(ids))
			}
			for _, id := range ids {
				if !seen[id] {
					t.Fatalf("%s stored but not in the stream", id)
				}
			}
			rested := counterValue(t, reg, "switchyard_delivery_yield_seconds_total")
			t.Logf("%d events, loop rested %.3fs", len(ids), rested)
			if lag == "0s" && rested != 0 {
				t.Fatalf("rested %.3fs with yield_lag = \"0s\"", rested)
			}
			if lag != "0s" && rested == 0 {
				t.Fatal("never rested while delivery yields and requests are being served")
			}
		})
	}
}

// ingestNamed stores n events of type typ with ids prefix-0 … prefix-(n-1)
// in one request.
func ingestNamed(e *engine.Engine, typ, prefix string, n int) ([]string, error) {
	req := &engine.IngestRequest{
		Tenant: "default",
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		req.Events = append(req.Events, engine.IngestEvent{Event: switchyard.Event{
			ID: ids[i], Type: typ, Source: "/test", SpecVersion: "1.0",
		}})
	}
	_, err := e.Ingest(context.Background(), req)
	return ids, err
}
