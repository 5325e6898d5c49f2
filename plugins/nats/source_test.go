package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/backoff"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// sourceEnv is an embedded server with the ORDERS stream (orders.>).
type sourceEnv struct {
	url string
	js  jetstream.JetStream
}

func newSourceEnv(t *testing.T) *sourceEnv {
	t.Helper()
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	openSink(t, cfg, srv.ClientURL()) // creates the stream
	return &sourceEnv{url: srv.ClientURL(), js: testkit.JetStream(t, srv.ClientURL(), testAuth)}
}

// publish stores n messages on subject with ids prefix-<i>.
func (e *sourceEnv) publish(t *testing.T, subject, prefix string, n int) {
	t.Helper()
	for i := range n {
		m := natsgo.NewMsg(subject)
		m.Header.Set("ce-specversion", "1.0")
		m.Header.Set("ce-id", fmt.Sprintf("%s-%04d", prefix, i))
		m.Header.Set("ce-source", "/orders")
		m.Header.Set("ce-type", "order.created")
		m.Header.Set("ce-subject", "order%20"+fmt.Sprint(i))
		m.Header.Set("content-type", "application/json")
		m.Header.Set("traceparent", traceparent)
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		if _, err := e.js.PublishMsg(pubCtx(t, 5*time.Second), m); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteDurable deletes the durable consumer of stream, as someone else
// would under a running source.
func (e *sourceEnv) deleteDurable(t *testing.T, stream, durable string) {
	t.Helper()
	if err := e.js.DeleteConsumer(pubCtx(t, 5*time.Second), stream, durable); err != nil {
		t.Fatal(err)
	}
}

// checkEvery has the sources of the test read their durable back every d
// (consumerCheckEvery), the default again when it ends.
func checkEvery(t *testing.T, d time.Duration) {
	old := consumerCheckEvery
	consumerCheckEvery = d
	t.Cleanup(func() { consumerCheckEvery = old })
}

func (e *sourceEnv) info(t *testing.T, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := e.js.Consumer(pubCtx(t, 5*time.Second), "ORDERS", durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(pubCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func natsInbox(durable, subject string) config.Inbox {
	in := config.NewInbox("orders", config.NewNATS("local"), config.DefaultPolicy())
	in.Subject, in.Durable, in.TTL, in.Policy.BatchSize = subject, durable, time.Hour, 10
	return in
}

func newNATSSource(t *testing.T, e *sourceEnv, in config.Inbox, ackWait time.Duration) *Source {
	t.Helper()
	return newNATSSourceLogged(t, e, in, ackWait, testLogger(t))
}

// newNATSSourceLogged is newNATSSource logging to log.
func newNATSSourceLogged(t *testing.T, e *sourceEnv, in config.Inbox, ackWait time.Duration, log hclog.Logger) *Source {
	t.Helper()
	s, err := openSource(pubCtx(t, 10*time.Second), testConfig(true), e.url, in, log, ackWait, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

type collector struct {
	mu  sync.Mutex
	got []switchyard.Inbound
	ids map[string]int
}

func (c *collector) receive(_ context.Context, msgs []switchyard.Inbound) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]int{}
	}
	c.got = append(c.got, msgs...)
	for _, m := range msgs {
		c.ids[m.Event.ID]++
	}
	return nil
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// A NATS inbox receives every message of its subject and none other, each
// as the event its headers say with its stream sequence as origin, and
// acks them all on an explicit-ack durable filtered on the subject; a
// stream without an age limit is warned about.
func TestSourceReceivesAndAcks(t *testing.T) {
	e := newSourceEnv(t)
	const n = 35
	e.publish(t, "orders.created", "o", n)
	e.publish(t, "orders.other", "x", 3) // not the inbox's subject
	s := newNATSSource(t, e, natsInbox("inbox-a", "orders.created"), DefaultAckWait)
	if s.Name() != "orders" || s.Stream() != "ORDERS" {
		t.Fatalf("Name %q Stream %q", s.Name(), s.Stream())
	}
	var c collector
	r := testkit.RunSource(s, c.receive)
	testkit.Eventually(t, "all messages", 10*time.Second, func() bool { return c.distinct() == n })
	testkit.Eventually(t, "acks", 5*time.Second, func() bool {
		info := e.info(t, "inbox-a")
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	r.Stop(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) != n {
		t.Fatalf("received %d, want %d", len(c.got), n)
	}
	for i, in := range c.got {
		ev := in.Event
		want := fmt.Sprintf("o-%04d", i)
		// The x messages are stream sequences 36..38; ours are 1..35.
		if ev.ID != want || in.IDDerived || in.Origin != fmt.Sprintf("nats.local:ORDERS#%d", i+1) ||
			ev.Type != "order.created" || ev.Source != "/orders" || ev.SpecVersion != "1.0" ||
			ev.Subject != fmt.Sprintf("order %d", i) || ev.DataContentType != "application/json" ||
			ev.Extension("traceparent") != traceparent || string(ev.Data) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("message %d: %+v origin %s", i, ev, in.Origin)
		}
	}
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "without age limit") {
		t.Fatalf("warnings %q", w)
	}
	info := e.info(t, "inbox-a")
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy || info.Config.FilterSubject != "orders.created" ||
		info.Config.AckWait != DefaultAckWait || info.Config.MaxAckPending != minMaxAckPending || info.NumRedelivered != 0 {
		t.Fatalf("consumer %+v", info)
	}
}

// Messages whose receive failed (the data file unavailable) are delivered
// again until they are taken, and none is left unacked.
func TestSourceReceiveErrorRedelivers(t *testing.T) {
	defer func(old backoff.Doubling) { receiveBackoff = old }(receiveBackoff)
	receiveBackoff.Min = 20 * time.Millisecond
	e := newSourceEnv(t)
	const n = 8
	e.publish(t, "orders.created", "r", n)
	s := newNATSSource(t, e, natsInbox("inbox-r", "orders.>"), DefaultAckWait)
	var mu sync.Mutex
	fails := 2
	var failedIDs []string
	var c collector
	r := testkit.RunSource(s, func(ctx context.Context, msgs []switchyard.Inbound) error {
		mu.Lock()
		if fails > 0 {
			fails--
			for _, m := range msgs {
				failedIDs = append(failedIDs, m.Event.ID)
			}
			mu.Unlock()
			return errors.New("storage unavailable")
		}
		mu.Unlock()
		return c.receive(ctx, msgs)
	})
	testkit.Eventually(t, "all messages", 10*time.Second, func() bool { return c.distinct() == n })
	testkit.Eventually(t, "acks", 5*time.Second, func() bool { return e.info(t, "inbox-r").NumAckPending == 0 })
	r.Stop(t)
	mu.Lock()
	defer mu.Unlock()
	if len(failedIDs) == 0 {
		t.Fatal("receive never failed")
	}
	for _, id := range failedIDs {
		if c.ids[id] == 0 {
			t.Fatalf("%s was not redelivered", id)
		}
	}
	if info := e.info(t, "inbox-r"); info.NumRedelivered != 0 && info.NumAckPending != 0 {
		t.Fatalf("consumer %+v", info)
	}
}

// Two routers on one durable split the messages; together they get all.
func TestSourceTwoOnOneDurable(t *testing.T) {
	e := newSourceEnv(t)
	in := natsInbox("shared", "orders.>")
	in.Policy.BatchSize = 5
	var c1, c2 collector
	slow := func(c *collector) func(context.Context, []switchyard.Inbound) error {
		return func(ctx context.Context, msgs []switchyard.Inbound) error {
			time.Sleep(10 * time.Millisecond)
			return c.receive(ctx, msgs)
		}
	}
	s1 := newNATSSource(t, e, in, DefaultAckWait)
	s2 := newNATSSource(t, e, in, DefaultAckWait)
	r1 := testkit.RunSource(s1, slow(&c1))
	r2 := testkit.RunSource(s2, slow(&c2))
	const n = 200
	e.publish(t, "orders.created", "s", n)
	testkit.Eventually(t, "all messages across both", 20*time.Second, func() bool {
		c1.mu.Lock()
		c2.mu.Lock()
		defer c1.mu.Unlock()
		defer c2.mu.Unlock()
		all := map[string]bool{}
		for id := range c1.ids {
			all[id] = true
		}
		for id := range c2.ids {
			all[id] = true
		}
		return len(all) == n
	})
	testkit.Eventually(t, "acks", 5*time.Second, func() bool { return e.info(t, "shared").NumAckPending == 0 })
	r1.Stop(t)
	r2.Stop(t)
	if c1.distinct() == 0 || c2.distinct() == 0 {
		t.Fatalf("one router got nothing: %d and %d", c1.distinct(), c2.distinct())
	}
	if c1.distinct()+c2.distinct() != n {
		t.Fatalf("split %d + %d, want %d (no failures, so no redelivery)", c1.distinct(), c2.distinct(), n)
	}
	t.Logf("split %d / %d", c1.distinct(), c2.distinct())
}

// A receive slower than the ack wait keeps the messages (in progress):
// another router on the durable does not get them.
func TestSourceSlowReceiveKeepsMessages(t *testing.T) {
	e := newSourceEnv(t)
	in := natsInbox("slow", "orders.>")
	const ackWait = 600 * time.Millisecond
	s1 := newNATSSource(t, e, in, ackWait)
	e.publish(t, "orders.created", "w", 3)
	entered := make(chan []switchyard.Inbound, 1)
	var once sync.Once
	var c1 collector
	r1 := testkit.RunSource(s1, func(ctx context.Context, msgs []switchyard.Inbound) error {
		once.Do(func() { entered <- msgs })
		time.Sleep(3 * ackWait)
		return c1.receive(ctx, msgs)
	})
	// The first batch may hold all three messages or fewer (a busy machine
	// fetches what has arrived); whatever it holds, the second router must
	// not get while the first works on it past the ack wait.
	held := <-entered
	s2 := newNATSSource(t, e, in, ackWait)
	var c2 collector
	r2 := testkit.RunSource(s2, c2.receive)
	testkit.Eventually(t, "every message", 20*time.Second, func() bool { return c1.distinct()+c2.distinct() >= 3 })
	testkit.Eventually(t, "acks", 5*time.Second, func() bool { return e.info(t, "slow").NumAckPending == 0 })
	r1.Stop(t)
	r2.Stop(t)
	c2.mu.Lock()
	for _, m := range held {
		if c2.ids[m.Event.ID] > 0 {
			t.Errorf("the other router got %s while the first still had it", m.Event.ID)
		}
	}
	c2.mu.Unlock()
	if c1.distinct()+c2.distinct() != 3 {
		t.Fatalf("received %d + %d, want 3 in all", c1.distinct(), c2.distinct())
	}
	if info := e.info(t, "slow"); info.NumRedelivered != 0 {
		t.Fatalf("redelivered: %+v", info)
	}
}

// A message without an id gets one derived from its content, the same for
// the same content; with id_header set, the id is that header's value, and
// ce-id is ignored.
func TestSourceDerivedAndCustomID(t *testing.T) {
	e := newSourceEnv(t)
	for range 2 {
		m := natsgo.NewMsg("orders.plain")
		m.Header.Set("ce-type", "t")
		m.Data = []byte("same")
		if _, err := e.js.PublishMsg(pubCtx(t, 5*time.Second), m); err != nil {
			t.Fatal(err)
		}
	}
	m := natsgo.NewMsg("orders.plain")
	m.Header.Set("ce-id", "ignored")
	m.Header.Set("X-Msg", "custom-1")
	if _, err := e.js.PublishMsg(pubCtx(t, 5*time.Second), m); err != nil {
		t.Fatal(err)
	}
	in := natsInbox("ids", "orders.plain")
	in.IDHeader = "x-msg"
	s := newNATSSource(t, e, in, DefaultAckWait)
	var c collector
	r := testkit.RunSource(s, c.receive)
	testkit.Eventually(t, "messages", 10*time.Second, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.got) == 3 })
	r.Stop(t)
	g := c.got
	if !g[0].IDDerived || g[0].Event.ID != g[1].Event.ID || !strings.HasPrefix(g[0].Event.ID, engine.DerivedIDPrefix) {
		t.Fatalf("derived: %+v %+v", g[0], g[1])
	}
	if g[2].IDDerived || g[2].Event.ID != "custom-1" {
		t.Fatalf("custom id header: %+v", g[2])
	}
}

// A NATS inbox does not open on a subject no stream stores or one several
// streams store, the error naming the subject or the streams, nor without
// a subject.
func TestOpenSourceStreamErrors(t *testing.T) {
	e := newSourceEnv(t)
	_, err := OpenSource(pubCtx(t, 5*time.Second), testConfig(true), e.url, natsInbox("d", "nowhere.>"), testLogger(t), nil, nil)
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), `no JetStream stream stores subject "nowhere.>"`) {
		t.Fatalf("no stream: %v", err)
	}
	if _, err := e.js.CreateStream(pubCtx(t, 5*time.Second), jetstream.StreamConfig{Name: "MORE", Subjects: []string{"more.a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateStream(pubCtx(t, 5*time.Second), jetstream.StreamConfig{Name: "MORE2", Subjects: []string{"more.b"}}); err != nil {
		t.Fatal(err)
	}
	_, err = OpenSource(pubCtx(t, 5*time.Second), testConfig(true), e.url, natsInbox("d", "more.*"), testLogger(t), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "several streams (MORE, MORE2)") {
		t.Fatalf("two streams: %v", err)
	}
	if _, err := OpenSource(pubCtx(t, 5*time.Second), testConfig(true), e.url, natsInbox("d", ""), nil, nil, nil); err == nil {
		t.Fatal("no subject accepted")
	}
}

// Close while Run waits in a pull returns promptly.
func TestSourceCloseStopsRun(t *testing.T) {
	e := newSourceEnv(t)
	s := newNATSSource(t, e, natsInbox("c", "orders.>"), DefaultAckWait)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(context.Background(), func(context.Context, []switchyard.Inbound) error { return nil })
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %s", d)
	}
	if err := s.Run(context.Background(), nil); err == nil {
		t.Fatal("second Run accepted")
	}
}

// An inbox whose dedup window (ttl) is shorter than its stream's max_age is
// warned about, naming both; one longer than the max_age is not.
func TestSourceRetentionWarning(t *testing.T) {
	e := newSourceEnv(t)
	if _, err := e.js.CreateStream(pubCtx(t, 5*time.Second), jetstream.StreamConfig{Name: "AGED", Subjects: []string{"aged.>"}, MaxAge: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	in := natsInbox("aged", "aged.>")
	in.TTL = 24 * time.Hour
	if w := newNATSSource(t, e, in, DefaultAckWait).Warnings(); len(w) != 0 {
		t.Fatalf("ttl above max_age: %q", w)
	}
	in.TTL = time.Hour
	w := newNATSSource(t, e, in, DefaultAckWait).Warnings()
	if len(w) != 1 || !strings.Contains(w[0], `the dedup window (ttl 1h0m0s) is shorter than the max_age of stream "AGED" (2h0m0s)`) {
		t.Fatalf("warnings %q", w)
	}
}

// A durable deleted under a running source is created again, reading on
// after the ack floor the source last read from it (every
// consumerCheckEvery), not from the stream's start: consuming goes on, and
// nothing acknowledged before is read again.
func TestSourceDurableDeletedIsRecreated(t *testing.T) {
	checkEvery(t, 200*time.Millisecond)
	e := newSourceEnv(t)
	book := &keptBook{reads: map[string]switchyard.Read{}}
	defer runKept(t, e, natsInbox("gone", "orders.>"), testLogger(t), book)()
	e.publish(t, "orders.created", "before", 3)
	testkit.Eventually(t, "first messages", 10*time.Second, func() bool { return book.distinct() == 3 })
	time.Sleep(300 * time.Millisecond)
	e.publish(t, "orders.created", "mid", 1) // the check after its batch reads the floor
	testkit.Eventually(t, "the floor after the next message", 10*time.Second, func() bool {
		book.mu.Lock()
		defer book.mu.Unlock()
		return book.times("mid-0000") == 1 && book.reads["ORDERS"].Next == 5
	})
	e.deleteDurable(t, "ORDERS", "gone")
	e.publish(t, "orders.created", "after", 3)
	testkit.Eventually(t, "messages after the delete", 20*time.Second, func() bool { return book.distinct() == 7 })
	time.Sleep(300 * time.Millisecond) // anything read again
	for _, id := range []string{"before-0000", "before-0002", "mid-0000"} {
		if n := book.times(id); n != 1 {
			t.Errorf("%s received %d times: the durable made again read from the stream's start", id, n)
		}
	}
}

// A durable someone else changed (here its filter, to a subject the
// inbox's messages are not on) is set back at the next check, and the
// messages the server passed over meanwhile are read again: none is
// lost. Before, the inbox got nothing more, said nothing, and a restart
// set the filter back with those messages passed over for good (a trial).
func TestSourceSetsAChangedConsumerBack(t *testing.T) {
	checkEvery(t, 300*time.Millisecond)
	e := newSourceEnv(t)
	in := natsInbox("edited", "orders.>")
	s := newNATSSource(t, e, in, DefaultAckWait)
	var c collector
	r := testkit.RunSource(s, c.receive)
	defer r.Stop(t)
	e.publish(t, "orders.created", "before", 3)
	testkit.Eventually(t, "first messages", 10*time.Second, func() bool { return c.distinct() == 3 })
	changed := consumerConfig(in, DefaultAckWait)
	changed.FilterSubject = "orders.other"
	if _, err := e.js.UpdateConsumer(pubCtx(t, 5*time.Second), "ORDERS", changed); err != nil {
		t.Fatal(err)
	}
	e.publish(t, "orders.created", "during", 5)
	e.publish(t, "orders.other", "other", 2) // what the changed filter takes
	testkit.Eventually(t, "the messages passed over", 20*time.Second, func() bool { return c.distinct() == 10 })
	if got := e.info(t, "edited").Config.FilterSubject; got != "orders.>" {
		t.Errorf("the durable's filter is %q, not set back", got)
	}
	e.publish(t, "orders.created", "after", 2)
	testkit.Eventually(t, "messages after", 10*time.Second, func() bool { return c.distinct() == 12 })
}

// Routers on one durable whose inboxes differ in what loses no message
// (batch sizes, so max_ack_pending) do not take each other's settings for
// a change by someone else: they set them back in turn for ever, each
// reading the stream again (a review).
func TestSourcesWithOtherBatchSizesShareADurable(t *testing.T) {
	checkEvery(t, 100*time.Millisecond)
	e := newSourceEnv(t)
	var logs testkit.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs})
	small, large := natsInbox("shared", "orders.>"), natsInbox("shared", "orders.>")
	large.Policy.BatchSize = 200
	var c collector
	for _, in := range []config.Inbox{small, large} {
		r := testkit.RunSource(newNATSSourceLogged(t, e, in, DefaultAckWait, log), c.receive)
		defer r.Stop(t)
	}
	e.publish(t, "orders.created", "s", 50)
	testkit.Eventually(t, "every message", 10*time.Second, func() bool { return c.distinct() == 50 })
	time.Sleep(1500 * time.Millisecond) // checks on both
	if strings.Contains(logs.String(), "changed by someone else") {
		t.Errorf("two routers' settings taken for someone else's:\n%s", logs.String())
	}
}

// A durable changed in a way it cannot be set back (its ack policy: the
// server refuses that change) is said once a minute, not at every batch
// (602 lines in 5 s, a review).
func TestADurableThatCannotBeSetBackIsSaidOnce(t *testing.T) {
	checkEvery(t, 50*time.Millisecond)
	e := newSourceEnv(t)
	var logs testkit.Buffer
	in := natsInbox("acked", "orders.>")
	s := newNATSSourceLogged(t, e, in, DefaultAckWait, hclog.New(&hclog.LoggerOptions{Output: &logs}))
	ctx := pubCtx(t, 5*time.Second)
	if err := e.js.DeleteConsumer(ctx, "ORDERS", "acked"); err != nil {
		t.Fatal(err)
	}
	all := consumerConfig(in, DefaultAckWait)
	all.AckPolicy = jetstream.AckAllPolicy
	if _, err := e.js.CreateConsumer(ctx, "ORDERS", all); err != nil {
		t.Fatal(err)
	}
	var c collector
	r := testkit.RunSource(s, c.receive)
	defer r.Stop(t)
	e.publish(t, "orders.created", "a", 1)
	testkit.Eventually(t, "the first check", 15*time.Second, func() bool { return strings.Contains(logs.String(), "cannot be set back") })
	for i := range 10 { // a batch each, and a check after each
		e.publish(t, "orders.created", fmt.Sprint("b", i), 1)
		time.Sleep(100 * time.Millisecond)
	}
	testkit.Eventually(t, "the messages", 10*time.Second, func() bool { return c.distinct() == 11 })
	if n := strings.Count(logs.String(), "cannot be set back"); n != 1 {
		t.Errorf("%d lines for a durable that cannot be set back:\n%s", n, logs.String())
	}
}

// A stream deleted under a running source, its subject now stored by a
// stream of another name, is found: the durable is created on it and
// consuming goes on (before, the source retried on the old name until a
// restart).
func TestSourceFindsItsSubjectsNewStream(t *testing.T) {
	e := newSourceEnv(t)
	s := newNATSSource(t, e, natsInbox("moved", "orders.>"), DefaultAckWait)
	var c collector
	r := testkit.RunSource(s, c.receive)
	defer r.Stop(t)
	e.publish(t, "orders.created", "before", 2)
	testkit.Eventually(t, "first messages", 10*time.Second, func() bool { return c.distinct() == 2 })
	ctx := pubCtx(t, 5*time.Second)
	if err := e.js.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS2", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	e.publish(t, "orders.created", "after", 3)
	testkit.Eventually(t, "messages on the new stream", 20*time.Second, func() bool { return c.distinct() == 5 })
	if got := s.Stream(); got != "ORDERS2" {
		t.Errorf("Stream() = %q", got)
	}
}

// A producer's quirk in every message (here an empty ce-id) does not flood
// the log: the inbox takes every message, with its id derived, and says
// so in about a line a second, the next counting those held back.
func TestSourceLenientWarningsAreThrottled(t *testing.T) {
	e := newSourceEnv(t)
	const n = 60
	for i := range n {
		m := natsgo.NewMsg("orders.quirky")
		m.Header.Set("ce-specversion", "1.0")
		m.Header.Set("ce-id", "")
		m.Header.Set("ce-source", "/orders")
		m.Header.Set("ce-type", "order.created")
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		if _, err := e.js.PublishMsg(pubCtx(t, 5*time.Second), m); err != nil {
			t.Fatal(err)
		}
	}
	var logs testkit.Buffer
	s := newNATSSourceLogged(t, e, natsInbox("quirky", "orders.quirky"), DefaultAckWait,
		hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs}))
	start := time.Now()
	var c collector
	r := testkit.RunSource(s, c.receive)
	testkit.Eventually(t, "every message", 10*time.Second, func() bool { return c.distinct() == n })
	r.Stop(t)
	took := time.Since(start)
	lines := strings.Count(logs.String(), "message decoded leniently")
	if most := int(took/time.Second) + 1; lines < 1 || lines > most {
		t.Fatalf("%d lines of \"decoded leniently\" for %d messages in %v, want 1 to %d:\n%s", lines, n, took, most, logs.String())
	}
	if !strings.Contains(logs.String(), "id must not be empty") {
		t.Errorf("the line does not say what was wrong:\n%s", logs.String())
	}
}

