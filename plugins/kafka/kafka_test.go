package kafka

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	kgo "github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

const topic = "orders"

// testLogger logs to stderr with KAFKA_TEST_LOG=debug|info|..., else nowhere
// (franz-go goroutines outlive a test, so t.Log cannot be used).
func testLogger() hclog.Logger {
	lvl := os.Getenv("KAFKA_TEST_LOG")
	if lvl == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.LevelFromString(lvl), Output: os.Stderr})
}

func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.SeedTopics(3, topic)}, opts...)
	return testkit.Kafka(t, opts...)
}

// fastOpts shorten franz-go's metadata and retry waits for tests.
func fastOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.MetadataMinAge(20 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
	}
}

func testConfig(c *kfake.Cluster) config.Kafka {
	cfg := config.NewKafka("main", c.ListenAddrs()...)
	cfg.PublishTimeout = 5 * time.Second
	return cfg
}

func newSink(t testing.TB, cfg config.Kafka) *Sink {
	t.Helper()
	s, err := open(context.Background(), cfg, testLogger(), fastOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

var evtTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func message(prefix string, i int, dest string) *switchyard.Message {
	id := fmt.Sprintf("%s-%05d", prefix, i)
	return &switchyard.Message{
		Event: &switchyard.Event{
			ID:              id,
			Source:          "/test/orders",
			Type:            "order.created",
			SpecVersion:     "1.0",
			Time:            evtTime,
			DataContentType: "application/json",
			Extensions: []switchyard.Header{
				{Name: "partitionkey", Value: fmt.Sprintf("cust-%d", i%17)},
				{Name: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			},
			Data: fmt.Appendf(nil, `{"n":%d}`, i),
		},
		Topic: dest,
		Key:   fmt.Sprintf("cust-%d", i%17),
		MsgID: id,
	}
}

func messages(prefix string, n int, dest string) []*switchyard.Message {
	ms := make([]*switchyard.Message, n)
	for i := range ms {
		ms[i] = message(prefix, i, dest)
	}
	return ms
}

func publishOK(t testing.TB, s *Sink, msgs []*switchyard.Message) []switchyard.Result {
	t.Helper()
	res := s.Publish(context.Background(), msgs)
	if len(res) != len(msgs) {
		t.Fatalf("got %d results for %d messages", len(res), len(msgs))
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	return res
}

// consumed is a record read back, keyed by its ce_id header.
type consumed struct {
	rec   *kgo.Record
	count int
}

// readBack consumes topic with a consumer group until want distinct ce_ids
// are seen and the log stays quiet for a moment (to catch duplicates).
func readBack(t testing.TB, c *kfake.Cluster, want int) map[string]*consumed {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("readback-"+strings.ReplaceAll(t.Name(), "/", "-")),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(20*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]*consumed{}
	deadline := time.Now().Add(20 * time.Second)
	quietUntil := time.Time{}
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				t.Fatalf("fetch: %v", fe.Err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			id := header(r, "ce_id")
			if e := got[id]; e != nil {
				e.count++
			} else {
				got[id] = &consumed{rec: r, count: 1}
			}
		})
		if len(got) >= want {
			if quietUntil.IsZero() {
				quietUntil = time.Now().Add(300 * time.Millisecond)
			} else if time.Now().After(quietUntil) {
				return got
			}
		}
	}
	t.Fatalf("read back %d distinct records, want %d", len(got), want)
	return nil
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// (a) every message arrives once with its key, value and binding headers,
// and the returned positions are where the consumer found them.
func TestPublishReadBack(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	if s.Name() != "kafka.main" {
		t.Fatalf("Name() = %q", s.Name())
	}
	const n = 1000
	msgs := messages("a", n, topic)
	res := publishOK(t, s, msgs)
	got := readBack(t, c, n)
	if len(got) != n {
		t.Fatalf("read %d distinct records, want %d", len(got), n)
	}
	for i, m := range msgs {
		e := got[m.Event.ID]
		if e == nil {
			t.Fatalf("message %s not read back", m.Event.ID)
		}
		if e.count != 1 {
			t.Errorf("message %s read %d times", m.Event.ID, e.count)
		}
		r := e.rec
		if string(r.Key) != m.Key || !bytes.Equal(r.Value, m.Event.Data) {
			t.Errorf("message %s: key %q value %q", m.Event.ID, r.Key, r.Value)
		}
		wantHeaders := map[string]string{
			"ce_id":           m.Event.ID,
			"ce_type":         "order.created",
			"ce_source":       "/test/orders",
			"ce_specversion":  "1.0",
			"ce_time":         "2026-01-02T03:04:05Z",
			"ce_partitionkey": m.Key,
			"content-type":    "application/json",
			"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		}
		for k, v := range wantHeaders {
			if h := header(r, k); h != v {
				t.Errorf("message %s: header %s = %q, want %q", m.Event.ID, k, h, v)
			}
		}
		if h := header(r, "ce_traceparent"); h != "" {
			t.Errorf("traceparent must pass through unprefixed, got ce_traceparent %q", h)
		}
		p := res[i].Position
		if p.Topic != r.Topic || p.Partition != r.Partition || p.Offset != r.Offset {
			t.Errorf("message %s: position %+v, consumed at %s/%d/%d", m.Event.ID, p, r.Topic, r.Partition, r.Offset)
		}
	}
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
}

// Batches sent one after the other without waiting (switchyard.Sender, as
// the engine pipelines them) land in each partition in the order they were
// sent, whichever batch's acknowledgements are collected first.
func TestSendKeepsOrderAcrossBatches(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	batches := [][]*switchyard.Message{messages("a", 300, topic), messages("b", 300, topic), messages("c", 300, topic)}
	waits := make([]func() []switchyard.Result, len(batches))
	for i, b := range batches {
		waits[i] = s.Send(context.Background(), b)
	}
	results := make([][]switchyard.Result, len(batches))
	for i := len(waits) - 1; i >= 0; i-- { // the last batch's acks first
		results[i] = waits[i]()
	}
	last := map[int32]int64{} // partition → offset of the last record seen in send order
	for b, res := range results {
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("batch %d message %d: %v", b, i, r.Err)
			}
			p := r.Position
			if prev, ok := last[p.Partition]; ok && p.Offset <= prev {
				t.Fatalf("batch %d message %d at partition %d offset %d, behind an earlier send at %d", b, i, p.Partition, p.Offset, prev)
			}
			last[p.Partition] = p.Offset
		}
	}
	if len(last) < 2 {
		t.Fatalf("records went to %d partition(s): the test needs several", len(last))
	}
}

// (b) the broker writes the batch and then answers REQUEST_TIMED_OUT: the
// idempotent producer's retry is deduplicated by the broker, so nothing is
// written twice. The same faults without idempotence do duplicate, which
// shows the faults hit.
func TestLostAcksNoDuplicates(t *testing.T) {
	run := func(t *testing.T, idempotent bool) (hits, total int) {
		c := newCluster(t)
		cfg := testConfig(c)
		cfg.Idempotent = idempotent
		s := newSink(t, cfg)
		publishOK(t, s, messages("warm", 3, topic)) // producer id, metadata
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: 3})
		const n = 300
		for b := range 3 {
			publishOK(t, s, messages(fmt.Sprintf("b%d", b), n/3, topic))
		}
		got := readBack(t, c, n+3)
		for _, e := range got {
			total += e.count
		}
		return f.Hits(), total
	}
	t.Run("idempotent", func(t *testing.T) {
		hits, total := run(t, true)
		if hits == 0 {
			t.Fatal("fault never hit")
		}
		if total != 303 {
			t.Fatalf("read %d records, want 303 (no duplicates)", total)
		}
	})
	t.Run("not idempotent duplicates", func(t *testing.T) {
		hits, total := run(t, false)
		if hits == 0 || total <= 303 {
			t.Fatalf("hits %d, read %d records: expected the faults to duplicate without idempotence", hits, total)
		}
	})
}

