package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/storage"
)

// funcPlugin is a plugin written in Go for the engine's own tests (the
// WebAssembly host has its own, in plugins/wasm and cmd/router); it sees
// the handle's context, where the state view rides.
type funcPlugin struct {
	name string
	fn   func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error)
}

func (p funcPlugin) Name() string { return p.name }
func (p funcPlugin) Handle(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
	return p.fn(ctx, ev)
}

// pluginPolicy is the HCL of a type typ that runs the one plugin and routes
// to the NATS subject named as the type; extra goes into the event block.
func pluginPolicy(plugin, typ, extra string) string {
	return fmt.Sprintf(`
plugin %[1]q { wasm = "unused.wasm" }
event %[2]q {
  plugins = [%[1]q]
  %[3]s
  route {
    to      = "nats.local"
    subject = %[2]q
  }
}
`, plugin, typ, extra)
}

// A chain's outputs go to their own destinations or the type's routes; a
// destination naming a sink that is not configured, or a subject no
// message can be published to, is a reject (DLQ at once, with a reason
// that names the plugin and the event); outputs split from one event get
// distinct Nats-Msg-Ids.
func TestPluginChainDestinations(t *testing.T) {
	split := funcPlugin{name: "split", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		switch ev.Subject {
		case "bad":
			return []switchyard.PluginOutput{{Destination: "kafka.nope:x", Event: *ev}}, nil
		case "wild":
			return []switchyard.PluginOutput{{Destination: "nats.local:t.>", Event: *ev}}, nil
		}
		var outs []switchyard.PluginOutput
		for i := range 3 {
			o := switchyard.PluginOutput{Event: *ev}
			o.Event.Data = []byte(fmt.Sprint(i))
			if i == 2 {
				o.Destination = "nats.local:t.direct"
			}
			outs = append(outs, o)
		}
		return outs, nil
	}}
	h := newHarness(t, `
plugin "split" { wasm = "unused.wasm" }
event "t.chain" {
  plugins = ["split"]
  route {
    to      = "nats.local"
    subject = "t.routed"
  }
}
`, true, withPlugins(split))
	ok := h.ingest("t.chain", 1)[0]
	bad := h.ingestEvent(switchyard.Event{ID: "bad-1", Type: "t.chain", Source: "/t", SpecVersion: "1.0", Subject: "bad"})
	wild := h.ingestEvent(switchyard.Event{ID: "wild-1", Type: "t.chain", Source: "/t", SpecVersion: "1.0", Subject: "wild"})
	if _, err := h.eng.Loop("t.chain").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(ok); rec.State != storage.StateDelivered || len(rec.Outputs) != 3 {
		t.Fatalf("split event: %s, outputs %+v", rec.State, rec.Outputs)
	}
	bySubject := map[string][]string{}
	for _, m := range h.streamMessages() {
		bySubject[m.Subject] = append(bySubject[m.Subject], m.Header.Get("Nats-Msg-Id")+"="+string(m.Data))
	}
	if got := fmt.Sprint(bySubject["t.routed"], bySubject["t.direct"]); got != fmt.Sprintf("[%s=0 %s/1/=1] [%s/2/=2]", ok, ok, ok) {
		t.Fatalf("outputs: %s", got)
	}
	rec := h.record(bad)
	if rec.State != storage.StateDLQ || rec.Attempts != 1 || !strings.Contains(rec.LastError, `plugin "split", event "bad-1": destination "kafka.nope:x" names sink "kafka.nope"`) {
		t.Fatalf("unknown destination: %s attempts %d %q", rec.State, rec.Attempts, rec.LastError)
	}
	rec = h.record(wild)
	if rec.State != storage.StateDLQ || rec.Attempts != 1 || !strings.Contains(rec.LastError, `plugin "split", event "wild-1": destination "nats.local:t.>": subject "t.>" has the wildcard ">"`) {
		t.Fatalf("wildcard destination: %s attempts %d %q", rec.State, rec.Attempts, rec.LastError)
	}
}

// firstFails routes every event to t.ok but the one with id "first",
// which goes where no stream captures: it always fails.
var firstFails = funcPlugin{name: "router", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
	dest := "nats.local:t.ok"
	if ev.ID == "first" {
		dest = "nats.local:nostream.fail"
	}
	return []switchyard.PluginOutput{{Destination: dest, Event: *ev, Key: ev.PartitionKey()}}, nil
}}

