package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// Every example plugin in examples/plugins through the real router, with
// the in-process NATS server and, for the one that routes to Kafka, kfake.
func TestExamplePluginsInTheRouter(t *testing.T) {
	kc := testkit.Kafka(t, kfake.SeedTopics(1, "orders.large"))
	ex := func(p string) string {
		abs, err := filepath.Abs(filepath.Join("..", "..", "examples", "plugins", p))
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	compilePlugins(t, ex("route-go/route.wasm"), ex("enrich-c/enrich.wasm"), ex("filter-as/filter.wasm"),
		ex("split-rust/split.wasm"), ex("passthrough-wat/passthrough.wasm"))
	natsPort := testkit.FreePort(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
nats "bus" {
  embedded = true
  port     = %d
  stream "ex" { subjects = ["ex.>"] }
}
plugin "route" {
  wasm   = %q
  config = {
    threshold         = "1000"
    large_destination = "kafka.main:orders.large"
    small_destination = "nats.bus:ex.small"
  }
  limits {
    memory  = "32MiB"
    timeout = "2s"
  }
}
plugin "enrich" {
  wasm   = %q
  config = { region = "eu-1" }
}
plugin "filter" {
  wasm   = %q
  config = { drop_if_header = "env=test" }
}
plugin "split" {
  wasm   = %q
  config = { destination = "nats.bus:ex.items", index_header = "splitindex" }
}
plugin "passthrough" {
  wasm = %q
}
defaults {
  polling { min = "10ms" }
}
event "ex.route" {
  plugins = ["route"]
}
event "ex.enrich" {
  plugins = ["enrich"]
  route {
    to      = "nats.bus"
    subject = "ex.enriched"
  }
}
event "ex.filter" {
  plugins = ["filter"]
  route {
    to      = "nats.bus"
    subject = "ex.kept"
  }
}
event "ex.split" {
  plugins = ["split"]
}
event "ex.pass" {
  plugins = ["passthrough"]
  route {
    to      = "nats.bus"
    subject = "ex.passed"
  }
}
`, kc.ListenAddrs()[0], natsPort, ex("route-go/route.wasm"), ex("enrich-c/enrich.wasm"), ex("filter-as/filter.wasm"),
		ex("split-rust/split.wasm"), ex("passthrough-wat/passthrough.wasm")))
	runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	post := func(id, typ, extra, data string) {
		t.Helper()
		body := fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":"/t","id":%q%s,"data":%s}`, typ, id, extra, data)
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post %s: %v %v", id, resp, err)
		}
		resp.Body.Close()
	}
	post("r-large", "ex.route", "", `{"amount":2500}`)
	post("r-small", "ex.route", "", `{"amount":10}`)
	post("e-1", "ex.enrich", "", `{"n":1}`)
	post("f-test", "ex.filter", `,"env":"test"`, `{}`)
	post("f-prod", "ex.filter", `,"env":"prod"`, `{}`)
	post("s-1", "ex.split", "", `[{"sku":"A"},{"sku":"B"},42,"four"]`)
	post("p-1", "ex.pass", "", `{"same":true}`)
	for _, id := range []string{"r-large", "r-small", "e-1", "f-prod", "s-1", "p-1"} {
		waitState(t, c, id, "delivered", 30*time.Second)
	}
	waitState(t, c, "f-test", "filtered", 30*time.Second) // filter-as dropped it: done, nothing sent

	msgs := streamBySubject(t, path, natsPort, "ex")
	check := func(subject string, n int) []*jetstream.RawStreamMsg {
		t.Helper()
		if got := len(msgs[subject]); got != n {
			t.Fatalf("%s has %d messages, want %d", subject, got, n)
		}
		return msgs[subject]
	}
	if m := check("ex.small", 1)[0]; m.Header.Get("ce-id") != "r-small" {
		t.Errorf("route-go small: %v", m.Header)
	}
	if m := check("ex.enriched", 1)[0]; m.Header.Get("ce-region") != "eu-1" {
		t.Errorf("enrich-c did not add region: %v", m.Header)
	}
	if m := check("ex.kept", 1)[0]; m.Header.Get("ce-id") != "f-prod" {
		t.Errorf("filter-as kept the wrong event: %v", m.Header)
	}
	items := check("ex.items", 4)
	for i, m := range items {
		// Each item is an event of its own, named by an id of its own.
		if m.Header.Get("ce-splitindex") != fmt.Sprint(i) || m.Header.Get("ce-id") != fmt.Sprintf("s-1/%d", i) || m.Header.Get("ce-source") == "" {
			t.Errorf("split-rust item %d: %v %s", i, m.Header, m.Data)
		}
	}
	if string(items[0].Data) != `{"sku":"A"}` || string(items[3].Data) != `"four"` {
		t.Errorf("split-rust items: %s … %s", items[0].Data, items[3].Data)
	}
	if m := check("ex.passed", 1)[0]; string(m.Data) != `{"same":true}` {
		t.Errorf("passthrough changed the data: %s", m.Data)
	}

	// route-go sent the large order to Kafka.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("orders.large"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids []string
	for len(ids) < 1 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "ce_id" {
					ids = append(ids, string(h.Value))
				}
			}
		})
	}
	if len(ids) != 1 || ids[0] != "r-large" {
		t.Fatalf("orders.large has %v, want [r-large]", ids)
	}
}

// streamBySubject reads a whole stream, grouped by subject in order.
func streamBySubject(t *testing.T, config string, natsPort int, stream string) map[string][]*jetstream.RawStreamMsg {
	t.Helper()
	js := routerJetStream(t, config, "bus", fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*jetstream.RawStreamMsg{}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out[m.Subject] = append(out[m.Subject], m)
	}
	return out
}
