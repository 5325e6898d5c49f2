package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
)

// slowAcks is the NATS sink with each batch's acknowledgements held back a
// little, counting how many batches wait for theirs at once.
type slowAcks struct {
	*natsplugin.Sink
	waiting, most atomic.Int32
}

func (s *slowAcks) Send(ctx context.Context, msgs []*switchyard.Message) func() []switchyard.Result {
	wait := s.Sink.Send(ctx, msgs)
	n := s.waiting.Add(1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	return func() []switchyard.Result {
		defer s.waiting.Add(-1)
		time.Sleep(3 * time.Millisecond)
		return wait()
	}
}

// While a backlog drains, a loop has several batches waiting for their
// acknowledgements at once, and the messages still reach the stream in the
// order the events were stored — for the whole type, and per key with
// ordering = "key".
func TestBatchesInTransitLeaveInOrder(t *testing.T) {
	for _, ordering := range []string{"none", "key"} {
		t.Run(ordering, func(t *testing.T) {
			var sink *slowAcks
			wrap := sinkWrap(func(s *natsplugin.Sink) switchyard.Sink { sink = &slowAcks{Sink: s}; return sink })
			h := newHarness(t, fmt.Sprintf(`
event "t.seq" {
  batch_size = 10
  ordering   = %q
  route {
    to      = "nats.local"
    subject = "t.seq"
  }
}
`, ordering), false, wrap)
			const n, keys = 600, 50
			ids := h.ingestKeyed("t.seq", n, keys) // the commit wakes the loop
			h.waitDelivered(ids, 30*time.Second)

			msgs := h.streamMessages()
			if len(msgs) != n {
				t.Fatalf("stream has %d messages, want %d", len(msgs), n)
			}
			if ordering == "none" {
				for i, m := range msgs {
					if got := m.Header.Get("ce-id"); got != ids[i] {
						t.Fatalf("message %d is %s, want %s: batches overtook each other", i, got, ids[i])
					}
				}
			}
			next := make(map[string]int) // per key: the index of the next event expected
			for _, m := range msgs {
				k, id := m.Header.Get("ce-partitionkey"), m.Header.Get("ce-id")
				want := next[k]*keys + keyIndex(t, k)
				if id != ids[want] {
					t.Fatalf("key %s: got %s, want %s: out of order", k, id, ids[want])
				}
				next[k]++
			}
			if most := sink.most.Load(); most < 2 {
				t.Fatalf("at most %d batch waited for its acknowledgements at a time: no overlap", most)
			}
			t.Logf("ordering %s: up to %d batches in transit", ordering, sink.most.Load())
		})
	}
}

// ingestKeyed stores n events of type typ in one request, event i with
// partition key "k<i mod keys>", and returns their ids in order.
func (h *harness) ingestKeyed(typ string, n, keys int) []string {
	h.t.Helper()
	ids := make([]string, n)
	req := &engine.IngestRequest{
		Tenant: "default",
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	}
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%04d", typ, i)
		req.Events = append(req.Events, engine.IngestEvent{Event: switchyard.Event{
			ID: ids[i], Type: typ, Source: "/test", SpecVersion: "1.0",
			Extensions: []switchyard.Header{{Name: "partitionkey", Value: fmt.Sprintf("k%d", i%keys)}},
		}})
	}
	if _, err := h.eng.Ingest(context.Background(), req); err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func keyIndex(t *testing.T, k string) int {
	var i int
	if _, err := fmt.Sscanf(k, "k%d", &i); err != nil {
		t.Fatalf("partition key %q", k)
	}
	return i
}

// With the broker down and a backlog of full batches, a loop probes about
// once a second instead of at polling.min: each probe that meets the outage
// grows the delay, so it must not repeat every few milliseconds. (Counted
// in polls: a probe that meets a known outage writes nothing.)
func TestOutageWithBacklogProbesSlowly(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, `
event "t.backlog" {
  batch_size = 10
  route {
    to      = "nats.local"
    subject = "t.backlog"
  }
  polling { min = "5ms" }
}
`, false, harnessOption(func(o *engine.Options) { o.Registerer = reg }))
	h.srv.Close(context.Background())
	testkit.Eventually(t, "the sink to see the server go", 10*time.Second, func() bool {
		return h.sink.Healthy(context.Background()) != nil
	})
	h.ingest("t.backlog", 200)
	time.Sleep(500 * time.Millisecond) // the first probes, while the delay grows
	before := counterValue(t, reg, "switchyard_polls_total")
	time.Sleep(2 * time.Second)
	polls := counterValue(t, reg, "switchyard_polls_total") - before
	// At 5 ms a poll, a loop that kept treating its full batches as a
	// backlog would poll ~400 times; probing within a second, ≤ 4.
	if polls > 6 {
		t.Fatalf("%v polls in 2s of outage: the loop polls at min, not once a second", polls)
	}
	t.Logf("%v polls in 2s of outage", polls)
}
