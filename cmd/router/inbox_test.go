package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// service is a local service on a unix socket that counts the deliveries of
// each event id; while unavailable it answers 503, counting them in refused.
type service struct {
	mu    sync.Mutex
	count map[string]int
	sock  string

	unavailable atomic.Bool
	refused     atomic.Int32
}

func startService(t *testing.T) *service {
	t.Helper()
	dir, err := os.MkdirTemp("", "sv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &service{count: map[string]int{}, sock: filepath.Join(dir, "svc.sock")}
	ln, err := net.Listen("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The key as README's Inbox says a service may build it from the
		// ce- headers as they come (percent-encoded).
		id := r.Header.Get("Ce-Id")
		key := strings.ReplaceAll(r.Header.Get("Ce-Source"), "#", "%23") + "#" + id
		if id == "" || r.Header.Get("Idempotency-Key") != key || r.URL.Path != "/events" {
			http.Error(w, "bad delivery", http.StatusBadRequest)
			return
		}
		if s.unavailable.Load() {
			s.refused.Add(1)
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		s.count[id]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *service) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.count))
	for k, v := range s.count {
		out[k] = v
	}
	return out
}

// waitIDs waits until the service has seen n distinct ids.
func (s *service) waitIDs(t *testing.T, n int, timeout time.Duration) map[string]int {
	t.Helper()
	var got map[string]int
	testkit.EventuallyWith(t, timeout, func() bool {
		got = s.snapshot()
		return len(got) >= n
	}, func() string { return fmt.Sprintf("service saw %d distinct ids, want %d", len(got), n) })
	return got
}

// A Kafka topic where every message is delivered twice, then a consumer
// group that replays the whole topic: the local service sees each id
// exactly once, and the audit lists every dropped duplicate.
func TestInboxKafkaDropsRedeliveries(t *testing.T) {
	kc := testkit.Kafka(t, kfake.SeedTopics(3, "payments")) // after the routers' cleanups: they leave the group
	svc := startService(t)
	inbox := func(group string) string {
		return fmt.Sprintf(`
kafka "main" { brokers = [%q] }
inbox "payments" {
  from   = "kafka.main"
  topics = ["payments"]
  group  = %q
  polling { min = "10ms" }
  deliver {
    url         = "unix://%s/events"
    concurrency = 16
  }
}
`, kc.ListenAddrs()[0], group, svc.sock)
	}
	path, sock := writeConfig(t, inbox("edge-1"))

	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 200
	for i := range n {
		for range 2 { // every message twice
			if err := cl.ProduceSync(context.Background(), payRecord(i)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	stop := runRouter(t, path, sock)
	got := svc.waitIDs(t, n, 30*time.Second)
	c := testkit.UnixClient(sock, 10*time.Second)
	waitAudit(t, c, "payments", n)
	stop()

	// A new group replays the topic from the start: all dropped.
	os.WriteFile(path, []byte(strings.Replace(mustRead(t, path), `group  = "edge-1"`, `group  = "edge-2"`, 1)), 0o600)
	runRouter(t, path, sock)
	waitAudit(t, testkit.UnixClient(sock, 10*time.Second), "payments", 3*n)
	time.Sleep(200 * time.Millisecond)
	got = svc.snapshot()
	if len(got) != n {
		t.Fatalf("service saw %d ids, want %d", len(got), n)
	}
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s delivered %d times", id, k)
		}
	}
	if m := get(t, c, "/metrics"); !strings.Contains(m, `switchyard_inbox_dedup_skips_total{inbox="payments",reason="duplicate"}`) {
		t.Error("dedup skips not in the metrics")
	}
}

// payRecord is the Kafka record of payment i in the binary CloudEvents
// mode, keyed by i % 5.
func payRecord(i int) *kgo.Record {
	return &kgo.Record{Key: []byte(fmt.Sprint(i % 5)), Value: []byte(fmt.Sprintf(`{"i":%d}`, i)), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte(fmt.Sprintf("pay-%d", i))}, {Key: "ce_specversion", Value: []byte("1.0")},
		{Key: "ce_type", Value: []byte("payment")}, {Key: "ce_source", Value: []byte("/bank")},
		{Key: "content-type", Value: []byte("application/json")},
	}}
}

