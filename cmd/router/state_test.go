package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// A plugin's state counts each event once, through the real binary killed
// with SIGKILL at random moments (20 kills; 200 with -long) while events
// are posted, and through a broker outage that makes publishes fail and
// events retry: when everything is delivered, the counting plugin's count
// (read from the data file) equals the number of acknowledged events.
func TestPluginStateExactlyOnceThroughKills(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	kills := 20
	if *long {
		kills = 200
	}
	// An external JetStream server, so the test can take the broker away
	// while the router runs.
	natsPort, store := testkit.FreePort(t), t.TempDir()
	startBroker := func() *server.Server {
		return testkit.NATS(t, func(o *server.Options) { o.Port, o.JetStream, o.StoreDir = natsPort, true, store })
	}
	broker := startBroker()

	r := newCrashRouter(t, time.Hour)
	dbPath := filepath.Join(filepath.Dir(r.config), "data", "router.db")
	cfg := fmt.Sprintf(`
listen  { socket = %q }
storage { path = %q }

nats "bus" {
  url = "nats://127.0.0.1:%d"
  stream "counted" {
    subjects   = ["counted.>"]
    duplicates = "1h"
  }
}

plugin "counter" {
  wasm = %q
}

event "counted" {
  plugins    = ["counter"]
  batch_size = 25
  route {
    to      = "nats.bus"
    subject = "counted.events"
  }
  polling { min = "10ms" }
  backoff { delay = "50ms" }
  max_retries = 1000
}
`, r.socket, dbPath, natsPort, wasmTestdata(t, "counter"))
	if err := os.WriteFile(r.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	compilePlugins(t, wasmTestdata(t, "counter"))
	r.start()

	// Post events in batches of 10 with ids of our own until the kills end.
	var mu sync.Mutex
	var acked []string
	ctx, stop := context.WithCancel(context.Background())
	var posters sync.WaitGroup
	for w := range 4 {
		posters.Go(func() {
			for seq := 0; ctx.Err() == nil; seq++ {
				var ids []string
				var evs []string
				for i := range 10 {
					id := fmt.Sprintf("w%d-%d-%d", w, seq, i)
					ids = append(ids, id)
					evs = append(evs, fmt.Sprintf(`{"specversion":"1.0","type":"counted","source":"/t","id":%q,"data":{}}`, id))
				}
				time.Sleep(20 * time.Millisecond) // a steady load, not a flood: the drain after the kills stays short
				resp, err := r.client.Post("http://router/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(evs, ",")+"]"))
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK {
					mu.Lock()
					acked = append(acked, ids...)
					mu.Unlock()
				}
			}
		})
	}
	outageAt := kills / 2
	for k := range kills {
		time.Sleep(100*time.Millisecond + rand.N(500*time.Millisecond))
		if k == outageAt {
			broker.Shutdown() // publishes fail: events are retried while the router is killed and restarted
		}
		r.kill()
		r.start()
		if k == outageAt+3 {
			broker = startBroker()
		}
	}
	stop()
	posters.Wait()
	t.Logf("%d kills, a broker outage across kills %d..%d: %d events acknowledged", kills, outageAt, outageAt+3, len(acked))

	waitDrained(t, r.client, "counted", "after the kills", 2*time.Minute)
	st, err := r.statuses(acked)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range acked {
		if s := st[id]; s == nil || s.State != "delivered" {
			t.Fatalf("event %s: %+v, want delivered", id, s)
		}
	}
	r.stop()
	db, err := storage.Open(dbPath, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var count uint32
	var states storage.StateCounts
	db.View(func(tx *storage.Tx) error {
		v, ok, err := tx.StateGet("counter:counted", []byte("n"), time.Now())
		if err != nil || !ok || len(v) != 4 {
			t.Fatalf("the count: %x %v %v", v, ok, err)
		}
		count = binary.LittleEndian.Uint32(v)
		states = tx.CountStates()
		return nil
	})
	// Every stored event is delivered: the acknowledged ones, and those a
	// kill stored before their 202 could leave.
	t.Logf("delivered %d (acknowledged %d), counted %d", states.Delivered, len(acked), count)
	if states.Pending != 0 || states.DLQ != 0 || states.Delivered < len(acked) {
		t.Fatalf("data file: %+v, want every one of the %d acknowledged events delivered", states, len(acked))
	}
	if int(count) != states.Delivered {
		t.Fatalf("the plugin counted %d events, %d were delivered: state writes must count once per event outcome", count, states.Delivered)
	}
}

// An operator sees and manages a running router's plugin state: router
// plugin state lists the plugin's namespaces and the keys of one (a binary
// value in base64), GET /v1/stats and /metrics carry the sizes, and a key is
// deleted (deleting it again is a clear not found, as is a plugin name
// nothing has); a plugin block's
// state_namespace is one namespace shared by the types that run it; a write over a limit
// rejects the event with a reason naming the plugin, the event and the
// limit.
func TestPluginStateForOperators(t *testing.T) {
	path, sock := writeConfig(t, fmt.Sprintf(`
plugin "counter" { wasm = %q }
event "t.counted" {
  plugins = ["counter"]
  route {
    to      = "nats.local"
    subject = "t.counted"
  }
  polling { min = "10ms" }
}
plugin "bigkey" { wasm = %q }
plugin "tally" {
  wasm            = %q
  state_namespace = "tally"
}
event "t.one" {
  plugins = ["tally"]
  route {
    to      = "nats.local"
    subject = "t.one"
  }
  polling { min = "10ms" }
}
event "t.two" {
  plugins = ["tally"]
  route {
    to      = "nats.local"
    subject = "t.two"
  }
  polling { min = "10ms" }
}
event "t.big" {
  plugins = ["bigkey"]
  route {
    to      = "nats.local"
    subject = "t.big"
  }
  polling { min = "10ms" }
}
`, wasmTestdata(t, "counter"), wasmTestdata(t, "bigkey"), wasmTestdata(t, "counter")))
	compilePlugins(t, wasmTestdata(t, "counter"), wasmTestdata(t, "bigkey"))
	runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	for i := range 3 {
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(fmt.Sprintf(`{"specversion":"1.0","type":"t.counted","source":"/t","id":"c%d","data":{}}`, i)))
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
		waitState(t, c, fmt.Sprintf("c%d", i), "delivered", 10*time.Second)
	}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := NewMain(nil, &out, &out).Run(context.Background(), append([]string{"plugin", "state"}, append(args, "-socket", sock)...))
		return out.String(), err
	}
	if out, err := cli("counter"); err != nil || !strings.Contains(out, "t.counted") || !strings.Contains(out, "  1  ") {
		t.Fatalf("namespaces: %v\n%s", err, out)
	}
	if out, err := cli("counter", "-type", "t.counted"); err != nil || !strings.Contains(out, `"n"`) || !strings.Contains(out, "base64:AwAAAA==") {
		t.Fatalf("keys (want n = 3): %v\n%s", err, out)
	}
	// Another tenant's events count in the tenant's own namespace.
	req, _ := http.NewRequest("POST", "http://r/v1/events", strings.NewReader(`{"specversion":"1.0","type":"t.counted","source":"/t","id":"c0","data":{}}`))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("X-Tenant", "acme")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post as acme: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := cli("counter", "-type", "t.counted", "-tenant", "acme")
		if err == nil && strings.Contains(out, "base64:AQAAAA==") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's keys (want n = 1): %v\n%s", err, out)
		}
	}
	if out, err := cli("counter"); err != nil || !strings.Contains(out, "@acme/counter:t.counted  acme") || !strings.Contains(out, "counter:t.counted        default") {
		t.Fatalf("namespaces of two tenants: %v\n%s", err, out)
	}
	if out, err := cli("counter", "-type", "t.counted"); err != nil || !strings.Contains(out, "base64:AwAAAA==") {
		t.Fatalf("the default tenant's keys after acme's event (want n = 3 still): %v\n%s", err, out)
	}
	if stats := get(t, c, "/v1/stats"); !strings.Contains(stats, `"plugin_state"`) || !strings.Contains(stats, `"keys": 1`) {
		t.Fatalf("/v1/stats: %s", stats)
	}
	if v := metricValue(t, c, `switchyard_plugin_state_keys{namespace="counter:t.counted"}`); v != 1 {
		t.Fatalf("switchyard_plugin_state_keys = %v, want 1", v)
	}
	if out, err := cli("counter", "-type", "t.counted", "-delete", "-key", "n"); err != nil || !strings.Contains(out, "deleted 1 key(s)") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if _, err := cli("counter", "-type", "t.counted", "-delete", "-key", "n"); err == nil || !strings.Contains(err.Error(), `plugin "counter" has no key "n" in namespace "counter:t.counted"`) {
		t.Fatalf("delete again: %v", err)
	}

	// A shared namespace: the tally plugin counts the events of both types
	// in one key.
	for _, typ := range []string{"t.one", "t.two"} {
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(`{"specversion":"1.0","type":"`+typ+`","source":"/t","id":"`+typ+`","data":{}}`))
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
		waitState(t, c, typ, "delivered", 10*time.Second)
	}
	// A name no plugin has is a clear not found, not "no state" (an
	// adversarial trial); a loaded plugin without state is "no state".
	if _, err := cli("nope"); err == nil || !strings.Contains(err.Error(), `no plugin "nope" is loaded, and no state is kept under that name`) {
		t.Fatalf("state of a plugin that does not exist: %v", err)
	}
	// So with -type (it said "no keys": a new user's trial).
	if _, err := cli("nope", "-type", "t.big"); err == nil || !strings.Contains(err.Error(), `no plugin "nope" is loaded`) {
		t.Fatalf("keys of a plugin that does not exist: %v", err)
	}
	if out, err := cli("bigkey"); err != nil || !strings.Contains(out, "no state") {
		t.Fatalf("state of a loaded plugin without any: %v\n%s", err, out)
	}
	if out, err := cli("bigkey", "-type", "t.big"); err != nil || strings.TrimSpace(out) != "no keys" {
		t.Fatalf("the keys of a namespace without any (was a bare heading): %v\n%s", err, out)
	}
	if out, err := cli("tally", "-namespace", "tally"); err != nil || !strings.Contains(out, "base64:AgAAAA==") {
		t.Fatalf("the shared namespace (want n = 2): %v\n%s", err, out)
	}
	if out, err := cli("tally"); err != nil || !strings.Contains(out, "(shared)") {
		t.Fatalf("tally's namespaces: %v\n%s", err, out)
	}

	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(`{"specversion":"1.0","type":"t.big","source":"/t","id":"b1","data":{}}`))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	body := waitState(t, c, "b1", "dlq", 10*time.Second)
	if !strings.Contains(body, `plugin \"bigkey\", event \"b1\": state_put: state key of 300 bytes: keys have 1 to 256`) {
		t.Fatalf("over the key limit: %s", body)
	}
}

