package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// One event type routed to Kafka and to NATS (fan-out) through the real
// router; a second type whose Kafka topic does not exist shows a failure in
// one output does not re-send the other.
func TestKafkaAndNATSFanOut(t *testing.T) {
	kc := testkit.Kafka(t, kfake.SeedTopics(3, "orders"))
	natsPort := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "main" {
  brokers = [%q]
}
nats "bus" {
  embedded = true
  port     = %d
  stream "fan" { subjects = ["fan.>"] }
}
event "fan.order" {
  polling { min = "10ms" }
  route {
    to    = "kafka.main"
    topic = "orders"
  }
  route {
    to      = "nats.bus"
    subject = "fan.orders"
  }
}
event "fan.broken" {
  max_retries = 2
  backoff { enabled = false }
  polling {
    min = "10ms"
    max = "50ms"
  }
  route {
    to      = "nats.bus"
    subject = "fan.broken"
  }
  route {
    to    = "kafka.main"
    topic = "does-not-exist"
  }
}
`, kc.ListenAddrs()[0], natsPort))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewMain(nil, io.Discard, io.Discard).Run(ctx, []string{"run", "-config", path}) }()
	defer func() {
		cancel()
		<-done
	}()
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)

	const n = 100
	for i := range n {
		body := fmt.Sprintf(`{"specversion":"1.0","type":"fan.order","source":"/t","id":"o-%d","partitionkey":"cust-%d","data":{"i":%d}}`, i, i%7, i)
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"fan.broken","source":"/t","id":"b-1","data":{}}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("post broken: %v %v", resp, err)
	}
	resp.Body.Close()

	for i := range n {
		body := waitState(t, c, fmt.Sprintf("o-%d", i), "delivered", 30*time.Second)
		if !strings.Contains(body, `"topic": "orders"`) || !strings.Contains(body, `"stream": "fan"`) {
			t.Fatalf("o-%d positions: %s", i, body)
		}
	}
	if body := waitState(t, c, "b-1", "dlq", 30*time.Second); !strings.Contains(body, "does-not-exist") {
		t.Fatalf("DLQ reason does not name the topic: %s", body)
	}

	// Kafka: every record once, keyed by the partition key, with headers.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	fetchCtx, fetchCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fetchCancel()
	for len(seen) < n && fetchCtx.Err() == nil {
		cl.PollFetches(fetchCtx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			id := h["ce_id"]
			if h["ce_type"] != "fan.order" || h["ce_specversion"] != "1.0" || string(r.Key) != h["ce_partitionkey"] || !strings.HasPrefix(string(r.Key), "cust-") {
				t.Errorf("record %s: key %q headers %v", id, r.Key, h)
			}
			seen[id]++
		})
	}
	if len(seen) != n {
		t.Fatalf("kafka has %d distinct ids, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s in Kafka %d times", id, k)
		}
	}

	// NATS: the same events, and the broken type's NATS output exactly once
	// although its Kafka output failed three times.
	js := routerJetStream(t, path, "bus", fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	st, err := js.Stream(context.Background(), "fan")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(context.Background(), jetstream.WithSubjectFilter("fan.broken"))
	if got := info.State.Subjects["fan.broken"]; got != 1 {
		t.Errorf("fan.broken published %d times to NATS, want 1", got)
	}
	if info.State.Msgs != n+1 {
		t.Errorf("stream has %d messages, want %d", info.State.Msgs, n+1)
	}
}

// A Kafka broker that never answers: the router's own deadline fires, the
// batch is released without counting an attempt, /readyz (still ready:
// ingest works) says which sink is down; once the broker answers again
// everything is delivered.
func TestKafkaBrokerHangs(t *testing.T) {
	kc := testkit.Kafka(t, kfake.SeedTopics(1, "orders"))
	var blocked atomic.Bool
	blocked.Store(true)
	unblock := make(chan struct{})
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !blocked.Load() {
			kc.DropControl()
			return nil, nil, false
		}
		kc.KeepControl()
		kc.SleepControl(func() { <-unblock })
		return nil, errors.New("abandoned"), true
	})
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "main" {
  brokers         = [%q]
  publish_timeout = "500ms"
}
event "hang.order" {
  polling {
    min = "10ms"
    max = "200ms"
  }
  route {
    to    = "kafka.main"
    topic = "orders"
  }
}
`, kc.ListenAddrs()[0]))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewMain(nil, io.Discard, io.Discard).Run(ctx, []string{"run", "-config", path}) }()
	defer func() {
		cancel()
		<-done
	}()
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)
	for i := range 20 {
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(fmt.Sprintf(`{"specversion":"1.0","type":"hang.order","source":"/t","id":"h-%d"}`, i)))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	time.Sleep(2 * time.Second) // several deadlines
	body := get(t, c, "/v1/events/h-0")
	if !strings.Contains(body, `"attempts": 0`) || strings.Contains(body, `"state": "delivered"`) || !strings.Contains(body, "outcome unknown") {
		t.Fatalf("while the broker hangs: %s", body)
	}
	// Ingest works, so the router is ready; the sink's detail says why it
	// is not delivering.
	if ready := get(t, c, "/readyz"); !strings.Contains(ready, `"ready": true`) || !strings.Contains(ready, `"kafka.main": "kafka.main: `) {
		t.Fatalf("readyz while hung: %s", ready)
	}
	blocked.Store(false)
	close(unblock)
	next, body := 0, ""
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		for ; next < 20; next++ {
			if body = get(t, c, fmt.Sprintf("/v1/events/h-%d", next)); !strings.Contains(body, `"state": "delivered"`) {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("h-%d not delivered after the broker came back: %s", next, body) })
	if ready := get(t, c, "/readyz"); !strings.Contains(ready, `"ready": true`) {
		t.Fatalf("readyz after recovery: %s", ready)
	}
}

// validate -check-sinks finds a Kafka broker reachable, and says, naming
// the sink once, when a routed topic does not exist.
func TestValidateCheckSinks(t *testing.T) {
	kc := testkit.Kafka(t, kfake.SeedTopics(1, "orders"))
	cfg := func(topic string) string {
		path, _ := writeConfig(t, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
event "v.order" {
  route {
    to    = "kafka.main"
    topic = %q
  }
}
`, kc.ListenAddrs()[0], topic))
		return path
	}
	var out strings.Builder
	m := NewMain(nil, &out, io.Discard)
	if err := m.Run(context.Background(), []string{"validate", "-check-sinks", "-config", cfg("orders")}); err != nil {
		t.Fatalf("existing topic: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "kafka.main: reachable") {
		t.Fatalf("output: %s", out.String())
	}
	out.Reset()
	err := m.Run(context.Background(), []string{"validate", "-check-sinks", "-config", cfg("nope")})
	if err == nil || !strings.Contains(out.String(), `topic "nope" does not exist`) || strings.Contains(out.String(), "kafka.main: kafka.main:") {
		t.Fatalf("missing topic (named once): %v\n%s", err, out.String())
	}
}