// A Kafka inbox whose group's offsets are gone when the router starts
// (expired by the cluster's offset retention while it was stopped, or
// deleted) reads on after the last message it took, as its data file
// keeps it, not from the topic's start: no message it took is read again
// (none in the dedup audit, where a read from the start would drop each
// while the inbox remembers it, and hand it to the service again once
// its ttl is over), and the new ones all reach the service once.
func TestInboxKafkaReadsOnWhenItsGroupLostItsOffsets(t *testing.T) {
	kc := testkit.Kafka(t, kfake.SeedTopics(3, "payments"))
	svc := startService(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
inbox "payments" {
  from   = "kafka.main"
  topics = ["payments"]
  group  = "edge-1"
  polling { min = "10ms" }
  deliver { url = "unix://%s/events" }
}
`, kc.ListenAddrs()[0], svc.sock))
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceRange := func(from, to int) {
		for i := from; i < to; i++ {
			if err := cl.ProduceSync(context.Background(), payRecord(i)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produceRange(0, 60)
	stop := runRouter(t, path, sock)
	svc.waitIDs(t, 60, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // the last batch's commit
	stop()

	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{"edge-1"}
	resp, err := req.RequestWith(context.Background(), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Groups[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("deleting the group: %v", err)
	}
	produceRange(60, 80)

	runRouter(t, path, sock)
	got := svc.waitIDs(t, 80, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // anything read again would be in the audit by now
	if audit := get(t, testkit.UnixClient(sock, 10*time.Second), "/v1/inbox/payments/dedup?limit=1000"); strings.Contains(audit, `"reason"`) {
		t.Fatalf("messages taken before were read again:\n%.800s", audit)
	}
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s delivered %d times", id, k)
		}
	}
}

// waitAudit waits until the inbox's audit lists at least n dropped
// redeliveries.
func waitAudit(t *testing.T, c *http.Client, inbox string, n int) {
	t.Helper()
	var body string
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		body = get(t, c, fmt.Sprintf("/v1/inbox/%s/dedup?limit=1000", inbox))
		return strings.Count(body, `"reason"`) >= n
	}, func() string { return fmt.Sprintf("audit has %d entries, want %d", strings.Count(body, `"reason"`), n) })
	if !strings.Contains(body, `"first_origin": "kafka.main:payments/`) && !strings.Contains(body, `"first_origin": "nats.`) {
		t.Fatalf("audit entries do not point at the first delivery: %.500s", body)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startNATSInbox runs the router with an embedded NATS server and an
// inbox "alerts" of its subjects alerts.>, extra in the inbox block,
// delivering to a local service; it returns the service, the router's
// socket and a connection to the server. storage settings go into the
// storage block.
func startNATSInbox(t *testing.T, extra string, storage ...string) (svc *service, sock string, nc *nats.Conn) {
	t.Helper()
	svc = startService(t)
	natsPort := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
nats "bus" {
  embedded = true
  port     = %d
  stream "alerts" { subjects = ["alerts.>"] }
}
inbox "alerts" {
  from    = "nats.bus"
  subject = "alerts.>"
  %s
  polling { min = "10ms" }
  deliver { url = "unix://%s/events" }
}
`, natsPort, extra, svc.sock))
	for _, setting := range storage {
		setStorage(t, path, setting)
	}
	runRouter(t, path, sock)
	nc = routerConn(t, path, "bus", fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	return svc, sock, nc
}

// alert is a CloudEvent of type alert on subject alerts.disk in the NATS
// binding, with id and source as its headers carry them, and headers
// besides (name, value pairs).
func alert(id, source string, headers ...string) *nats.Msg {
	m := nats.NewMsg("alerts.disk")
	m.Header.Set("ce-id", id)
	m.Header.Set("ce-specversion", "1.0")
	m.Header.Set("ce-type", "alert")
	m.Header.Set("ce-source", source)
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Set(headers[i], headers[i+1])
	}
	m.Data = []byte("disk full")
	return m
}

// mustPublish sends m and waits for JetStream's acknowledgement.
func mustPublish(t *testing.T, nc *nats.Conn, m *nats.Msg) {
	t.Helper()
	if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// The same from a JetStream durable consumer: messages published twice
// with the same ce-id (and distinct Nats-Msg-Ids, so JetStream keeps both);
// once all are read, switchyard_inbox_lag_messages says none are left.
func TestInboxNATSDropsRedeliveries(t *testing.T) {
	svc, sock, nc := startNATSInbox(t, "")
	const n = 100
	for i := range n {
		for copy := range 2 {
			mustPublish(t, nc, alert(fmt.Sprintf("alert-%d", i), "/mon", "Nats-Msg-Id", fmt.Sprintf("alert-%d-copy-%d", i, copy)))
		}
	}
	got := svc.waitIDs(t, n, 30*time.Second)
	waitAudit(t, testkit.UnixClient(sock, 10*time.Second), "alerts", n)
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s delivered %d times", id, k)
		}
	}
	const lag = `switchyard_inbox_lag_messages{inbox="alerts"}`
	testkit.Eventually(t, lag+" at 0", 10*time.Second, func() bool { return metricValue(t, testkit.UnixClient(sock, 10*time.Second), lag) == 0 })
}

// A local service can build an event's Idempotency-Key from its ce-source
// and ce-id headers as README says, whatever bytes the source and id hold
// ('#', '%', spaces, non-ASCII): the router encoded the source's '%' twice,
// and a service building the key never matched it.
func TestInboxIdempotencyKeyIsTheHeadersJoined(t *testing.T) {
	svc, _, nc := startNATSInbox(t, "")
	for i, source := range []string{"/mon", "/a%23b", "/s%25p%20ace", "/caf%C3%A9"} { // as the NATS binding carries them
		mustPublish(t, nc, alert(fmt.Sprintf("alert%%20%d%%25", i), source))
	}
	svc.waitIDs(t, 4, 20*time.Second) // the service answers 400 to a key it cannot build
}