// (c) the broker drops produce connections before answering: franz-go
// reconnects and everything is delivered, once.
func TestDroppedConnections(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	publishOK(t, s, messages("warm", 1, topic))
	var drops atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if drops.Add(1) > 4 {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("connection dropped by test"), true
	})
	const n = 200
	publishOK(t, s, messages("c", n, topic))
	if d := drops.Load(); d < 4 {
		t.Fatalf("only %d produce requests dropped", d)
	}
	got := readBack(t, c, n+1)
	for id, e := range got {
		if e.count != 1 {
			t.Errorf("%s read %d times", id, e.count)
		}
	}
}

// blockProduce makes every produce request hang (the broker never answers)
// until the returned release func is called; then the hung requests are
// dropped and produce works again.
func blockProduce(t testing.TB, c *kfake.Cluster) (release func(), hung *atomic.Int32) {
	var blocked atomic.Bool
	blocked.Store(true)
	hung = new(atomic.Int32)
	ch := make(chan struct{})
	var once sync.Once
	release = func() {
		once.Do(func() {
			blocked.Store(false)
			close(ch)
		})
	}
	t.Cleanup(release)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !blocked.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		hung.Add(1)
		c.SleepControl(func() { <-ch })
		return nil, errors.New("hung request abandoned"), true
	})
	return release, hung
}

// (d) a broker that never answers: Publish returns at the router's deadline
// with ErrUnknownOutcome, the sink is unhealthy; once the broker answers
// again a new Publish succeeds and the sink is healthy. The abandoned records
// are not delivered behind the router's back (the engine resends them).
func TestBrokerNeverAnswers(t *testing.T) {
	t.Run("idempotent", func(t *testing.T) { testBrokerNeverAnswers(t, true) })
	t.Run("not idempotent", func(t *testing.T) { testBrokerNeverAnswers(t, false) })
}

func testBrokerNeverAnswers(t *testing.T, idempotent bool) {
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.Idempotent = idempotent
	cfg.PublishTimeout = time.Second
	s := newSink(t, cfg)
	publishOK(t, s, messages("warm", 5, topic))

	release, hung := blockProduce(t, c)

	for round := range 2 { // a second deadline miss while still hung
		start := time.Now()
		res := s.Publish(context.Background(), messages(fmt.Sprintf("lost%d", round), 50, topic))
		took := time.Since(start)
		if took < 900*time.Millisecond || took > 2500*time.Millisecond {
			t.Fatalf("round %d: Publish took %s, want about the 1s publish timeout", round, took)
		}
		for i, r := range res {
			if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) || switchyard.IsPermanent(r.Err) {
				t.Fatalf("round %d: result %d: %v, want ErrUnknownOutcome", round, i, r.Err)
			}
		}
	}
	if hung.Load() == 0 {
		t.Fatal("no produce request reached the hung broker")
	}
	if err := s.Healthy(context.Background()); err == nil {
		t.Fatal("Healthy = nil after a missed deadline")
	} else if !errors.Is(err, ErrStalled) {
		t.Fatalf("Healthy: %v", err)
	}

	// The caller's deadline wins when it is the shorter one.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	res := s.Publish(ctx, messages("short", 5, topic))
	cancel()
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("Publish with a 300ms context took %s", took)
	}
	if !errors.Is(res[0].Err, switchyard.ErrUnknownOutcome) {
		t.Fatalf("short deadline: %v", res[0].Err)
	}

	release()
	start = time.Now()
	publishOK(t, s, messages("after", 50, topic))
	t.Logf("first publish after the broker came back took %s", time.Since(start))
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy after recovery: %v", err)
	}

	got := readBack(t, c, 55)
	for id := range got {
		if !strings.HasPrefix(id, "warm-") && !strings.HasPrefix(id, "after-") {
			t.Errorf("abandoned record %s was delivered later", id)
		}
	}
}

