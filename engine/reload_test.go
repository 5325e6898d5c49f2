package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// A reload that removes the block of an event type with stored events says
// so, naming the type and what is stored (the start says as much of a
// queue the configuration no longer has); one that keeps every block says
// nothing of the kind.
func TestReloadWarnsOfARemovedType(t *testing.T) {
	var logs testkit.Buffer // the loops log from their goroutines
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	keep := `
event "t.keep" {
  route {
    to      = "nats.local"
    subject = "t.keep"
  }
}
`
	gone := `
event "nostream.gone" {
  route {
    to      = "nats.local"
    subject = "nostream.gone"
  }
  backoff { delay = "1h" }
}
`
	h := newHarness(t, keep+gone, false, harnessOption(func(o *engine.Options) { o.Logger = logger }))
	h.ingest("nostream.gone", 3)
	reload := func(policies string) {
		cfg, err := config.Parse([]byte(natsBlock+policies), "reload.hcl")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.eng.Reload(cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	reload(keep + gone)
	if strings.Contains(logs.String(), "removed the block") {
		t.Fatalf("a reload that keeps every block warned:\n%s", logs.String())
	}
	reload(keep)
	if l := logs.String(); !strings.Contains(l, "a reload removed the block of an event type with stored events") || !strings.Contains(l, "type=nostream.gone pending=3") {
		t.Fatalf("no warning for the removed type:\n%s", l)
	}
}

// A reload that removes a type's block leaves its loop to deliver what the
// queue holds, then stops the loop and drops the type's metric series; a
// type whose events still wait (a retry in its backoff) keeps its loop.
// The loops and series of removed types stayed until a restart: a trial
// rotating 300 of 2,000 types at each reload grew by 300 goroutines and
// ~5,100 series every time.
func TestAReloadStopsTheLoopOfARemovedTypeOnceItsQueueIsEmpty(t *testing.T) {
	reg := prometheus.NewRegistry()
	block := func(typ string) string {
		return fmt.Sprintf(`
event %q {
  route {
    to      = "nats.local"
    subject = %q
  }
  backoff { delay = "1h" }
}
`, typ, typ)
	}
	keep, gone, waits := block("t.keep"), block("t.gone"), block("nostream.waits") // no stream takes nostream.*: a retry in an hour
	h := newHarness(t, keep+gone+waits, false, harnessOption(func(o *engine.Options) { o.Registerer = reg }))
	h.waitDelivered(h.ingest("t.gone", 3), 10*time.Second)
	waiting := h.ingest("nostream.waits", 1)
	testkit.Eventually(t, "the event without a stream to wait out its backoff", 10*time.Second, func() bool {
		return h.record(waiting[0]).Attempts > 0
	})
	gone2 := h.ingest("t.gone", 2) // stored before the reload
	h.reload(keep)
	h.waitDelivered(gone2, 10*time.Second)
	testkit.Eventually(t, "the loop of the removed type with an empty queue to stop", 10*time.Second, func() bool {
		return !engine.HasLoop(h.eng, "t.gone")
	})
	for _, name := range []string{"switchyard_events_ingested_total", "switchyard_polls_total", "switchyard_published_total"} {
		if testkit.MetricSeries(t, reg, name, map[string]string{"type": "t.gone"}) > 0 {
			t.Errorf("%s{type=t.gone} still there after its loop stopped", name)
		}
		if !(testkit.MetricSeries(t, reg, name, map[string]string{"type": "t.keep"}) > 0) {
			t.Errorf("%s{type=t.keep} gone", name)
		}
	}
	time.Sleep(200 * time.Millisecond) // a few polls of the loop with a retry waiting
	if !engine.HasLoop(h.eng, "nostream.waits") || !(testkit.MetricSeries(t, reg, "switchyard_polls_total", map[string]string{"type": "nostream.waits"}) > 0) {
		t.Fatal("the loop of a removed type whose event waits out a retry stopped")
	}
	h.reload(keep + gone)
	if !engine.HasLoop(h.eng, "t.gone") {
		t.Fatal("a type brought back by a reload has no loop")
	}
	h.waitDelivered(h.ingest("t.gone", 1), 10*time.Second)
}

// An event admitted before a reload removed its type's block, and stored
// after the type's loop had stopped (its queue was empty), is not left in
// silence: it waits for the reload that takes the type again, the log
// says so, and that reload delivers it. It stayed pending with no loop
// and no word until a restart (a review).
func TestAnEventStoredAfterItsTypesLoopStoppedWaitsForTheBlock(t *testing.T) {
	var logs testkit.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	gate := &updateGate{held: make(chan struct{}), release: make(chan struct{})}
	keep, gone := oneType("t.keep"), oneType("t.gone")
	h := newHarness(t, keep+gone, false, harnessOption(func(o *engine.Options) { o.Logger = logger }),
		storeWrap(func(s engine.Store) engine.Store { gate.Store = s; return gate }))
	stored := make(chan string, 1)
	ingestHeld(t, h, gate, "late", "t.gone", stored)
	h.reload(keep)
	testkit.Eventually(t, "the removed type's loop, its queue empty, to stop", 10*time.Second, func() bool {
		return !engine.HasLoop(h.eng, "t.gone")
	})
	close(gate.release)
	id := <-stored
	testkit.Eventually(t, "the log to say the event waits", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "events were stored for a type no block or catch-all takes") && strings.Contains(logs.String(), "type=t.gone")
	})
	if st := h.record(id).State; st != storage.StatePending {
		t.Fatalf("the event is %s before its block came back", st)
	}
	h.reload(keep + gone)
	h.waitDelivered([]string{id}, 10*time.Second)
}

