package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// silentWay is a broker a test can silence under the running router, as
// when its host goes dark: no reset, no answer, dials time out.
type silentWay struct {
	sink    string                // the router's name for its sink
	block   string                // its block in the policies file
	route   string                // a route of the type to it
	cut     func()                // silences the way
	restore func()                // opens it again
	held    func() map[string]int // the events it holds, by id: how many times each
	once    bool                  // it holds each event once (JetStream drops a message id it has)
}

// The real router, its broker going silent while it runs (the way to it
// cut with no reset, as when its host goes dark or a NAT forgets the
// connection): it goes on taking events, finds the sink down within
// seconds (switchyard_sink_up 0; the client libraries alone take 55 s for
// Kafka and minutes for NATS), delivers meanwhile the type's events to its
// other sink, and once the way is back delivers every held event to the
// silent broker: nothing acknowledged is lost, and an external JetStream
// holds each once.
func TestBrokerGoesSilentUnderTheRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a silent broker to be found down and to come back")
	}
	for name, way := range map[string]func(*testing.T) silentWay{"nats": silentNATS, "kafka": silentKafka} {
		t.Run(name, func(t *testing.T) { brokerGoesSilent(t, way(t)) })
	}
}

func brokerGoesSilent(t *testing.T, far silentWay) {
	near := jetStreamServer(t, -1)
	path, sock := writeConfig(t, far.block+fmt.Sprintf(`
nats "near" {
  url = %q
  stream "near" { subjects = ["near.>"] }
}
event "s.order" {
%s
  route {
    to      = "nats.near"
    subject = "near.orders"
  }
}
`, near.ClientURL(), far.route))
	c, _ := serveBinary(t, path, sock)
	before := postRange(t, c, "s.order", 0, 100)
	waitAllDelivered(t, c, before, time.Now())

	far.cut()
	cut := time.Now()
	during := postRange(t, c, "s.order", 100, 200)
	// The router finds the silence itself, after a publish left unanswered
	// (the client libraries alone: 55 s for Kafka, minutes for NATS).
	var said string
	testkit.EventuallyWith(t, 30*time.Second, func() bool { said = readyDetail(t, c, "sinks", far.sink); return strings.Contains(said, "went silent") },
		func() string { return fmt.Sprintf("/readyz says of %s: %q", far.sink, said) })
	t.Logf("%s found silent %s after the cut: %s", far.sink, time.Since(cut).Round(time.Millisecond), said)
	if v := metricValue(t, c, `switchyard_sink_up{sink="`+far.sink+`"}`); v != 0 {
		t.Fatalf("switchyard_sink_up of %s is %v while /readyz says %q", far.sink, v, said)
	}
	// From then on its events to that broker are held without being sent,
	// and the others go on.
	during = append(during, postRange(t, c, "s.order", 300, 200)...)
	last := during[len(during)-1]
	var out eventOutput
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		var tried bool
		out, tried = farOutput(t, c, last, far.sink)
		return tried && strings.Contains(out.LastError, switchyard.ErrSinkUnavailable.Error())
	}, func() string { return fmt.Sprintf("%s to the silent broker: %+v, want it held, not sent", last, out) })
	if out.Delivered {
		t.Fatalf("%s delivered to the silent broker: %+v", last, out)
	}
	testkit.EventuallyWith(t, 30*time.Second, func() bool { return testkit.StreamMsgs(t, near.ClientURL(), "near") == 500 },
		func() string {
			return fmt.Sprintf("the other sink holds %d of 500 events", testkit.StreamMsgs(t, near.ClientURL(), "near"))
		})
	t.Logf("the other sink had every event %s after the cut", time.Since(cut).Round(time.Millisecond))

	far.restore()
	back := time.Now()
	waitAllDelivered(t, c, during, back)
	held := far.held()
	for _, id := range append(before, during...) {
		if held[id] == 0 {
			t.Errorf("%s delivered, but the broker does not hold it", id)
		}
		if far.once && held[id] > 1 {
			t.Errorf("%s held %d times", id, held[id])
		}
	}
	extra := 0
	for _, n := range held {
		extra += n - 1
	}
	t.Logf("%s holds %d events, %d of them more than once", far.sink, len(held), extra)
}