// The reason for kgo.AllowIdempotentProduceCancellation, as a canary: with
// the idempotent producer's default, franz-go keeps a record whose request
// is on the wire past its context's deadline for as long as the broker does
// not answer. If a franz-go upgrade changes this, revisit RATIONALE.md.
func TestFranzGoHoldsRecordsWithoutCancellationOption(t *testing.T) {
	c := newCluster(t)
	cl, err := kgo.NewClient(append(fastOpts(), kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	blockProduce(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(ctx, &kgo.Record{Topic: topic}).FirstErr() }()
	select {
	case err := <-done:
		t.Fatalf("franz-go now honours the record context of an in-flight idempotent batch (%v): revisit RATIONALE.md", err)
	case <-time.After(1500 * time.Millisecond):
	}
}

// A cancelled caller (shutdown) is not the broker's fault: unknown outcome,
// but the sink stays healthy.
func TestCallerCancelIsNotAStall(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	publishOK(t, s, messages("warm", 1, topic))
	blockProduce(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res := s.Publish(ctx, messages("x", 3, topic))
	if !errors.Is(res[0].Err, switchyard.ErrUnknownOutcome) {
		t.Fatalf("got %v", res[0].Err)
	}
	if s.stall.Stalled() {
		t.Fatal("a cancelled caller marked the sink stalled")
	}
	// Nor is a context that was over before the call.
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	res = s.Publish(ctx, messages("y", 2, topic))
	if !errors.Is(res[1].Err, switchyard.ErrUnknownOutcome) || s.stall.Stalled() {
		t.Fatalf("expired context: %v, stalled %v", res[1].Err, s.stall.Stalled())
	}
}

// (e) errors retrying cannot fix are Permanent.
func TestPermanentErrors(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.MaxRecordBytes = 1024
	s := newSink(t, cfg)

	t.Run("record too large (client)", func(t *testing.T) {
		m := message("big", 0, topic)
		m.Event.Data = bytes.Repeat([]byte("x"), 4096)
		start := time.Now()
		res := s.Publish(context.Background(), []*switchyard.Message{m, message("small", 1, topic)})
		if time.Since(start) > time.Second {
			t.Fatalf("took %s", time.Since(start))
		}
		if !switchyard.IsPermanent(res[0].Err) || !errors.Is(res[0].Err, kerr.MessageTooLarge) {
			t.Fatalf("big record: %v", res[0].Err)
		}
		if res[1].Err != nil {
			t.Fatalf("small record next to it: %v", res[1].Err)
		}
	})
	brokerSays := func(t *testing.T, e *kerr.Error) {
		publishOK(t, s, messages("warm", 1, topic))
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: e, Count: 1})
		defer f.Remove()
		res := s.Publish(context.Background(), []*switchyard.Message{message(e.Message, 0, topic)})
		if !switchyard.IsPermanent(res[0].Err) || !errors.Is(res[0].Err, e) {
			t.Fatalf("got %v, want permanent %s", res[0].Err, e.Message)
		}
	}
	for _, e := range []*kerr.Error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.TopicAuthorizationFailed, kerr.InvalidRecord} {
		t.Run("broker "+e.Message, func(t *testing.T) { brokerSays(t, e) })
	}
	t.Run("no destination", func(t *testing.T) {
		res := s.Publish(context.Background(), []*switchyard.Message{message("nodest", 0, "")})
		if !switchyard.IsPermanent(res[0].Err) {
			t.Fatalf("got %v", res[0].Err)
		}
	})
	t.Run("after a permanent error the sink still delivers", func(t *testing.T) {
		publishOK(t, s, messages("ok", 10, topic))
	})
}

// (e) a missing topic fails at once with a clear error, while the other
// topic of the same batch is delivered; CheckTopics names it; creating it
// makes it work.
func TestMissingTopic(t *testing.T) {
	c := newCluster(t) // kfake creates no topic on its own
	s := newSink(t, testConfig(c))

	msgs := []*switchyard.Message{message("m", 0, "nope"), message("m", 1, topic), message("m", 2, "nope")}
	start := time.Now()
	res := s.Publish(context.Background(), msgs)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Publish to a missing topic took %s", took)
	}
	for _, i := range []int{0, 2} {
		err := res[i].Err
		if err == nil || !strings.Contains(err.Error(), `topic "nope" does not exist`) ||
			!errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, switchyard.ErrUnknownOutcome) {
			t.Fatalf("result %d: %v", i, err)
		}
	}
	if res[1].Err != nil {
		t.Fatalf("existing topic in the same batch: %v", res[1].Err)
	}
	// Answered from memory now.
	start = time.Now()
	res = s.Publish(context.Background(), msgs[:1])
	if res[0].Err == nil || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("second publish: %v after %s", res[0].Err, time.Since(start))
	}

	ctx := context.Background()
	if err := s.CheckTopics(ctx, []string{topic}); err != nil {
		t.Fatalf("CheckTopics(existing): %v", err)
	}
	err := s.CheckTopics(ctx, []string{topic, "nope", "gone", "nope"})
	if err == nil || !errors.Is(err, kerr.UnknownTopicOrPartition) ||
		!strings.Contains(err.Error(), `topic "gone" does not exist; topic "nope" does not exist`) {
		t.Fatalf("CheckTopics: %v", err)
	}

	// The operator creates the topic: picked up within missingTTL.
	createTopic(t, c, "nope", 1)
	time.Sleep(missingTTL + 50*time.Millisecond)
	publishOK(t, s, msgs[:1])
	if err := s.CheckTopics(ctx, []string{"nope"}); err != nil {
		t.Fatalf("CheckTopics after create: %v", err)
	}
}

