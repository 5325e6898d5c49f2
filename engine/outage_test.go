package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/plugins/kafka"
	"github.com/switchyard-router/switchyard/storage"
)

// One sink's outage does not hold up a type's events to its other sinks:
// with the Kafka cluster down, events a plugin routes to NATS are
// delivered, within a publish timeout, while more events than a batch wait
// for Kafka at the head of the queue (before, they never were), and the
// Kafka sink answers at once that it is unavailable instead of waiting
// its publish timeout batch after batch. Once the cluster is back, every
// Kafka event is delivered, none with an attempt counted.
func TestOneSinkOutageDoesNotHoldTheOthers(t *testing.T) {
	// The same port and data directory: a broker restarted, topics and
	// their ids kept.
	port, dir := testkit.FreePort(t), t.TempDir()
	kc := testkit.Kafka(t, kfake.Ports(port), kfake.DataDir(dir), kfake.SeedTopics(1, "orders")) // closed again at the end: a second Close does nothing
	kcfg := config.NewKafka("main", kc.ListenAddrs()...)
	kcfg.PublishTimeout = 5 * time.Second
	ks, err := kafka.Open(context.Background(), kcfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ks.Close(context.Background()) })
	h := newHarness(t, `
kafka "main" { brokers = ["127.0.0.1:1"] }
`+pluginPolicy("pick", "t.mixed", `batch_size = 10
  polling {
    min = "10ms"
    max = "100ms"
  }`), false, withPlugins(pickBySubject), switchyard.Sink(ks))

	warm := h.ingestMixed("warm", "kafka", 1)
	h.waitDelivered(warm, 20*time.Second)
	kc.Close()

	stuck := h.ingestMixed("stuck", "kafka", 30)
	// The batch in flight when the cluster went away waits its publish
	// timeout once; then the sink knows, and says so at once.
	unavailable := func(id string) bool {
		return strings.Contains(h.record(id).LastError, switchyard.ErrSinkUnavailable.Error())
	}
	testkit.EventuallyWith(t, 30*time.Second, func() bool { return unavailable(stuck[0]) && unavailable(stuck[len(stuck)-1]) },
		func() string {
			return fmt.Sprintf("a Kafka event's last error: %q, want the sink unavailable", h.record(stuck[0]).LastError)
		})

	start := time.Now()
	toNATS := h.ingestMixed("nats", "", 30)
	// Not a batch of them waits a publish timeout: the Kafka events
	// between them are answered at once, and wait behind them.
	h.waitDelivered(toNATS, kcfg.PublishTimeout)
	t.Logf("NATS events delivered %s after they were stored, Kafka down", time.Since(start).Round(time.Millisecond))
	for _, id := range stuck {
		rec := h.record(id)
		if (rec.State != storage.StatePending && rec.State != storage.StateInProcess) || rec.Attempts != 0 {
			t.Fatalf("%s while Kafka is down: %s, %d attempts, %q", id, rec.State, rec.Attempts, rec.LastError)
		}
	}

	testkit.Kafka(t, kfake.Ports(port), kfake.DataDir(dir))
	back := time.Now()
	h.waitDelivered(stuck, 30*time.Second)
	t.Logf("Kafka events delivered %s after the cluster was back", time.Since(back).Round(time.Millisecond))
	for _, id := range stuck {
		if rec := h.record(id); rec.Attempts != 0 {
			t.Fatalf("%s: %d attempts counted for an outage: %+v", id, rec.Attempts, rec.History)
		}
	}
}

// pickBySubject sends an event whose subject is "kafka" to kafka.main's
// topic orders, and any other along the type's routes.
var pickBySubject = funcPlugin{name: "pick", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
	if ev.Subject == "kafka" {
		return []switchyard.PluginOutput{{Destination: "kafka.main:orders", Event: *ev}}, nil
	}
	return []switchyard.PluginOutput{{Event: *ev}}, nil
}}

