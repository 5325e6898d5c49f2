package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/stall"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testPassword is the embedded test servers' password (testAuth connects
// with it); config.Secret reads it from the environment.
const testPassword = "test-password-for-the-embedded-server"

var testAuth = natsgo.UserInfo("switchyard", testPassword)

func init() { os.Setenv("SWITCHYARD_TEST_NATS_PASSWORD", testPassword) }

func testConfig(jetStream bool) config.NATS {
	cfg := config.NewNATS("local")
	cfg.Auth = config.NATSAuth{User: "switchyard", Password: config.Secret{Env: "SWITCHYARD_TEST_NATS_PASSWORD"}}
	cfg.Embedded, cfg.Port, cfg.JetStream, cfg.PublishTimeout = true, -1, jetStream, 5*time.Second
	cfg.Streams = []config.Stream{config.NewStream("ORDERS", "orders.>")}
	return cfg
}

func startServer(t testing.TB, cfg config.NATS, dir string) *Server {
	t.Helper()
	srv, err := StartServer(cfg, dir, testLogger(t))
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}

func openSink(t testing.TB, cfg config.NATS, url string) *Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink, err := Open(ctx, cfg, url, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = sink.Close(context.Background()) })
	return sink
}

func makeMsgs(prefix, subject string, n int) []*switchyard.Message {
	msgs := make([]*switchyard.Message, n)
	now := time.Now()
	for i := range msgs {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		msgs[i] = &switchyard.Message{
			Event: &switchyard.Event{
				ID:              id,
				Source:          "/test/orders",
				Type:            "order.created",
				SpecVersion:     "1.0",
				Time:            now,
				DataContentType: "application/json",
				Extensions: []switchyard.Header{
					{Name: "partitionkey", Value: "customer-" + strconv.Itoa(i%7)},
					{Name: "traceparent", Value: traceparent},
				},
				Data: []byte(`{"order":"` + id + `","amount":42}`),
			},
			Topic: subject,
			MsgID: id,
		}
	}
	return msgs
}

func pubCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func requireOK(t *testing.T, res []switchyard.Result, n int) {
	t.Helper()
	if len(res) != n {
		t.Fatalf("got %d results, want %d", len(res), n)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("result %d: %v", i, r.Err)
		}
	}
}

// 1000 events published to JetStream are stored once each, at the distinct
// sequence each result names, with the binding's headers, their subject
// and data; published again under the same Nats-Msg-Ids they are dropped,
// and the results name the original positions.
func TestJetStreamPublishAndDedup(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	if got := sink.Name(); got != "nats.local" {
		t.Fatalf("Name() = %q", got)
	}
	if err := sink.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy: %v", err)
	}

	const n = 1000
	msgs := makeMsgs("evt", "orders.created", n)
	res := sink.Publish(pubCtx(t, 10*time.Second), msgs)
	requireOK(t, res, n)
	seen := make(map[uint64]bool, n)
	for i, r := range res {
		if r.Position.Stream != "ORDERS" || r.Position.Sequence == 0 {
			t.Fatalf("result %d: position %+v", i, r.Position)
		}
		if seen[r.Position.Sequence] {
			t.Fatalf("result %d: sequence %d twice", i, r.Position.Sequence)
		}
		seen[r.Position.Sequence] = true
	}
	if got := testkit.StreamMsgs(t, srv.ClientURL(), "ORDERS", testAuth); got != n {
		t.Fatalf("stream has %d messages, want %d", got, n)
	}

	// Every stored message: the headers of the binding, at the sequence the
	// result named.
	js := testkit.JetStream(t, srv.ClientURL(), testAuth)
	st, err := js.Stream(pubCtx(t, 5*time.Second), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		raw, err := st.GetMsg(pubCtx(t, 5*time.Second), res[i].Position.Sequence)
		if err != nil {
			t.Fatalf("GetMsg %d: %v", res[i].Position.Sequence, err)
		}
		want := map[string]string{
			"ce-id":           m.Event.ID,
			"ce-type":         "order.created",
			"ce-source":       "/test/orders",
			"ce-specversion":  "1.0",
			"ce-partitionkey": m.Event.PartitionKey(),
			"content-type":    "application/json",
			"traceparent":     traceparent,
			"Nats-Msg-Id":     m.MsgID,
			"ce-time":         m.Event.Time.UTC().Format(time.RFC3339Nano),
		}
		for k, v := range want {
			if got := raw.Header.Get(k); got != v {
				t.Fatalf("msg %d header %s = %q, want %q", i, k, got, v)
			}
		}
		if raw.Subject != "orders.created" || string(raw.Data) != string(m.Event.Data) {
			t.Fatalf("msg %d: subject %q data %q", i, raw.Subject, raw.Data)
		}
	}

	// (b) The same MsgIDs again: JetStream drops them, the results succeed
	// and name the original positions.
	res2 := sink.Publish(pubCtx(t, 10*time.Second), msgs)
	requireOK(t, res2, n)
	for i := range res2 {
		if res2[i].Position != res[i].Position {
			t.Fatalf("duplicate %d: position %+v, want %+v", i, res2[i].Position, res[i].Position)
		}
	}
	if got := testkit.StreamMsgs(t, srv.ClientURL(), "ORDERS", testAuth); got != n {
		t.Fatalf("after duplicates stream has %d messages, want %d", got, n)
	}
}