// The two stateful examples through the router: onchange-go forwards a
// reading only when it differs from the last of its key — also across a
// restart, its state being in the data file; threshold-rust alerts once per
// upward crossing of each key.
func TestStatefulExamplesInTheRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a Go plugin and runs the router twice")
	}
	ex := func(p string) string { return filepath.Join("..", "..", "examples", "plugins", p) }
	onchange, threshold := ex("onchange-go/onchange.wasm"), ex("threshold-rust/threshold.wasm")
	compilePlugins(t, onchange, threshold)
	dir := t.TempDir()
	sockDir, _ := os.MkdirTemp("", "sy")
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock, natsPort := filepath.Join(sockDir, "r.sock"), testkit.FreePort(t)
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`
listen  { socket = %q }
storage { path = %q }
nats "local" {
  embedded = true
  port     = %d
  stream "ex" { subjects = ["ex.>"] }
}
plugin "onchange" { wasm = %q }
plugin "threshold" {
  wasm   = %q
  config = { threshold = "30", alert_destination = "nats.local:ex.alerts", field = "celsius" }
}
event "ex.reading" {
  plugins = ["onchange"]
  route {
    to      = "nats.local"
    subject = "ex.readings"
  }
  polling { min = "10ms" }
}
event "ex.temp" {
  plugins = ["threshold"]
  route {
    to      = "nats.local"
    subject = "ex.temps"
  }
  polling { min = "10ms" }
}
`, sock, filepath.Join(dir, "data", "router.db"), natsPort, onchange, threshold)), 0o600)
	c := testkit.UnixClient(sock, 10*time.Second)
	n := 0
	post := func(typ, key, data string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("r%d", n)
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(
			fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":"/t","id":%q,"partitionkey":%q,"data":%s}`, typ, id, key, data)))
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
		return id
	}
	reading := func(key, data, want string) {
		t.Helper()
		waitState(t, c, post("ex.reading", key, data), want, 20*time.Second)
	}
	stop := runRouter(t, path, sock)
	reading("s1", "1", "delivered")
	reading("s1", "1", "filtered")
	reading("s2", "1", "delivered")
	stop()
	runRouter(t, path, sock)
	reading("s1", "1", "filtered") // the last reading of s1 survived the restart
	reading("s1", "2", "delivered")

	for _, r := range []struct{ key, c string }{{"a", "25"}, {"a", "31"}, {"a", "35"}, {"b", "40"}, {"a", "20"}, {"a", "32"}} {
		waitState(t, c, post("ex.temp", r.key, `{"celsius": `+r.c+`}`), "delivered", 20*time.Second)
	}
	js := routerJetStream(t, path, "local", fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "ex")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("ex.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects["ex.alerts"]; got != 3 {
		t.Fatalf("%d alerts on ex.alerts, want 3 (a at 31, b at 40, a at 32): %v", got, info.State.Subjects)
	}
	if got := info.State.Subjects["ex.readings"]; got != 3 {
		t.Fatalf("%d readings forwarded, want 3 (s1=1, s2=1, s1=2): %v", got, info.State.Subjects)
	}
}