// orderedPolicy is type t.ord through firstFails with the ordering given.
func orderedPolicy(ordering string) string {
	return `
plugin "router" { wasm = "unused.wasm" }
event "t.ord" {
  plugins     = ["router"]
  ordering    = "` + ordering + `"
  max_retries = 1
  backoff { delay = "10s" }
}
`
}

// ordering = "key": an event waits while an earlier one with the same
// partition key is still pending (here: failing, then dead-lettered); an
// event with another key does not wait.
func TestOrderingByKey(t *testing.T) {
	h := newHarness(t, orderedPolicy("key"), true, withPlugins(firstFails))
	key := []switchyard.Header{{Name: "partitionkey", Value: "k"}}
	other := []switchyard.Header{{Name: "partitionkey", Value: "other"}}
	h.ingestEvent(switchyard.Event{ID: "first", Type: "t.ord", Source: "/t", SpecVersion: "1.0", Extensions: key})
	h.clock.Advance(time.Millisecond)
	h.ingestEvent(switchyard.Event{ID: "second", Type: "t.ord", Source: "/t", SpecVersion: "1.0", Extensions: key})
	h.ingestEvent(switchyard.Event{ID: "third", Type: "t.ord", Source: "/t", SpecVersion: "1.0", Extensions: other})
	loop := h.eng.Loop("t.ord")
	poll := func() {
		t.Helper()
		if _, err := loop.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	poll() // first fails (retry in 10s); third is delivered; second waits
	poll()
	if s := h.record("second").State; s != storage.StatePending {
		t.Fatalf("second: %s while first is pending", s)
	}
	if s := h.record("third").State; s != storage.StateDelivered {
		t.Fatalf("third (another key): %s", s)
	}
	h.clock.Advance(11 * time.Second)
	poll() // first fails again: max_retries reached, DLQ
	if s := h.record("first").State; s != storage.StateDLQ {
		t.Fatalf("first: %s", s)
	}
	if s := h.record("second").State; s != storage.StatePending {
		t.Fatalf("second was claimed in the same batch as first's last try: %s", s)
	}
	poll() // first is no longer pending: second goes
	if s := h.record("second").State; s != storage.StateDelivered {
		t.Fatalf("second after first left: %s", s)
	}
}

// Each plugin call is counted by verdict — ok (outputs), filtered (none),
// retry, reject — with its outputs and, for failures without a verdict of
// the plugin's own, their kind; and a failure is kept with the plugin's
// reason, the event's type and the stored event's id.
func TestPluginVerdictsCounted(t *testing.T) {
	judge := funcPlugin{name: "judge", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		switch ev.Subject {
		case "drop":
			return nil, nil
		case "later":
			return nil, fmt.Errorf("not now: %w", switchyard.ErrPluginRetry)
		case "trap":
			return nil, trapError{}
		case "never":
			return nil, switchyard.Permanentf("never this one")
		}
		return []switchyard.PluginOutput{{Event: *ev}, {Event: *ev}}, nil
	}}
	h := newHarness(t, pluginPolicy("judge", "t.judged", ""), true, withPlugins(judge))
	ev := func(id, subject string) string {
		return h.ingestEvent(switchyard.Event{ID: id, Type: "t.judged", Source: "/t", SpecVersion: "1.0", Subject: subject})
	}
	ev("pass-1", "")
	ev("drop-1", "drop")
	ev("drop-2", "drop")
	ev("later-1", "later")
	ev("never-1", "never")
	ev("trap-1", "trap")
	if _, err := h.eng.Loop("t.judged").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	ps := h.eng.Plugins()
	if len(ps) != 1 || ps[0].Name != "judge" || fmt.Sprint(ps[0].UsedBy) != "[t.judged]" {
		t.Fatalf("plugins = %+v", ps)
	}
	p := ps[0]
	want := map[engine.PluginVerdict]int64{engine.PluginOK: 1, engine.PluginFiltered: 2, engine.PluginRetry: 2, engine.PluginReject: 1}
	if fmt.Sprint(p.Verdicts) != fmt.Sprint(want) || p.Outputs != 2 {
		t.Fatalf("verdicts %v outputs %d, want %v and 2", p.Verdicts, p.Outputs, want)
	}
	var failures []string
	for _, f := range p.Failures {
		failures = append(failures, fmt.Sprintf("%s %s %s %s", f.Queue, f.EventID, f.Verdict, f.Reason))
	}
	if got := strings.Join(failures, " | "); !strings.Contains(got, "t.judged never-1 reject never this one") || !strings.Contains(got, "t.judged later-1 retry not now") {
		t.Fatalf("failures: %s", got)
	}
	if fmt.Sprint(p.FailureKinds) != "map[trap:1]" {
		t.Fatalf("failure kinds %v, want one trap (a verdict is no failure)", p.FailureKinds)
	}
}