// oneType is an event block of typ routed to the subject typ.
func oneType(typ string) string {
	return fmt.Sprintf("\nevent %q {\n  route {\n    to      = \"nats.local\"\n    subject = %q\n  }\n}\n", typ, typ)
}

// gateKey marks the context of the request whose commit updateGate holds.
type gateKey struct{}

// ingestHeld ingests event id of type typ on a goroutine of its own,
// admitted now and held by gate before its commit (until gate.release),
// and returns once it is held; the id goes to stored once it is stored.
func ingestHeld(t *testing.T, h *harness, gate *updateGate, id, typ string, stored chan<- string) {
	go func() {
		ctx := context.WithValue(context.Background(), gateKey{}, true)
		req := &engine.IngestRequest{Tenant: "default", Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
			Events: []engine.IngestEvent{{Event: switchyard.Event{ID: id, Type: typ, Source: "/test", SpecVersion: "1.0"}}}}
		if _, err := h.eng.Ingest(ctx, req); err != nil {
			t.Error(err)
		}
		stored <- id
	}()
	<-gate.held
}

// updateGate holds the first Update whose context carries gateKey until
// release is closed, saying on held when it does.
type updateGate struct {
	engine.Store
	held, release chan struct{}
	once          sync.Once
}

func (g *updateGate) Update(ctx context.Context, fn func(*storage.Tx) error) error {
	if ctx.Value(gateKey{}) != nil {
		g.once.Do(func() { close(g.held); <-g.release })
	}
	return g.Store.Update(ctx, fn)
}

