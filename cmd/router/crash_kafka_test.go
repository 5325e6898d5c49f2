package main

// Crash tests for Kafka: the router binary publishing to a Kafka topic and
// consuming one into an inbox, killed with SIGKILL again and again, while
// the Kafka-protocol cluster (kfake) lives on in the test process.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// withConfig replaces a crash router's config: the socket and data file
// stay where newCrashRouter put them, body says the rest.
func withConfig(t *testing.T, r *crashRouter, body string) {
	t.Helper()
	dataDir := filepath.Join(filepath.Dir(r.config), "data")
	cfg := fmt.Sprintf("listen { socket = %q }\nstorage { path = %q }\n%s", r.socket, filepath.Join(dataDir, "router.db"), body)
	if err := os.WriteFile(r.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readTopic reads a whole topic and counts the records of each ce_id.
func readTopic(t *testing.T, brokers []string, topic string, want int) (ids map[string]int, records int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids = map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	count := func(r *kgo.Record) {
		records++
		for _, h := range r.Headers {
			if h.Key == "ce_id" {
				ids[string(h.Value)]++
			}
		}
	}
	for len(ids) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(count)
	}
	// Anything still buffered after the last id arrived.
	tail, cancelTail := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelTail()
	cl.PollFetches(tail).EachRecord(count)
	return ids, records
}

// The router killed mid-publish to Kafka (≥ 10 kills): every acknowledged
// event is in the topic. Kafka has no broker-side dedup across producer
// sessions, so a batch in flight at a kill is published again: the test
// counts those duplicates (receivers drop them by ce_id).
func TestCrashPublishKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	kills := 10
	if *long {
		kills = 200
	}
	kc := testkit.Kafka(t, kfake.SeedTopics(3, "crash"))
	r := newCrashRouter(t, time.Minute)
	withConfig(t, r, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
event %q {
  polling { min = "10ms" }
  route {
    to    = "kafka.main"
    topic = "crash"
  }
}
`, kc.ListenAddrs()[0], crashType))
	acked := crashLoad(t, r, kills)
	waitDrained(t, r.client, crashType, "after the load", time.Minute)

	ids, records := readTopic(t, kc.ListenAddrs(), "crash", len(acked))
	lost := 0
	for _, id := range acked {
		if ids[id] == 0 {
			if lost < 10 {
				t.Errorf("acknowledged event %s is not in the topic", id)
			}
			lost++
		}
	}
	t.Logf("acked %d; topic has %d records, %d distinct ids: lost %d, duplicates %d (republished after a kill)",
		len(acked), records, len(ids), lost, records-len(ids))
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged events lost", lost, len(acked))
	}
}

// produceTwice puts n events on topic, each record twice (a redelivering
// producer).
func produceTwice(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var wg sync.WaitGroup
	for i := range n {
		rec := &kgo.Record{Key: []byte(fmt.Sprint(i % 13)), Value: []byte(fmt.Sprintf(`{"i":%d}`, i)), Headers: []kgo.RecordHeader{
			{Key: "ce_id", Value: []byte(fmt.Sprintf("in-%d", i))}, {Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_type", Value: []byte("payment")}, {Key: "ce_source", Value: []byte("/bank")},
		}}
		for range 2 {
			wg.Add(1)
			copy := *rec // franz-go writes into a record it produces: one each
			cl.Produce(context.Background(), &copy, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

// The router killed with SIGKILL while consuming (≥ 10 kills): no id is
// lost, and each reaches the service exactly once except where a kill fell
// between the service's 2xx and the commit that records it — the window
// at-least-once delivery leaves, which the service closes with the
// Idempotency-Key it gets. Redeliveries from Kafka (every record is there
// twice, and every kill replays uncommitted offsets) never reach it.
func TestCrashInbox(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	kills := 10
	if *long {
		kills = 200
	}
	kc := testkit.Kafka(t, kfake.SeedTopics(4, "inbound"))
	const n = 20000
	produceTwice(t, kc.ListenAddrs(), "inbound", n)
	svc := startService(t)
	r := newCrashRouter(t, time.Minute)
	withConfig(t, r, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
inbox "in" {
  from   = "kafka.main"
  topics = ["inbound"]
  group  = "crash"
  # A static member: a restarted router takes its partitions back at once.
  instance_id = "crash-1"
  polling { min = "10ms" }
  deliver { url = "unix://%s/events" }
}
`, kc.ListenAddrs()[0], svc.sock))
	r.start()
	start := time.Now()
	for range kills {
		time.Sleep(50*time.Millisecond + rand.N(250*time.Millisecond))
		r.kill()
		r.start()
	}
	got := svc.waitIDs(t, n, 120*time.Second)
	time.Sleep(500 * time.Millisecond)
	got = svc.snapshot()
	twice := 0
	for _, k := range got {
		twice += k - 1
	}
	t.Logf("%d kills in %s; %d ids (each produced twice): service saw %d distinct, %d second deliveries (a kill between the service's 2xx and the commit)",
		kills, time.Since(start).Round(time.Millisecond), n, len(got), twice)
	if len(got) != n {
		t.Fatalf("lost ids: %d of %d", n-len(got), n)
	}
	// Each kill can catch at most the batches being delivered at that
	// moment (batch_size 200, up to 4 commits in flight).
	if limit := kills * 200 * 4; twice > limit {
		t.Fatalf("%d second deliveries for %d kills: more than in-flight batches explain", twice, kills)
	}
	body := get(t, r.client, "/v1/inbox/in/dedup?limit=1")
	if !strings.Contains(body, `"reason"`) {
		t.Fatalf("no dropped redelivery in the audit: %s", body)
	}
	// Once a delivery is committed it is never made again: two more kills
	// and restarts (Kafka replays whatever offsets were not committed) add
	// no delivery at all.
	waitDrained(t, r.client, "inbox:in", "after the redeliveries", time.Minute)
	before := svc.snapshot()
	for range 2 {
		r.kill()
		r.start()
		time.Sleep(time.Second)
	}
	after := svc.snapshot()
	for id, k := range after {
		if k != before[id] {
			t.Errorf("%s delivered again after its delivery was committed: %d → %d", id, before[id], k)
		}
	}
}