// trapError is a plugin failure without a verdict, as plugins/wasm reports
// a trap.
type trapError struct{}

func (trapError) Error() string         { return "sy_handle trapped: unreachable" }
func (trapError) PluginFailure() string { return "trap" }
func (trapError) Unwrap() error         { return switchyard.ErrPluginRetry }

// An event the plugin chain returns nothing for ends "filtered" (done,
// nothing sent), not "delivered"; an output that names no destination in a
// type with no route is dead-lettered with a reason that names the fix and
// is counted, never dropped; and each failed event is one WARN line with
// its type, id and reason.
func TestFilteredAndUnroutedOutputs(t *testing.T) {
	h, logs, reg := noRouteHarness(t)
	ev := func(id, subject string) string {
		return h.ingestEvent(switchyard.Event{ID: id, Type: "t.noroute", Source: "/t", SpecVersion: "1.0", Subject: subject})
	}
	dropped, unrouted := ev("drop-1", "drop"), ev("keep-1", "")
	res, err := h.eng.Loop("t.noroute").Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Filtered != 1 || res.DeadLettered != 1 || res.Delivered != 0 {
		t.Fatalf("poll result %+v, want 1 filtered, 1 dead-lettered", res)
	}
	if rec := h.record(dropped); rec.State != storage.StateFiltered || len(rec.Outputs) != 0 {
		t.Fatalf("filtered event: %s %+v", rec.State, rec.Outputs)
	}
	rec := h.record(unrouted)
	if rec.State != storage.StateDLQ || !strings.Contains(rec.LastError, "names no destination and the type has no route") {
		t.Fatalf("unrouted event: %s %q", rec.State, rec.LastError)
	}
	if got := testkit.MetricSum(t, reg, "switchyard_unrouted_outputs_total", nil); got != 1 {
		t.Fatalf("switchyard_unrouted_outputs_total = %v, want 1", got)
	}
	if got := testkit.MetricSum(t, reg, "switchyard_filtered_total", nil); got != 1 {
		t.Fatalf("switchyard_filtered_total = %v, want 1", got)
	}
	if l := logs.String(); !strings.Contains(l, "[WARN]") || !strings.Contains(l, "event dead-lettered") || !strings.Contains(l, "event=keep-1") || !strings.Contains(l, "type=t.noroute") {
		t.Fatalf("log: %s", l)
	}
}

// noRouteHarness is an engine (fake clock) with the type t.noroute, whose
// plugin drops an event of subject "drop" and sends the others to the
// type's routes (it has none), logging WARN and up to the returned buffer.
func noRouteHarness(t *testing.T) (*harness, *testkit.Buffer, *prometheus.Registry) {
	pick := funcPlugin{name: "pick", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		if ev.Subject == "drop" {
			return nil, nil
		}
		return []switchyard.PluginOutput{{Event: *ev}}, nil // to the type's routes: it has none
	}}
	logs := new(testkit.Buffer) // the loop's count line comes on a timer of its own
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	reg := prometheus.NewRegistry()
	h := newHarness(t, `
plugin "pick" { wasm = "unused.wasm" }
event "t.noroute" {
  plugins = ["pick"]
}
`, true, withPlugins(pick), harnessOption(func(o *engine.Options) { o.Logger = log; o.Registerer = reg }))
	return h, logs, reg
}

// A loop whose events fail in many batches a second logs at most five of
// them a second, and the count of those held back a second after the
// first was, though no batch comes after them (a soak trial: an inbox
// whose service failed wrote ~100 lines a second, each batch held to
// five; a review: a loop gone idle after a burst never said its count).
func TestFailureLinesAreBoundedPerSecond(t *testing.T) {
	h, logs, _ := noRouteHarness(t)
	for b := range 8 { // 8 batches of 5, each event dead-lettered
		for i := range 5 {
			h.ingestEvent(switchyard.Event{ID: fmt.Sprintf("f-%d-%d", b, i), Type: "t.noroute", Source: "/t", SpecVersion: "1.0"})
		}
		if res, err := h.eng.Loop("t.noroute").Poll(context.Background()); err != nil || res.DeadLettered != 5 {
			t.Fatalf("poll %d: %+v %v", b, res, err)
		}
	}
	if n := strings.Count(logs.String(), "event dead-lettered"); n != 5 {
		t.Fatalf("%d lines for 40 failed events in one second, want 5:\n%s", n, logs.String())
	}
	const count = "more events were dead-lettered than were told: type=t.noroute more=35"
	testkit.Eventually(t, "the 35 held back to be told with no batch after them", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), count)
	})
	h.clock.Advance(time.Second)
	h.ingestEvent(switchyard.Event{ID: "f-last", Type: "t.noroute", Source: "/t", SpecVersion: "1.0"})
	if _, err := h.eng.Loop("t.noroute").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "event=f-last") || strings.Count(l, "more events were dead-lettered") != 1 {
		t.Fatalf("a second later: want f-last told, and the count told once:\n%s", l)
	}
}