// A subject no JetStream stream stores is a retryable error (not permanent,
// not an unknown outcome) naming the subject; a message without a subject,
// or no message at all, is refused for good.
func TestJetStreamNoStream(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	res := sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("x", "nowhere.subject", 3))
	for i, r := range res {
		if r.Err == nil || switchyard.IsPermanent(r.Err) || errors.Is(r.Err, switchyard.ErrUnknownOutcome) {
			t.Fatalf("result %d: want a plain retryable error, got %v", i, r.Err)
		}
		if want := `no JetStream stream for subject "nowhere.subject"`; !strings.Contains(r.Err.Error(), want) {
			t.Fatalf("result %d: %v, want it to say %s", i, r.Err, want)
		}
	}
	// A message without a subject or an event is permanent.
	bad := []*switchyard.Message{{Event: &switchyard.Event{ID: "a"}}, nil}
	for i, r := range sink.Publish(pubCtx(t, 5*time.Second), bad) {
		if !switchyard.IsPermanent(r.Err) {
			t.Fatalf("bad %d: want permanent, got %v", i, r.Err)
		}
	}
}

// A message over the server's max_payload is refused for good, and the
// error counts what the server counts, headers and data: it gave the data
// alone, a number under the limit it said it was over (an adversarial
// trial).
func TestOverMaxPayloadSaysTheWholeSize(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	msgs := makeMsgs("big", "orders.big", 1)
	limit := sink.nc.MaxPayload()
	msgs[0].Event.Data = make([]byte, limit-8) // the headers take it over
	res := sink.Publish(pubCtx(t, 5*time.Second), msgs)
	if err := res[0].Err; !switchyard.IsPermanent(err) || !strings.Contains(err.Error(), "of headers") || !strings.Contains(err.Error(), fmt.Sprintf("max_payload of %d", limit)) {
		t.Fatalf("over max_payload: %v", err)
	}
}

// When the server stops, the sink turns unhealthy and a publish fails within
// a second instead of hanging; when the server is back on the same port and
// store, the sink reconnects by itself, publishes, and the stream has kept
// what it held.
func TestServerDownAndReconnect(t *testing.T) {
	cfg := testConfig(true)
	dir := t.TempDir()
	srv, err := StartServer(cfg, dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	sink := openSink(t, cfg, srv.ClientURL())
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("before", "orders.created", 10)), 10)

	if err := srv.Close(pubCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	// (e) Healthy notices the server is gone.
	testkit.Eventually(t, "Healthy to fail after the server stopped", 5*time.Second,
		func() bool { return sink.Healthy(context.Background()) != nil })
	t.Logf("Healthy while down: %v", sink.Healthy(context.Background()))

	// (c) Publish fails promptly with errors, no hang.
	start := time.Now()
	res := sink.Publish(pubCtx(t, 300*time.Millisecond), makeMsgs("down", "orders.created", 10))
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Publish took %s while the server was down", el)
	}
	for i, r := range res {
		if r.Err == nil {
			t.Fatalf("result %d: no error while the server is down", i)
		}
	}
	t.Logf("Publish while down: %v", res[0].Err)

	// Restart on the same port and store: the sink reconnects by itself.
	cfg2 := cfg
	cfg2.Port = port
	srv2 := startServer(t, cfg2, dir)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return sink.Healthy(context.Background()) == nil },
		func() string { return fmt.Sprintf("no reconnect: %v", sink.Healthy(context.Background())) })
	msgs := makeMsgs("after", "orders.created", 10)
	var last []switchyard.Result
	for attempt := 0; attempt < 5; attempt++ {
		last = sink.Publish(pubCtx(t, 2*time.Second), msgs)
		if last[0].Err == nil {
			break
		}
		t.Logf("attempt %d after restart: %v", attempt, last[0].Err)
		time.Sleep(200 * time.Millisecond)
	}
	requireOK(t, last, 10)
	if got := testkit.StreamMsgs(t, srv2.ClientURL(), "ORDERS", testAuth); got != 20 {
		t.Fatalf("stream has %d messages after restart, want 20 (store kept)", got)
	}
}