// eventOutput is one output of GET /v1/events/{id}.
type eventOutput struct {
	Destination string `json:"destination"`
	Delivered   bool   `json:"delivered"`
	LastError   string `json:"last_error"`
}

// readyDetail is what /readyz says of one of its sinks or inboxes
// (section "sinks" or "inboxes"). It answers within a health check's wait
// (its checks run at once) whatever the brokers do (it waited past 10 s for a silent Kafka
// cluster: a readiness probe would have timed out).
func readyDetail(t *testing.T, c *http.Client, section, name string) string {
	t.Helper()
	start := time.Now()
	body := get(t, c, "/readyz")
	if took := time.Since(start); took > healthWait+2*time.Second { // the real binary, under load
		t.Fatalf("/readyz took %s (each check is given %s)", took, healthWait)
	}
	var r map[string]json.RawMessage
	var detail map[string]string
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	if err := json.Unmarshal(r[section], &detail); err != nil {
		t.Fatalf("/readyz %s: %v: %s", section, err, body)
	}
	return detail[name]
}

// farOutput is event id's output to sink, if the router has offered it
// there yet.
func farOutput(t *testing.T, c *http.Client, id, sink string) (eventOutput, bool) {
	t.Helper()
	body := get(t, c, "/v1/events/"+id)
	var e struct{ Outputs []eventOutput }
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("GET %s: %v: %s", id, err, body)
	}
	for _, o := range e.Outputs {
		if strings.HasPrefix(o.Destination, sink+":") {
			return o, true
		}
	}
	return eventOutput{}, false
}

// silentNATS is an external JetStream server behind a link.
func silentNATS(t *testing.T) silentWay {
	ns := jetStreamServer(t, -1)
	u, err := url.Parse(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	link := testkit.NewLink(t, u.Host)
	return silentWay{
		sink: "nats.far",
		block: fmt.Sprintf(`
nats "far" {
  url             = "nats://%s"
  publish_timeout = "2s"
  stream "far" { subjects = ["far.>"] }
}
`, link.Addr()),
		route:   "  route {\n    to      = \"nats.far\"\n    subject = \"far.orders\"\n  }",
		cut:     link.Cut,
		restore: link.Restore,
		once:    true,
		held: func() map[string]int {
			// The stream drops a duplicate message id within its window
			// (2 m): what it holds, each once, is what a consumer reads.
			return streamIDs(t, ns.ClientURL(), "far", testkit.StreamMsgs(t, ns.ClientURL(), "far"))
		},
	}
}

// silentKafka is an in-process Kafka cluster whose listeners a test cuts.
func silentKafka(t *testing.T) silentWay {
	cluster := testkit.CuttableKafka(t, kfake.SeedTopics(3, "far-orders"))
	return silentWay{
		sink: "kafka.far",
		block: fmt.Sprintf(`
kafka "far" {
  brokers         = [%s]
  publish_timeout = "2s"
}
`, quoteAll(cluster.ListenAddrs())),
		route:   "  route {\n    to    = \"kafka.far\"\n    topic = \"far-orders\"\n  }",
		cut:     cluster.Cut,
		restore: cluster.Restore,
		held:    func() map[string]int { return topicIDs(t, cluster.ListenAddrs(), "far-orders") },
	}
}

// quoteAll is ss as the items of an HCL list.
func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// streamIDs reads the n messages of a stream and counts them by their
// Nats-Msg-Id.
func streamIDs(t *testing.T, serverURL, name string, n uint64) map[string]int {
	t.Helper()
	js := testkit.JetStream(t, serverURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for range n {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading stream %s after %d messages: %v", name, len(ids), err)
		}
		ids[m.Headers().Get(natsgo.MsgIdHdr)]++
	}
	return ids
}

// topicIDs reads a topic from its start until no record comes for three
// polls of 2 s, and counts its records by their ce_id header.
func topicIDs(t *testing.T, brokers []string, topic string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids := map[string]int{}
	for idle := 0; idle < 3; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			for _, h := range r.Headers {
				if h.Key == "ce_id" {
					ids[string(h.Value)]++
				}
			}
		})
		if n == 0 {
			idle++
		}
	}
	return ids
}