// SharedID names two outputs sent the same way with one id (to one
// destination, or one to the type's routes and one naming a route
// outright), and leaves alone the same event sent to two destinations.
func TestSharedID(t *testing.T) {
	out := func(dest, id string) switchyard.PluginOutput {
		return switchyard.PluginOutput{Destination: dest, Event: switchyard.Event{ID: id}}
	}
	many := func(n, sameAs3 int) []switchyard.PluginOutput { // n outputs with ids of their own, but sameAs3's is output 3's
		outs := make([]switchyard.PluginOutput, n)
		for i := range outs {
			outs[i] = out("", fmt.Sprintf("e1/%d", i))
		}
		if sameAs3 >= 0 {
			outs[sameAs3].Event.ID = "e1/3"
		}
		return outs
	}
	routes := []string{"nats.a:x", "kafka.b:y"}
	for _, tc := range []struct {
		name   string
		outs   []switchyard.PluginOutput
		routes []string
		want   string
	}{
		{"one output", []switchyard.PluginOutput{out("", "e1")}, nil, ""},
		{"fan-out to two destinations", []switchyard.PluginOutput{out("nats.a:x", "e1"), out("kafka.b:y", "e1")}, nil, ""},
		{"split with ids", []switchyard.PluginOutput{out("", "e1/0"), out("", "e1/1"), out("", "e1/2")}, nil, ""},
		{"split without ids", []switchyard.PluginOutput{out("", "e1"), out("nats.a:x", "e1"), out("", "e1")}, nil,
			`outputs 0 and 2 to the type's routes have the same id "e1"`},
		{"to one subject", []switchyard.PluginOutput{out("nats.a:x", "e1"), out("nats.a:x", "e1")}, nil,
			`outputs 0 and 1 to nats.a:x have the same id "e1"`},
		{"the routes and one of them named", []switchyard.PluginOutput{out("", "e1"), out("kafka.b:y", "e1")}, routes,
			`outputs 0 and 1 to kafka.b:y have the same id "e1"`},
		{"the routes and another destination", []switchyard.PluginOutput{out("", "e1"), out("nats.c:z", "e1")}, routes, ""},
		{"many, with ids", many(20, -1), routes, ""},
		{"many, two sharing", many(20, 17), routes, `outputs 3 and 17 to the type's routes have the same id "e1/3"`},
		{"many, two sharing, routes unknown", many(20, 17), nil, `outputs 3 and 17 to the type's routes have the same id "e1/3"`},
		{"many, the routes and one of them named", append(many(20, -1), out("kafka.b:y", "e1/5")), routes,
			`outputs 5 and 20 to kafka.b:y have the same id "e1/5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var routes func() []string
			if tc.routes != nil {
				routes = func() []string { return tc.routes }
			}
			got := engine.SharedID(tc.outs, routes)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("SharedID = %q, want %q", got, tc.want)
			}
		})
	}
}

// A plugin whose outputs of one event, sent the same way, share an id is
// counted (switchyard_plugin_shared_id_events_total) and logged, once a
// minute; one that gives each output its own id is neither. The outputs
// are published all the same, each under the id it has.
func TestPluginOutputsSharingAnID(t *testing.T) {
	split := funcPlugin{name: "split", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		a, b := *ev, *ev
		if ev.Subject == "ids" {
			a.ID, b.ID = ev.ID+"/0", ev.ID+"/1"
		}
		return []switchyard.PluginOutput{{Event: a}, {Event: b}}, nil
	}}
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	reg := prometheus.NewRegistry()
	h := newHarness(t, pluginPolicy("split", "t.split", ""), true, withPlugins(split), harnessOption(func(o *engine.Options) { o.Logger = log; o.Registerer = reg }))
	ev := func(id, subject string) string {
		return h.ingestEvent(switchyard.Event{ID: id, Type: "t.split", Source: "/t", SpecVersion: "1.0", Subject: subject})
	}
	ev("same-1", "")
	ev("same-2", "")
	ev("own-1", "ids")
	if _, err := h.eng.Loop("t.split").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testkit.MetricSum(t, reg, "switchyard_plugin_shared_id_events_total", nil); got != 2 {
		t.Fatalf("switchyard_plugin_shared_id_events_total = %v, want 2 (same-1 and same-2)", got)
	}
	if n := strings.Count(logs.String(), "plugin outputs share an id"); n != 1 || !strings.Contains(logs.String(), "plugin=split") {
		t.Fatalf("%d lines, want one naming the plugin:\n%s", n, logs.String())
	}
	if ps := h.eng.Plugins(); len(ps) != 1 || ps[0].SharedIDEvents != 2 || ps[0].SharedIDLast == nil ||
		ps[0].SharedIDLast.EventID != "same-2" || ps[0].SharedIDLast.Queue != "t.split" || !strings.Contains(ps[0].SharedIDLast.Problem, `"same-2"`) {
		t.Fatalf("plugin status %+v, want 2 shared-id events, the last same-2's", ps)
	}
	ids := map[string]int{}
	for _, m := range h.streamMessages() {
		ids[m.Header.Get("ce-id")]++
	}
	if fmt.Sprint(ids) != "map[own-1/0:1 own-1/1:1 same-1:2 same-2:2]" {
		t.Fatalf("published ce-ids %v", ids)
	}
}

// In a chain, an output without a destination goes where its input was
// going: a plugin that sends the event there and to "" under one id sends
// it twice to one subject, and is noted, though the type's route is
// another.
func TestSharedIDFollowsTheChain(t *testing.T) {
	pick := funcPlugin{name: "pick", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		return []switchyard.PluginOutput{{Destination: "nats.local:t.chosen", Event: *ev}}, nil
	}}
	dup := funcPlugin{name: "dup", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		return []switchyard.PluginOutput{{Event: *ev}, {Destination: "nats.local:t.chosen", Event: *ev}}, nil
	}}
	h := newHarness(t, `
plugin "pick" { wasm = "unused.wasm" }
plugin "dup" { wasm = "unused.wasm" }
event "t.chain2" {
  plugins = ["pick", "dup"]
  route {
    to      = "nats.local"
    subject = "t.routed"
  }
}
`, true, withPlugins(pick, dup))
	h.ingestEvent(switchyard.Event{ID: "c-1", Type: "t.chain2", Source: "/t", SpecVersion: "1.0"})
	if _, err := h.eng.Loop("t.chain2").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range h.eng.Plugins() {
		if p.Name == "dup" && (p.SharedIDEvents != 1 || p.SharedIDLast == nil || !strings.Contains(p.SharedIDLast.Problem, "outputs 0 and 1 to nats.local:t.chosen")) {
			t.Fatalf("dup: %+v, want its two outputs to t.chosen noted", p)
		}
	}
}

// A loaded plugin's series exist from the first scrape, before its first
// call: each verdict's count at 0, its outputs, its duration histogram (as
// a type's counters do: an alert on increase() sees the first reject).
func TestPluginSeriesExistBeforeTheFirstCall(t *testing.T) {
	idle := funcPlugin{name: "idle", fn: func(context.Context, *switchyard.Event) ([]switchyard.PluginOutput, error) { return nil, nil }}
	reg := prometheus.NewRegistry()
	newHarness(t, pluginPolicy("idle", "t.idle", ""), true, withPlugins(idle), harnessOption(func(o *engine.Options) { o.Registerer = reg }))
	for name, n := range map[string]int{"switchyard_plugin_events_total": 4, "switchyard_plugin_outputs_total": 1, "switchyard_plugin_duration_seconds": 1} {
		if got := testkit.MetricSeries(t, reg, name, map[string]string{"plugin": "idle"}); got != n {
			t.Errorf("%s: %d series for plugin idle before its first call, want %d", name, got, n)
		}
	}
}

// A stop while the plugin chain runs counts no attempt: the chain failed
// because the router stopped, not because of the event, so the event is
// requeued as one whose publish the stop cut short is (one SIGTERM with
// max_retries = 0 dead-lettered 199 of 200 good events; an adversarial
// trial).
func TestStopDuringPluginsCountsNoAttempt(t *testing.T) {
	running := make(chan struct{}, 16)
	slow := funcPlugin{name: "slow", fn: func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		select {
		case running <- struct{}{}:
		default:
		}
		<-ctx.Done() // as the WebAssembly host is cut off by the stop
		return nil, fmt.Errorf("plugin %q, event %q: not run: %w", "slow", ev.ID, ctx.Err())
	}}
	h := newHarness(t, pluginPolicy("slow", "t.slow", "max_retries = 0\n  polling { min = \"10ms\" }"), false, withPlugins(slow))
	ids := h.ingest("t.slow", 3)
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin never ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if rec := h.record(id); rec.State != storage.StatePending || rec.Attempts != 0 {
			t.Errorf("%s after the stop: %s, %d attempts (%s)", id, rec.State, rec.Attempts, rec.LastError)
		}
	}
	// Nor is it a verdict of the plugin's in its counts (GET /v1/plugins).
	for _, p := range h.eng.Plugins() {
		if p.Name == "slow" && (p.Verdicts[engine.PluginRetry] != 0 || len(p.Failures) != 0) {
			t.Errorf("the stop counted as the plugin's: %+v", p)
		}
	}
}

// bigOutputs is a plugin "big" that makes 16 outputs of size bytes of data
// from each event.
func bigOutputs(size int) funcPlugin {
	return funcPlugin{name: "big", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		outs := make([]switchyard.PluginOutput, 16)
		for i := range outs {
			outs[i] = switchyard.PluginOutput{Event: *ev}
			outs[i].Event.Data = make([]byte, size)
		}
		return outs, nil
	}}
}

// A batch holds at most maxBatchOutputBytes (32 MiB) of plugin outputs
// until they are published: the events after that wait for the next batch,
// with no attempt counted, and every event is delivered in the end. Plugins
// within their limits made 3 GiB of one batch of 200 small events, and the
// router was killed for its memory at each start (an adversarial trial).
func TestBatchOutputsAreBounded(t *testing.T) {
	big := bigOutputs(256 << 10) // 16 × 256 KiB: 4 MiB an event
	h := newHarness(t, pluginPolicy("big", "t.big", ""), true, withPlugins(big))
	ids := h.ingest("t.big", 20)
	loop := h.eng.Loop("t.big")
	res, err := loop.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 8 || res.Requeued != 12 {
		t.Fatalf("first batch: %d delivered, %d requeued; want 8 (32 MiB of outputs) and 12", res.Delivered, res.Requeued)
	}
	for _, id := range ids {
		if rec := h.record(id); rec.Attempts != 0 {
			t.Fatalf("%s: %d attempts after the first batch (%s)", id, rec.Attempts, rec.LastError)
		}
	}
	for range 3 {
		if _, err := loop.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if rec := h.record(id); rec.State != storage.StateDelivered {
			t.Errorf("%s: %s after four batches (%s)", id, rec.State, rec.LastError)
		}
	}
}

// An output to a destination nothing could go to is the plugin's reject
// in its counts and failures (GET /v1/plugins), naming the destination:
// before, it counted as the plugin's "ok" while the event was dead-lettered
// (a plugin author's trial).
func TestBadDestinationIsThePluginsReject(t *testing.T) {
	astray := funcPlugin{name: "astray", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		return []switchyard.PluginOutput{{Event: *ev, Destination: "kafka.nowhere:x"}}, nil
	}}
	h := newHarness(t, pluginPolicy("astray", "t.astray", ""), true, withPlugins(astray))
	ids := h.ingest("t.astray", 1)
	h.pollAll("t.astray")
	if rec := h.record(ids[0]); rec.State != storage.StateDLQ {
		t.Fatalf("the event: %s (%s)", rec.State, rec.LastError)
	}
	for _, p := range h.eng.Plugins() {
		if p.Name != "astray" {
			continue
		}
		if p.Verdicts[engine.PluginOK] != 0 || p.Verdicts[engine.PluginReject] != 1 || len(p.Failures) != 1 ||
			!strings.Contains(p.Failures[0].Reason, `destination "kafka.nowhere:x" names sink "kafka.nowhere", which is not configured`) {
			t.Fatalf("counts: %+v", p)
		}
		return
	}
	t.Fatal("no stats for the plugin")
}

// An output to the NATS server's own API subjects is the plugin's reject,
// naming the namespace, and the stream keeps what it holds (a plugin
// trial: an output to $JS.API.STREAM.PURGE.<stream> emptied the stream at
// every attempt, and one to $JS.API.STREAM.DELETE.<stream> deleted it,
// while the event was dead-lettered as a refused publish).
func TestAnOutputToTheServersAPIIsAReject(t *testing.T) {
	purge := funcPlugin{name: "purge", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		if ev.Subject != "purge" {
			return []switchyard.PluginOutput{{Event: *ev}}, nil
		}
		return []switchyard.PluginOutput{{Event: *ev, Destination: "nats.local:$JS.API.STREAM.PURGE.events"}, {Event: *ev, Destination: "nats.local:$JS.API.STREAM.DELETE.events"}}, nil
	}}
	h := newHarness(t, pluginPolicy("purge", "t.purge", ""), true, withPlugins(purge))
	kept := h.ingest("t.purge", 3)
	h.pollAll("t.purge")
	h.streamHoldsOnce(kept)
	id := h.ingestEvent(switchyard.Event{ID: "p-1", Type: "t.purge", Source: "/t", SpecVersion: "1.0", Subject: "purge"})
	h.pollAll("t.purge")
	if rec := h.record(id); rec.State != storage.StateDLQ || !strings.Contains(rec.LastError, "the NATS server's own namespace $JS.") {
		t.Fatalf("the event: %s (%s)", rec.State, rec.LastError)
	}
	h.streamHoldsOnce(kept)
}

// A chain's outputs of one event, at each plugin, are held to what one call
// of that plugin may make (limits.max_outputs, and as much data as that
// many outputs of max_output_bytes): 4 × 4 outputs go out, 5 × 5 is the
// second plugin's reject, naming it and the event (a plugin trial: three
// plugins each making 16 outputs of 256 KiB, within their limits, took
// the router from 90 MB to 1.2 GB for one event).
func TestAChainsOutputsAreHeldToOneCallsBound(t *testing.T) {
	fan := func(name string) funcPlugin {
		return splitter(name, func(ev *switchyard.Event) int { return len(ev.Subject) }) // "xxxx": 4 outputs
	}
	h := newHarness(t, `
plugin "one" { wasm = "unused.wasm" }
plugin "two" { wasm = "unused.wasm" }
event "t.fan" {
  plugins = ["one", "two"]
  route {
    to      = "nats.local"
    subject = "t.fan"
  }
}
`, true, withPlugins(fan("one"), fan("two")))
	four := h.ingestEvent(switchyard.Event{ID: "f4", Type: "t.fan", Source: "/t", SpecVersion: "1.0", Subject: "xxxx"})
	five := h.ingestEvent(switchyard.Event{ID: "f5", Type: "t.fan", Source: "/t", SpecVersion: "1.0", Subject: "xxxxx"})
	h.pollAll("t.fan")
	if rec := h.record(four); rec.State != storage.StateDelivered || len(h.streamMessages()) != 16 {
		t.Fatalf("4 × 4: %s (%s), %d messages", rec.State, rec.LastError, len(h.streamMessages()))
	}
	if rec := h.record(five); rec.State != storage.StateDLQ || !strings.Contains(rec.LastError, `plugin "two", event "f5": the chain made 20 outputs`) {
		t.Fatalf("5 × 5: %s (%s)", rec.State, rec.LastError)
	}
	for _, p := range h.eng.Plugins() { // the reject is the plugin's, in its counts (a review)
		if p.Name == "two" && p.Verdicts[engine.PluginReject] != 1 {
			t.Fatalf("the second plugin's counts: %+v", p.Verdicts)
		}
	}
}

// splitter is a plugin that makes n(ev) copies of each event, with ids of
// their own (<id>/<i>).
func splitter(name string, n func(*switchyard.Event) int) funcPlugin {
	return funcPlugin{name: name, fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		outs := make([]switchyard.PluginOutput, n(ev))
		for i := range outs {
			outs[i].Event = *ev
			outs[i].Event.ID = fmt.Sprintf("%s/%d", ev.ID, i)
		}
		return outs, nil
	}}
}

// The bound is the most generous plugin's of the chain so far: a 1:1
// enricher on default limits (16 outputs a call) after a splitter allowed
// 32 passes on the splitter's 20 (a review: held to the enricher's own
// 16, every such event was rejected).
func TestAnEnricherAfterASplitterPassesItsOutputsOn(t *testing.T) {
	split := splitter("split", func(*switchyard.Event) int { return 20 })
	enrich := funcPlugin{name: "enrich", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		return []switchyard.PluginOutput{{Event: *ev}}, nil
	}}
	h := newHarness(t, `
plugin "split" {
  wasm = "unused.wasm"
  limits { max_outputs = 32 }
}
plugin "enrich" { wasm = "unused.wasm" }
event "t.split" {
  plugins = ["split", "enrich"]
  route {
    to      = "nats.local"
    subject = "t.split"
  }
}
`, true, withPlugins(split, enrich))
	id := h.ingestEvent(switchyard.Event{ID: "s1", Type: "t.split", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("t.split")
	if rec := h.record(id); rec.State != storage.StateDelivered || len(h.streamMessages()) != 20 {
		t.Fatalf("split into 20, enriched: %s (%s), %d messages", rec.State, rec.LastError, len(h.streamMessages()))
	}
}

// gatedAcks is the NATS sink with every batch's acknowledgements held until
// open is closed; entered gets a value as each batch is sent.
type gatedAcks struct {
	*natsplugin.Sink
	open    chan struct{}
	entered chan struct{}
}

func (s *gatedAcks) Send(ctx context.Context, msgs []*switchyard.Message) func() []switchyard.Result {
	wait := s.Sink.Send(ctx, msgs)
	s.entered <- struct{}{}
	return func() []switchyard.Result {
		<-s.open
		return wait()
	}
}

// The outputs all batches hold until they are published are bounded too
// (maxHeldOutputBytes), not only each batch's: with one type's batch
// waiting for its acknowledgements at the bound, another type's batch
// takes and runs only its first event (every batch makes progress), the
// rest wait with no attempt counted; once the first batch is done its
// bytes count no more.
func TestHeldOutputsAreBoundedAcrossTypes(t *testing.T) {
	engine.SetMaxHeldOutputBytes(t, 4<<20)
	big := bigOutputs(64 << 10) // 16 × 64 KiB: 1 MiB an event
	gate := &gatedAcks{open: make(chan struct{}), entered: make(chan struct{}, 4)}
	wrap := sinkWrap(func(s *natsplugin.Sink) switchyard.Sink { gate.Sink = s; return gate })
	h := newHarness(t, pluginPolicy("big", "t.big1", "")+`
event "t.big2" {
  plugins = ["big"]
  route {
    to      = "nats.local"
    subject = "t.big2"
  }
}
`, true, withPlugins(big), wrap)
	h.ingest("t.big1", 20)
	ids := h.ingest("t.big2", 20)
	poll := func(typ string) <-chan engine.PollResult {
		ch := make(chan engine.PollResult, 1)
		go func() {
			res, err := h.eng.Loop(typ).Poll(context.Background())
			if err != nil {
				t.Error(err)
			}
			ch <- res
		}()
		return ch
	}
	first := poll("t.big1")
	<-gate.entered // its outputs made and sent, the acknowledgements held
	second := poll("t.big2")
	<-gate.entered
	close(gate.open)
	if res := <-first; res.Delivered != 4 || res.Requeued != 16 {
		t.Fatalf("first batch: %+v, want 4 delivered (4 MiB) and 16 requeued", res)
	}
	if res := <-second; res.Taken != 1 || res.Delivered != 1 {
		t.Fatalf("second type's batch while the first held 4 MiB: %+v, want 1 taken and delivered", res)
	}
	if rec := h.record(ids[1]); rec.Attempts != 0 || rec.State != storage.StatePending {
		t.Fatalf("an event left for the next batch: %s, %d attempts", rec.State, rec.Attempts)
	}
	if res := <-poll("t.big2"); res.Delivered != 4 {
		t.Fatalf("after the batches were done: %+v, want 4 delivered", res)
	}
}

// A publish that fails at a destination a plugin named says which plugin
// named it, as the plugin's other failures do (a plugin author's trial:
// "nats.local:stamped: no JetStream stream for subject" left them to guess
// that their own sy_emit_to chose it); one along the type's routes does not.
func TestAFailedPublishNamesThePluginThatChoseItsDestination(t *testing.T) {
	to := funcPlugin{name: "stamp", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		return []switchyard.PluginOutput{{Destination: "nats.local:nostream.stamped", Event: *ev}}, nil
	}}
	h := newHarness(t, pluginPolicy("stamp", "t.stamp", "max_retries = 0"), true, withPlugins(to))
	id := h.ingest("t.stamp", 1)[0]
	h.pollAll("t.stamp")
	rec := h.record(id)
	if rec.State != storage.StateDLQ || !strings.Contains(rec.LastError, `nats.local:nostream.stamped (named by plugin "stamp"): `) {
		t.Fatalf("%s: %q, want the destination named by plugin \"stamp\"", rec.State, rec.LastError)
	}
}
