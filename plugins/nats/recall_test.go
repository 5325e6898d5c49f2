package nats

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// Besides what it was asked about, Kept lists the messages the stream
// stored lately that it was not asked about or that are not where the
// router recorded them — each with its subject, id and position — and only
// those: a message found in place is not listed, nor one from before the
// window.
func TestKeptListsTheOthers(t *testing.T) {
	ctx := pubCtx(t, 20*time.Second)
	sink, msgs, res, acked := publishAcked(t, ctx, 10)
	elsewhere := acked[5]
	elsewhere.Position.Sequence = res[6].Position.Sequence // recorded, but the stream has another message there
	asked := append(slices.Clone(acked[:5]), elsewhere)
	others := checkKept(t, ctx, sink, asked, []bool{true, true, true, true, true, false})
	slices.SortFunc(others, func(a, b switchyard.Stored) int { return int(a.Position.Sequence) - int(b.Position.Sequence) })
	var want []switchyard.Stored
	for i := 5; i < 10; i++ {
		want = append(want, switchyard.Stored{Topic: msgs[i].Topic, MsgID: msgs[i].MsgID, Position: res[i].Position})
	}
	if !slices.Equal(others, want) {
		t.Fatalf("others = %+v\nwant     %+v", others, want)
	}

	// Older than the window: read only as far back as asked.
	time.Sleep(1200 * time.Millisecond)
	requireOK(t, sink.Publish(ctx, makeMsgs("b", "orders.created", 1)), 1)
	got, others, err := sink.Kept(ctx, acked[8:9], 0)
	if err != nil || !slices.Equal(got, []bool{true}) {
		t.Fatalf("Kept = %v, %v", got, err)
	}
	if len(others) != 2 || others[0].MsgID == msgs[8].MsgID || others[1].MsgID == msgs[8].MsgID {
		t.Fatalf("others = %+v, want msgs[9] and the new one", others)
	}
}