// An inbox whose connection goes silent (no reset, no answer: a host gone
// dark, a NAT that forgot it) notices at its next empty pull, not at
// nats.go's idle ping minutes later: it pings, reconnects, and once the way
// is back it receives what the stream stored meanwhile.
func TestSourceFindsASilentConnection(t *testing.T) {
	e := newSourceEnv(t)
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	link := testkit.NewLink(t, u.Host)
	s, err := openSource(pubCtx(t, 10*time.Second), testConfig(true), "nats://"+link.Addr(), natsInbox("silent", "orders.>"), testLogger(t), 2*time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	var c collector
	r := testkit.RunSource(s, c.receive)
	defer r.Stop(t)
	e.publish(t, "orders.created", "before", 3)
	testkit.Eventually(t, "the messages before the cut", 10*time.Second, func() bool { return c.distinct() == 3 })
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy while consuming: %v", err)
	}

	link.Cut()
	cut := time.Now()
	e.publish(t, "orders.created", "during", 3)
	// An empty pull (up to fetchWait), a ping (fetchWait/2), a reconnect
	// whose dials hang (IsConnected waits each out).
	testkit.Eventually(t, "the inbox to find its connection silent", 4*fetchWait, func() bool { return !s.nc.IsConnected() })
	t.Logf("found silent %s after the cut", time.Since(cut).Round(time.Millisecond))
	// And says so (/readyz, switchyard_inbox_up) at once, while nats.go
	// dials the silent address again.
	start := time.Now()
	if err := s.Healthy(context.Background()); err == nil || !strings.Contains(err.Error(), "not connected") || time.Since(start) > fetchWait/4 {
		t.Fatalf("Healthy after the silence: %v after %s, want it said at once", err, time.Since(start))
	}
	link.Restore()
	// A message the server had handed to the pull open at the cut comes
	// again after its ack wait (2 s here).
	testkit.Eventually(t, "the messages stored while the way was cut", 15*time.Second, func() bool { return c.distinct() == 6 })
	testkit.Eventually(t, "the inbox to say it consumes again", 2*fetchWait, func() bool { return s.Healthy(context.Background()) == nil })
}