// Without JetStream, events are published on core NATS with the binding's
// headers, reach a subscriber in order, and their results carry no
// position.
func TestCorePublish(t *testing.T) {
	cfg := testConfig(false)
	cfg.Streams = nil
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())

	nc := testkit.NATSConn(t, srv.ClientURL(), testAuth)
	ch := make(chan *natsgo.Msg, 100)
	sub, err := nc.ChanSubscribe("events.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	msgs := makeMsgs("core", "events.core", 20)
	res := sink.Publish(pubCtx(t, 5*time.Second), msgs)
	requireOK(t, res, 20)
	for i, r := range res {
		if r.Position != (switchyard.Position{}) {
			t.Fatalf("result %d: core NATS has no position, got %+v", i, r.Position)
		}
	}
	for i := range msgs {
		select {
		case m := <-ch:
			if m.Header.Get("ce-id") != msgs[i].Event.ID || m.Header.Get("traceparent") != traceparent ||
				m.Header.Get("ce-type") != "order.created" {
				t.Fatalf("message %d headers %v", i, m.Header)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("subscriber got %d of %d messages", i, len(msgs))
		}
	}
}

// After Close the sink is not healthy and a publish fails instead of
// passing for delivered.
func TestHealthyAfterClose(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	if err := sink.Close(pubCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Healthy(context.Background()); err == nil {
		t.Fatal("Healthy after Close")
	}
	res := sink.Publish(pubCtx(t, time.Second), makeMsgs("closed", "orders.created", 2))
	if res[0].Err == nil {
		t.Fatal("Publish after Close succeeded")
	}
}

// Open creates the configured streams and, on a later Open, updates them.
func TestStreamCreateOrUpdate(t *testing.T) {
	cfg := testConfig(true)
	audit := config.NewStream("AUDIT", "audit.>")
	audit.Storage, audit.MaxAge = "memory", time.Hour
	cfg.Streams = []config.Stream{audit}
	srv := startServer(t, cfg, t.TempDir())
	openSink(t, cfg, srv.ClientURL())

	cfg.Streams[0].MaxAge = 2 * time.Hour
	cfg.Streams[0].Duplicates = time.Minute
	openSink(t, cfg, srv.ClientURL())

	js := testkit.JetStream(t, srv.ClientURL(), testAuth)
	st, err := js.Stream(pubCtx(t, 5*time.Second), "AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if c.MaxAge != 2*time.Hour || c.Duplicates != time.Minute || c.Storage != jetstream.MemoryStorage {
		t.Fatalf("stream config not updated: max_age %s duplicates %s storage %s", c.MaxAge, c.Duplicates, c.Storage)
	}

	cfg.Streams[0].Storage = "tape"
	if _, err := Open(pubCtx(t, 5*time.Second), cfg, srv.ClientURL(), testLogger(t)); err == nil {
		t.Fatal("Open accepted storage \"tape\"")
	}
}

// SetStreams (a reload) only adds: it creates streams and adds subjects at
// once on a connected server, and undo takes them back. Any other change
// to a stream the server has (storage, max_age, fewer subjects) is refused
// before anything changes, so that a refused reload drops nothing (an
// adversarial trial: a refused reload had purged a stream by setting its
// max_age before the refusal); so is a change on a server not connected.
// A set-up the server refuses (a subject another stream has) is put back:
// the streams made for it deleted.
func TestSetStreams(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("o", "orders.created", 2)), 2)
	audit := append(slices.Clone(cfg.Streams), config.NewStream("AUDIT", "audit.>"))
	audit[0].Subjects = append(audit[0].Subjects, "refunds.>")
	undo, err := sink.SetStreams(pubCtx(t, 5*time.Second), audit)
	if err != nil {
		t.Fatal(err)
	}
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("a", "audit.login", 1)), 1)
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("r", "refunds.done", 1)), 1)
	undo()
	if _, ok := streamSubjects(t, srv.ClientURL(), "AUDIT"); !ok {
		t.Fatal("undo deleted AUDIT, which holds a message")
	}
	if subjects, _ := streamSubjects(t, srv.ClientURL(), "ORDERS"); fmt.Sprint(subjects) != "[orders.>]" {
		t.Fatalf("after undo ORDERS stores %v, want [orders.>]", subjects)
	}

	held := testkit.StreamMsgs(t, srv.ClientURL(), "ORDERS", testAuth)
	for name, change := range map[string]func([]config.Stream){
		"max_age":  func(st []config.Stream) { st[0].MaxAge = time.Second },
		"storage":  func(st []config.Stream) { st[0].Storage = "memory" },
		"subjects": func(st []config.Stream) { st[0].Subjects = []string{"orders.created"} },
	} {
		blocks := append(slices.Clone(cfg.Streams), config.NewStream("NEW", "new.>"))
		blocks[0].Subjects = slices.Clone(blocks[0].Subjects)
		change(blocks)
		if _, err := sink.SetStreams(pubCtx(t, 5*time.Second), blocks); err == nil || !strings.Contains(err.Error(), "a reload only creates streams and adds subjects") {
			t.Fatalf("%s changed: %v, want it refused as more than an addition", name, err)
		}
		if _, ok := streamSubjects(t, srv.ClientURL(), "NEW"); ok {
			t.Fatalf("%s changed: NEW was made, though the change was refused", name)
		}
	}
	if got := testkit.StreamMsgs(t, srv.ClientURL(), "ORDERS", testAuth); got != held || held != 3 {
		t.Fatalf("ORDERS holds %d messages after the refusals, want the %d before (its 2 and the refund)", got, held)
	}

	// SHIPPED takes a subject ORDERS has: the server refuses it after NEW
	// was made, and NEW is deleted; ORDERS gets back the config it had,
	// with a subject an operator added by hand (and the blocks name too),
	// not its block's before.
	handAdd(t, srv.ClientURL(), "ORDERS", "hand.>")
	overlap := append(slices.Clone(cfg.Streams), config.NewStream("NEW", "new.>"), config.NewStream("SHIPPED", "orders.shipped"))
	overlap[0].Subjects = []string{"orders.>", "hand.>"}
	if _, err := sink.SetStreams(pubCtx(t, 5*time.Second), overlap); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("SHIPPED over ORDERS's subject: %v, want the server's refusal", err)
	}
	if _, ok := streamSubjects(t, srv.ClientURL(), "NEW"); ok {
		t.Fatal("NEW, made for the refused blocks, is still there")
	}
	if subjects, _ := streamSubjects(t, srv.ClientURL(), "ORDERS"); fmt.Sprint(subjects) != "[orders.> hand.>]" {
		t.Fatalf("after the refusal ORDERS stores %v, want [orders.> hand.>] as the server had it", subjects)
	}
	if got := sink.declared(); !reflect.DeepEqual(got, cfg.Streams) {
		t.Fatalf("after the refusal the sink declares %+v, want the blocks before", got)
	}
	if err := sink.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy after a refused SetStreams put back: %v", err)
	}

	if err := srv.Close(pubCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the sink to see the server gone", 5*time.Second, func() bool { return sink.Healthy(context.Background()) != nil })
	if _, err := sink.SetStreams(pubCtx(t, 5*time.Second), audit); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("SetStreams while the server is down: %v, want it refused", err)
	}
}