// The start warns of a queue the configuration no longer has only while
// events wait in it, with how many: it warned of every queue ever stored,
// emptied ones too, and said no number (a reload trial).
func TestTheStartWarnsOnlyOfQueuesWithEvents(t *testing.T) {
	h := newHarness(t, `
event "t.done" {
  route {
    to      = "nats.local"
    subject = "t.done"
  }
}
event "t.left" {
  route {
    to      = "nats.local"
    subject = "t.left"
  }
}
`, true)
	done := h.ingest("t.done", 1)
	h.pollAll("t.done")
	h.waitDelivered(done, 10*time.Second)
	h.ingest("t.left", 2)
	cfg, err := config.Parse([]byte(`event "t.other" {}`), "policies.hcl")
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	e, err := engine.New(h.db, cfg, nil, engine.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Open(); err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if l := logs.String(); !strings.Contains(l, "queue=t.left pending=2") || strings.Contains(l, "queue=t.done") {
		t.Fatalf("the start's warnings of queues the configuration no longer has:\n%s", l)
	}
}

// A reload is refused only when a setting that needs a restart changed,
// and the refusal names the block and the setting: the listen block moved
// down the file (the place of its tokens_file with it) is no change.
func TestReloadNamesWhatNeedsARestart(t *testing.T) {
	listen := "listen {\n  http        = \"127.0.0.1:8080\"\n  tokens_file = \"tokens.json\"\n}\n"
	h := newHarness(t, listen+oneRoute, false)
	reload := func(policies string) error {
		t.Helper()
		cfg, err := config.Parse([]byte(natsBlock+policies), "reload.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return h.eng.Reload(cfg, nil)
	}
	if err := reload("# the same listen block, further down\n\n" + listen + oneRoute); err != nil {
		t.Errorf("a reload that moved the listen block: %v", err)
	}
	for _, c := range []struct{ policies, want string }{
		{strings.Replace(listen, "8080", "8081", 1) + oneRoute, "reload: the listen blocks changed (http); that needs a restart"},
		{listen + "storage {\n  max_size = \"1GiB\"\n}\n" + oneRoute, "reload: the storage blocks changed (max_size); that needs a restart"},
	} {
		if err := reload(c.policies); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.want, err, c.want)
		}
	}
}

