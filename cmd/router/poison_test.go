package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// poisonBody is an event its NATS route can never carry: data just under
// max_body that goes over max_payload once headers are added (binary mode),
// or 8,000 extensions whose headers pass JetStream's 64 KiB.
func poisonRequest(kind, typ, id string) *http.Request {
	var req *http.Request
	if kind == "payload" {
		req, _ = http.NewRequest("POST", "http://r/v1/events", strings.NewReader(strings.Repeat("p", 1<<20-64)))
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range map[string]string{"specversion": "1.0", "type": typ, "source": "/poison", "id": id} {
			req.Header.Set("ce-"+k, v)
		}
		return req
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{"specversion":"1.0","type":%q,"source":"/poison","id":%q`, typ, id)
	v := strings.Repeat("v", 1000) // 200 extensions (of at most 256) of 1,000 bytes
	for i := range 200 {
		fmt.Fprintf(&b, `,"x%04d":%q`, i, v)
	}
	b.WriteString(`,"data":1}`)
	req, _ = http.NewRequest("POST", "http://r/v1/events", strings.NewReader(b.String()))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	return req
}

// One poison event per hundred never holds up the good ones: an event its
// route can never carry is refused at ingest (413 too_large_for_route,
// nothing stored), or — behind a plugin, where only the publish can tell —
// dead-lettered at once with the broker's reason; the good events' latency
// stays within twice that of the same run without poison.
func TestPoisonEventsDoNotBlock(t *testing.T) {
	if testing.Short() {
		t.Skip("posts 1 MiB events and measures latency")
	}
	pass, _ := filepath.Abs(filepath.Join("..", "..", "examples", "plugins", "passthrough-wat", "passthrough.wasm"))
	natsPort := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
nats "bus" {
  embedded = true
  port     = %d
  stream "poison" { subjects = ["poison.>"] }
}
plugin "pass" { wasm = %q }
defaults {
  polling { min = "10ms" }
}
event "poison.order" {
  route {
    to      = "nats.bus"
    subject = "poison.orders"
  }
}
event "poison.plugged" {
  plugins = ["pass"]
  route {
    to      = "nats.bus"
    subject = "poison.plugged"
  }
}
`, natsPort, pass))
	runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	nc := routerConn(t, path, "bus", fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	var mu sync.Mutex
	received := map[string]time.Time{}
	sub, err := nc.Subscribe("poison.>", func(m *natsgo.Msg) {
		mu.Lock()
		received[m.Header.Get("ce-id")] = time.Now()
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// run posts 300 good events, one every 5 ms, with a poison one in
	// place of every hundredth when poison is set, and returns the good
	// events' latencies from POST to the subscriber.
	run := func(round string, poison bool) []time.Duration {
		sent := map[string]time.Time{}
		for i := range 300 {
			id := fmt.Sprintf("%s-%d", round, i)
			if poison && i%100 == 50 {
				kind := []string{"payload", "headers"}[i/100%2]
				resp, err := c.Do(poisonRequest(kind, "poison.order", id))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 413 || !strings.Contains(string(body), `"code":"too_large_for_route"`) {
					t.Fatalf("poison (%s) at ingest: %d %s", kind, resp.StatusCode, body)
				}
				continue
			}
			sent[id] = time.Now()
			resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
				strings.NewReader(`{"specversion":"1.0","type":"poison.order","source":"/good","id":"`+id+`","data":{}}`))
			if err != nil || resp.StatusCode != 202 {
				t.Fatalf("good event: %v %v", resp, err)
			}
			resp.Body.Close()
			time.Sleep(5 * time.Millisecond)
		}
		var missing string
		testkit.EventuallyWith(t, 30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for id := range sent {
				if _, ok := received[id]; !ok {
					missing = id
					return false
				}
			}
			return true
		}, func() string { return missing + " not received" })
		var lat []time.Duration
		mu.Lock()
		for id, at := range sent {
			lat = append(lat, received[id].Sub(at))
		}
		mu.Unlock()
		slices.Sort(lat)
		return lat
	}
	clean := run("clean", false)
	poisoned := run("poisoned", true)
	p50 := func(l []time.Duration) time.Duration { return l[len(l)/2] }
	p90 := func(l []time.Duration) time.Duration { return l[len(l)*9/10] }
	t.Logf("good events' latency: without poison p50 %s p90 %s; with 1 in 100 poisoned p50 %s p90 %s",
		p50(clean), p90(clean), p50(poisoned), p90(poisoned))
	// 20 ms of slack: one poll interval and this machine's noise.
	if p50(poisoned) > 2*p50(clean)+20*time.Millisecond {
		t.Errorf("poison slowed the good events: p50 %s against %s without", p50(poisoned), p50(clean))
	}

	// Behind a plugin the ingest cannot tell: JetStream's refusal sends the
	// event to the DLQ at once, and the next event of the type goes out.
	resp, err := c.Do(poisonRequest("headers", "poison.plugged", "plugged-poison"))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("poison behind a plugin: %v %v", resp, err)
	}
	resp.Body.Close()
	start := time.Now()
	resp, err = c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"poison.plugged","source":"/good","id":"plugged-good","data":{}}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("good event behind a plugin: %v %v", resp, err)
	}
	resp.Body.Close()
	body := waitState(t, c, "plugged-poison", "dlq", 10*time.Second)
	if !strings.Contains(body, "headers over JetStream's limit") || !strings.Contains(body, `"attempts": 1`) {
		t.Errorf("the dead letter does not say why, or was retried: %s", body)
	}
	waitState(t, c, "plugged-good", "delivered", 10*time.Second)
	t.Logf("poison behind a plugin dead-lettered and the next event delivered %s after", time.Since(start).Round(time.Millisecond))
}