// An inbox started before its server, whose server then comes without the
// stream, says it cannot consume yet; once the stream is there it says it
// consumes as soon as its consumer is set up, not after the first pull
// (fetchWait on an idle stream) cleared the old reason.
func TestSourceHealthyOnceSetUp(t *testing.T) {
	cfg := testConfig(true)
	cfg.Port = testkit.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", cfg.Port)
	s, err := openSource(pubCtx(t, 10*time.Second), cfg, url, natsInbox("late", "orders.>"), testLogger(t), 2*time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	r := testkit.RunSource(s, (&collector{}).receive)
	defer r.Stop(t)
	if err := s.Healthy(context.Background()); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("Healthy without a server: %v", err)
	}

	startServer(t, cfg, t.TempDir()) // no stream: the sink makes it
	var last error
	testkit.EventuallyWith(t, 15*time.Second, func() bool {
		last = s.Healthy(context.Background())
		return last != nil && strings.Contains(last.Error(), "cannot start consuming yet")
	}, func() string { return fmt.Sprintf("Healthy with the server there and no stream: %v", last) })

	openSink(t, cfg, url)
	made := time.Now()
	testkit.EventuallyWith(t, 15*time.Second, func() bool {
		last = s.Healthy(context.Background())
		return last == nil
	}, func() string { return fmt.Sprintf("Healthy once the stream is there: %v", last) })
	if took := time.Since(made); took >= fetchWait {
		t.Fatalf("Healthy said the old reason for %s after the consumer could be set up (a pull's wait is %s)", took, fetchWait)
	}
}

