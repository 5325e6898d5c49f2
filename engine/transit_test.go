package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/storage"
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

// A burst of one key, ordered by key, drains as fast as its outcomes are
// recorded: each poll can take only the first of the key's line, and the
// next, due already, is taken as soon as that outcome is in, not after the
// adaptive delay (here a minute: before, each of the eight waited it, and
// with the default 250 ms min the burst took 12 s). The same for events a
// batch leaves for the next one (outputsFull), ordered or not.
func TestDueEventsLeftBehindAreTakenAtOnce(t *testing.T) {
	for _, c := range []struct {
		name, ordering string
		heldBytes      int64
	}{{"one key's line", "key", 0}, {"left for the next batch", "none", 1}} {
		t.Run(c.name, func(t *testing.T) {
			if c.heldBytes > 0 {
				engine.SetMaxHeldOutputBytes(t, c.heldBytes) // each batch sends one event
			}
			h := newHarness(t, fmt.Sprintf(`
event "t.burst" {
  ordering = %q
  polling {
    min = "1m"
    max = "1m"
  }
  route {
    to      = "nats.local"
    subject = "t.burst"
  }
}
`, c.ordering), false)
			ids := h.ingest("t.burst", 8, switchyard.Header{Name: "partitionkey", Value: "k"})
			h.waitDelivered(ids, 20*time.Second) // eight minutes if each waited the delay
			for i, m := range h.streamMessages() {
				if got := m.Header.Get("ce-id"); got != ids[i] {
					t.Fatalf("message %d is %s, want %s", i, got, ids[i])
				}
			}
		})
	}
}

// A batch takes no more events than the outputs it may hold: once their
// data reaches what the batches may still hold (maxHeldOutputBytes, here
// 300 KiB), the rest stay in the data file, not read. Before, every poll
// read batch_size events whatever their size and left all but the first
// few for the next one: events of a legal 1 MB took the router's heap to
// gigabytes, and an outage re-read 200 of them every poll (a multi-tenant
// trial: 1.07 GB in use for 4 clients, 27% of a core with nothing sent).
func TestABatchTakesNoMoreThanItMayHold(t *testing.T) {
	engine.SetMaxHeldOutputBytes(t, 300<<10)
	h := newHarness(t, `
event "t.large" {
  route {
    to      = "nats.local"
    subject = "t.large"
  }
}
`, true)
	ids := ingestLarge(h, 20)
	res, err := h.eng.Loop("t.large").Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Taken > 4 || res.Requeued != 0 || res.Delivered == 0 {
		t.Fatalf("a poll over 20 events of 100 KiB with 300 KiB to hold: %+v, want 3 or 4 taken and delivered, none taken to be put back", res)
	}
	for range 10 { // the rest, a few a poll
		if res, err = h.eng.Loop("t.large").Poll(context.Background()); err != nil || res.Requeued != 0 {
			t.Fatalf("a later poll: %+v, %v", res, err)
		}
	}
	h.waitDelivered(ids, 30*time.Second)
}

// A batch its bytes cut short is a full one: the loop overlaps it with
// the next and its outcome does not wait for company, as for a batch of
// batch_size events. Counted as partial, a backlog of large events took
// one batch at a time, each outcome waiting outcomeWait: 60 events of 100
// KiB drained in 2.26 s against 1.02 s before the byte bound, and 0.23 s
// counted as full (a review).
func TestABatchCutByItsBytesIsFull(t *testing.T) {
	engine.SetMaxHeldOutputBytes(t, 300<<10)
	reg := prometheus.NewRegistry()
	h := newHarness(t, `
event "t.large" {
  batch_size = 10
  route {
    to      = "nats.local"
    subject = "t.large"
  }
}
`, true, harnessOption(func(o *engine.Options) { o.Registerer = reg }))
	ids := ingestLarge(h, 60)
	if err := h.eng.Open(); err != nil {
		t.Fatal(err)
	}
	h.opened = true
	h.waitDelivered(ids, 60*time.Second)
	polls := map[string]float64{}
	for _, outcome := range []string{"empty", "partial", "full"} {
		polls[outcome] = testkit.MetricSum(t, reg, "switchyard_polls_total", map[string]string{"outcome": outcome})
	}
	if polls["full"] < 10 || polls["partial"] > 2 {
		t.Fatalf("polls of 60 events of 100 KiB, 300 KiB to hold: %v; want the batches cut by their bytes counted full, at most the last two partial", polls)
	}
}