// A service that answers 503 for longer than the retries' schedule (a
// restart behind a proxy) gets every event once it answers again: a 503
// asks for a pause and counts no attempt (each was one, and the trial's
// backlog went to the DLQ in 15 s).
func TestAServiceThatAnswers503LosesNoEventToTheDLQ(t *testing.T) {
	svc, sock, nc := startNATSInbox(t, `max_retries = 1
  backoff { delay = "100ms" }`)
	svc.unavailable.Store(true)
	for i := range 5 {
		mustPublish(t, nc, alert(fmt.Sprintf("alert-%d", i), "/mon"))
	}
	// Three rounds of the five: twice what max_retries lets a counted
	// attempt make before the DLQ.
	testkit.Eventually(t, "15 503s", 20*time.Second, func() bool { return svc.refused.Load() >= 15 })
	svc.unavailable.Store(false)
	svc.waitIDs(t, 5, 20*time.Second)
	if body := get(t, testkit.UnixClient(sock, 10*time.Second), "/v1/dlq"); strings.Contains(body, "alert-") {
		t.Errorf("the DLQ holds events: %s", body)
	}
}

// An inbox whose every batch is refused (a full storage budget) is not
// ready in /readyz and switchyard_inbox_up is 0, though its server
// answers: the engine refuses, and the router's check of the inbox says
// so (both said ok throughout before: a NATS trial); nor is the router,
// whose ingest the budget refuses too.
func TestAnInboxPastTheBudgetIsNotReady(t *testing.T) {
	_, sock, nc := startNATSInbox(t, "", `max_size = "1"`)
	mustPublish(t, nc, alert("over-budget", "/mon"))
	c := testkit.UnixClient(sock, 10*time.Second)
	const up = `switchyard_inbox_up{inbox="alerts"}`
	var said string
	testkit.EventuallyWith(t, 20*time.Second, func() bool {
		said = readyDetail(t, c, "inboxes", "alerts")
		return strings.Contains(said, "the last batch was not taken") && strings.Contains(said, "storage_full")
	}, func() string { return "/readyz says of the inbox: " + said })
	if v := metricValue(t, c, up); v != 0 {
		t.Errorf("%s is %v while every batch is refused", up, v)
	}
	// Nor is the router: ingest is 507 (it said ready: a tenant trial).
	if said := readyDetail(t, c, "checks", "storage_budget"); !strings.Contains(said, "storage_full") {
		t.Errorf("/readyz says of the budget %q", said)
	}
	resp, err := c.Get("http://r/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/readyz past the budget: %d, want 503", resp.StatusCode)
	}
}

// A message whose id or partition key is too long to be a key in the data
// file (bbolt takes 32 KiB) failed the commit of its batch, and every
// batch after it: the inbox took nothing more. Now its id is derived and
// its key left out, with a warning, and the messages behind it arrive.
func TestInboxTakesKeysTooLongForTheDataFile(t *testing.T) {
	svc, _, nc := startNATSInbox(t, `ordering = "key"`)
	publish := func(id, key string) {
		m := alert(id, "/mon")
		if key != "" {
			m.Header.Set("ce-partitionkey", key)
		}
		mustPublish(t, nc, m)
	}
	publish(strings.Repeat("L", 33000), "")
	publish("long-key", strings.Repeat("k", 40000))
	publish("after-1", "")
	publish("after-2", "k")
	got := svc.waitIDs(t, 4, 30*time.Second)
	for _, id := range []string{"long-key", "after-1", "after-2"} {
		if got[id] != 1 {
			t.Errorf("%s delivered %d times (all: %d ids)", id, got[id], len(got))
		}
	}
}

// An inbox's counters exist at 0 from the start, as a type's do: what it
// stored, each reason it dropped a message for, and its delivery queue's
// dead letters; an inbox queue has no events_ingested_total (its
// messages are counted as received).
func TestInboxCountersExistBeforeTheirFirstCount(t *testing.T) {
	_, sock, _ := startNATSInbox(t, "")
	m := scrape(t, testkit.UnixClient(sock, 10*time.Second))
	for _, series := range []string{
		`switchyard_inbox_received_total{inbox="alerts"}`,
		`switchyard_inbox_dedup_skips_total{inbox="alerts",reason="duplicate"}`,
		`switchyard_inbox_dedup_skips_total{inbox="alerts",reason="no_id"}`,
		`switchyard_dead_lettered_total{type="inbox:alerts"}`,
	} {
		wantZero(t, m, series, "before any message")
	}
	if v, ok := m[`switchyard_events_ingested_total{type="inbox:alerts"}`]; ok {
		t.Errorf("events_ingested_total has an inbox queue's series (%v): it never counts there", v)
	}
}
