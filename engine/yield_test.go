package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// While delivery yields to ingest, a loop rests between batches but keeps
// delivering: every event the producers stored reaches the stream, once;
// with outbox.yield_lag = "0s" the loop never rests
// (docs/decisions/ingest-first.md).
func TestDeliveryYieldsToIngest(t *testing.T) {
	for _, lag := range []string{"10s", "0s"} {
		t.Run("yield_lag="+lag, func(t *testing.T) {
			h, reg := newYieldHarness(t, "t.yield", lag)

			ids := produce(t, h.eng, "t.yield", "p", 500*time.Millisecond)
			h.waitDelivered(ids, 60*time.Second)
			h.streamHoldsOnce(ids)
			rested := testkit.MetricSum(t, reg, "switchyard_delivery_yield_seconds_total", nil)
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

// A reload (SIGHUP) changes outbox.yield_lag for the loops already
// running: they rest under "10s", stop resting once "0s" is swapped in, and
// rest again when "10s" comes back; every event is delivered once.
func TestYieldLagReloads(t *testing.T) {
	h, reg := newYieldHarness(t, "t.reload", "10s")

	var all []string
	rested := 0.0
	for round, lag := range []string{"10s", "0s", "10s"} {
		if round > 0 {
			cfg, err := config.Parse([]byte(natsBlock+yieldPolicies("t.reload", lag)), "reload.hcl")
			if err != nil {
				t.Fatal(err)
			}
			if err := h.eng.Reload(cfg, nil); err != nil {
				t.Fatal(err)
			}
		}
		ids := produce(t, h.eng, "t.reload", fmt.Sprintf("r%d", round), 500*time.Millisecond)
		h.waitDelivered(ids, 60*time.Second)
		all = append(all, ids...)
		now := testkit.MetricSum(t, reg, "switchyard_delivery_yield_seconds_total", nil)
		t.Logf("yield_lag = %q: %d events, loop rested %.3fs", lag, len(ids), now-rested)
		if lag == "0s" && now != rested {
			t.Fatalf("rested %.3fs after a reload to yield_lag = \"0s\"", now-rested)
		}
		if lag != "0s" && now == rested {
			t.Fatalf("never rested under yield_lag = %q (round %d)", lag, round)
		}
		rested = now
	}
	h.streamHoldsOnce(all)
}

// newYieldHarness starts an engine with one type, typ, under
// outbox.yield_lag = lag, whose CPU gauge always reads saturated and whose
// delivery yields (as if a trial had paid) for a minute; reg has its
// metrics.
func newYieldHarness(t *testing.T, typ, lag string) (*harness, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, yieldPolicies(typ, lag), false, harnessOption(func(o *engine.Options) {
		o.Registerer = reg
		o.Saturated = func() bool { return true }
	}))
	engine.ForceYield(h.eng, time.Minute)
	return h, reg
}

// yieldPolicies is the configuration of newYieldHarness.
func yieldPolicies(typ, lag string) string {
	return fmt.Sprintf(`
outbox { yield_lag = %q }
storage { min_free = "1MiB" } # roomy on a nearly full test disk too
event %q {
  batch_size = 20
  route {
    to      = "nats.local"
    subject = %q
  }
}
`, lag, typ, typ)
}

// produce runs 4 closed-loop producers (always inside Ingest, as
// closed-loop clients are) for d, each storing requests of 10 events of
// type typ, and returns the ids stored.
func produce(t *testing.T, e *engine.Engine, typ, prefix string, d time.Duration) []string {
	t.Helper()
	var ids []string
	var mu sync.Mutex
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				got, err := ingestNamed(e, typ, fmt.Sprintf("%s-p%d-%d", prefix, p, n), 10)
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
	return ids
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
