package nats

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
)

// Kept tells which acknowledged messages a stream still holds after it lost
// its newest ones and another publisher took their sequences: the
// surviving prefix is kept; sequences that now hold other messages, those
// past the stream's end, messages without a position and a stream that is
// gone are lost.
func TestKeptAfterLosingTheNewest(t *testing.T) {
	ctx := pubCtx(t, 20*time.Second)
	sink, msgs, _, acked := publishAcked(t, ctx, 10)
	acked = append(acked, switchyard.Acked{MsgID: "core-nats-no-position"})
	all := slices.Repeat([]bool{true}, len(msgs))
	checkKept(t, ctx, sink, acked, append(all, false))

	// The stream as a power cut leaves it: its first 4 messages, then 2
	// of another publisher at the sequences of the 5th and 6th.
	recreateStream(t, ctx, sink)
	requireOK(t, sink.Publish(ctx, msgs[:4]), 4)
	requireOK(t, sink.Publish(ctx, makeMsgs("b", "orders.created", 2)), 2)
	want := make([]bool, len(acked))
	copy(want, all[:4])
	checkKept(t, ctx, sink, acked, want)

	// Shuffled input: the answer follows the input's order.
	rev := slices.Clone(acked)
	slices.Reverse(rev)
	wantRev := slices.Clone(want)
	slices.Reverse(wantRev)
	checkKept(t, ctx, sink, rev, wantRev)

	if err := sink.jsAdmin.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	checkKept(t, ctx, sink, acked, make([]bool, len(acked)))
}

// A gap the power cut left inside the stream (the unsynced tail of an older
// block file) is lost, even below messages that were kept; what the stream's limits
// removed from its front was kept; of two outputs recorded at one sequence
// only the one whose id is there was kept.
func TestKeptWithGapsAndPurges(t *testing.T) {
	ctx := pubCtx(t, 20*time.Second)
	sink, _, res, acked := publishAcked(t, ctx, 10)
	st, err := sink.jsAdmin.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{res[4].Position.Sequence, res[5].Position.Sequence} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(res[2].Position.Sequence)); err != nil {
		t.Fatal(err)
	}
	ghost := switchyard.Acked{MsgID: "another-output", Position: res[7].Position}
	acked = append(acked, ghost)
	want := []bool{true, true, true, true, false, false, true, true, true, true, false}
	checkKept(t, ctx, sink, acked, want)
}

// publishAcked starts an embedded server with the ORDERS stream, publishes
// n messages to it and returns them, their results and what the router
// would have recorded of them.
func publishAcked(t *testing.T, ctx context.Context, n int) (*Sink, []*switchyard.Message, []switchyard.Result, []switchyard.Acked) {
	t.Helper()
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	msgs := makeMsgs("a", "orders.created", n)
	res := sink.Publish(ctx, msgs)
	requireOK(t, res, n)
	acked := make([]switchyard.Acked, n)
	for i, r := range res {
		acked[i] = switchyard.Acked{MsgID: msgs[i].MsgID, Position: r.Position}
	}
	return sink, msgs, res, acked
}

// checkKept fails the test unless Kept answers want for acked, and
// returns the others it read.
func checkKept(t *testing.T, ctx context.Context, sink *Sink, acked []switchyard.Acked, want []bool) []switchyard.Stored {
	t.Helper()
	got, others, err := sink.Kept(ctx, acked, time.Minute)
	if err != nil {
		t.Fatalf("Kept: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Kept = %v, want %v", got, want)
	}
	return others
}

// recreateStream deletes the sink's stream and creates it again, empty.
func recreateStream(t *testing.T, ctx context.Context, sink *Sink) {
	t.Helper()
	if err := sink.jsAdmin.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	// nats-server removes a deleted stream's directory after it answers;
	// a create in between can fail to make its own (seen once in 60 runs).
	var err error
	for range 20 {
		if _, err = ensureStream(ctx, sink.jsAdmin, sink.declared()[0]); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(err)
}

// Besides what it was asked about, Kept lists the messages the stream
// stored lately that it was not asked about or that are not where the
// router recorded them — each with its subject, id, position, time and
// CloudEvents id and source as they went out — and only those: a message
// found in place is not listed, nor one from before the window.
func TestKeptListsTheOthers(t *testing.T) {
	ctx := pubCtx(t, 20*time.Second)
	start := time.Now()
	sink, msgs, res, acked := publishAcked(t, ctx, 10)
	elsewhere := acked[5]
	elsewhere.Position.Sequence = res[6].Position.Sequence // recorded, but the stream has another message there
	asked := append(slices.Clone(acked[:5]), elsewhere)
	others := checkKept(t, ctx, sink, asked, []bool{true, true, true, true, true, false})
	slices.SortFunc(others, func(a, b switchyard.Stored) int { return int(a.Position.Sequence) - int(b.Position.Sequence) })
	var want []switchyard.Stored
	for i := 5; i < 10; i++ {
		if !others[i-5].Time.After(start) || others[i-5].Time.After(time.Now()) {
			t.Errorf("message %d stored at %v, not during the test", i, others[i-5].Time)
		}
		others[i-5].Time = time.Time{}
		want = append(want, switchyard.Stored{Topic: msgs[i].Topic, MsgID: msgs[i].MsgID, Position: res[i].Position,
			EventID: msgs[i].Event.ID, Source: msgs[i].Event.Source})
	}
	if !slices.Equal(others, want) {
		t.Fatalf("others = %+v\nwant     %+v", others, want)
	}

	// Older than the window: read only as far back as asked.
	time.Sleep(1200 * time.Millisecond)
	odd := makeMsgs("b", "orders.created", 1)
	odd[0].Event.ID, odd[0].Event.Source = "b 1 ü%", "urn:x y"
	requireOK(t, sink.Publish(ctx, odd), 1)
	got, others, err := sink.Kept(ctx, acked[8:9], 0)
	if err != nil || !slices.Equal(got, []bool{true}) {
		t.Fatalf("Kept = %v, %v", got, err)
	}
	if len(others) != 2 || others[0].MsgID == msgs[8].MsgID || others[1].MsgID == msgs[8].MsgID {
		t.Fatalf("others = %+v, want msgs[9] and the new one", others)
	}
	i := slices.IndexFunc(others, func(o switchyard.Stored) bool { return o.MsgID == odd[0].MsgID })
	if i < 0 {
		t.Fatalf("others = %+v: the new message is not among them", others)
	}
	if o := others[i]; o.EventID != odd[0].Event.ID || o.Source != odd[0].Event.Source {
		t.Errorf("read back id %q source %q, want them as sent: %q, %q", o.EventID, o.Source, odd[0].Event.ID, odd[0].Event.Source)
	}
}