// (f) the leader of partitions goes away: delivery continues on the new
// leaders.
func TestLeaderRemoved(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(3), kfake.SeedTopics(6, topic))
	s := newSink(t, testConfig(c))
	publishOK(t, s, messages("before", 200, topic))

	leader := c.LeaderFor(topic, 0)
	if err := c.RemoveNode(leader); err != nil {
		t.Fatal(err)
	}
	if now := c.LeaderFor(topic, 0); now == leader {
		t.Fatalf("partition 0 still led by removed node %d", leader)
	}
	for b := range 3 {
		publishOK(t, s, messages(fmt.Sprintf("after%d", b), 100, topic))
	}
	c.ShufflePartitionLeaders()
	publishOK(t, s, messages("shuffled", 100, topic))

	got := readBack(t, c, 600)
	for id, e := range got {
		if e.count != 1 {
			t.Errorf("%s read %d times", id, e.count)
		}
	}
}

// A Kafka sink opens with each compression codec and each SASL mechanism
// (in any case), and refuses no brokers, an unknown codec, a record limit
// too small, the GSSAPI mechanism, a CA file that does not exist or half a
// client certificate.
func TestOpenConfig(t *testing.T) {
	base := config.NewKafka("x", "127.0.0.1:1")
	for _, comp := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		cfg := base
		cfg.Compression = comp
		s, err := Open(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("compression %q: %v", comp, err)
		}
		_ = s.Close(context.Background())
	}
	bad := []func(*config.Kafka){
		func(c *config.Kafka) { c.Brokers = nil },
		func(c *config.Kafka) { c.Compression = "brotli" },
		func(c *config.Kafka) { c.MaxRecordBytes = 10 },
		func(c *config.Kafka) { c.SASL = &config.SASL{Mechanism: "GSSAPI"} },
		func(c *config.Kafka) { c.TLS = &config.TLS{CAFile: "/does/not/exist"} },
		func(c *config.Kafka) { c.TLS = &config.TLS{CertFile: "a.pem"} },
	}
	for i, mod := range bad {
		cfg := base
		mod(&cfg)
		if _, err := Open(context.Background(), cfg, nil); err == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "scram-sha-512"} {
		cfg := base
		cfg.SASL = &config.SASL{Mechanism: mech, Username: "u", Password: config.Secret{File: testkit.SecretFile(t, "p")}}
		s, err := Open(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("sasl %s: %v", mech, err)
		}
		_ = s.Close(context.Background())
	}
}

// SASL against kfake, end to end.
func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c := newCluster(t, kfake.EnableSASL(), kfake.Superuser(mech, "edge", "s3cret"))
			cfg := testConfig(c)
			cfg.SASL = &config.SASL{Mechanism: mech, Username: "edge", Password: config.Secret{File: testkit.SecretFile(t, "s3cret")}}
			s := newSink(t, cfg)
			publishOK(t, s, messages("sasl", 3, topic))
		})
	}
}

// Messages published zstd-compressed reach the broker and are all read
// back.
func TestCompressionRoundTrip(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.Compression = "zstd"
	cfg.Linger = 5 * time.Millisecond
	s := newSink(t, cfg)
	publishOK(t, s, messages("z", 100, topic))
	if got := readBack(t, c, 100); len(got) != 100 {
		t.Fatalf("read %d", len(got))
	}
}

// Publishing no messages gives no results; Close may be called twice, and a
// publish after it fails instead of passing for delivered.
func TestPublishEmptyAndClose(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	if res := s.Publish(context.Background(), nil); len(res) != 0 {
		t.Fatalf("%d results for no messages", len(res))
	}
	publishOK(t, s, messages("x", 2, topic))
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal("second Close:", err)
	}
	res := s.Publish(context.Background(), messages("y", 1, topic))
	if res[0].Err == nil {
		t.Fatal("Publish after Close succeeded")
	}
}

// franz-go logs through the router's logger at the router's level: lines
// below it are dropped, the others written with their key-value pairs.
func TestLoggerAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := newKgoLogger(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}))
	if l.Level() != kgo.LogLevelWarn {
		t.Fatalf("level %v", l.Level())
	}
	l.Log(kgo.LogLevelInfo, "hidden")
	l.Log(kgo.LogLevelWarn, "shown", "broker", 1)
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "shown") || !strings.Contains(out, "broker=1") {
		t.Fatalf("log output %q", out)
	}
}

// franz-go's warnings repeat at every dial while a cluster is down: one
// line per message and minute gets through below debug (with debug on,
// every line does).
func TestLoggerThrottlesRepeats(t *testing.T) {
	var buf bytes.Buffer
	l := newKgoLogger(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}))
	for range 20 {
		l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "127.0.0.1:1")
		l.Log(kgo.LogLevelInfo, "metadata update triggered")
	}
	l.Log(kgo.LogLevelError, "an error", "n", 1)
	l.Log(kgo.LogLevelError, "an error", "n", 2)
	out := buf.String()
	if n := strings.Count(out, "unable to open connection"); n != 1 {
		t.Errorf("%d warnings of one kind within a minute, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "metadata update triggered"); n != 1 {
		t.Errorf("%d info lines of one kind within a minute, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "an error"); n != 2 {
		t.Errorf("errors are never held back: %d of 2 logged", n)
	}

	buf.Reset()
	debug := newKgoLogger(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug}))
	for range 3 {
		debug.Log(kgo.LogLevelWarn, "unable to open connection to broker")
	}
	if n := strings.Count(buf.String(), "unable to open connection"); n != 3 {
		t.Errorf("at debug %d of 3 lines logged", n)
	}
}

