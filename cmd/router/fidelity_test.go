package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// fidelityEvents are the events the fidelity test sends: the attribute
// values that once drifted (percent signs, spaces, non-ASCII, quotes),
// every data kind (JSON, text, bytes, none), extensions, a time with
// nanoseconds. Each goes out once through NATS and once through Kafka.
func fidelityEvents() []switchyard.Event {
	at := time.Date(2026, 11, 30, 12, 34, 56, 789012345, time.UTC)
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	return []switchyard.Event{{
		ID: "drift-1", Source: "/bar/ünï%20code", Type: "fid", Subject: "a%41b c/é", Time: at,
		DataContentType: "application/json", Data: []byte(`{"k": [1, "two", {"é": null}]}`),
		Extensions: []switchyard.Header{{Name: "note", Value: `100% "café"`}, {Name: "partitionkey", Value: "k 1"}},
	}, {
		ID: "text-2", Source: "/s", Type: "fid", Subject: "  spaced  ", Time: at,
		DataContentType: "text/plain; charset=utf-8", DataSchema: "https://example.com/schema%20v1",
		Data: []byte("héllo wörld %41\n"),
	}, {
		ID: "bytes-3", Source: "/s", Type: "fid", Time: at,
		DataContentType: "application/octet-stream", Data: bin,
		Extensions: []switchyard.Header{{Name: "seq", Value: "42"}},
	}, {
		ID: "empty-4", Source: "urn:x:€😀", Type: "fid", Time: at,
		Extensions: []switchyard.Header{{Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	}}
}

// received collects the events each reader saw, by reader and id.
type received struct {
	mu   sync.Mutex
	seen map[string]map[string]switchyard.Event
}

func (r *received) add(t *testing.T, reader string, ev switchyard.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[reader] == nil {
		r.seen[reader] = map[string]switchyard.Event{}
	}
	r.seen[reader][ev.ID] = ev
}

func (r *received) count(reader string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen[reader])
}

// An event POSTed to the real binary leaves it and comes back with every
// attribute identical: out to NATS and back in through an inbox, out to
// Kafka and back, each delivered to a webhook (binary mode from NATS,
// structured from Kafka) and to a pull subscription; on the way, what the
// router puts on NATS and Kafka is read off the brokers, and the official
// CloudEvents SDK reads the Kafka records, the structured webhook and the
// pull messages as the same events. Events sent by the SDK itself over
// HTTP, in both modes, are accepted and make the same trip.
func TestEventFidelityThroughTheBinary(t *testing.T) {
	got := &received{seen: map[string]map[string]switchyard.Event{}}
	hook := fidelityWebhook(t, got)
	kc := testkit.Kafka(t, kfake.SeedTopics(2, "fid"))
	dir := t.TempDir()
	sock, natsPort := filepath.Join(dir, "r.sock"), testkit.FreePort(t)
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte(fidelityConfig(sock, dir, natsPort, kc.ListenAddrs()[0], hook)), 0o600)

	cmd := exec.Command(routerBinary(t), "run", "-config", path, "-plugin-cache-dir", testPluginCache(t))
	var logs testkit.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("router log:\n%s", logs.String())
		}
	})
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)
	readBrokers(t, got, natsPort, dir, kc.ListenAddrs())

	want := map[string]switchyard.Event{}
	for _, ev := range fidelityEvents() {
		for _, way := range []string{"nats", "kafka"} {
			ev := ev
			ev.ID, ev.Type, ev.SpecVersion = ev.ID+"-"+way, "fid."+way, cloudevents.SpecVersion
			want[ev.ID] = ev
			postStructured(t, c, &ev)
		}
	}
	for _, way := range []string{"nats", "kafka"} {
		for _, structured := range []bool{false, true} {
			ev := switchyard.Event{
				ID: fmt.Sprintf("sdk-%s-%v", way, structured), Source: "/sdk/e", Type: "fid." + way, SpecVersion: cloudevents.SpecVersion,
				Subject: "from the SDK ü", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
				DataContentType: "application/json", Data: []byte(`{"sdk":true}`),
				Extensions: []switchyard.Header{{Name: "comexampleext", Value: "v é"}},
			}
			want[ev.ID] = ev
			sdkSend(t, sock, &ev, structured)
		}
	}

	readers := map[string]string{ // reader → the ids it sees: those of the type it reads
		"nats-wire": "fid.nats", "kafka-wire": "fid.kafka", "kafka-wire-sdk": "fid.kafka",
		"webhook-binary": "fid.nats", "webhook-structured-sdk": "fid.kafka",
		"pull-nats": "fid.nats", "pull-nats-sdk": "fid.nats", "pull-kafka": "fid.kafka", "pull-kafka-sdk": "fid.kafka",
	}
	pullUntil(t, c, got, want, readers)
	for reader, typ := range readers {
		for id, w := range want {
			if w.Type != typ {
				continue
			}
			g, ok := got.seen[reader][id]
			if !ok {
				t.Errorf("%s: %s never arrived", reader, id)
				continue
			}
			if strings.HasSuffix(reader, "-sdk") {
				w = sdkView(w, reader == "kafka-wire-sdk")
			}
			sameFidelity(t, reader, g, w)
		}
	}
}

