package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// brokerLate is how long the late-broker tests keep the broker away after
// the router started and took its events.
const brokerLate = 10 * time.Second

// serveBinary runs the real router binary on the config at path until the
// test ends, and returns a client of its socket once it is healthy.
func serveBinary(t *testing.T, path, sock string) (*http.Client, *testkit.Buffer) {
	t.Helper()
	c, logs, _ := serveBinaryProcess(t, path, sock)
	return c, logs
}

// serveBinaryProcess is serveBinary that also returns the router's
// process, for a test that signals it.
func serveBinaryProcess(t *testing.T, path, sock string) (*http.Client, *testkit.Buffer, *os.Process) {
	t.Helper()
	logs := new(testkit.Buffer)
	cmd := exec.Command(routerBinary(t), "run", "-config", path)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("router log:\n%s", logs.String())
		}
	})
	c := testkit.UnixClient(sock, 10*time.Second)
	select {
	case <-exited:
		t.Fatalf("router stopped at start: %v\n%s", cmd.ProcessState, logs.String())
	case ok := <-healthy(c, routerStartWait):
		if !ok {
			t.Fatalf("router not healthy after %s:\n%s", routerStartWait, logs.String())
		}
	}
	return c, logs, cmd.Process
}

// jetStreamServer starts a plain nats-server with JetStream (no auth) on
// loopback at port (-1: a free one) until the test ends: the external
// broker of a test.
func jetStreamServer(t *testing.T, port int) *server.Server {
	t.Helper()
	return testkit.NATS(t, func(o *server.Options) { o.Port, o.JetStream, o.StoreDir = port, true, t.TempDir() })
}

// batchSource is the source of postBatches' events.
const batchSource = "/late"

// postBatches posts n events of type typ in batches of 100 and returns
// their ids.
func postBatches(t *testing.T, c *http.Client, typ string, n int) []string {
	t.Helper()
	return postRange(t, c, typ, 0, n)
}

// postRange is postBatches for the events numbered from first to first+n.
func postRange(t *testing.T, c *http.Client, typ string, first, n int) []string {
	t.Helper()
	var ids []string
	for start := first; start < first+n; start += 100 {
		var batch []string
		for i := start; i < min(start+100, first+n); i++ {
			id := fmt.Sprintf("%s-%d", typ, i)
			ids = append(ids, id)
			batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":%q,"id":%q,"data":{"i":%d}}`, typ, batchSource, id, i))
		}
		resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(batch, ",")+"]"))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post while the broker is away: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	return ids
}

// waitAllDelivered waits until every id is delivered and says how long the
// first and the last took after since.
func waitAllDelivered(t *testing.T, c *http.Client, ids []string, since time.Time) {
	t.Helper()
	var first time.Duration
	for _, id := range ids {
		waitState(t, c, id, "delivered", 60*time.Second)
		if first == 0 {
			first = time.Since(since)
		}
	}
	t.Logf("%d events: first delivered %s after the broker appeared, all %s after", len(ids), first.Round(time.Millisecond), time.Since(since).Round(time.Millisecond))
}

// The router starts while its external NATS server is down: it opens its
// socket, takes 1,000 events, says in /readyz (still ready) why the sink is
// not connected, and when the server appears 10 s later it creates its
// stream and delivers every event, without a restart.
func TestStartWithExternalNATSDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 10 s for a late broker")
	}
	port := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
nats "ext" {
  url = "nats://127.0.0.1:%d"
  stream "late" { subjects = ["late.>"] }
}
event "late.order" {
  route {
    to      = "nats.ext"
    subject = "late.orders"
  }
}
`, port))
	c, _ := serveBinary(t, path, sock)
	ids := postBatches(t, c, "late.order", 1000)
	if ready := get(t, c, "/readyz"); !strings.Contains(ready, `"ready": true`) || !strings.Contains(ready, `"nats.ext": "nats.ext: not connected`) {
		t.Fatalf("readyz with the broker away: %s", ready)
	}
	time.Sleep(brokerLate)
	ns := jetStreamServer(t, port)
	appeared := time.Now()
	waitAllDelivered(t, c, ids, appeared)
	js := testkit.JetStream(t, ns.ClientURL())
	st, err := js.Stream(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := st.Info(context.Background()); info.State.Msgs != 1000 {
		t.Errorf("the stream holds %d messages, want 1000", info.State.Msgs)
	}
}

