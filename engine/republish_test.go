package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// twoRoutes is a type whose events go to two subjects (outputs "<id>" and
// "<id>-1") and a type whose events go to the second of them.
const twoRoutes = `
event "t.two" {
  route {
    to      = "nats.local"
    subject = "t.a"
  }
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
event "t.b" {
  route {
    to      = "nats.local"
    subject = "t.b"
  }
}
`

// After an unclean stop, the outputs of a pending event that the stream
// stored without the router recording it are recorded at the stream's
// position by the next poll, not sent again, though the stream's
// duplicates window has passed; an event whose output the stream holds
// under its own id is not taken for one, nor is the first output of an
// event whose id is another event's Nth output's old id ("q-1").
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
	// The stop cut these acknowledgements off: stored, never recorded.
	p := ev("p", "t.two")
	pRec := h.record("p")
	unrecorded := []*switchyard.Message{
		{Event: &p, Topic: "t.a", MsgID: pRec.OutputMsgID(0)}, {Event: &p, Topic: "t.b", MsgID: pRec.OutputMsgID(1)},
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
	if done.Recalled != 2 || done.Events != 0 {
		t.Fatalf("Republish = %+v, want p's 2 outputs recalled and nothing requeued", done)
	}
	h.pollAll("t.two", "t.b")
	for _, id := range []string{"p", "q", "q-1"} {
		if st := h.record(id).State; st != storage.StateDelivered {
			t.Fatalf("%s: %s, want delivered", id, st)
		}
	}
	for i, o := range h.record("p").Outputs {
		if o.Position == nil || *o.Position != res[i].Position {
			t.Errorf("p's output %s: recorded at %v, want where the stream holds it, %+v", o.MsgID, o.Position, res[i].Position)
		}
	}
	// p sent nothing; q (2 outputs) and q-1 sent theirs, each stored.
	if sent := len(h.streamMessages()) - before; sent != 3 {
		t.Errorf("%d messages stored after the restart, want 3", sent)
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