// BenchmarkPublish publishes batches of 200 messages (the engine's default
// batch size) to an in-process kfake broker and reports msgs/s.
func BenchmarkPublish(b *testing.B) {
	c := newCluster(b)
	s := newSink(b, testConfig(c))
	const batch = 200
	msgs := messages("bench", batch, topic)
	publishOK(b, s, msgs)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		res := s.Publish(context.Background(), msgs)
		if res[batch-1].Err != nil {
			b.Fatal(res[batch-1].Err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkPublishParallel runs four publishers at once (four event types'
// loops sharing one sink), batches of 200.
func BenchmarkPublishParallel(b *testing.B) {
	c := newCluster(b)
	s := newSink(b, testConfig(c))
	const batch = 200
	publishOK(b, s, messages("warm", 1, topic))
	b.SetParallelism(2) // 2 × GOMAXPROCS goroutines
	var n atomic.Int64
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		msgs := messages(fmt.Sprintf("p%d", n.Add(1)), batch, topic)
		for pb.Next() {
			if res := s.Publish(context.Background(), msgs); res[batch-1].Err != nil {
				b.Error(res[batch-1].Err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
}

// TLS from files, with a client certificate, against a kfake TLS listener.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, usage x509.ExtKeyUsage, serial int64) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	server := leaf("broker", x509.ExtKeyUsageServerAuth, 2)
	c := newCluster(t, kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}))
	client := leaf("edge", x509.ExtKeyUsageClientAuth, 3)
	keyDER, _ := x509.MarshalECPrivateKey(client.PrivateKey.(*ecdsa.PrivateKey))
	cfg := testConfig(c)
	cfg.TLS = &config.TLS{
		CAFile:   writePEM("ca.pem", "CERTIFICATE", caDER),
		CertFile: writePEM("client.pem", "CERTIFICATE", client.Certificate[0]),
		KeyFile:  writePEM("client.key", "EC PRIVATE KEY", keyDER),
	}
	s := newSink(t, cfg)
	publishOK(t, s, messages("tls", 3, topic))
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Fits refuses a record that could never go out in one batch of
// max_record_bytes — its data, or its headers — and passes one that can:
// ingest answers 413 for the first instead of storing a poison event.
func TestFitsMaxRecordBytes(t *testing.T) {
	cfg := testConfig(newCluster(t))
	cfg.MaxRecordBytes = 4096
	s := newSink(t, cfg)
	small := message("fits", 0, topic)
	if err := s.Fits(small); err != nil {
		t.Fatalf("a small record: %v", err)
	}
	big := message("fits", 1, topic)
	big.Event.Data = make([]byte, 4096)
	if err := s.Fits(big); err == nil || !strings.Contains(err.Error(), "over max_record_bytes of 4096") {
		t.Fatalf("data over the limit: %v", err)
	}
	headers := message("fits", 2, topic)
	headers.Event.Extensions = append(headers.Event.Extensions, switchyard.Header{Name: "big", Value: strings.Repeat("h", 4000)})
	if err := s.Fits(headers); err == nil {
		t.Fatal("headers over the limit passed")
	}
}

// A broker that is gone (its process killed: every dial refused) leaves
// each record's outcome unknown, or the sink unavailable: the engine
// counts no attempt. Before, franz-go's "unable to dial" fell through as a
// plain failure: every event counted an attempt per publish, and a
// four-minute outage dead-lettered a third of them (a broker trial).
func TestBrokerGoneCountsNoAttempt(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	publishOK(t, s, messages("warm", 1, topic))
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		for i, r := range s.Publish(ctx, messages("gone", 5, topic)) {
			if r.Err == nil {
				t.Fatalf("message %d published to a closed cluster", i)
			}
			if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) && !errors.Is(r.Err, switchyard.ErrSinkUnavailable) {
				t.Fatalf("message %d: %v: counts an attempt", i, r.Err)
			}
		}
	}
}

// A topic deleted and made again under the sink is produced to again:
// before, franz-go kept the old topic id and every publish failed with
// UNKNOWN_TOPIC_ID until a restart, the events dead-lettered (a broker
// trial).
func TestTopicMadeAgain(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, testConfig(c))
	publishOK(t, s, messages("before", 1, topic))
	deleteTopic(t, c, topic)
	createTopic(t, c, topic, 3)
	ctx := context.Background()
	var last error
	testkit.EventuallyWith(t, 20*time.Second, func() bool {
		last = s.Publish(ctx, messages("after", 1, topic))[0].Err
		return last == nil
	}, func() string { return fmt.Sprintf("no publish to the topic made again: %v", last) })
}

// adminRequest sends one admin request to the cluster and fails the test
// when it, or the answer's first topic, fails.
func adminRequest(t testing.TB, c *kfake.Cluster, req kmsg.Request, code func(kmsg.Response) int16) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	resp, err := admin.Request(context.Background(), req)
	if err == nil {
		err = kerr.ErrorForCode(code(resp))
	}
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
}

// createTopic creates topic with n partitions, as an operator would.
func createTopic(t testing.TB, c *kfake.Cluster, topic string, n int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 1
	req.Topics = append(req.Topics, rt)
	adminRequest(t, c, req, func(r kmsg.Response) int16 { return r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode })
}

// deleteTopic deletes topic, as an operator would.
func deleteTopic(t testing.TB, c *kfake.Cluster, topic string) {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(topic)
	req.Topics, req.TopicNames = append(req.Topics, dt), []string{topic}
	adminRequest(t, c, req, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode })
}