// ingestMixed stores n events of type t.mixed with the given subject.
func (h *harness) ingestMixed(prefix, subject string, n int) []string {
	h.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.ingestEvent(switchyard.Event{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "t.mixed", Source: "/t", SpecVersion: "1.0", Subject: subject, Data: []byte(`{}`), DataContentType: "application/json"})
	}
	return ids
}

// A long outage costs the data file nothing once it has begun: the poll
// that meets it first writes why its events wait, and the probes after it,
// a second apart, that meet it again write nothing (each used to rewrite a
// batch of records). The events still go out, with no attempt counted,
// once the server is back.
func TestProbesThatMeetTheOutageWriteNothing(t *testing.T) {
	h := newHarness(t, oneRoute, false)
	h.srv.Close(context.Background())
	ids := h.ingest("t.order", 600)
	probesWriteNothing(h, ids[0])
	if rec := h.record(ids[0]); rec.State != storage.StatePending || rec.Attempts != 0 {
		t.Fatalf("during the outage: %s, %d attempts", rec.State, rec.Attempts)
	}
	h.startNATS()
	back := time.Now()
	h.waitDelivered(ids, 30*time.Second)
	t.Logf("every event delivered %s after the server was back", time.Since(back).Round(time.Millisecond))
	for _, id := range ids {
		if n := h.record(id).Attempts; n != 0 {
			t.Fatalf("%s: %d attempts counted for an outage", id, n)
		}
	}
}

// A sink back without a reconnect to tell (a full stream with room again)
// is found by the next probe, though every waiting event waits out the
// outage in memory: a probe that finds nothing else takes those.
func TestProbeFindsASinkBackWithoutAReconnect(t *testing.T) {
	h := newHarness(t, oneRoute, false)
	h.waitDelivered(h.ingest("t.order", 1), 10*time.Second)
	ctx := context.Background()
	s, err := h.js.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgs, cfg.Discard = 1, jetstream.DiscardNew // full: "unavailable", connected
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ids := h.ingest("t.order", 5)
	testkit.Eventually(t, "the first poll to meet the full stream", 10*time.Second, func() bool {
		return strings.Contains(h.record(ids[0]).LastError, switchyard.ErrSinkUnavailable.Error())
	})
	time.Sleep(12 * time.Second) // the events' waits grow with their age
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.MaxMsgs = -1
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	deliveredWithin(h, ids, 3*time.Second, "the stream had room again (a probe a second finds it)")
}

// An event whose outputs meet two kinds of outage (one sink unavailable,
// one not answering) writes nothing either once each output's record
// names its kind.
func TestTwoKindsOfOutageWriteNothing(t *testing.T) {
	h := newHarness(t, `
kafka "hang" {
  brokers = ["127.0.0.1:1"]
}
event "t.two" {
  max_processing_time = "100ms"
  route {
    to      = "nats.local"
    subject = "t.two"
  }
  route {
    to    = "kafka.hang"
    topic = "x"
  }
}
`, false, hangingSink{name: "kafka.hang"})
	h.srv.Close(context.Background())
	probesWriteNothing(h, h.ingest("t.two", 5)[0])
}

// probesWriteNothing waits until the event id has met the outage and the
// probes have begun, and fails if 4 s of them commit anything. The probes
// begin once the batches taken before the outage was known have recorded
// it: 1.5 s without a commit (a fixed 1.5 s was too short on a busy box,
// once: "2 commits in 4 s"); probes that wrote once a second would never
// give that, and fail here too.
func probesWriteNothing(h *harness, id string) {
	h.t.Helper()
	testkit.Eventually(h.t, "the first poll to meet the outage", 10*time.Second, func() bool {
		return h.record(id).LastError != ""
	})
	last, still := h.db.Commits(), time.Now()
	testkit.Eventually(h.t, "1.5 s without a commit once the outage was met", 20*time.Second, func() bool {
		if n := h.db.Commits(); n != last {
			last, still = n, time.Now()
		}
		return time.Since(still) >= 1500*time.Millisecond
	})
	before := h.db.Commits()
	time.Sleep(4 * time.Second)
	if n := h.db.Commits() - before; n > 0 {
		h.t.Fatalf("%d commits in 4 s of probing an outage, with nothing ingested: outputs %+v", n, h.record(id).Outputs)
	}
}