// The same with a Kafka cluster that appears 10 s after the router.
func TestStartWithKafkaDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 10 s for a late broker")
	}
	port := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "late" { brokers = ["127.0.0.1:%d"] }
event "late.order" {
  route {
    to    = "kafka.late"
    topic = "late-orders"
  }
}
`, port))
	c, _ := serveBinary(t, path, sock)
	ids := postBatches(t, c, "late.order", 1000)
	time.Sleep(brokerLate)
	testkit.Kafka(t, kfake.Ports(port), kfake.SeedTopics(3, "late-orders"))
	waitAllDelivered(t, c, ids, time.Now())
}

// An inbox whose NATS server appears 10 s after the router: /readyz and
// switchyard_inbox_up say it is not connected, it starts consuming then,
// and the local service gets every event once.
func TestInboxStartsWithNATSDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 10 s for a late broker")
	}
	port := testkit.FreePort(t)
	svc := startService(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
nats "ext" { url = "nats://127.0.0.1:%d" }
inbox "alerts" {
  from    = "nats.ext"
  subject = "alerts.>"
  polling { min = "10ms" }
  deliver { url = "unix://%s/events" }
}
`, port, svc.sock))
	c, _ := serveBinary(t, path, sock)
	const up = `switchyard_inbox_up{inbox="alerts"}`
	if said := readyDetail(t, c, "inboxes", "alerts"); !strings.Contains(said, "not connected") || metricValue(t, c, up) != 0 {
		t.Fatalf("with the server away, /readyz says of the inbox %q, and %s is %v", said, up, metricValue(t, c, up))
	}
	time.Sleep(brokerLate)
	ns := jetStreamServer(t, port)
	js := testkit.JetStream(t, ns.ClientURL())
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "alerts", Subjects: []string{"alerts.>"}}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		m := natsgo.NewMsg("alerts.disk")
		m.Header.Set("ce-id", fmt.Sprintf("alert-%d", i))
		m.Header.Set("ce-specversion", "1.0")
		m.Header.Set("ce-type", "alert")
		m.Header.Set("ce-source", "/late")
		m.Data = []byte(`{}`)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	got := svc.waitIDs(t, n, 60*time.Second)
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s delivered %d times", id, k)
		}
	}
	if said := readyDetail(t, c, "inboxes", "alerts"); said != "ok" || metricValue(t, c, up) != 1 {
		t.Fatalf("consuming, /readyz says of the inbox %q, and %s is %v", said, up, metricValue(t, c, up))
	}
}

// A long outage on a node with a storage budget: while the broker is away
// the backlog grows until storage.max_size, where ingest answers 507
// storage_full with Retry-After and stores nothing (a replay of an
// accepted request is still answered); every event acknowledged before is
// delivered when the broker comes back, delivered
// records make room, and ingest resumes — no restart, nothing lost.
func TestStorageBudgetDuringOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a storage budget through the real binary")
	}
	port := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