// A cluster whose every broker cannot be reached, whether its address
// refuses connections (the broker stopped) or drops them (the host gone
// dark, a network that loses packets: each dial times out): once the client
// has failed to connect to each, Publish answers at once that the sink is
// unavailable and hands nothing to the client (nothing can be in the log
// behind the router's back, no attempt is counted, and a batch does not
// wait its publish timeout), nor does the one whose records it had handed
// over when the cluster went away. The sink probes by itself and finds the
// cluster when it is back (restarted on its port and data directory): the
// ready function runs and publishes go through.
func TestUnreachableClusterAnswersAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// gone makes the stopped broker's port unreachable, and returns
		// what gives it back.
		gone func(t *testing.T, port int) (back func())
		// firstWithin bounds the first publish: it ends when the
		// client finds no broker, a refusal at once, a dial's timeout
		// (half the publish timeout) when packets are dropped.
		firstWithin func(publishTimeout time.Duration) time.Duration
	}{
		{"refused", func(*testing.T, int) func() { return func() {} },
			func(d time.Duration) time.Duration { return d / 2 }},
		{"dropped", func(t *testing.T, port int) func() {
			_, stop := testkit.Blackhole(t, port)
			return stop
		}, func(d time.Duration) time.Duration { return d * 9 / 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, dir := testkit.FreePort(t), t.TempDir()
			c := newCluster(t, kfake.Ports(port), kfake.DataDir(dir))
			cfg := testConfig(c)
			s := newSink(t, cfg)
			ready := readyChan(s)
			publishOK(t, s, messages("warm", 1, topic))
			c.Close()
			back := tc.gone(t, port)

			// The first publish finds the cluster gone after its
			// records were handed over: it ends as soon as no broker
			// takes a connection, its outcome unknown, not at the
			// publish timeout. The ones after it are not handed over.
			start := time.Now()
			for i, r := range s.Publish(context.Background(), messages("first", 5, topic)) {
				if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) && !errors.Is(r.Err, switchyard.ErrSinkUnavailable) {
					t.Fatalf("first publish, message %d: %v", i, r.Err)
				}
			}
			if took, within := time.Since(start), tc.firstWithin(cfg.PublishTimeout); took > within {
				t.Fatalf("the first publish after the cluster went away took %s, more than %s (publish timeout %s)", took, within, cfg.PublishTimeout)
			}
			answersAtOnce(t, s, cfg.PublishTimeout)
			select {
			case <-ready:
				t.Fatal("ready while the cluster is down")
			default:
			}

			back()
			c2 := newCluster(t, kfake.Ports(port), kfake.DataDir(dir))
			// Nothing is published meanwhile: the sink watches by itself.
			select {
			case <-ready:
			case <-time.After(20 * time.Second):
				t.Fatal("the sink never noticed the cluster was back")
			}
			publishOK(t, s, messages("after", 5, topic))
			got := readBack(t, c2, 6)
			for id := range got {
				if !strings.HasPrefix(id, "after-") && id != "warm-00000" {
					t.Errorf("%s is in the log: it was sent while the sink said it was not", id)
				}
			}
		})
	}
}

// A cluster whose connections go silent under way (the brokers' host gone
// dark after the client connected: nothing answered, nothing reset, new
// connections taken and left unanswered) is found down within a publish
// and a probe, not when franz-go gives up on its requests (its request
// timeout, ~20 s for a produce, then a connection's first request's 10 s):
// the publish the silence meets ends at its deadline, outcome unknown, and
// the next are answered unavailable at once. When the brokers answer
// again, the sink finds them by itself and publishes.
func TestSilentClusterIsFoundDown(t *testing.T) {
	c := testkit.CuttableKafka(t, kfake.SeedTopics(3, topic))
	cfg := testConfig(c.Cluster)
	s := newSink(t, cfg)
	ready := readyChan(s)
	publishOK(t, s, messages("warm", 3, topic))

	c.Cut()
	cut := time.Now()
	for i, r := range s.Publish(context.Background(), messages("cut", 3, topic)) {
		if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) && !errors.Is(r.Err, switchyard.ErrSinkUnavailable) {
			t.Fatalf("the publish the silence met, message %d: %v", i, r.Err)
		}
	}
	// A probe after it: half a publish timeout (franz-go alone: 55 s).
	testkit.Eventually(t, "the sink to find the cluster down", 2*cfg.PublishTimeout, s.conn.down)
	t.Logf("found down %s after the cut: %v", time.Since(cut).Round(time.Millisecond), s.conn.lastError())
	answersAtOnce(t, s, cfg.PublishTimeout)

	c.Restore()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the sink never noticed the brokers answer again")
	}
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		return s.Publish(context.Background(), messages("after", 1, topic))[0].Err == nil
	}, func() string { return "no publish went through after the brokers answered again" })
}

// answersAtOnce publishes three batches to a sink whose cluster is down:
// each is answered unavailable within half the publish timeout, and none
// of its records is handed to the client; and Healthy says it is down.
func answersAtOnce(t *testing.T, s *Sink, publishTimeout time.Duration) {
	t.Helper()
	for round := range 3 {
		start := time.Now()
		before := s.client().BufferedProduceRecords()
		res := s.Publish(context.Background(), messages(fmt.Sprintf("down%d", round), 5, topic))
		took := time.Since(start)
		for i, r := range res {
			if !errors.Is(r.Err, switchyard.ErrSinkUnavailable) {
				t.Fatalf("round %d, message %d: %v, want the sink unavailable", round, i, r.Err)
			}
		}
		if n := s.client().BufferedProduceRecords(); n > before {
			t.Fatalf("round %d: %d records handed to the client while no broker is reachable", round, n-before)
		}
		if took > publishTimeout/2 {
			t.Fatalf("round %d: the answer took %s, publish timeout %s: it waited for the broker", round, took, publishTimeout)
		}
		t.Logf("round %d answered in %s: %v", round, took.Round(time.Millisecond), res[0].Err)
	}
	// So does a health check with no deadline of its own (/readyz gives
	// one a second): a ping would wait for dials that time out, or on
	// connections gone silent.
	start := time.Now()
	if err := s.Healthy(context.Background()); err == nil || time.Since(start) > publishTimeout/4 {
		t.Fatalf("Healthy while the cluster is down: %v after %s, want an error at once", err, time.Since(start))
	}
}

