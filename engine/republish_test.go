package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// twoRoutes is a type whose events go to two subjects (outputs "<id>" and
// "<id>/1/") and a type whose events go to the second of them.
// tbRoute is type t.b with one route, to t.b on the embedded stream.
const tbRoute = `
event "t.b" {
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
`

// twoRoutes is t.b, and t.two routed both to t.a and to t.b.
var twoRoutes = twoRoutesWith("")

// twoRoutesWith is twoRoutes with extra in t.two's block.
func twoRoutesWith(extra string) string {
	return `
event "t.two" {
  ` + extra + `
  route {
    to      = "nats.local"
    subject = "t.a"
  }
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
` + tbRoute
}

// After an unclean stop, the outputs of a pending event that the stream
// stored without the router recording it are recorded at the stream's
// position by the next poll, not sent again, though the stream's
// duplicates window has passed. Not taken for an event's: a message its
// event already recorded ("r", from before the replay window), one that
// carries another event's identity (event q's second output under its id of
// before 2026-12, "q-1", which is also event q-1's), and one stored before
// the event was (event n, ingested again after an earlier n was deleted).
func TestRepublishRecordsWhatTheStreamStoredUnrecorded(t *testing.T) {
	h := newHarness(t, twoRoutes, true)
	ctx := context.Background()
	ev := func(id, typ string) switchyard.Event {
		return switchyard.Event{ID: id, Type: typ, Source: "/t", SpecVersion: "1.0"}
	}
	h.ingestEvent(ev("r", "t.two"))
	h.pollAll("t.two")
	h.clock.Advance(time.Hour) // r's delivery is older than the replay window
	h.ingestEvent(ev("s", "t.b"))
	h.pollAll("t.b")
	for _, e := range []switchyard.Event{ev("p", "t.two"), ev("q", "t.two"), ev("q-1", "t.b")} {
		h.ingestEvent(e)
	}
	h.clock.Advance(2 * 365 * 24 * time.Hour) // n is created after the message below (its clock is fake, the stream's real)
	h.ingestEvent(ev("n", "t.b"))
	// The stop cut these acknowledgements off: stored, never recorded.
	p, q, n := ev("p", "t.two"), ev("q", "t.two"), ev("n", "t.b")
	pRec := h.record("p")
	unrecorded := []*switchyard.Message{
		{Event: &p, Topic: "t.a", MsgID: pRec.OutputMsgID(0)}, {Event: &p, Topic: "t.b", MsgID: pRec.OutputMsgID(1)},
		{Event: &q, Topic: "t.b", MsgID: "q-1"}, {Event: &n, Topic: "t.b", MsgID: "n"},
	}
	res := h.sink.Publish(ctx, unrecorded)
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	before := len(h.streamMessages())
	time.Sleep(1200 * time.Millisecond) // past the stream's duplicates window: only the recall keeps p from going out again

	done, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Found by message id: p's two, and q's "q-1" for q-1 (left when q-1's
	// output is made: it carries q's id, not q-1's).
	if done.Recalled != 3 || done.Events != 0 {
		t.Fatalf("Republish = %+v, want 3 recalled (p's 2, q's q-1) and nothing requeued", done)
	}
	h.pollAll("t.two", "t.b")
	for _, id := range []string{"p", "q", "q-1", "n"} {
		if st := h.record(id).State; st != storage.StateDelivered {
			t.Fatalf("%s: %s, want delivered", id, st)
		}
	}
	for i, o := range h.record("p").Outputs[:2] {
		if o.Position == nil || *o.Position != res[i].Position {
			t.Errorf("p's output %s: recorded at %v, want where the stream holds it, %+v", o.MsgID, o.Position, res[i].Position)
		}
	}
	// p sent nothing; q (2 outputs), q-1 and n sent theirs, each stored.
	if sent := len(h.streamMessages()) - before; sent != 4 {
		t.Errorf("%d messages stored after the restart, want 4", sent)
	}
}

// After an unclean stop, an output a plugin gave an id of its own is
// recalled like any other when the plugin gives it the same id again (p,
// whose ids are derived from its own), and sent again when it does not (q:
// the stream holds "q/old"): the stored message's id is compared with the
// one the output has when the loop makes it.
func TestRepublishRecallsOutputsWithIDsOfTheirOwn(t *testing.T) {
	derive := funcPlugin{name: "derive", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		out := *ev
		out.ID = ev.ID + "/x"
		return []switchyard.PluginOutput{{Event: out}}, nil // to both of the type's routes
	}}
	h := newHarness(t, `plugin "derive" { wasm = "unused.wasm" }`+twoRoutesWith(`plugins = ["derive"]`), true, withPlugins(derive))
	ctx := context.Background()
	var msgs []*switchyard.Message
	for _, e := range []struct{ id, stored string }{{"p", "p/x"}, {"q", "q/old"}} {
		h.ingestEvent(switchyard.Event{ID: e.id, Type: "t.two", Source: "/t", SpecVersion: "1.0"})
		rec := h.record(e.id)
		out := rec.Event
		out.ID = e.stored
		msgs = append(msgs, &switchyard.Message{Event: &out, Topic: "t.a", MsgID: rec.OutputMsgID(0)},
			&switchyard.Message{Event: &out, Topic: "t.b", MsgID: rec.OutputMsgID(1)})
	}
	res := h.sink.Publish(ctx, msgs)
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	before := len(h.streamMessages())
	time.Sleep(1200 * time.Millisecond) // past the stream's duplicates window

	if _, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second); err != nil {
		t.Fatal(err)
	}
	h.pollAll("t.two")
	for i, o := range h.record("p").Outputs {
		if o.Position == nil || *o.Position != res[i].Position {
			t.Errorf("p's output %s: recorded at %v, want where the stream holds it, %+v", o.MsgID, o.Position, res[i].Position)
		}
	}
	var again []string
	for _, m := range h.streamMessages()[before:] {
		again = append(again, m.Header.Get("ce-id"))
	}
	if fmt.Sprint(again) != "[q/x q/x]" {
		t.Errorf("sent after the restart: %v, want q's two outputs under the id the plugin gives now", again)
	}
}