// A reload that routes a type away from a sink that is down sends the
// events that wait out its outage in memory along the new route at once.
func TestReloadEndsTheWaitsInMemory(t *testing.T) {
	pol := func(route string) string {
		return `
kafka "hang" {
  brokers = ["127.0.0.1:1"]
}
event "t.re" {
  max_processing_time = "100ms"
  route {
` + route + `
  }
}
`
	}
	h := newHarness(t, pol(`to = "kafka.hang"
    topic = "x"`), false, hangingSink{name: "kafka.hang"})
	ids := h.ingest("t.re", 3)
	testkit.Eventually(t, "the first poll to meet the outage", 10*time.Second, func() bool {
		return h.record(ids[0]).LastError != ""
	})
	time.Sleep(10 * time.Second) // the events' waits grow with their age
	h.reload(pol(`to = "nats.local"
    subject = "t.re"`))
	deliveredWithin(h, ids, 3*time.Second, "the reload routed them to a sink that is up")
}

// A reload while a probe's batch is in flight ends that batch's waits in
// memory too: when it comes back from a sink still down, its events are
// not noted again, so the next probe takes them as due, not as waiting.
func TestReloadDuringAProbeEndsItsWaits(t *testing.T) {
	h, ps := newPartHarness(t)
	ps.meetOutage(h, "a", "b")
	loop := h.eng.Loop("t.part")
	testkit.Eventually(t, "a probe to note both events", 10*time.Second, func() bool { return loop.Noted() == 2 })
	calls := ps.intercept(t)
	inFlight := next(t, calls).release
	h.reload(partPolicy)
	if n := loop.Noted(); n != 0 {
		t.Fatalf("after the reload %d events wait in memory, want 0", n)
	}
	close(inFlight) // the sink is still down for both
	close(next(t, calls).release)
	if n := loop.Noted(); n != 0 {
		t.Fatalf("the probe after the reload took %d events as waiting in memory, want 0: the batch in flight at the reload noted them again", n)
	}
}

// A reload landing while a probe's outcome is being written ends that
// batch's waits too. A probe that meets the outage with new events writes
// that meeting (their records name it), and only then notes them: the
// reload comes after the probe decided they may wait (Loop.mayWait) and
// before the commit returns, so only waitInMemory's own look at the
// reloads can tell.
func TestReloadDuringAProbesCommitEndsItsWaits(t *testing.T) {
	gs := &gatedStore{gate: make(chan struct{}), in: make(chan struct{}, 4)}
	ps := &partSink{name: "kafka.part", down: map[string]bool{}}
	h := newHarness(t, partPolicy, false, ps, storeWrap(func(s engine.Store) engine.Store { gs.Store = s; return gs }))
	ps.meetOutage(h, "a", "b")
	loop := h.eng.Loop("t.part")
	testkit.Eventually(t, "a probe to note both events", 10*time.Second, func() bool { return loop.Noted() == 2 })
	calls := ps.intercept(t)
	ps.set(true, "c", "d")
	ps.ingest(h, "c")
	ps.ingest(h, "d")
	for c := next(t, calls); ; c = next(t, calls) { // probes take a, b and c, d by turns
		if slices.Contains(c.ids, "c") {
			gs.block.Store(true)
			close(c.release)
			break
		}
		close(c.release)
	}
	select {
	case <-gs.in: // the probe's outcome is on its way to the file
	case <-time.After(10 * time.Second):
		t.Fatal("the probe of c and d wrote nothing within 10 s")
	}
	h.reload(partPolicy)
	gs.block.Store(false)
	close(gs.gate)
	after := next(t, calls) // the next probe: the one before has noted what it noted
	defer close(after.release)
	if rec := h.record("c"); rec.LastError == "" {
		t.Fatalf("c's record does not say it met the outage: %+v", rec)
	}
	if n := loop.Noted(); n != 0 {
		t.Fatalf("%d events wait in memory after the reload, want 0: the probe whose commit the reload came during noted its events", n)
	}
}