// A seed that is an alias of the cluster (a load balancer that still takes
// connections, and holds them, when no broker behind it is up) does not
// keep a cluster that is gone from counting as down: its publishes are
// answered at once, and the sink still notices the cluster's return by
// itself.
func TestSeedAliasOfAGoneClusterIsDown(t *testing.T) {
	port, dir := testkit.FreePort(t), t.TempDir()
	c := newCluster(t, kfake.Ports(port), kfake.DataDir(dir))
	alias := balancer(t, c.ListenAddrs()[0])
	cfg := config.NewKafka("main", alias)
	cfg.PublishTimeout = 5 * time.Second
	s := newSink(t, cfg)
	ready := readyChan(s)
	publishOK(t, s, messages("warm", 1, topic))
	c.Close()

	// The first publish may have handed its records over; from then on the
	// cluster is down, whatever the balancer answers to a dial.
	s.Publish(context.Background(), messages("first", 5, topic))
	for round := range 3 {
		start := time.Now()
		res := s.Publish(context.Background(), messages(fmt.Sprintf("down%d", round), 5, topic))
		if took := time.Since(start); took > cfg.PublishTimeout/2 {
			t.Fatalf("round %d: the answer took %s, publish timeout %s: the seed alias kept the cluster up", round, took, cfg.PublishTimeout)
		}
		for i, r := range res {
			if !errors.Is(r.Err, switchyard.ErrSinkUnavailable) {
				t.Fatalf("round %d, message %d: %v, want the sink unavailable", round, i, r.Err)
			}
		}
		time.Sleep(100 * time.Millisecond) // kgo dials the seed now and then for metadata
	}
	select {
	case <-ready:
		t.Fatal("ready while the cluster is down: the balancer's accepted connection counted as a broker")
	default:
	}

	newCluster(t, kfake.Ports(port), kfake.DataDir(dir))
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("the sink never noticed the cluster was back")
	}
	// A metadata request kgo sent on a connection the balancer held may
	// still be waiting: the publishes go through once it gives up on it.
	back := time.Now()
	var last error
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		for _, r := range s.Publish(context.Background(), messages("after", 5, topic)) {
			if last = r.Err; r.Err != nil {
				if !errors.Is(r.Err, switchyard.ErrSinkUnavailable) && !errors.Is(r.Err, switchyard.ErrUnknownOutcome) {
					t.Fatalf("after the cluster came back: %v: not an outage", r.Err)
				}
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("no publish after the cluster came back: %v", last) })
	t.Logf("published again %s after the sink noticed the cluster", time.Since(back).Round(time.Millisecond))
}

// readyChan registers a ready function on s that signals the returned
// channel (once, until it is read).
func readyChan(s *Sink) <-chan struct{} {
	ready := make(chan struct{}, 1)
	s.OnReady(func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	return ready
}

// balancer listens on a port of its own and forwards each connection to
// backend, as a TCP load balancer does; when backend refuses, it holds the
// connection it accepted, unanswered, until the client closes it. It
// returns its address.
func balancer(t *testing.T, backend string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			front, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(front, backend)
		}
	}()
	return ln.Addr().String()
}

func forward(front net.Conn, backend string) {
	defer front.Close()
	back, err := net.DialTimeout("tcp", backend, time.Second)
	if err != nil {
		io.Copy(io.Discard, front)
		return
	}
	defer back.Close()
	go func() {
		io.Copy(back, front)
		back.Close()
	}()
	io.Copy(front, back)
}

// kgo reports only dials: a produce connection that failed to open beside
// a live one marks the broker failing, and with nothing produced nothing
// dials it again. A broker that answers a probe clears that, and calls the
// ready function once; a dial its caller cancelled marks nothing.
func TestConnStateReachableClearsFailedDials(t *testing.T) {
	var readies atomic.Int32
	c := newConnState(hclog.NewNullLogger(), false)
	c.ready = func() { readies.Add(1) }
	meta := kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}
	c.OnBrokerConnect(meta, 0, nil, context.Canceled)
	if c.down() {
		t.Fatal("down after a cancelled dial")
	}
	c.OnBrokerConnect(meta, 0, nil, errors.New("connection refused"))
	if !c.down() {
		t.Fatal("not down after the only broker's dial failed")
	}
	c.reachable()
	if c.down() || c.lastError() != nil {
		t.Fatalf("still down after a probe answered: %v", c.lastError())
	}
	c.reachable() // not down: no second call
	testkit.EventuallyWith(t, 5*time.Second, func() bool { return readies.Load() > 0 }, func() string { return "ready never called" })
	time.Sleep(50 * time.Millisecond) // a wrong second call would run by now
	if n := readies.Load(); n != 1 {
		t.Fatalf("ready called %d times, want 1", n)
	}
}