// An inbox's writes (its acks) to a connection whose socket takes nothing
// fail after the block's publish timeout, as the sink's do, not after
// nats.go's minute, which held the connection's lock and Close as long. A
// block without one (not resolved) is refused, as the sink refuses it: 0
// would mean no bound at all.
func TestSourceWritesAreBounded(t *testing.T) {
	e := newSourceEnv(t)
	s := newNATSSource(t, e, natsInbox("bounded", "orders.>"), 2*time.Second)
	if got, want := s.nc.Opts.FlusherTimeout, testConfig(true).PublishTimeout; got != want {
		t.Fatalf("the inbox connection's write timeout is %s, want the publish timeout %s", got, want)
	}
	unresolved := testConfig(true)
	unresolved.PublishTimeout = 0
	s, err := openSource(pubCtx(t, 10*time.Second), unresolved, e.url, natsInbox("unbounded", "orders.>"), testLogger(t), 2*time.Second, nil, nil)
	if err == nil {
		s.Close(context.Background())
		t.Fatal("an inbox opened on a block without a publish timeout")
	}
	if !strings.Contains(err.Error(), "publish_timeout 0s") {
		t.Fatalf("err = %v, want it to name publish_timeout", err)
	}
}

// An inbox says how far behind its durable it reads: the messages past
// those a pull brought (here 20 of 30 while the first batch of 10 is
// held), those of a batch it refused with them while they wait to come
// again, and none once it has read them all.
func TestSourceLag(t *testing.T) {
	defer func(old backoff.Doubling) { receiveBackoff = old }(receiveBackoff)
	receiveBackoff.Min, receiveBackoff.Max = time.Second, time.Second
	e := newSourceEnv(t)
	e.publish(t, "orders.created", "lag", 30)
	s := newNATSSource(t, e, natsInbox("lag", "orders.>"), DefaultAckWait)
	if _, ok := s.Lag(); ok {
		t.Fatal("a lag before any pull")
	}
	held, refused, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	r := testkit.RunSource(s, func(context.Context, []switchyard.Inbound) error {
		switch calls.Add(1) {
		case 1:
			close(held)
			<-release
		case 2:
			close(refused)
			return errors.New("storage_full")
		}
		return nil
	})
	defer r.Stop(t)
	<-held
	if n, ok := s.Lag(); !ok || n != 20 {
		t.Errorf("with the first batch of 10 held: lag %d (%v), want 20", n, ok)
	}
	close(release)
	<-refused
	testkit.EventuallyWith(t, 800*time.Millisecond, func() bool { n, _ := s.Lag(); return n == 20 },
		func() string {
			n, ok := s.Lag()
			return fmt.Sprintf("lag %d (%v) while the refused batch waits, want 20", n, ok)
		})
	testkit.EventuallyWith(t, 10*time.Second, func() bool { n, _ := s.Lag(); return n == 0 },
		func() string { n, ok := s.Lag(); return fmt.Sprintf("lag %d (%v) once all is read", n, ok) })
}