// partSink is unavailable for the events it is told are down (a partition
// whose leader is gone, a full stream): it answers at once, and nothing
// tells the engine when one comes back (no reconnect).
type partSink struct {
	name string
	mu   sync.Mutex
	down map[string]bool
	// calls, when set, is handed each publish: it answers once the test
	// closes its release (intercept).
	calls chan publishCall
}

// publishCall is a publish a test intercepts: the ids of its events, and
// what the test closes to let it answer.
type publishCall struct {
	ids     []string
	release chan struct{}
}

func (s *partSink) Name() string { return s.name }
func (s *partSink) Publish(ctx context.Context, msgs []*switchyard.Message) []switchyard.Result {
	s.mu.Lock()
	calls := s.calls
	s.mu.Unlock()
	if calls != nil {
		c := publishCall{release: make(chan struct{})}
		for _, m := range msgs {
			c.ids = append(c.ids, m.Event.ID)
		}
		select {
		case calls <- c:
			<-c.release
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := make([]switchyard.Result, len(msgs))
	for i, m := range msgs {
		if s.down[m.Event.ID] {
			r[i].Err = fmt.Errorf("partition leader gone: %w", switchyard.ErrSinkUnavailable)
		}
	}
	return r
}
func (s *partSink) Close(context.Context) error { return nil }

// newPartHarness is a harness whose type t.part (batches of 2) goes to a
// partSink.
func newPartHarness(t *testing.T) (*harness, *partSink) {
	ps := &partSink{name: "kafka.part", down: map[string]bool{}}
	return newHarness(t, partPolicy, false, ps), ps
}

const partPolicy = `
kafka "part" {
  brokers = ["127.0.0.1:1"]
}
event "t.part" {
  batch_size = 2
  route {
    to    = "kafka.part"
    topic = "x"
  }
}
`

// ingest stores an event of type t.part with the given id.
func (s *partSink) ingest(h *harness, id string) {
	h.ingestEvent(switchyard.Event{ID: id, Type: "t.part", Source: "/t", SpecVersion: "1.0", Data: []byte(`{}`)})
}

// meetOutage stores events with the given ids, down, and waits until
// each has met the outage.
func (s *partSink) meetOutage(h *harness, ids ...string) {
	s.set(true, ids...)
	for _, id := range ids {
		s.ingest(h, id)
	}
	testkit.Eventually(h.t, "every event to meet the outage", 10*time.Second, func() bool {
		for _, id := range ids {
			if h.record(id).LastError == "" {
				return false
			}
		}
		return true
	})
}

// intercept makes each publish wait for the test: it is handed on the
// channel returned, and answers once the test closes its release. The
// test's end stops it.
func (s *partSink) intercept(t *testing.T) <-chan publishCall {
	calls := make(chan publishCall)
	s.mu.Lock()
	s.calls = calls
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		s.calls = nil
		s.mu.Unlock()
		for {
			select {
			case c := <-calls:
				close(c.release)
			default:
				return
			}
		}
	})
	return calls
}

// next is the next publish a test intercepts.
func next(t *testing.T, calls <-chan publishCall) publishCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no publish within 10 s")
		return publishCall{}
	}
}

func (s *partSink) set(down bool, ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.down[id] = down
	}
}

