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
	if err := ensureStream(ctx, sink.jsAdmin, sink.streams[0]); err != nil {
		t.Fatal(err)
	}
}