nats "ext" {
  url = "nats://127.0.0.1:%d"
  stream "budget" { subjects = ["budget.>"] }
}
event "budget.order" {
  route {
    to      = "nats.ext"
    subject = "budget.orders"
  }
}
`, port))
	setStorage(t, path, `max_size = "4MiB"`)
	c, _ := serveBinary(t, path, sock)

	var acked []string
	post := func(batch int) *http.Response {
		var evs []string
		for i := range 100 {
			id := fmt.Sprintf("b-%d-%d", batch, i)
			evs = append(evs, fmt.Sprintf(`{"specversion":"1.0","type":"budget.order","source":"/b","id":%q,"data":%q}`, id, strings.Repeat("z", 400)))
		}
		resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(evs, ",")+"]"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 202 {
			for i := range 100 {
				acked = append(acked, fmt.Sprintf("b-%d-%d", batch, i))
			}
		}
		return resp
	}
	var full *http.Response
	for b := 0; b < 500 && full == nil; b++ {
		resp := post(b)
		if resp.StatusCode != 202 {
			full = resp
			break
		}
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond) // the budget is measured every 250 ms
	}
	if full == nil {
		t.Fatal("the budget was never reached")
	}
	body, _ := io.ReadAll(full.Body)
	full.Body.Close()
	if full.StatusCode != 507 || !strings.Contains(string(body), `"code":"storage_full"`) || full.Header.Get("Retry-After") == "" {
		t.Fatalf("past the budget: %d %s (Retry-After %q)", full.StatusCode, body, full.Header.Get("Retry-After"))
	}
	// A replay stores nothing: the full budget does not refuse it.
	var first []string
	for i := range 100 {
		first = append(first, fmt.Sprintf(`{"specversion":"1.0","type":"budget.order","source":"/b","id":"b-0-%d","data":%q}`, i, strings.Repeat("z", 400)))
	}
	replay, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(first, ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	replay.Body.Close()
	if replay.StatusCode != 202 || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the first batch again, past the budget: %d (replayed %q), want its stored 202", replay.StatusCode, replay.Header.Get("Idempotent-Replayed"))
	}
	stats := get(t, c, "/v1/stats")
	if !strings.Contains(stats, `"max_size_bytes": 4194304`) {
		t.Errorf("/v1/stats lacks the budget: %s", stats)
	}
	if m := get(t, c, "/metrics"); !strings.Contains(m, "switchyard_storage_max_size_bytes 4.194304e+06") || !strings.Contains(m, "switchyard_storage_used_bytes ") ||
		!strings.Contains(m, "switchyard_storage_reserve_bytes 1.6777216e+07") { // a quarter of the default min_free
		t.Errorf("/metrics lacks the budget's series")
	}
	t.Logf("budget reached after %d events acknowledged; stats: %s", len(acked), strings.Join(strings.Fields(stats[strings.Index(stats, `"storage"`):]), " "))

	ns := jetStreamServer(t, port)
	// Delivered records are removed early to make room, so the proof that
	// nothing was lost is the stream: every acknowledged id is in it.
	start := time.Now()
	js := testkit.JetStream(t, ns.ClientURL())
	var msgs uint64
	testkit.EventuallyWith(t, 60*time.Second, func() bool {
		if st, err := js.Stream(context.Background(), "budget"); err == nil {
			if info, err := st.Info(context.Background()); err == nil {
				msgs = info.State.Msgs
			}
		}
		return msgs >= uint64(len(acked))
	}, func() string {
		return fmt.Sprintf("the stream holds %d messages of the %d acknowledged", msgs, len(acked))
	})
	t.Logf("backlog of %d drained in %s (%.0f events/s)", len(acked), time.Since(start).Round(time.Millisecond), float64(len(acked))/time.Since(start).Seconds())
	// Read until every acknowledged id was seen (the stream may also hold
	// events that were stored but never acknowledged).
	missing := make(map[string]bool, len(acked))
	for _, id := range acked {
		missing[id] = true
	}
	cons, err := js.OrderedConsumer(context.Background(), "budget", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for len(missing) > 0 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			break
		}
		delete(missing, m.Headers().Get("ce-id"))
	}
	for _, id := range acked {
		if missing[id] {
			t.Fatalf("acknowledged event %s is not in the stream (%d of %d missing)", id, len(missing), len(acked))
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := post(10_000)
		resp.Body.Close()
		if resp.StatusCode == 202 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingest did not resume after the backlog drained: %d", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A reload (SIGHUP) that adds a sink whose broker is not up is taken like a
// start without brokers: the new type's events are stored at once and
// delivered when the server appears, without a restart.
func TestReloadAddsSinkWithBrokerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary with a late broker")
	}
	path, sock := writeConfig(t, "")
	logs := new(testkit.Buffer)
	cmd := exec.Command(routerBinary(t), "run", "-config", path)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("router log:\n%s", logs.String())
		}
	}()
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)
	port := testkit.FreePort(t)
	os.WriteFile(path, []byte(mustRead(t, path)+fmt.Sprintf(`
nats "added" {
  url = "nats://127.0.0.1:%d"
  stream "added" { subjects = ["added.>"] }
}
event "added.order" {
  route {
    to      = "nats.added"
    subject = "added.orders"
  }
}
`, port)), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "configuration reloaded") },
		func() string { return "the reload was not taken:\n" + logs.String() })
	ids := postBatches(t, c, "added.order", 200)
	time.Sleep(2 * time.Second)
	jetStreamServer(t, port)
	waitAllDelivered(t, c, ids, time.Now())
}