// The probes go through every waiting event, a batch a second, though
// none is written: events whose destination came back without a reconnect
// to tell are found within a round, not only the batch at the queue's
// head (which the probes took again and again).
func TestProbesGoThroughEveryWaitingEvent(t *testing.T) {
	h, ps := newPartHarness(t)
	ps.meetOutage(h, "a1", "a2", "b1", "b2")
	time.Sleep(3 * time.Second) // probes, writing nothing
	ps.set(false, "b1", "b2")   // b's partition is back; a's is not
	deliveredWithin(h, []string{"b1", "b2"}, 3*time.Second, "their partition came back (a1, a2's did not)")
}

// goneSink answers at once that it is unavailable (a Kafka cluster gone).
type goneSink struct{ name string }

func (s goneSink) Name() string { return s.name }
func (s goneSink) Publish(_ context.Context, msgs []*switchyard.Message) []switchyard.Result {
	r := make([]switchyard.Result, len(msgs))
	for i := range r {
		r[i].Err = fmt.Errorf("no broker reachable: %w", switchyard.ErrSinkUnavailable)
	}
	return r
}
func (goneSink) Close(context.Context) error { return nil }

// While probes go through a backlog of events waiting for a sink that is
// down, a new event of the type to a sink that is up is taken by the next
// probe, before any event a probe already met the outage with.
func TestANewEventGoesBeforeTheProbedOnes(t *testing.T) {
	h := newHarness(t, `
kafka "main" { brokers = ["127.0.0.1:1"] }
`+pluginPolicy("pick", "t.mixed", `batch_size = 2`), false, withPlugins(pickBySubject), switchyard.Sink(goneSink{name: "kafka.main"}))
	stuck := h.ingestMixed("stuck", "kafka", 30)
	testkit.Eventually(t, "the Kafka events to meet the outage", 30*time.Second, func() bool {
		return h.record(stuck[0]).LastError != "" && h.record(stuck[len(stuck)-1]).LastError != ""
	})
	time.Sleep(3 * time.Second) // probes, writing nothing
	up := h.ingestMixed("up", "", 1)
	// The next probe, or the one after it.
	deliveredWithin(h, up, 4*time.Second, "it was stored, behind events probes met the outage with")
}

// deliveredWithin waits until ids are delivered, and fails if that took
// longer than within from now, just after what happened (after).
func deliveredWithin(h *harness, ids []string, within time.Duration, after string) {
	h.t.Helper()
	start := time.Now()
	h.waitDelivered(ids, 60*time.Second)
	took := time.Since(start)
	h.t.Logf("delivered %s after %s", took.Round(time.Millisecond), after)
	if took > within {
		h.t.Fatalf("delivered %s after %s, want within %s", took.Round(time.Millisecond), after, within)
	}
}

// New events that keep coming to a destination still down (one every
// 400 ms, fewer than a batch a second) do not keep the probes from the
// events they met the outage with: those whose destination came back
// without a reconnect are found.
func TestNewEventsDoNotStarveTheProbedOnes(t *testing.T) {
	h, ps := newPartHarness(t)
	ps.meetOutage(h, "a1", "a2", "b1", "b2")
	delivered := func() bool {
		return h.record("b1").State == storage.StateDelivered && h.record("b2").State == storage.StateDelivered
	}
	var back time.Time
	for i := 0; back.IsZero() || !delivered(); i++ {
		if i == 8 { // the new events have kept coming for 3 s
			ps.set(false, "b1", "b2") // b's partition is back; a's and c's are not
			back = time.Now()
		}
		if !back.IsZero() && time.Since(back) > 10*time.Second {
			t.Fatalf("b1, b2 not delivered %s after their partition came back: %s, %q", time.Since(back).Round(time.Millisecond), h.record("b1").State, h.record("b1").LastError)
		}
		c := fmt.Sprintf("c%d", i)
		ps.set(true, c)
		ps.ingest(h, c)
		time.Sleep(400 * time.Millisecond)
	}
	t.Logf("b delivered %s after its partition came back", time.Since(back).Round(time.Millisecond))
}