// Three routers in one Kafka consumer group split the partitions; one is
// killed with SIGKILL and its partitions move to the other two: every id
// reaches the service.
func TestInboxGroupOfThree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three router binaries")
	}
	kc := testkit.Kafka(t, kfake.SeedTopics(6, "shared"))
	svc := startService(t)
	routers := make([]*crashRouter, 3)
	for i := range routers {
		r := newCrashRouter(t, time.Minute)
		withConfig(t, r, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
inbox "shared" {
  from            = "kafka.main"
  topics          = ["shared"]
  group           = "edge"
  session_timeout = "6s"
  polling { min = "10ms" }
  deliver { url = "unix://%s/events" }
}
`, kc.ListenAddrs()[0], svc.sock))
		r.start()
		routers[i] = r
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("shared"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			rec := &kgo.Record{Value: []byte("{}"), Headers: []kgo.RecordHeader{
				{Key: "ce_id", Value: []byte(fmt.Sprintf("g-%d", i))}, {Key: "ce_specversion", Value: []byte("1.0")},
				{Key: "ce_type", Value: []byte("t")}, {Key: "ce_source", Value: []byte("/g")},
			}}
			if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	received := func(r *crashRouter) string {
		for _, l := range strings.Split(get(t, r.client, "/metrics"), "\n") {
			if strings.HasPrefix(l, `switchyard_inbox_received_total{inbox="shared"}`) {
				return strings.Fields(l)[1]
			}
		}
		return "0"
	}
	const half = 3000
	// Slowly, so the group settles on three members while records flow.
	for i := 0; i < half; i += half / 10 {
		produce(i, i+half/10)
		time.Sleep(400 * time.Millisecond)
	}
	svc.waitIDs(t, half, 60*time.Second)
	var shares []string
	for _, r := range routers {
		shares = append(shares, received(r))
	}
	for i, s := range shares {
		if s == "0" {
			t.Fatalf("router %d received nothing: the group did not split the partitions (%v)", i, shares)
		}
	}
	routers[2].kill()
	produce(half, 2*half)
	got := svc.waitIDs(t, 2*half, 90*time.Second)
	after := []string{received(routers[0]), received(routers[1])}
	t.Logf("received per router before the kill: %v; the two survivors after: %v; service saw %d distinct ids", shares, after, len(got))
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	// The killed router's partitions moved: the survivors stored the whole
	// second half between them.
	if gained := num(after[0]) + num(after[1]) - num(shares[0]) - num(shares[1]); gained < half {
		t.Fatalf("the survivors stored %d of the second half's %d", gained, half)
	}
}