// handAdd adds subject to stream as an operator would, with another
// client.
func handAdd(t *testing.T, url, stream, subject string) {
	t.Helper()
	js := testkit.JetStream(t, url, testAuth)
	st, err := js.Stream(pubCtx(t, 5*time.Second), stream)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Subjects = append(sc.Subjects, subject)
	if _, err := js.UpdateStream(pubCtx(t, 5*time.Second), sc); err != nil {
		t.Fatal(err)
	}
}

// streamSubjects is the subjects stream stores, and whether it exists.
func streamSubjects(t *testing.T, url, stream string) ([]string, bool) {
	t.Helper()
	info, ok := testkit.StreamInfo(t, url, stream, testAuth)
	if !ok {
		return nil, false
	}
	return info.Config.Subjects, true
}

// A subject a plain subscriber listens on, but no stream: the publish is
// never acknowledged, so the outcome is unknown once the deadline passes,
// and the sink is unhealthy (stalled) until an acknowledgement comes.
func TestNoAckIsUnknownOutcome(t *testing.T) {
	cfg := testConfig(true)
	cfg.MaxPending = 4
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	blackhole(t, srv.ClientURL())

	// 20 messages, 4 slots: 4 are sent and never acked, the rest stall until
	// the deadline. All must be unknown outcomes, and Publish must return on
	// time although the library's own stall wait is 200ms.
	start := time.Now()
	res := sink.Publish(pubCtx(t, 300*time.Millisecond), makeMsgs("bh", "blackhole.x", 20))
	if el := time.Since(start); el > 600*time.Millisecond {
		t.Fatalf("Publish took %s with a 300ms deadline", el)
	}
	for i, r := range res {
		if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) {
			t.Fatalf("result %d: want ErrUnknownOutcome, got %v", i, r.Err)
		}
	}
	t.Logf("sent, no ack: %v", res[0].Err)
	t.Logf("stalled, not sent: %v", res[19].Err)
	// The sink says it is stalled (before, a hung server looked healthy:
	// a broker trial).
	if err := sink.Healthy(context.Background()); !errors.Is(err, stall.ErrStalled) {
		t.Fatalf("Healthy after a deadline with no acknowledgement: %v", err)
	}
	// The server answers the ping that follows (checkSilent): the
	// connection is kept, not taken for a silent one.
	testkit.Eventually(t, "the ping after the stall", 5*time.Second, func() bool { return !sink.checking.Load() })
	if n := sink.nc.Stats().Reconnects; n != 0 || !sink.nc.IsConnected() {
		t.Fatalf("%d reconnects, connected %v, after a stall the server answered pings through", n, sink.nc.IsConnected())
	}
}