// The plugins a reload replaced are retired only once no batch runs them:
// a batch taken before the reload finishes its events with the old plugin
// (RetirePlugins waits for it), and the batches after take the new one.
// A fixed minute's grace closed the old plugin under a batch that ran
// longer, and its events failed (an adversarial trial).
func TestReloadRetiresPluginsAfterTheirBatches(t *testing.T) {
	inside, release := make(chan struct{}, 1), make(chan struct{})
	var byOld, byNew atomic.Int32
	old := funcPlugin{name: "p", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		select {
		case inside <- struct{}{}:
		default:
		}
		<-release
		byOld.Add(1)
		return []switchyard.PluginOutput{{Event: *ev}}, nil
	}}
	replacement := funcPlugin{name: "p", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		byNew.Add(1)
		return []switchyard.PluginOutput{{Event: *ev}}, nil
	}}
	policy := pluginPolicy("p", "t.p", `polling { min = "10ms" }`)
	h := newHarness(t, policy, false, withPlugins(old))
	first := h.ingest("t.p", 2)
	<-inside
	cfg, err := config.Parse([]byte(natsBlock+policy), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// Two reloads close together, each retiring what it replaced: neither
	// returns while the batch runs the first plugin (the first one's
	// caller took both sets, and the second's returned at once).
	retired := make(chan struct{}, 2)
	for range 2 {
		if err := h.eng.Reload(cfg, []switchyard.Plugin{replacement}); err != nil {
			t.Fatal(err)
		}
		go func() { h.eng.RetirePlugins(); retired <- struct{}{} }()
	}
	select {
	case <-retired:
		t.Fatal("the old plugin was retired while a batch ran it")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	for range 2 {
		select {
		case <-retired:
		case <-time.After(10 * time.Second):
			t.Fatal("the old plugin was never retired")
		}
	}
	h.waitDelivered(first, 10*time.Second)
	second := h.ingest("t.p", 2)
	h.waitDelivered(second, 10*time.Second)
	if byOld.Load() != 2 || byNew.Load() != 2 {
		t.Fatalf("the old plugin ran %d events, the new one %d; want 2 and 2", byOld.Load(), byNew.Load())
	}
}

// A reload or a restart that turns ordering = "key" on holds an event
// stored before it behind an earlier pending one of its key, as it holds
// the events stored after it: the events of the unordered past are put in
// their key's line. (Before, the line held only the later events: third
// went first, then first and second together, and second was delivered
// while first still failed.)
// In "lined before", the type was ordered by key and lined up (the file
// remembers it, storage.Tx.LinedUp) before a reload turned ordering off:
// the events stored then must still be lined up at the restart.
func TestOrderingByKeyTurnedOnOrdersStoredEvents(t *testing.T) {
	for _, how := range []string{"reload", "restart", "lined before"} {
		t.Run(how, func(t *testing.T) { orderingTurnedOn(t, how) })
	}
}

func orderingTurnedOn(t *testing.T, how string) {
	h := newHarness(t, orderedPolicy("none"), true, withPlugins(firstFails))
	if how == "lined before" {
		h.reload(orderedPolicy("key"), firstFails)
		if _, err := h.eng.Loop("t.ord").Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !h.linedUp("t.ord") {
			t.Fatal("not marked lined up after a take by key")
		}
		h.reload(orderedPolicy("none"), firstFails)
		how = "restart"
	}
	key := []switchyard.Header{{Name: "partitionkey", Value: "k"}}
	ingest := func(id string) {
		h.ingestEvent(switchyard.Event{ID: id, Type: "t.ord", Source: "/t", SpecVersion: "1.0", Extensions: key})
		h.clock.Advance(time.Millisecond)
	}
	ingest("first")
	ingest("second")
	cfg, err := config.Parse([]byte(natsBlock+orderedPolicy("key")), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if how == "reload" {
		err = h.eng.Reload(cfg, []switchyard.Plugin{firstFails})
	} else {
		h.eng, err = engine.New(h.db, cfg, []switchyard.Sink{h.sink}, engine.Options{Now: h.clock.Now, Plugins: []switchyard.Plugin{firstFails}, CleanupInterval: time.Hour})
	}
	if err != nil {
		t.Fatal(err)
	}
	ingest("third")
	loop := h.eng.Loop("t.ord")
	poll := func() {
		t.Helper()
		if _, err := loop.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	poll() // first fails (retry in 10s); second and third wait behind it
	poll()
	for _, id := range []string{"second", "third"} {
		if s := h.record(id).State; s != storage.StatePending {
			t.Fatalf("%s: %s while first, stored before it, is pending (first %s, third %s)", id, s, h.record("first").State, h.record("third").State)
		}
	}
	h.clock.Advance(11 * time.Second)
	poll() // first's last try: DLQ
	poll() // second goes, third waits for it
	if a, b, c := h.record("first").State, h.record("second").State, h.record("third").State; a != storage.StateDLQ || b != storage.StateDelivered || c != storage.StatePending {
		t.Fatalf("first %s, second %s, third %s; want dlq, delivered, pending", a, b, c)
	}
	poll()
	if s := h.record("third").State; s != storage.StateDelivered {
		t.Fatalf("third after second: %s", s)
	}
	if !h.linedUp("t.ord") {
		t.Fatal("not marked lined up after the line-up")
	}
}

// A reload that turns ordering = "key" on while the loop's line-up waits
// for the writer must not hold the engine's lock (e.mu) until the line-up
// ends: Stats (a read transaction that then takes e.mu) and every ingest's
// wake would wait for it, and a commit that has to remap the file waits
// for that read transaction: a deadlock.
func TestReloadDoesNotWaitForALineUp(t *testing.T) {
	h := newHarness(t, orderedPolicy("key"), true, withPlugins(firstFails))
	h.reload(orderedPolicy("key"), firstFails) // notes the idempotency window: the reloads below write nothing
	loop := h.eng.Loop("t.ord")                // created ordered by key: it lines up at its first take

	// A write that takes long (a big commit, a slow disk) holds the writer.
	release, holding := make(chan struct{}), make(chan struct{})
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		h.db.Update(context.Background(), func(*storage.Tx) error { close(holding); <-release; return nil })
	}()
	<-holding
	polled := make(chan struct{})
	go func() { defer close(polled); loop.Poll(context.Background()) }() // lineUp waits for the writer
	defer func() { close(release); <-writeDone; <-polled }()
	testkit.Eventually(t, "the poll's line-up under way", 10*time.Second, loop.LiningUp)

	h.reload(orderedPolicy("none"), firstFails)
	cfg, err := config.Parse([]byte(natsBlock+orderedPolicy("key")), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan error, 1)
	go func() { reloaded <- h.eng.Reload(cfg, []switchyard.Plugin{firstFails}) }()
	time.Sleep(200 * time.Millisecond)

	stats := make(chan struct{})
	go func() { defer close(stats); h.eng.Stats() }()
	select {
	case <-stats:
	case <-time.After(2 * time.Second):
		t.Error("Stats waited 2s for a reload waiting for a line-up")
	}
	select {
	case err := <-reloaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Error("the reload waited 2s for the loop's line-up")
	}
}

// An output an earlier attempt made that the attempt which delivered the
// event did not (a reload moved the type's route) is marked abandoned,
// not listed as undelivered beside "delivered"; an event whose outputs
// were all abandoned and that the chain now filters ends filtered.
func TestReloadAbandonsOutputsNoLongerMade(t *testing.T) {
	policy := func(subject string) string {
		return fmt.Sprintf(`
event "t.moved" {
  backoff { enabled = false }
  route {
    to      = "nats.local"
    subject = %q
  }
}
`, subject)
	}
	h := newHarness(t, policy("nostream.moved"), true)
	id := h.ingest("t.moved", 1)[0]
	loop := func() engine.PollResult {
		t.Helper()
		res, err := h.eng.Loop("t.moved").Poll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := loop(); res.Retried != 1 {
		t.Fatalf("first attempt, to a subject no stream captures: %+v", res)
	}
	h.reload(policy("t.moved"))
	if res := loop(); res.Delivered != 1 {
		t.Fatalf("after the reload: %+v", res)
	}
	rec := h.record(id)
	if rec.State != storage.StateDelivered || len(rec.Outputs) != 2 || rec.LastError != "" {
		t.Fatalf("%s, last error %q (the first attempt's is in its output and the history), outputs %+v", rec.State, rec.LastError, rec.Outputs)
	}
	for _, o := range rec.Outputs {
		switch o.Destination {
		case "nats.local:nostream.moved":
			if o.Delivered || !o.Abandoned || o.LastError == "" {
				t.Errorf("the output the reload moved away from: %+v", o)
			}
		case "nats.local:t.moved":
			if !o.Delivered || o.Abandoned {
				t.Errorf("the output that delivered the event: %+v", o)
			}
		default:
			t.Errorf("output %+v", o)
		}
	}

	// The chain sent an event where no stream captures it; reloaded, it
	// returns nothing for it.
	send := funcPlugin{name: "pick", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		return []switchyard.PluginOutput{{Destination: "nats.local:nostream.picked", Event: *ev}}, nil
	}}
	drop := funcPlugin{name: "pick", fn: func(context.Context, *switchyard.Event) ([]switchyard.PluginOutput, error) { return nil, nil }}
	picked := pluginPolicy("pick", "t.picked", "backoff { enabled = false }")
	h.reload(picked, send)
	id = h.ingestEvent(switchyard.Event{ID: "picked-1", Type: "t.picked", Source: "/t", SpecVersion: "1.0"})
	if res, err := h.eng.Loop("t.picked").Poll(context.Background()); err != nil || res.Retried != 1 {
		t.Fatalf("first attempt: %+v %v", res, err)
	}
	h.reload(picked, drop)
	if res, err := h.eng.Loop("t.picked").Poll(context.Background()); err != nil || res.Filtered != 1 {
		t.Fatalf("after the reload: %+v %v", res, err)
	}
	if rec := h.record(id); rec.State != storage.StateFiltered || len(rec.Outputs) != 1 || !rec.Outputs[0].Abandoned {
		t.Fatalf("filtered at last: %s, outputs %+v", rec.State, rec.Outputs)
	}
}

// A route a reload adds to a running type has its sink's publish counters
// at 0 from the reload, as the routes of a start have from theirs: an
// alert on increase() sees that route's first error. They appeared only at
// its first publish (a review).
func TestAReloadedRouteHasItsCountersAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	const down = `kafka "down" { brokers = ["127.0.0.1:1"] }` + "\n"
	h := newHarness(t, down+oneRoute, false, switchyard.Sink(downSink{}), harnessOption(func(o *engine.Options) { o.Registerer = reg }))
	twoRoutes := strings.Replace(oneRoute, "  polling", "  route {\n    to    = \"kafka.down\"\n    topic = \"orders\"\n  }\n  polling", 1)
	cfg, err := config.Parse([]byte(natsBlock+down+twoRoutes), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Reload(cfg, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"switchyard_published_total", "switchyard_publish_errors_total"} {
		if !(testkit.MetricSeries(t, reg, name, map[string]string{"type": "t.order", "sink": "kafka.down"}) > 0) {
			t.Errorf("%s{type=t.order,sink=kafka.down} absent after the reload that added the route", name)
		}
	}
}

// retireViewHook runs hook once, after the first View that Engine.retire
// makes (its pendingIn, read before it takes e.mu) has returned: the
// window between retire's "queue empty" read and its lock.
type retireViewHook struct {
	engine.Store
	once sync.Once
	hook func()
}

func (r *retireViewHook) View(fn func(*storage.Tx) error) error {
	err := r.Store.View(fn)
	if calledFrom("engine.(*Engine).retire") {
		r.once.Do(r.hook)
	}
	return err
}

func calledFrom(fn string) bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}

// An event admitted before a reload removed its type, whose commit and wake
// fall between Engine.retire's look at the queue (empty) and its lock, is
// not left pending in silence: it woke the retiring loop, which retire
// then deleted, and retire's second look finds it and logs that it waits
// (a review of 47f509f: no loop and no log line).
func TestAnEventCommittedWhileItsLoopRetiresIsNotSilent(t *testing.T) {
	var logs testkit.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	gate := &updateGate{held: make(chan struct{}), release: make(chan struct{})}
	stored := make(chan string, 1)
	hooked := &retireViewHook{}
	hooked.hook = func() { // retire read an empty queue and has not locked yet
		close(gate.release)
		<-stored // the commit is in and Ingest has woken "the" loop
	}
	keep, gone := oneType("t.keep"), oneType("t.gone")
	h := newHarness(t, keep+gone, false, harnessOption(func(o *engine.Options) { o.Logger = logger }),
		storeWrap(func(s engine.Store) engine.Store { gate.Store = s; hooked.Store = gate; return hooked }))
	ingestHeld(t, h, gate, "late", "t.gone", stored)
	h.reload(keep) // the loop of t.gone retires; its retire meets the hook
	testkit.Eventually(t, "the removed type's loop to stop", 10*time.Second, func() bool {
		return !engine.HasLoop(h.eng, "t.gone")
	})
	// Either the loop delivered it before it stopped, or the log says it
	// waits (strandedLocked's line); not pending in silence.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if h.record("late").State == storage.StateDelivered || strings.Contains(logs.String(), "type=t.gone") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("event \"late\" of t.gone is %s, t.gone has no loop (HasLoop %v), and the log says nothing of it (stranded in silence); log:\n%s",
		h.record("late").State, engine.HasLoop(h.eng, "t.gone"), logs.String())
}
