package nats

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A work-queue stream's durable deleted is made again deliver-all, the
// only kind the server takes on one (it keeps only what was not
// acknowledged): with a start sequence the server refused it for ever,
// and the inbox did not open again (a review's test).
func TestAWorkQueueDurableDeletedIsMadeAgain(t *testing.T) {
	e := newSourceEnv(t)
	if _, err := e.js.CreateStream(pubCtx(t, 5*time.Second), jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy,
	}); err != nil {
		t.Fatal(err)
	}
	book := &keptBook{reads: map[string]switchyard.Read{}}
	open := func() (*Source, error) {
		return openSource(pubCtx(t, 10*time.Second), testConfig(true), e.url, natsInbox("wq", "jobs.>"), testLogger(t), DefaultAckWait, book.kept, book.keep)
	}
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	r := testkit.RunSource(s, book.receive)
	e.publish(t, "jobs.run", "a", 3)
	testkit.Eventually(t, "first jobs", 10*time.Second, func() bool { return book.distinct() == 3 })
	r.Stop(t)
	s.Close(context.Background())

	e.deleteDurable(t, "JOBS", "wq")
	e.publish(t, "jobs.run", "b", 3)
	s, err = open()
	if err != nil {
		t.Fatalf("the inbox cannot be opened again after its work-queue durable was deleted (kept %+v): %v", book.reads["JOBS"], err)
	}
	defer s.Close(context.Background())
	r = testkit.RunSource(s, book.receive)
	defer r.Stop(t)
	testkit.Eventually(t, "jobs after the delete", 10*time.Second, func() bool { return book.distinct() == 6 })
}

// A stream made again whose durable cannot be made at once (a consumer
// limit lifted a moment later; in life a timeout, a leader election) is
// read from its start when it can: the next try read it on from the old
// stream's ack floor (the new id was kept before the durable was made,
// the floor after), and the server does not clamp a start past the
// stream's end: its first messages were passed over (a review's test).
func TestADurableOnAStreamMadeAgainMadeAfterAFailureSkipsNothing(t *testing.T) {
	checkEvery(t, 200*time.Millisecond)
	e := newSourceEnv(t)
	var logs testkit.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	book := &keptBook{reads: map[string]switchyard.Read{}}
	defer runKept(t, e, natsInbox("again", "orders.>"), log, book)()
	e.publish(t, "orders.created", "before", 5)
	testkit.Eventually(t, "first messages", 10*time.Second, func() bool { return book.distinct() == 5 })
	time.Sleep(300 * time.Millisecond)
	e.publish(t, "orders.created", "mid", 1) // the check after its batch reads floor 6
	testkit.Eventually(t, "the next message", 10*time.Second, func() bool { return book.distinct() == 6 })
	time.Sleep(300 * time.Millisecond)

	ctx := pubCtx(t, 10*time.Second)
	if err := e.js.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"},
		ConsumerLimits: jetstream.StreamConsumerLimits{MaxAckPending: 100}} // refuses the durable (1024)
	if _, err := e.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e.publish(t, "orders.created", "after", 10) // sequences 1-10 of the new stream
	time.Sleep(3 * time.Second)                 // tries to make the durable fail (every errorPause)
	cfg.ConsumerLimits = jetstream.StreamConsumerLimits{}
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if n := book.distinct(); n != 16 {
		c, _ := e.js.Consumer(pubCtx(t, 5*time.Second), "ORDERS", "again")
		var start uint64
		if c != nil {
			start = c.CachedInfo().Config.OptStartSeq
		}
		t.Errorf("%d of 16 messages: the durable on the new stream starts at %d (the old stream's floor+1); lost:%s\n%s",
			n, start, missing(book, "after", 10), logs.String())
	}
}

// A changed durable that cannot be set back, deleted as the log advises,
// is made again before what its filter passed over: the changed durable's
// floor, past those messages, is not taken (a review's test).
func TestADurableDeletedAfterItWasChangedReadsWhatItPassedOver(t *testing.T) {
	checkEvery(t, 100*time.Millisecond)
	e := newSourceEnv(t)
	var logs testkit.Buffer
	in := natsInbox("advised", "orders.>")
	book := &keptBook{reads: map[string]switchyard.Read{}}
	s, err := openSource(pubCtx(t, 10*time.Second), testConfig(true), e.url, in, hclog.New(&hclog.LoggerOptions{Output: &logs}), DefaultAckWait, book.kept, book.keep)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	// Someone else remakes it with another filter and ack policy (before
	// Run: the source would make it again first): the ack policy cannot be
	// set back.
	ctx := pubCtx(t, 5*time.Second)
	if err := e.js.DeleteConsumer(ctx, "ORDERS", "advised"); err != nil {
		t.Fatal(err)
	}
	changed := consumerConfig(in, DefaultAckWait)
	changed.FilterSubject, changed.AckPolicy = "orders.other", jetstream.AckAllPolicy
	if _, err := e.js.CreateConsumer(ctx, "ORDERS", changed); err != nil {
		t.Fatal(err)
	}
	r := testkit.RunSource(s, book.receive)
	defer r.Stop(t)
	e.publish(t, "orders.created", "during", 5) // passed over by the changed filter
	e.publish(t, "orders.other", "other", 2)
	testkit.Eventually(t, "cannot be set back", 15*time.Second, func() bool {
		return strings.Contains(logs.String(), "cannot be set back") && book.distinct() == 2
	})
	time.Sleep(300 * time.Millisecond)
	e.publish(t, "orders.other", "other2", 1) // a batch, and a check after it (floor 8)
	testkit.Eventually(t, "other2", 10*time.Second, func() bool { return book.distinct() == 3 })
	time.Sleep(300 * time.Millisecond)

	// As the log says: delete it to have the inbox make it again.
	e.deleteDurable(t, "ORDERS", "advised")
	e.publish(t, "orders.created", "after", 2)
	testkit.Eventually(t, "after", 15*time.Second, func() bool { return book.times("after-0001") == 1 })
	time.Sleep(500 * time.Millisecond)
	if m := missing(book, "during", 5); m != "" {
		t.Errorf("made again as the log advises, the durable never reads what the changed one passed over:%s", m)
	}
}

// The floor a check reads after the last batch before a stop is kept (it
// was kept only with a next batch): a durable deleted then is made again
// after that batch, nothing read twice (a review's test).
func TestTheFloorAfterTheLastBatchIsKept(t *testing.T) {
	checkEvery(t, 200*time.Millisecond)
	e := newSourceEnv(t)
	book := &keptBook{reads: map[string]switchyard.Read{}}
	run := func() func() { return runKept(t, e, natsInbox("burst", "orders.>"), testLogger(t), book) }
	e.publish(t, "orders.created", "a", 10) // one batch
	stop := run()
	testkit.Eventually(t, "the batch", 10*time.Second, func() bool { return book.distinct() == 10 })
	time.Sleep(6 * time.Second) // an empty pull (5 s) and the check after it: floor 10
	stop()
	e.deleteDurable(t, "ORDERS", "burst")
	stop = run()
	defer stop()
	time.Sleep(2 * time.Second)
	for _, id := range []string{"a-0000", "a-0009"} {
		if n := book.times(id); n != 1 {
			t.Errorf("%s read %d times (kept %+v)", id, n, book.reads["ORDERS"])
		}
	}
}

func missing(book *keptBook, prefix string, n int) string {
	var m string
	for i := range n {
		if id := fmt.Sprintf("%s-%04d", prefix, i); book.times(id) == 0 {
			m += " " + id
		}
	}
	return m
}