// An event that came due after a poll took its batch, a retry whose
// backoff ended while the batch was published, is taken at polling.min,
// not after the whole delay: the loop looked for the next event due after
// the time it finished, found none, and waited polling.max (a reload
// trial: six retries delivered 60 s late).
func TestAnEventDueDuringAPollIsNotLeftForTheWholeDelay(t *testing.T) {
	h := newHarness(t, `
event "t.soon" {
  route {
    to      = "nats.local"
    subject = "t.soon"
  }
  polling { min = "50ms" }
}
`, true)
	takeAt := h.clock.Now()
	h.clock.Advance(10 * time.Millisecond)
	h.ingest("t.soon", 1) // due now: after the take, before the wait
	if d := h.eng.Loop("t.soon").UntilNextDue(time.Minute, takeAt); d > 50*time.Millisecond {
		t.Fatalf("after a poll that took its batch before an event came due, the loop waits %s, want polling.min (50ms)", d)
	}
}

// With backoff off ("retry on the next poll"), a failing event's retries
// are paced by the adaptive delay, which grows while they fail: its own
// retry, due at the commit that wrote it, does not count as an event that
// came due during the poll (untilNextDue). Counted so, it was retried every
// polling.min for as long as its receiver stayed down (a review: 173
// attempts in 2 s at a 10 ms min, against 2).
func TestRetriesWithoutBackoffFollowTheAdaptiveDelay(t *testing.T) {
	var runs atomic.Int64
	fail := funcPlugin{name: "fail", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		runs.Add(1)
		return nil, fmt.Errorf("receiver down")
	}}
	h := newHarness(t, pluginPolicy("fail", "t.nb", `
  max_retries = 100000
  polling {
    min = "10ms"
    max = "1m"
  }
  ordering = "key"
  backoff { enabled = false }`), false, withPlugins(fail))
	h.ingest("t.nb", 1)
	time.Sleep(2 * time.Second) // the delay grows past a second
	before := runs.Load()
	time.Sleep(2 * time.Second)
	if n := runs.Load() - before; n > 5 {
		t.Fatalf("a failing event without backoff was tried %d times in 2 s after 2 s of failures: the delay did not grow", n)
	}
}

// ingestLarge stores n events of type t.large with 100 KiB of data each,
// one request each, and returns their ids.
func ingestLarge(h *harness, n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, h.ingestEvent(switchyard.Event{ID: fmt.Sprintf("large-%d", i), Type: "t.large", Source: "/test", SpecVersion: "1.0",
			Data: bytes.Repeat([]byte("x"), 100<<10)}))
	}
	return ids
}

// A line whose first event waits out a retry's backoff holds the events
// behind it without spinning the loop: after the poll that retried it,
// one more poll finds nothing it may take, and the loop waits for the
// backoff's end.
func TestALineWaitingForABackoffDoesNotSpin(t *testing.T) {
	reg := prometheus.NewRegistry()
	failFirst := funcPlugin{name: "fail", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		if ev.ID == "first" {
			return nil, fmt.Errorf("not yet")
		}
		return []switchyard.PluginOutput{{Event: *ev}}, nil
	}}
	h := newHarness(t, pluginPolicy("fail", "t.line", `ordering = "key"
  backoff { delay = "1h" }`), false, withPlugins(failFirst), harnessOption(func(o *engine.Options) { o.Registerer = reg }))
	k := []switchyard.Header{{Name: "partitionkey", Value: "k"}}
	for _, id := range []string{"first", "second"} {
		h.ingestEvent(switchyard.Event{ID: id, Type: "t.line", Source: "/t", SpecVersion: "1.0", Extensions: k})
	}
	testkit.Eventually(t, "first attempt of first", 10*time.Second, func() bool { return h.record("first").Attempts == 1 })
	before := testkit.MetricSum(t, reg, "switchyard_polls_total", nil)
	time.Sleep(time.Second)
	if polls := testkit.MetricSum(t, reg, "switchyard_polls_total", nil) - before; polls > 2 {
		t.Fatalf("%v polls in a second while the line waits an hour's backoff", polls)
	}
	if st := h.record("second").State; st != storage.StatePending {
		t.Fatalf("second is %s, want pending behind first", st)
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
	before := testkit.MetricSum(t, reg, "switchyard_polls_total", nil)
	time.Sleep(2 * time.Second)
	polls := testkit.MetricSum(t, reg, "switchyard_polls_total", nil) - before
	// At 5 ms a poll, a loop that kept treating its full batches as a
	// backlog would poll ~400 times; probing within a second, ≤ 4.
	if polls > 6 {
		t.Fatalf("%v polls in 2s of outage: the loop polls at min, not once a second", polls)
	}
	t.Logf("%v polls in 2s of outage", polls)
}

