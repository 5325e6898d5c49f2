package nats

import (
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// After an unclean stop, a message the stream stored and the router never
// recorded is answered with where the stream holds it, not stored again,
// though the stream's duplicates window has long passed; a message Kept
// found in place of a recorded delivery is not recalled, one bound for
// another subject goes out, and each is answered once.
func TestRecallAnswersWhatTheStreamStored(t *testing.T) {
	ctx := pubCtx(t, 20*time.Second)
	cfg := testConfig(true)
	cfg.Streams[0].Duplicates = 100 * time.Millisecond
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	msgs := makeMsgs("a", "orders.created", 10)
	res := sink.Publish(ctx, msgs)
	requireOK(t, res, 10)
	time.Sleep(300 * time.Millisecond) // past the stream's window
	count := func(want uint64) {
		t.Helper()
		if got := streamMsgs(t, srv.ClientURL(), "ORDERS"); got != want {
			t.Fatalf("the stream holds %d messages, want %d", got, want)
		}
	}

	if err := sink.ReadBack(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	recorded := make([]switchyard.Acked, 6) // the router recorded the first 6
	for i := range recorded {
		recorded[i] = switchyard.Acked{MsgID: msgs[i].MsgID, Position: res[i].Position}
	}
	checkKept(t, ctx, sink, recorded, []bool{true, true, true, true, true, true})
	if n := sink.Recall(); n != 4 {
		t.Fatalf("Recall = %d messages, want the 4 never recorded", n)
	}

	moved := *msgs[9]
	moved.Topic = "orders.moved"
	requireOK(t, sink.Publish(ctx, []*switchyard.Message{&moved}), 1)
	count(11)
	again := sink.Publish(ctx, msgs[6:])
	requireOK(t, again, 4)
	for i, r := range again {
		if r.Position != res[6+i].Position {
			t.Errorf("message %d: answered %+v, want where the stream holds it, %+v", 6+i, r.Position, res[6+i].Position)
		}
	}
	count(11)
	requireOK(t, sink.Publish(ctx, []*switchyard.Message{msgs[6], msgs[0]}), 2)
	count(13)
}