// A sink stalled by publishes never answered is healthy again at the next
// acknowledgement.
func TestStallEndsWithAnAck(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	blackhole(t, srv.ClientURL())
	sink.Publish(pubCtx(t, 200*time.Millisecond), makeMsgs("bh", "blackhole.x", 2))
	if err := sink.Healthy(context.Background()); !errors.Is(err, stall.ErrStalled) {
		t.Fatalf("Healthy after a deadline with no acknowledgement: %v", err)
	}
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("ok", "orders.x", 1)), 1)
	if err := sink.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy after an acknowledgement: %v", err)
	}
}

// Concurrent callers sharing a small in-flight window: every message is
// stored once, the stall is handled by waiting.
func TestConcurrentPublishSmallWindow(t *testing.T) {
	cfg := testConfig(true)
	cfg.MaxPending = 32
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	const workers, batches, batch = 4, 5, 200
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for b := 0; b < batches; b++ {
				msgs := makeMsgs(fmt.Sprintf("w%d-b%d", w, b), "orders.concurrent", batch)
				for i, r := range sink.Publish(pubCtx(t, 10*time.Second), msgs) {
					if r.Err != nil || r.Position.Sequence == 0 {
						errc <- fmt.Errorf("worker %d batch %d msg %d: %+v", w, b, i, r)
						return
					}
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if got := testkit.StreamMsgs(t, srv.ClientURL(), "ORDERS", testAuth); got != workers*batches*batch {
		t.Fatalf("stream has %d messages, want %d", got, workers*batches*batch)
	}
}

// The server stops while a large batch is in flight: Publish returns by its
// deadline, every message either has a position or an error, and lost acks
// are unknown outcomes.
func TestShutdownMidFlight(t *testing.T) {
	cfg := testConfig(true)
	srv, err := StartServer(cfg, t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sink := openSink(t, cfg, srv.ClientURL())
	msgs := makeMsgs("mid", "orders.mid", 20000)
	resc := make(chan []switchyard.Result, 1)
	start := time.Now()
	go func() { resc <- sink.Publish(pubCtx(t, 2*time.Second), msgs) }()
	time.Sleep(5 * time.Millisecond)
	if err := srv.Close(pubCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var res []switchyard.Result
	select {
	case res = <-resc:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish hung after the server stopped")
	}
	var ok, unknown, other int
	for i, r := range res {
		switch {
		case r.Err == nil:
			if r.Position.Sequence == 0 {
				t.Fatalf("result %d: success without a position", i)
			}
			ok++
		case errors.Is(r.Err, switchyard.ErrUnknownOutcome):
			unknown++
		default:
			other++
		}
	}
	el := time.Since(start)
	t.Logf("after %s: %d acked, %d unknown, %d other errors", el, ok, unknown, other)
	if el > 3*time.Second {
		t.Fatalf("Publish returned after %s, deadline 2s", el)
	}
	if ok == len(res) {
		t.Log("the whole batch was acknowledged before the shutdown (fast machine)")
	}
}

// BenchmarkPublish publishes batches of 200 events (≈150-byte payloads, the
// full header set) and reports messages per second.
func BenchmarkPublish(b *testing.B) {
	for _, bc := range []struct {
		name      string
		jetStream bool
		storage   string
	}{
		{"jetstream-file", true, "file"},
		{"jetstream-memory", true, "memory"},
		{"core", false, ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := testConfig(bc.jetStream)
			cfg.Streams[0].Storage = bc.storage
			if !bc.jetStream {
				cfg.Streams = nil
			}
			srv := startServer(b, cfg, b.TempDir())
			sink := openSink(b, cfg, srv.ClientURL())
			const batch = 200
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			total := 0
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				msgs := makeMsgs("b"+strconv.Itoa(i), "orders.bench", batch)
				b.StartTimer()
				for j, r := range sink.Publish(ctx, msgs) {
					if r.Err != nil {
						b.Fatalf("batch %d msg %d: %v", i, j, r.Err)
					}
				}
				total += batch
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/msg")
		})
	}
}

// BenchmarkPublishParallel is BenchmarkPublish with 2×GOMAXPROCS callers at
// once (the engine runs one loop per event type), JetStream on a file
// stream. Building the messages is inside the timed region here.
func BenchmarkPublishParallel(b *testing.B) {
	cfg := testConfig(true)
	srv := startServer(b, cfg, b.TempDir())
	sink := openSink(b, cfg, srv.ClientURL())
	const batch = 200
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := n.Add(1)
			msgs := makeMsgs("p"+strconv.FormatInt(k, 10), "orders.bench", batch)
			for j, r := range sink.Publish(context.Background(), msgs) {
				if r.Err != nil {
					b.Errorf("msg %d: %v", j, r.Err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(n.Load()*batch)/b.Elapsed().Seconds(), "msgs/s")
}

type natsOption = natsgo.Option

var userInfo = natsgo.UserInfo

func connectWith(url string, opts ...natsgo.Option) (*natsgo.Conn, error) {
	return natsgo.Connect(url, opts...)
}

// serverLoggerFor is the logger a started server reports through.
func (s *Server) serverLoggerFor() *serverLogger {
	return &serverLogger{l: s.log, critical: s.signalCritical}
}

// What happens to the block's stream on the broker is no fault of an
// event's (a broker trial): a stream deleted by hand is created again and
// the message waits meanwhile (unavailable, no attempt; before, every
// event was dead-lettered until a restart); a full stream (max_msgs with
// discard new) is unavailable, not a failure counted per event; and
// limits an operator set by hand outlive the sink's next update (before,
// each reconnection reset them without a word).
func TestStreamTroublesCountNoAttempt(t *testing.T) {
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("a", "orders.new", 1)), 1)
	js := testkit.JetStream(t, srv.ClientURL(), testAuth)
	if err := js.DeleteStream(pubCtx(t, 5*time.Second), "ORDERS"); err != nil {
		t.Fatal(err)
	}
	for i, r := range sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("b", "orders.new", 2)) {
		if !errors.Is(r.Err, switchyard.ErrSinkUnavailable) || !strings.Contains(r.Err.Error(), `the stream "ORDERS" for subject "orders.new" is gone; it is being created again`) {
			t.Fatalf("result %d with the stream deleted: %v", i, r.Err)
		}
	}
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		return sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("c", "orders.new", 1))[0].Err == nil
	}, func() string { return "the stream was not created again" })

	st, err := js.Stream(pubCtx(t, 5*time.Second), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	c.MaxMsgs, c.Discard = 2, jetstream.DiscardNew
	if _, err := js.UpdateStream(pubCtx(t, 5*time.Second), c); err != nil {
		t.Fatal(err)
	}
	res := sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("d", "orders.new", 3))
	if r := res[2]; !errors.Is(r.Err, switchyard.ErrSinkUnavailable) || !strings.Contains(r.Err.Error(), "JetStream cannot store now") {
		t.Fatalf("a message past the stream's max_msgs (discard new): %v", r.Err)
	}
	if err := sink.Healthy(context.Background()); err == nil || !strings.Contains(err.Error(), "JetStream cannot store now") {
		t.Errorf("Healthy while the stream is full: %v", err)
	}
	if err := sink.ensureStreams(pubCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	st, _ = js.Stream(pubCtx(t, 5*time.Second), "ORDERS")
	if c := st.CachedInfo().Config; c.MaxMsgs != 2 || c.Discard != jetstream.DiscardNew {
		t.Errorf("the operator's limits after the sink's update: max_msgs %d, discard %v", c.MaxMsgs, c.Discard)
	}
	// Room again: the next acknowledgement makes the sink healthy.
	if err := st.Purge(pubCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("e", "orders.new", 1)), 1)
	if err := sink.Healthy(context.Background()); err != nil {
		t.Errorf("Healthy once the stream had room: %v", err)
	}
}