// sdkView is want as the SDK represents it, where its model is narrower
// than the spec's strings: a source is a net/url URI (non-ASCII escaped),
// and on a header binding a subject is trimmed and the W3C trace context
// is a header of its own, not an extension.
func sdkView(want switchyard.Event, headers bool) switchyard.Event {
	if u, err := url.Parse(want.Source); err == nil {
		want.Source = u.String()
	}
	if headers {
		want.Subject = strings.TrimSpace(want.Subject)
		want.Extensions = slices.DeleteFunc(slices.Clone(want.Extensions), func(h switchyard.Header) bool {
			return cloudevents.IsPassThrough(h.Name)
		})
		if len(want.Extensions) == 0 {
			want.Extensions = nil
		}
	}
	return want
}

// sameFidelity reports where got differs from want, attribute by
// attribute (time as the same instant).
func sameFidelity(t *testing.T, reader string, got, want switchyard.Event) {
	t.Helper()
	if !got.Time.Equal(want.Time) {
		t.Errorf("%s %s: time %v, want %v", reader, want.ID, got.Time, want.Time)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("%s %s:\n got %s\nwant %s", reader, want.ID, g, w)
	}
}

func fidelityConfig(sock, dir string, natsPort int, broker, hook string) string {
	inbox := func(name, from, source, deliver string) string {
		return fmt.Sprintf("inbox %q {\n  from = %q\n  %s\n  polling { min = \"10ms\" }\n  %s\n}\n", name, from, source, deliver)
	}
	return fmt.Sprintf(`
listen  { socket = %q }
storage { path = %q }
nats "local" {
  embedded = true
  port     = %d
  stream "fid" { subjects = ["fid.>"] }
}
kafka "main" { brokers = [%q] }
event "fid.nats" {
  polling { min = "10ms" }
  route {
    to      = "nats.local"
    subject = "fid.nats"
  }
}
event "fid.kafka" {
  polling { min = "10ms" }
  route {
    to    = "kafka.main"
    topic = "fid"
  }
}
`, sock, filepath.Join(dir, "r.db"), natsPort, broker) +
		inbox("nats_hook", "nats.local", `subject = "fid.nats"`, fmt.Sprintf(`deliver { url = "%s/binary" }`, hook)) +
		inbox("nats_pull", "nats.local", `subject = "fid.nats"`, "") +
		inbox("kafka_hook", "kafka.main", `topics = ["fid"]`, fmt.Sprintf("deliver {\n    url  = \"%s/structured\"\n    mode = \"structured\"\n  }", hook)) +
		inbox("kafka_pull", "kafka.main", `topics = ["fid"]`, "")
}

// fidelityWebhook is the local service of the two webhook inboxes: binary
// requests decoded by the HTTP binding, structured ones by the SDK.
func fidelityWebhook(t *testing.T, got *received) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/structured" {
			r.Body = io.NopCloser(bytes.NewReader(body))
			e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
			if err != nil {
				t.Errorf("the SDK cannot read the structured delivery: %v", err)
				http.Error(w, err.Error(), 400)
				return
			}
			got.add(t, "webhook-structured-sdk", testkit.FromSDK(t, e))
		} else {
			ev, err := cloudevents.HTTP.Decode(cloudevents.FromHTTP(r.Header), body)
			if err != nil {
				t.Errorf("binary delivery: %v", err)
			}
			got.add(t, "webhook-binary", ev)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// readBrokers reads what the router publishes straight off the brokers:
// the NATS subject (with the embedded server's generated password), and
// the Kafka topic, decoded by the router's bindings and by the SDK.
func readBrokers(t *testing.T, got *received, natsPort int, dir string, brokers []string) {
	pass, err := os.ReadFile(filepath.Join(dir, "nats-local.password"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://127.0.0.1:"+strconv.Itoa(natsPort), nats.UserInfo("switchyard", strings.TrimSpace(string(pass))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("fid.nats", func(m *nats.Msg) {
		var hs []switchyard.Header
		for k, vs := range m.Header {
			hs = append(hs, switchyard.Header{Name: k, Value: vs[0]})
		}
		ev, err := cloudevents.NATS.Decode(hs, m.Data)
		if err != nil {
			t.Errorf("NATS message: %v", err)
		}
		got.add(t, "nats-wire", ev)
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("fid"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				var hs []switchyard.Header
				for _, h := range r.Headers {
					hs = append(hs, switchyard.Header{Name: h.Key, Value: string(h.Value)})
				}
				ev, err := cloudevents.Kafka.Decode(hs, r.Value)
				if err != nil {
					t.Errorf("Kafka record: %v", err)
				}
				got.add(t, "kafka-wire", ev)
				e, err := binding.ToEvent(ctx, testkit.SDKHeaderMessage("ce_", hs, r.Value))
				if err != nil {
					t.Errorf("the SDK cannot read a Kafka record: %v", err)
					return
				}
				got.add(t, "kafka-wire-sdk", testkit.FromSDK(t, e))
			})
		}
	}()
}