// An output id is never another event's id, and reads back as its event
// and number.
func TestOutputMsgIDIsUnambiguous(t *testing.T) {
	x := &storage.Record{Tenant: storage.DefaultTenant, Event: switchyard.Event{ID: "x"}}
	x1 := &storage.Record{Tenant: storage.DefaultTenant, Event: switchyard.Event{ID: "x-1"}}
	acme := &storage.Record{Tenant: "a/b", Event: switchyard.Event{ID: "x"}}
	for _, c := range []struct {
		r   *storage.Record
		n   int
		key string
	}{{x, 0, "x"}, {x, 1, "x"}, {x, 12, "x"}, {x1, 0, "x-1"}, {x1, 2, "x-1"}, {acme, 0, "a/b/x"}, {acme, 3, "a/b/x"}} {
		id := c.r.OutputMsgID(c.n)
		if key, n := storage.OutputOf(id); key != c.key || n != c.n {
			t.Errorf("OutputOf(%q) = %q, %d; want %q, %d", id, key, n, c.key, c.n)
		}
	}
	if x.OutputMsgID(1) == x1.OutputMsgID(0) {
		t.Errorf("x's second output and x-1's first share the id %q", x1.OutputMsgID(0))
	}
}

// An output recorded as delivered under its old id ("<id>-N", before
// OutputMsgID) is not sent again under the new one.
func TestLegacyOutputIDCountsAsDelivered(t *testing.T) {
	h := newHarness(t, twoRoutes, true)
	h.ingestEvent(switchyard.Event{ID: "l", Type: "t.two", Source: "/t", SpecVersion: "1.0"})
	err := h.db.Update(context.Background(), func(tx *storage.Tx) error {
		rec := h.record("l")
		rec.Outputs = []storage.Output{{Destination: "nats.local:t.b", MsgID: "l-1", Delivered: true, DeliveredAt: h.clock.Now()}}
		return tx.Save(rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	before := len(h.streamMessages())
	h.pollAll("t.two")
	if st := h.record("l").State; st != storage.StateDelivered {
		t.Fatalf("l: %s, want delivered", st)
	}
	if sent := len(h.streamMessages()) - before; sent != 1 {
		t.Errorf("%d messages sent, want 1 (the output to t.a only)", sent)
	}
}

// halfRouted is a type with one route into the stream and one that fails:
// to a subject no stream captures (a retry), or to a sink that is down (an
// unknown outcome: the event keeps its place in the queue); and a type
// that is delivered in full.
const halfRouted = `
kafka "down" { brokers = ["127.0.0.1:1"] }
event "t.retry" {
  route {
    to      = "nats.local"
    subject = "t.a"
  }
  route {
    to      = "nats.local"
    subject = "x.none"
  }
}
event "t.down" {
  route {
    to      = "nats.local"
    subject = "t.a"
  }
  route {
    to    = "kafka.down"
    topic = "x"
  }
}
event "t.one" {
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
`

// downSink is a sink whose broker is unreachable.
type downSink struct{}

func (downSink) Name() string { return "kafka.down" }
func (downSink) Publish(_ context.Context, msgs []*switchyard.Message) []switchyard.Result {
	r := make([]switchyard.Result, len(msgs))
	for i := range r {
		r[i].Err = switchyard.ErrSinkUnavailable
	}
	return r
}
func (downSink) Close(context.Context) error { return nil }

// An output the stream lost after acknowledging it (a power cut) is sent
// again even when its event is still pending because another output
// failed — retried later, or an unknown outcome that left the event's
// queue entry a minute older than the output's delivery — and another
// event was delivered in full after it: Republish finds it through the
// partial index, not only among the delivered events.
func TestRepublishPartlyDeliveredEvent(t *testing.T) {
	for _, typ := range []string{"t.retry", "t.down"} {
		t.Run(typ, func(t *testing.T) {
			h := newHarness(t, halfRouted, true, downSink{})
			ctx := context.Background()
			// Not the stream's first message: one below the first counts as
			// removed by the stream's limits (Kept).
			h.ingestEvent(switchyard.Event{ID: "before", Type: "t.one", Source: "/t", SpecVersion: "1.0"})
			h.pollAll("t.one")
			h.ingestEvent(switchyard.Event{ID: "h", Type: typ, Source: "/t", SpecVersion: "1.0"})
			h.clock.Advance(time.Minute) // taken from a backlog
			h.pollAll(typ)
			rec := h.record("h")
			if rec.State != storage.StatePending || len(rec.Outputs) != 2 || !rec.Outputs[0].Delivered || rec.Outputs[0].Position == nil {
				t.Fatalf("h after its first attempt: %s, outputs %+v", rec.State, rec.Outputs)
			}
			h.ingestEvent(switchyard.Event{ID: "full", Type: "t.one", Source: "/t", SpecVersion: "1.0"})
			h.pollAll("t.one")
			st, err := h.js.Stream(ctx, "events")
			if err != nil {
				t.Fatal(err)
			}
			if err := st.DeleteMsg(ctx, rec.Outputs[0].Position.Sequence); err != nil { // what the cut took
				t.Fatal(err)
			}
			done, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if done.Events != 1 {
				t.Fatalf("Republish = %+v, want h's lost output marked for sending again", done)
			}
			if rec := h.record("h"); rec.Outputs[0].Delivered {
				t.Fatalf("h's lost output still counts as delivered: %+v", rec.Outputs[0])
			}
			h.clock.Advance(time.Hour) // past h's backoff
			// A deleted message's id stays in the stream's dedup window (a power
			// cut's restart forgets it): wait the window out.
			time.Sleep(1200 * time.Millisecond)
			h.pollAll(typ)
			if sent := h.timesSent("t.a", "h"); sent != 1 {
				t.Fatalf("the stream holds h's output to t.a %d times, want once; h: %+v", sent, h.record("h"))
			}
		})
	}
}

// failingUpdates is a store whose writes fail (a full or failing disk).
type failingUpdates struct{ engine.Store }

func (failingUpdates) Update(context.Context, func(*storage.Tx) error) error {
	return errors.New("write failed")
}

// A requeue that cannot be written makes Republish fail (and with it the
// router's start, cmd/router), instead of starting with the lost output
// counted as delivered.
func TestRepublishFailsWhenTheRequeueCannotBeWritten(t *testing.T) {
	h := newHarness(t, halfRouted, true, downSink{})
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		h.ingestEvent(switchyard.Event{ID: id, Type: "t.one", Source: "/t", SpecVersion: "1.0"})
	}
	h.pollAll("t.one")
	st, err := h.js.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, h.record("b").Outputs[0].Position.Sequence); err != nil { // what the cut took
		t.Fatal(err)
	}
	eng, err := engine.New(failingUpdates{h.db}, h.cfg, []switchyard.Sink{h.sink, downSink{}}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Republish(ctx, []string{"nats.local"}, 7*time.Second); err == nil || !strings.Contains(err.Error(), "write failed") {
		t.Fatalf("Republish = %v, want the write's error", err)
	}
	if rec := h.record("b"); !rec.Outputs[0].Delivered {
		t.Fatalf("b changed: %+v", rec.Outputs[0])
	}
}

// What Republish recalled answers only for recallFor (10 minutes): an
// event taken later than that sends its output again (a duplicate at
// worst), so an entry cannot outlive its event and answer for another.
func TestRecallExpires(t *testing.T) {
	h := newHarness(t, twoRoutes, true)
	h.recallOutput(switchyard.Event{ID: "late", Type: "t.b", Source: "/t", SpecVersion: "1.0"})
	before := len(h.streamMessages())
	h.clock.Advance(11 * time.Minute)
	h.pollAll("t.b")
	if st := h.record("late").State; st != storage.StateDelivered {
		t.Fatalf("late: %s, want delivered", st)
	}
	if sent := len(h.streamMessages()) - before; sent != 1 {
		t.Errorf("%d messages sent, want 1: the recall had expired", sent)
	}
}

// An output the recall answered for goes back to it when its event fails
// before the commit (here another output names a sink that is not
// configured: a reject, so a dead letter): the retry from the DLQ records
// it at the stream's position instead of sending it a second time.
func TestRecallPutBackOnAFailedEvent(t *testing.T) {
	var fixed atomic.Bool
	split := funcPlugin{name: "split", fn: func(_ context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		second := "bogus:t.x" // no such sink
		if fixed.Load() {
			second = "nats.local:t.a"
		}
		return []switchyard.PluginOutput{{Event: *ev}, {Destination: second, Event: *ev}}, nil
	}}
	h := newHarness(t, pluginPolicy("split", "t.b", ""), true, withPlugins(split))
	ctx := context.Background()
	h.recallOutput(switchyard.Event{ID: "pb", Type: "t.b", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("t.b")
	if st := h.record("pb").State; st != storage.StateDLQ {
		t.Fatalf("pb: %s, want a dead letter (its second output has no sink)", st)
	}
	fixed.Store(true)
	if _, err := h.eng.DLQRetry(ctx, engine.DLQRef{ID: "pb"}); err != nil {
		t.Fatal(err)
	}
	h.pollAll("t.b")
	rec := h.record("pb")
	if rec.State != storage.StateDelivered {
		t.Fatalf("pb after the retry: %s, %+v", rec.State, rec.Outputs)
	}
	if first := h.timesSent("t.b", "pb"); first != 1 {
		t.Errorf("the stream holds pb's first output %d times, want once (recalled, not sent again)", first)
	}
	if p := rec.Outputs[0].Position; p == nil || p.Sequence != 1 {
		t.Errorf("pb's first output recorded at %+v, want the stream's sequence 1", p)
	}
}

// recallOutput ingests ev and leaves its output to subject t.b stored in the
// stream but not recorded, as a crash between JetStream's ack and the
// router's commit does; then Republish, run past the stream's duplicates
// window, must recall that output.
func (h *harness) recallOutput(ev switchyard.Event) {
	h.t.Helper()
	ctx := context.Background()
	h.ingestEvent(ev)
	res := h.sink.Publish(ctx, []*switchyard.Message{{Event: &ev, Topic: "t.b", MsgID: ev.ID}})
	if res[0].Err != nil {
		h.t.Fatal(res[0].Err)
	}
	time.Sleep(1200 * time.Millisecond) // past the stream's duplicates window
	if done, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second); err != nil || done.Recalled != 1 {
		h.t.Fatalf("Republish = %+v, %v; want %s's output recalled", done, err, ev.ID)
	}
}

// brokenDisk is a store whose writes fail while broken is set (a full or
// failing disk), and go through to the data file otherwise.
type brokenDisk struct {
	engine.Store
	broken atomic.Bool
}

func (d *brokenDisk) Update(ctx context.Context, fn func(*storage.Tx) error) error {
	if d.broken.Load() {
		return errors.New("write failed")
	}
	return d.Store.Update(ctx, fn)
}

// An output the recall answered for goes back to it when the commit that
// would record it fails for good (past max_processing_time): the next
// attempt records it at the stream's position instead of sending it again,
// past the stream's duplicates window.
func TestRecallPutBackOnAFailedCommit(t *testing.T) {
	h := newHarness(t, `
event "t.b" {
  max_processing_time = "500ms"
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
`, true)
	disk := &brokenDisk{Store: h.db}
	eng, err := engine.New(disk, h.cfg, []switchyard.Sink{h.sink}, engine.Options{Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng // recallOutput and record go through the engine that recalls
	h.recallOutput(switchyard.Event{ID: "pc", Type: "t.b", Source: "/t", SpecVersion: "1.0"})
	disk.broken.Store(true)
	if _, err := eng.Loop("t.b").Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "write failed") {
		t.Fatalf("Poll = %v, want the commit's error", err)
	}
	disk.broken.Store(false)
	h.pollAll("t.b")
	rec := h.record("pc")
	if rec.State != storage.StateDelivered {
		t.Fatalf("pc: %s, want delivered", rec.State)
	}
	if sent := h.timesSent("", "pc"); sent != 1 {
		t.Errorf("the stream holds pc's output %d times, want once (recalled, not sent again)", sent)
	}
	if p := rec.Outputs[0].Position; p == nil || p.Sequence != 1 {
		t.Errorf("pc's output recorded at %+v, want the stream's sequence 1", p)
	}
}

// An event delivered again after an unclean stop (its output lost by the
// stream, Republish) is kept for outbox.ttl from that second delivery: the
// delivered index's entry of the first one, left behind, does not remove
// it at the first one's expiry.
func TestRedeliveredEventKeepsItsOwnTTL(t *testing.T) {
	h := newHarness(t, twoRoutes+`outbox { ttl = "1h" }`, true)
	ctx := context.Background()
	h.ingestEvent(switchyard.Event{ID: "x", Type: "t.b", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("t.b")
	st, err := h.js.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, h.record("x").Outputs[0].Position.Sequence); err != nil { // what the cut took
		t.Fatal(err)
	}
	h.clock.Advance(30 * time.Minute) // the machine stayed off
	if done, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second); err != nil || done.Events != 1 {
		t.Fatalf("Republish = %+v, %v; want x sent again", done, err)
	}
	time.Sleep(1200 * time.Millisecond) // a deleted message's id stays in the duplicates window
	h.pollAll("t.b")
	if st := h.record("x").State; st != storage.StateDelivered {
		t.Fatalf("x: %s, want delivered again", st)
	}
	h.clock.Advance(45 * time.Minute) // past the first delivery's hour, within the second's
	if _, err := h.eng.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.EventStatus(storage.DefaultTenant, "x"); err != nil {
		t.Fatalf("x, delivered again 45 minutes ago with a 1h ttl: %v", err)
	}
	h.clock.Advance(20 * time.Minute) // past the second delivery's hour
	if _, err := h.eng.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.EventStatus(storage.DefaultTenant, "x"); code(err) != switchyard.ENOTFOUND {
		t.Fatalf("x, past its ttl: %v, want removed", err)
	}
}

// After an unclean stop, the events whose messages the stream lost go out
// again in the order they first did, and before a later event of their key
// still pending (ordering = "key"): each goes back to its place in the
// queue and its key's line. (A review: they went out newest first, and
// behind such an event: [before b a].)
func TestRepublishKeepsKeyOrder(t *testing.T) {
	for _, how := range []string{"both lost", "first lost, second pending"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, `
event "t.kord" {
  ordering = "key"
  route {
    to      = "nats.local"
    subject = "t.kord"
  }
}
`, true)
			ctx := context.Background()
			k := []switchyard.Header{{Name: "partitionkey", Value: "k"}}
			ev := func(id string, ext []switchyard.Header) {
				h.ingestEvent(switchyard.Event{ID: id, Type: "t.kord", Source: "/t", SpecVersion: "1.0", Extensions: ext})
				h.clock.Advance(time.Millisecond)
			}
			ev("before", []switchyard.Header{{Name: "partitionkey", Value: "other"}})
			h.pollAll("t.kord")
			ev("a", k)
			ev("b", k)
			h.pollAll("t.kord") // a
			h.clock.Advance(time.Millisecond)
			if how == "both lost" {
				h.pollAll("t.kord") // b
			}
			if st := h.record("a").State; st != storage.StateDelivered {
				t.Fatalf("a: %s", st)
			}
			lost := []string{"a"}
			if how == "both lost" {
				lost = append(lost, "b")
			}
			s, err := h.js.Stream(ctx, "events")
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range lost { // what the power cut took
				if err := s.DeleteMsg(ctx, h.record(id).Outputs[0].Position.Sequence); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(1200 * time.Millisecond) // the stream's duplicates window
			done, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if done.Events != len(lost) {
				t.Fatalf("Republish = %+v", done)
			}
			for range 4 {
				h.pollAll("t.kord")
				h.clock.Advance(time.Millisecond)
			}
			var order []string
			for _, m := range h.streamMessages() {
				order = append(order, m.Header.Get("ce-id"))
			}
			if n := len(order); n != 3 || order[1] != "a" || order[2] != "b" {
				t.Fatalf("key k's events reached the stream as %v, want [before a b]", order)
			}
		})
	}
}

// kafkaLikeSink is a sink that cannot tell what its broker holds (not a
// Keeper), named kafka.up: it gives each message a Kafka position (topic,
// partition, offset), and fails while down is set.
type kafkaLikeSink struct {
	down   atomic.Bool
	offset atomic.Int64
}

func (*kafkaLikeSink) Name() string { return "kafka.up" }
func (s *kafkaLikeSink) Publish(_ context.Context, msgs []*switchyard.Message) []switchyard.Result {
	r := make([]switchyard.Result, len(msgs))
	for i, m := range msgs {
		if s.down.Load() {
			r[i].Err = switchyard.ErrSinkUnavailable
			continue
		}
		r[i].Position = switchyard.Position{Topic: m.Topic, Partition: 0, Offset: s.offset.Add(1)}
	}
	return r
}
func (*kafkaLikeSink) Close(context.Context) error { return nil }

const kafkaAndNATSRoutes = `
kafka "up" { brokers = ["127.0.0.1:1"] }
event "t.k" {
  route {
    to    = "kafka.up"
    topic = "x"
  }
}
event "t.both" {
  route {
    to      = "nats.local"
    subject = "t.a"
  }
  route {
    to    = "kafka.up"
    topic = "x"
  }
}
event "t.one" {
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
`

// An output to a sink that cannot tell what its broker holds (not a
// Keeper) counts as lost and is marked for sending again, whatever its
// position records: one with a Kafka position (topic, partition, offset)
// was counted lost under its stream and sequence alone and looked up by
// its whole position, and stayed delivered (a review of ab98d1c).
func TestRepublishRequeuesALostOutputWithAKafkaPosition(t *testing.T) {
	h := newHarness(t, kafkaAndNATSRoutes, true, &kafkaLikeSink{})
	ctx := context.Background()
	h.ingestEvent(switchyard.Event{ID: "k", Type: "t.k", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("t.k")
	rec := h.record("k")
	if rec.State != storage.StateDelivered || rec.Outputs[0].Position == nil || rec.Outputs[0].Position.Topic == "" {
		t.Fatalf("k: %s, outputs %+v", rec.State, rec.Outputs)
	}
	done, err := h.eng.Republish(ctx, []string{"kafka.up"}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if done.Events != 1 {
		t.Errorf("Republish = %+v, want k's output (a sink that cannot tell) marked for sending again", done)
	}
	if rec := h.record("k"); rec.State != storage.StatePending || rec.Outputs[0].Delivered {
		t.Errorf("k after Republish: %s, output delivered %v; want pending, not delivered", rec.State, rec.Outputs[0].Delivered)
	}
}

// The window is counted back from the newest delivery to any sink: an
// event whose NATS output went out an hour before its Kafka output, the
// last delivery before the stop, has a NATS output older than the window,
// synced long before, which the stream no longer holds (max_age; here a
// purge): it is not asked about, and not sent again. Counted from the
// newest delivery to the NATS sinks alone, it was (a review of ab98d1c: a
// duplicate).
func TestRepublishLeavesOutputsOlderThanTheWindow(t *testing.T) {
	kafka := &kafkaLikeSink{}
	h := newHarness(t, kafkaAndNATSRoutes, true, kafka)
	ctx := context.Background()
	h.ingestEvent(switchyard.Event{ID: "before", Type: "t.one", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("t.one")
	kafka.down.Store(true)
	h.ingestEvent(switchyard.Event{ID: "e", Type: "t.both", Source: "/t", SpecVersion: "1.0"})
	h.pollAll("t.both")
	if rec := h.record("e"); rec.State != storage.StatePending || !rec.Outputs[0].Delivered || rec.Outputs[1].Delivered {
		t.Fatalf("e after its first attempt: %s, outputs %+v", rec.State, rec.Outputs)
	}
	kafka.down.Store(false)
	h.clock.Advance(time.Hour) // past e's backoff
	h.pollAll("t.both")
	rec := h.record("e")
	if rec.State != storage.StateDelivered {
		t.Fatalf("e: %s, outputs %+v", rec.State, rec.Outputs)
	}
	t.Logf("e: nats output delivered at %s, kafka output at %s", rec.Outputs[0].DeliveredAt, rec.Outputs[1].DeliveredAt)
	st, err := h.js.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil { // what max_age removed long ago
		t.Fatal(err)
	}
	done, err := h.eng.Republish(ctx, []string{"nats.local"}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if done.Events != 0 {
		t.Errorf("Republish = %+v, want nothing sent again: e's NATS output was delivered an hour before the stop, outside the window", done)
	}
}