// The connection's asynchronous errors are logged at most once a second,
// with the count held back: a permissions violation comes once per
// message, and flooded the log (a broker trial); a refusal of the
// credentials at most once a minute.
func TestAsyncErrorsAreThrottled(t *testing.T) {
	var buf testkit.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf})
	h := asyncErrors(log, &connWatch{})
	for range 100 {
		h(nil, nil, errors.New("nats: permissions violation for publish to \"x\""))
	}
	if n := strings.Count(buf.String(), "NATS async error"); n != 1 {
		t.Fatalf("%d lines for 100 errors in a moment:\n%s", n, buf.String())
	}
	// A refusal of the credentials comes at every reconnect, a second or
	// so apart: logged once a minute (it was every time: 57 lines in 35 s).
	var refusals testkit.Buffer
	log = hclog.New(&hclog.LoggerOptions{Output: &refusals})
	w := &connWatch{}
	h = asyncErrors(log, w)
	h(nil, nil, natsgo.ErrAuthorization)
	time.Sleep(1100 * time.Millisecond)
	h(nil, nil, natsgo.ErrAuthorization)
	if n := strings.Count(refusals.String(), "NATS refuses the router's credentials"); n != 1 {
		t.Fatalf("%d lines for two refusals 1.1 s apart:\n%s", n, refusals.String())
	}
	if !errors.Is(w.lastError(), natsgo.ErrAuthorization) {
		t.Errorf("the connection's last error: %v", w.lastError())
	}
	// A refusal after the connection came up again, or one for another
	// cause, is a new one: told at once (it waited out the minute).
	// Two causes that alternate (two servers) are each told once a minute.
	w.connected()
	for range 3 {
		h(nil, nil, natsgo.ErrAuthorization)
		h(nil, nil, natsgo.ErrAuthExpired)
	}
	if n := strings.Count(refusals.String(), "NATS refuses the router's credentials"); n != 3 {
		t.Fatalf("%d lines for refusals after a connection, of two causes in turn (3 wanted):\n%s", n, refusals.String())
	}
}

