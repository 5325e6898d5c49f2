package nats

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// keptBook is a collector that also keeps, as the engine's Receive does
// with each batch it takes, the latest Read of each stream.
type keptBook struct {
	collector
	mu    sync.Mutex
	reads map[string]switchyard.Read
}

func (k *keptBook) receive(ctx context.Context, msgs []switchyard.Inbound) error {
	k.mu.Lock()
	for _, m := range msgs {
		if m.Read.Next > k.reads[m.Read.Topic].Next || m.Read.ID != k.reads[m.Read.Topic].ID {
			k.reads[m.Read.Topic] = m.Read
		}
	}
	k.mu.Unlock()
	return k.collector.receive(ctx, msgs)
}

// keep keeps r as the engine's KeepInboxRead does.
func (k *keptBook) keep(_ context.Context, r switchyard.Read) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r.Next > k.reads[r.Topic].Next || r.ID != k.reads[r.Topic].ID {
		k.reads[r.Topic] = r
	}
	return nil
}

func (k *keptBook) kept(stream string, _ int32) (switchyard.Read, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.reads[stream]
	return r, ok, nil
}

// runKept runs a source of in on e that keeps in book, logging to log;
// stop stops and closes it.
func runKept(t *testing.T, e *sourceEnv, in config.Inbox, log hclog.Logger, book *keptBook) (stop func()) {
	t.Helper()
	s, err := openSource(pubCtx(t, 10*time.Second), testConfig(true), e.url, in, log, DefaultAckWait, book.kept, book.keep)
	if err != nil {
		t.Fatal(err)
	}
	r := testkit.RunSource(s, book.receive)
	return func() { r.Stop(t); s.Close(context.Background()) }
}

// times is how many times id was received.
func (k *keptBook) times(id string) int {
	k.collector.mu.Lock()
	defer k.collector.mu.Unlock()
	return k.ids[id]
}

// A durable deleted while no router read it (an operator, a tool) is made
// again reading on after the ack floor the inbox kept at its last check,
// not from the stream's start, where every message older than the inbox's
// ttl would be handed to the service again: nothing acknowledged is read
// again. Said in the log.
func TestSourceDurableDeletedWhileStoppedReadsOn(t *testing.T) {
	checkEvery(t, 200*time.Millisecond)
	e := newSourceEnv(t)
	var logs testkit.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	book := &keptBook{reads: map[string]switchyard.Read{}}
	run := func() func() { return runKept(t, e, natsInbox("kept", "orders.>"), log, book) }
	stop := run()
	e.publish(t, "orders.created", "a", 25)
	testkit.Eventually(t, "the first messages", 10*time.Second, func() bool { return book.distinct() == 25 })
	// The check after a batch reads the ack floor (every
	// consumerCheckEvery) and keeps it.
	for _, prefix := range []string{"b", "d"} {
		time.Sleep(300 * time.Millisecond)
		e.publish(t, "orders.created", prefix, 1)
		testkit.Eventually(t, prefix, 10*time.Second, func() bool { return book.times(prefix+"-0000") == 1 })
	}
	testkit.Eventually(t, "the floor after the last batch kept", 10*time.Second, func() bool {
		book.mu.Lock()
		defer book.mu.Unlock()
		return book.reads["ORDERS"].Next == 28 // the check after the batch (it may come after the batch's receive)
	})
	stop()

	e.deleteDurable(t, "ORDERS", "kept")
	e.publish(t, "orders.created", "c", 10)
	stop = run()
	defer stop()
	testkit.Eventually(t, "the messages after the delete", 10*time.Second, func() bool { return book.distinct() == 37 })
	time.Sleep(300 * time.Millisecond) // anything read again
	for _, id := range []string{"a-0000", "a-0024", "b-0000", "d-0000"} {
		if n := book.times(id); n != 1 {
			t.Errorf("%s received %d times: the durable made again read from the stream's start\n%s", id, n, logs.String())
		}
	}
	if l := logs.String(); !strings.Contains(l, "made again, reading on after what it had acknowledged") || !strings.Contains(l, "from_stream_seq=28") {
		t.Errorf("reading on is not told:\n%s", l)
	}
}