// lateAcks is the NATS sink with each batch's acknowledgements collected
// half a second after the broker stored it, or not at all if the send's
// context ends first (what a stop meets under load): it says on inFlight
// when a batch waits.
type lateAcks struct {
	*natsplugin.Sink
	inFlight chan struct{}
}

func (s *lateAcks) Send(ctx context.Context, msgs []*switchyard.Message) func() []switchyard.Result {
	wait := s.Sink.Send(context.WithoutCancel(ctx), msgs) // the broker stores them
	return func() []switchyard.Result {
		res := wait()
		select {
		case s.inFlight <- struct{}{}:
		default:
		}
		select {
		case <-time.After(500 * time.Millisecond):
			return res
		case <-ctx.Done():
			for i := range res {
				res[i] = switchyard.Result{Err: fmt.Errorf("no acknowledgement before the stop: %w", switchyard.ErrUnknownOutcome)}
			}
			return res
		}
	}
}

// A stop lets the batches in flight have their acknowledgements and
// records them: nothing the stream stored stays pending, to be sent again
// after the restart, past the embedded stream's 1 s dedup window (an
// adversarial trial found 415 events twice in the stream after three
// SIGTERMs under load).
func TestAStopRecordsWhatIsInFlight(t *testing.T) {
	h, ids, err := stopInFlight(t, "t.stop", 20, 10*time.Second, func(s *natsplugin.Sink, inFlight chan struct{}) switchyard.Sink {
		return &lateAcks{Sink: s, inFlight: inFlight}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if rec := h.record(id); rec.State != storage.StateDelivered {
			t.Errorf("%s is %s after the stop (%s), though the stream holds it", id, rec.State, rec.LastError)
		}
	}
	h.streamHoldsOnce(ids)
}

// stopInFlight routes type typ to nats.local through the sink wrap makes
// of the harness's, stores n events, and closes the engine, within d,
// once that sink says on its channel that a batch waits for its
// acknowledgements.
func stopInFlight(t *testing.T, typ string, n int, d time.Duration, wrap func(*natsplugin.Sink, chan struct{}) switchyard.Sink) (*harness, []string, error) {
	t.Helper()
	inFlight := make(chan struct{}, 1)
	h := newHarness(t, fmt.Sprintf(`
event %q {
  route {
    to      = "nats.local"
    subject = %q
  }
}
`, typ, typ), false, sinkWrap(func(s *natsplugin.Sink) switchyard.Sink { return wrap(s, inFlight) }))
	ids := h.ingest(typ, n)
	select {
	case <-inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch was sent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h, ids, h.eng.Close(ctx)
}

// neverAcks is the NATS sink with no acknowledgement ever collected: each
// batch's outcome is unknown once its context ends (a silent broker).
type neverAcks struct {
	*natsplugin.Sink
	inFlight chan struct{}
}

func (s *neverAcks) Send(ctx context.Context, msgs []*switchyard.Message) func() []switchyard.Result {
	return func() []switchyard.Result {
		select {
		case s.inFlight <- struct{}{}:
		default:
		}
		<-ctx.Done()
		res := make([]switchyard.Result, len(msgs))
		for i := range res {
			res[i].Err = fmt.Errorf("no acknowledgement: %w", switchyard.ErrUnknownOutcome)
		}
		return res
	}
}

// A stop while a broker stays silent gives the batches in flight until a
// little before its deadline, then writes their outcomes (unknown: the
// events stay pending) and returns in time, without an error: the loops do
// not write after Close returned (a review found a stop held to its
// deadline, returning an error, the outcome written half a second later).
func TestAStopWithASilentBrokerEndsInTime(t *testing.T) {
	h, ids, err := stopInFlight(t, "t.silent", 1, 3*time.Second, func(s *natsplugin.Sink, inFlight chan struct{}) switchyard.Sink {
		return &neverAcks{Sink: s, inFlight: inFlight}
	})
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	if rec := h.record(ids[0]); rec.State != storage.StatePending || !strings.Contains(rec.LastError, "no acknowledgement") {
		t.Fatalf("when Close returned: %s (%q), want pending with the unknown outcome written", rec.State, rec.LastError)
	}
}