// The sink's dial function tells a dial that timed out by itself (the
// broker's address drops packets: a failure of the broker) from one whose
// caller stopped waiting, by deadline or cancel (nothing said of the
// broker), though Go gives both the same i/o timeout error; and connState
// marks only the first.
func TestDialerTellsItsTimeoutFromItsCallers(t *testing.T) {
	addr, _ := testkit.Blackhole(t, 0)
	meta := kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}
	deadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 200*time.Millisecond)
	}
	cancelled := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		return ctx, cancel
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the dial's own
		ctx     func() (context.Context, context.CancelFunc)
		gaveUp  bool
	}{
		{"its own timeout", 200 * time.Millisecond, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, false},
		{"its caller's deadline", 5 * time.Second, deadline, true},
		{"its caller cancelled", 5 * time.Second, cancelled, true},
		// The caller's deadline a moment before the dial's own: either
		// timer may fire first, and it is the caller's (once seen as the
		// dial's own: ctx.Err was still nil when the dial returned).
		{"its caller's deadline, a moment before its own", 200 * time.Millisecond, deadline, true},
	} {
		ctx, cancel := tc.ctx()
		_, err := dialer(tc.timeout, nil)(ctx, "tcp", addr)
		cancel()
		var ne *net.OpError
		if err == nil || !errors.As(err, &ne) {
			t.Fatalf("%s: %v, want a dial error franz-go can classify (*net.OpError)", tc.name, err)
		}
		if got := callerGaveUp(err); got != tc.gaveUp {
			t.Errorf("%s: %v: callerGaveUp = %v, want %v", tc.name, err, got, tc.gaveUp)
		}
		c := newConnState(hclog.NewNullLogger(), false)
		c.OnBrokerConnect(meta, 0, nil, fmt.Errorf("unable to dial: %w", err))
		if c.down() == tc.gaveUp {
			t.Errorf("%s: down = %v after the only broker's dial failed so", tc.name, c.down())
		}
	}
}

// A silence found by a probe is newer news only if nothing came since the
// probe began: a response read, a connection that succeeded or a probe
// answered meanwhile keeps the cluster up (the probe's own request may
// have waited behind a produce on a slow link); with none, it is down.
func TestConnStateSilentOnlyWithoutSignsOfLife(t *testing.T) {
	meta := kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}
	for _, tc := range []struct {
		name string
		life func(c *connState)
		down bool
	}{
		{"nothing came", func(*connState) {}, true},
		{"a response read", func(c *connState) { c.OnBrokerRead(meta, 0, 100, 0, 0, nil) }, false},
		{"a connection succeeded", func(c *connState) { c.OnBrokerConnect(meta, 0, nil, nil) }, false},
		{"a probe answered", func(c *connState) { c.reachable() }, false},
		{"a read failed", func(c *connState) { c.OnBrokerRead(meta, 0, 0, 0, 0, errors.New("i/o timeout")) }, true},
	} {
		c := newConnState(hclog.NewNullLogger(), false)
		c.OnBrokerConnect(meta, 0, nil, nil)
		seen := c.lives.Load()
		tc.life(c)
		c.silent(errors.New("no broker answered"), seen)
		if c.down() != tc.down {
			t.Errorf("%s: down = %v after the probe's silence, want %v", tc.name, c.down(), tc.down)
		}
	}
}

// A cluster some of whose brokers fail is not down: a health check's
// answer (reachable, at every scrape) does not forget which brokers were
// tried, so one more failed dial to one of three leaves it up, and the
// publishes to the others are neither refused nor cut short.
func TestConnStateOneBrokerOfThreeFailing(t *testing.T) {
	c := newConnState(hclog.NewNullLogger(), false)
	for port := range 3 {
		c.OnBrokerConnect(kgo.BrokerMetadata{Host: "127.0.0.1", Port: int32(9092 + port)}, 0, nil, nil)
	}
	b2 := kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9093}
	refused := errors.New("connection refused")
	c.OnBrokerConnect(b2, 0, nil, refused)
	c.reachable()
	c.OnBrokerConnect(b2, 0, nil, refused)
	if c.down() {
		t.Fatal("down with two of three brokers up")
	}
	select {
	case <-c.wentDown():
		t.Fatal("publishes would be cut short: the down channel is closed")
	default:
	}
}

// A broker discovered while the seeds' dials failed turns the seeds into
// aliases, which by itself changes whether the cluster counts as down: its
// first failed dial leaves the cluster down (it closed the down channel a
// second time, a panic, seen in TestBrokerGoneCountsNoAttempt), and its
// first good one makes it up with the down channel open again (it stayed
// closed, and every publish was cut short at once, "no acknowledgement
// after 0s", seen in TestShortAuthFailureIsAnOutage).
func TestConnStateBrokerDiscoveredWhileDown(t *testing.T) {
	seed := kgo.BrokerMetadata{NodeID: math.MinInt32, Host: "127.0.0.1", Port: 9092}
	broker := kgo.BrokerMetadata{NodeID: 0, Host: "127.0.0.1", Port: 9093}
	refused := errors.New("connection refused")
	closed := func(c *connState) bool {
		select {
		case <-c.wentDown():
			return true
		default:
			return false
		}
	}

	c := newConnState(hclog.NewNullLogger(), false)
	c.OnBrokerConnect(seed, 0, nil, refused)
	if !c.down() || !closed(c) {
		t.Fatal("not down after the only seed's dial failed")
	}
	c.OnBrokerConnect(broker, 0, nil, refused) // panicked
	if !c.down() || !closed(c) {
		t.Fatal("not down after the discovered broker's dial failed too")
	}
	c.OnBrokerConnect(broker, 0, nil, nil)
	if c.down() || closed(c) {
		t.Fatalf("down %v, down channel closed %v, after the broker's dial succeeded", c.down(), closed(c))
	}

	c = newConnState(hclog.NewNullLogger(), false)
	c.OnBrokerConnect(seed, 0, nil, refused)
	c.OnBrokerConnect(broker, 0, nil, context.Canceled) // says nothing: still down
	if !c.down() || !closed(c) {
		t.Fatal("up after a discovered broker's dial was cancelled, with no broker known to answer")
	}
	c.OnBrokerConnect(broker, 0, nil, nil)
	if c.down() || closed(c) {
		t.Fatalf("down %v, down channel closed %v, after a discovered broker's first dial succeeded", c.down(), closed(c))
	}
}