// serverBehindLink starts a server of cfg and a link to it that a test
// can cut (testkit.Link): clients dial "nats://"+link.Addr().
func serverBehindLink(t *testing.T, cfg config.NATS) (*Server, *testkit.Link) {
	t.Helper()
	srv := startServer(t, cfg, t.TempDir())
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	return srv, testkit.NewLink(t, u.Host)
}

// blackhole subscribes to blackhole.> on the server at url, and never
// replies: a publish there goes out and is never acknowledged.
func blackhole(t *testing.T, url string) {
	t.Helper()
	nc := testkit.NATSConn(t, url, testAuth)
	if _, err := nc.Subscribe("blackhole.>", func(*natsgo.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// An idle sink whose server goes silent says so at its next health check
// (/readyz, switchyard_sink_up), within the check's second, and
// reconnects; it said ok until a publish met the silence.
func TestAnIdleSinkFindsASilentServer(t *testing.T) {
	cfg := testConfig(true)
	_, link := serverBehindLink(t, cfg)
	sink := openSink(t, cfg, "nats://"+link.Addr())
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return sink.Healthy(ctx)
	}
	if err := check(); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	link.Cut()
	start := time.Now()
	err := check()
	if err == nil || !strings.Contains(err.Error(), "went silent") || time.Since(start) > time.Second {
		t.Fatalf("the check after the cut: %v after %s", err, time.Since(start))
	}
	link.Restore()
	testkit.Eventually(t, "healthy once the way is back", 15*time.Second, func() bool { return check() == nil })
}

// A busy sink's health check leaves its connection to the publishes' own
// wait (checkSilent): with a publish awaiting its acknowledgement, a check
// does not ping, and forces no reconnect. On a slow link a ping waited
// behind the publishes' bytes, and each check reconnected a working
// connection (a review: every publish failed).
func TestABusySinksCheckLeavesTheConnection(t *testing.T) {
	cfg := testConfig(true)
	srv, link := serverBehindLink(t, cfg)
	var logs testkit.Buffer
	sink, err := Open(pubCtx(t, 10*time.Second), cfg, "nats://"+link.Addr(), hclog.New(&hclog.LoggerOptions{Output: &logs}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close(pubCtx(t, time.Second)) }) // its connection was cut: no drain
	blackhole(t, srv.ClientURL())
	wait := sink.Send(pubCtx(t, 3*time.Second), makeMsgs("bh", "blackhole.x", 2)) // no acknowledgement comes
	link.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := sink.Healthy(ctx); err != nil && strings.Contains(err.Error(), "went silent") {
		t.Errorf("a check while a publish awaits its acknowledgement: %v", err)
	}
	if strings.Contains(logs.String(), "reconnecting") {
		t.Errorf("the check forced a reconnect:\n%s", logs.String())
	}
	link.Restore()
	wait()
}

// A connection that goes silent (the server's host gone dark, a NAT that
// lost its state: no reset, no answer, a new dial times out) is found
// within a publish or two, not at nats.go's idle ping (two minutes, two
// missed): the publish it leaves unanswered ends at its timeout, outcome
// unknown; then the sink pings the server, and with no answer reconnects,
// so the next publishes are answered unavailable at once, counting no
// attempt. When the way is back, the sink reconnects and publishes.
func TestSilentConnectionIsFound(t *testing.T) {
	cfg := testConfig(true)
	cfg.PublishTimeout = 2 * time.Second
	_, link := serverBehindLink(t, cfg)
	sink := openSink(t, cfg, "nats://"+link.Addr())
	requireOK(t, sink.Publish(context.Background(), makeMsgs("before", "orders.created", 5)), 5)

	link.Cut()
	cut := time.Now()
	for i, r := range sink.Publish(context.Background(), makeMsgs("cut", "orders.created", 5)) {
		if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) && !errors.Is(r.Err, switchyard.ErrSinkUnavailable) {
			t.Fatalf("the publish the cut met, message %d: %v", i, r.Err)
		}
	}
	var last error
	testkit.EventuallyWith(t, 4*cfg.PublishTimeout, func() bool {
		start := time.Now()
		res := sink.Publish(context.Background(), makeMsgs("down", "orders.created", 1))
		last = res[0].Err
		return errors.Is(last, switchyard.ErrSinkUnavailable) && time.Since(start) < cfg.PublishTimeout/2
	}, func() string { return fmt.Sprintf("publishes still wait for the silent connection: %v", last) })
	t.Logf("answered at once %s after the cut: %v", time.Since(cut).Round(time.Millisecond), last)
	// And so is every publish while the sink dials the silent address
	// again (nats.go holds the connection's lock across each dial: asking
	// it "connected?" waited the dial out, 2 s, for one publish in four).
	for i := range 8 {
		start := time.Now()
		res := sink.Publish(context.Background(), makeMsgs("still", "orders.created", 1))
		if took := time.Since(start); !errors.Is(res[0].Err, switchyard.ErrSinkUnavailable) || took > cfg.PublishTimeout/4 {
			t.Fatalf("publish %d while the way is cut: %v after %s, want the sink unavailable at once", i, res[0].Err, took)
		}
		time.Sleep(300 * time.Millisecond)
	}

	link.Restore()
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		res := sink.Publish(context.Background(), makeMsgs("after", "orders.created", 1))
		last = res[0].Err
		return last == nil
	}, func() string { return fmt.Sprintf("no publish after the way is back: %v", last) })
	if err := sink.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy after a publish was acknowledged: %v", err)
	}
}