// A stream deleted and made again under its name under a running source
// begins its sequences again: the durable made on it reads it from its
// start, not on from the old stream's ack floor, which would pass over
// its first messages.
func TestSourceReadsAStreamMadeAgainFromItsStart(t *testing.T) {
	checkEvery(t, 200*time.Millisecond)
	e := newSourceEnv(t)
	book := &keptBook{reads: map[string]switchyard.Read{}}
	defer runKept(t, e, natsInbox("again", "orders.>"), testLogger(t), book)()
	e.publish(t, "orders.created", "before", 5)
	testkit.Eventually(t, "first messages", 10*time.Second, func() bool { return book.distinct() == 5 })
	time.Sleep(300 * time.Millisecond)
	e.publish(t, "orders.created", "mid", 1) // the floor read after its batch: 6
	testkit.Eventually(t, "the next message", 10*time.Second, func() bool { return book.distinct() == 6 })
	ctx := pubCtx(t, 5*time.Second)
	if err := e.js.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	e.publish(t, "orders.created", "after", 10) // sequences 1–10, past the old floor
	testkit.Eventually(t, "every message of the stream made again", 20*time.Second, func() bool { return book.distinct() == 16 })
}

// A user the server does not let read the stream's info (a deny on
// $JS.API.STREAM.INFO) still consumes: the stream's creation time, which
// tells it from one made again, is then unknown, and a durable made
// again reads from the start; setup said so and went on (it failed for
// ever when it needed the info).
func TestSourceConsumesWithoutTheStreamsInfo(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "admin", Password: "admin-secret"},
			{Username: "inbox", Password: "inbox-secret", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.INFO.>"}}}},
		}}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("the server did not start")
	}
	nc, err := natsgo.Connect(srv.ClientURL(), natsgo.UserInfo("admin", "admin-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(pubCtx(t, 5*time.Second), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	e := &sourceEnv{url: srv.ClientURL(), js: js}
	e.publish(t, "orders.created", "o", 5)

	t.Setenv("SWITCHYARD_TEST_INBOX_PASSWORD", "inbox-secret")
	cfg := config.NewNATS("remote")
	cfg.URL, cfg.PublishTimeout = srv.ClientURL(), 5*time.Second
	cfg.Auth = config.NATSAuth{User: "inbox", Password: config.Secret{Env: "SWITCHYARD_TEST_INBOX_PASSWORD"}}
	s, err := openSource(pubCtx(t, 10*time.Second), cfg, srv.ClientURL(), natsInbox("blind", "orders.>"), testLogger(t), DefaultAckWait, nil, nil)
	if err != nil {
		t.Fatalf("a source whose user may not read the stream's info: %v", err)
	}
	defer s.Close(context.Background())
	var c collector
	r := testkit.RunSource(s, c.receive)
	defer r.Stop(t)
	testkit.Eventually(t, "the messages", 10*time.Second, func() bool { return c.distinct() == 5 })
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "cannot read stream") {
		t.Errorf("warnings: %q", w)
	}
}

// A kept floor past the stream's end (its sequences went back: a snapshot
// restored keeps the stream's creation time) is not read on from: the
// server would start the durable there, and never give the messages
// below it; the stream is read from its start.
func TestSourceReadsFromTheStartWhenTheKeptFloorIsPastTheEnd(t *testing.T) {
	e := newSourceEnv(t)
	book := &keptBook{reads: map[string]switchyard.Read{}}
	run := func() func() { return runKept(t, e, natsInbox("past", "orders.>"), testLogger(t), book) }
	e.publish(t, "orders.created", "a", 5)
	stop := run()
	testkit.Eventually(t, "the messages", 10*time.Second, func() bool { return book.distinct() == 5 })
	stop()
	book.mu.Lock()
	r := book.reads["ORDERS"]
	r.Next = 100
	book.reads["ORDERS"] = r
	book.mu.Unlock()
	e.deleteDurable(t, "ORDERS", "past")
	e.publish(t, "orders.created", "b", 3)
	stop = run()
	defer stop()
	testkit.Eventually(t, "the messages after the delete", 10*time.Second, func() bool { return book.times("b-0002") == 1 })
}