func postStructured(t *testing.T, c *http.Client, ev *switchyard.Event) {
	t.Helper()
	resp, err := c.Post("http://r/v1/events", cloudevents.MediaStructured, bytes.NewReader(cloudevents.EncodeJSON(ev)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s", ev.ID, resp.StatusCode, b)
	}
}

// sdkSend sends ev with the SDK's HTTP client over the router's socket.
func sdkSend(t *testing.T, sock string, ev *switchyard.Event, structured bool) {
	t.Helper()
	p, err := cehttp.New(cehttp.WithClient(*testkit.UnixClient(sock, 10*time.Second)), cehttp.WithTarget("http://r/v1/events"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := sdk.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	e := event.New()
	e.SetID(ev.ID)
	e.SetSource(ev.Source)
	e.SetType(ev.Type)
	e.SetSubject(ev.Subject)
	e.SetTime(ev.Time)
	for _, x := range ev.Extensions {
		e.SetExtension(x.Name, x.Value)
	}
	e.SetData(ev.DataContentType, ev.Data)
	ctx := context.Background()
	if structured {
		ctx = binding.WithForceStructured(ctx)
	}
	if res := client.Send(ctx, e); !sdk.IsACK(res) {
		t.Fatalf("the router refused the SDK's event (structured %v): %v", structured, res)
	}
}

// pullUntil pulls the two pull subscriptions (decoding each message with
// the codec and with the SDK) until every reader saw every event it
// should, or a minute passed.
func pullUntil(t *testing.T, c *http.Client, got *received, want map[string]switchyard.Event, readers map[string]string) {
	t.Helper()
	expect := func(reader string) int {
		n := 0
		for _, w := range want {
			if w.Type == readers[reader] {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, sub := range []string{"nats", "kafka"} {
			pullOnce(t, c, got, sub)
		}
		complete := true
		for reader := range readers {
			if got.count(reader) < expect(reader) {
				complete = false
			}
		}
		if complete {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for reader := range readers {
		t.Logf("%s: %d of %d", reader, got.count(reader), expect(reader))
	}
}

func pullOnce(t *testing.T, c *http.Client, got *received, sub string) {
	resp, err := c.Get("http://r/v1/subscriptions/" + sub + "_pull/messages?max=100&wait=200ms")
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Messages []struct {
			ID    string          `json:"id"`
			AckID string          `json:"ack_id"`
			Event json.RawMessage `json:"event"`
		} `json:"messages"`
	}
	json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	var ids []string
	for _, m := range page.Messages {
		ev, err := cloudevents.DecodeJSON(m.Event)
		if err != nil {
			t.Errorf("pull message %s: %v", m.ID, err)
		}
		got.add(t, "pull-"+sub, ev)
		var e event.Event
		if err := e.UnmarshalJSON(m.Event); err != nil {
			t.Errorf("the SDK cannot read pull message %s: %v", m.ID, err)
		} else {
			got.add(t, "pull-"+sub+"-sdk", testkit.FromSDK(t, &e))
		}
		ids = append(ids, m.AckID)
	}
	if len(ids) > 0 {
		b, _ := json.Marshal(map[string][]string{"ack_ids": ids})
		resp, err := c.Post("http://r/v1/subscriptions/"+sub+"_pull/ack", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var acked struct{ Acked int }
		json.NewDecoder(resp.Body).Decode(&acked)
		resp.Body.Close()
		if acked.Acked != len(ids) {
			t.Errorf("an ack of %d ack ids acked %d", len(ids), acked.Acked)
		}
	}
}