// The embedded server's storage limit follows its disk: grown under a
// running router (an operator resizing a volume that filled up), the
// stream takes more than the disk held at the start. Before, the limit
// stayed the filesystem's size at the start, and every message past it was
// refused ("insufficient resources") until the router restarted.
func TestEmbeddedStoreGrowsWithItsDisk(t *testing.T) {
	defer func(d time.Duration) { storeCheckEvery = d }(storeCheckEvery)
	storeCheckEvery = 50 * time.Millisecond
	disk := testkit.SmallDisk(t, 4<<20)
	cfg := testConfig(true)
	srv := startServer(t, cfg, disk)
	sink := openSink(t, cfg, srv.ClientURL())
	testkit.GrowDisk(t, disk, 32<<20)
	testkit.Eventually(t, "the storage limit to follow the disk", 5*time.Second, func() bool {
		return srv.storeMax() == 32<<20
	})
	data := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	for b := range 16 { // 8 MiB in all: twice what the disk held at the start
		msgs := makeMsgs(fmt.Sprintf("grown-%d", b), "orders.a", 8)
		for _, m := range msgs {
			m.Event.Data = data
		}
		requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), msgs), 8)
	}
}

// storeMax is JetStream's storage limit now.
func (s *Server) storeMax() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns.JetStreamConfig().MaxStore
}

// A publish the connection's end refused is an outage (no attempt counted),
// not the event's failure: the library's closed, draining and reconnecting
// errors, and a stall the connection dropped during (publishAsync). Before,
// each counted an attempt, so that connections dropping now and then could
// dead-letter a good event (a review). Other errors still count one.
func TestSendErrorsOfAConnectionGoneAreAnOutage(t *testing.T) {
	s, m := &Sink{name: "nats.x"}, &switchyard.Message{Topic: "a.b"}
	for _, err := range []error{natsgo.ErrConnectionClosed, natsgo.ErrConnectionDraining, natsgo.ErrConnectionReconnecting,
		fmt.Errorf("%w: %w", errNotConnected, jetstream.ErrTooManyStalledMsgs)} {
		if got := s.sendError(m, err); !errors.Is(got, switchyard.ErrSinkUnavailable) {
			t.Errorf("%v: %v, want an outage", err, got)
		}
	}
	if got := s.sendError(m, errors.New("something else")); errors.Is(got, switchyard.ErrSinkUnavailable) {
		t.Errorf("another error: %v, want no outage", got)
	}
}
