package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// natsCluster starts three in-process nats-servers with JetStream in one
// cluster and returns them and their client URLs.
func natsCluster(t *testing.T) ([]*server.Server, []string) {
	t.Helper()
	ports := []int{testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var servers []*server.Server
	var urls []string
	for i, p := range ports {
		ns := testkit.NATS(t, func(o *server.Options) {
			o.ServerName, o.JetStream, o.StoreDir = fmt.Sprintf("n%d", i+1), true, t.TempDir()
			o.Cluster = server.ClusterOpts{Name: "edge", Host: "127.0.0.1", Port: p}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		})
		servers, urls = append(servers, ns), append(urls, ns.ClientURL())
	}
	// JetStream answers once the cluster elected its meta leader.
	js := testkit.JetStream(t, strings.Join(urls, ","))
	var err error
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	}, func() string { return fmt.Sprintf("JetStream cluster not ready: %v", err) })
	return servers, urls
}

// underLoad posts events with a loader while kill runs, then returns every
// acknowledged id.
func underLoad(t *testing.T, sock string, kill func()) []string {
	t.Helper()
	l := &loader{client: testkit.UnixClient(sock, 10*time.Second)}
	ctx, cancel := context.WithCancel(context.Background())
	wait := l.run(ctx, 4)
	time.Sleep(1500 * time.Millisecond)
	kill()
	time.Sleep(3 * time.Second)
	cancel()
	wait()
	acked := l.ackedIDs()
	if len(acked) == 0 {
		t.Fatal("no event was acknowledged")
	}
	return acked
}

// Publishing to a 3-node NATS cluster with an R3 stream goes on when the
// node leading the stream is killed under load: every acknowledged event
// is delivered and in the stream.
func TestNATSClusterNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node NATS cluster under load")
	}
	servers, urls := natsCluster(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
nats "cluster" {
  url = %q
  stream %q {
    subjects = [%q]
    replicas = 3
  }
}
event %q {
  route {
    to      = "nats.cluster"
    subject = %q
  }
  # While the cluster elects a new stream leader JetStream answers "no
  # response from stream", which counts an attempt and backs off; a retry
  # comes due at the loop's poll cadence, so keep max short here.
  polling {
    min = "10ms"
    max = "1s"
  }
  backoff { delay = "1s" }
}
`, strings.Join(urls, ","), crashStream, crashSubject+".>", crashType, crashSubject+".events"))
	runRouter(t, path, sock)
	js := testkit.JetStream(t, strings.Join(urls, ","))
	acked := underLoad(t, sock, func() {
		st, err := js.Stream(context.Background(), crashStream)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := st.Info(context.Background())
		for _, ns := range servers {
			if info.Cluster != nil && ns.Name() == info.Cluster.Leader {
				t.Logf("killing %s, the stream's leader", ns.Name())
				ns.Shutdown()
				return
			}
		}
		servers[0].Shutdown()
	})
	c := testkit.UnixClient(sock, 10*time.Second)
	killed := time.Now()
	for _, id := range acked {
		waitState(t, c, id, "delivered", 60*time.Second)
	}
	t.Logf("all delivered %s after the load stopped", time.Since(killed).Round(time.Millisecond))
	// Read the whole stream; a read cut short while the cluster settles
	// starts over.
	st, err := js.Stream(context.Background(), crashStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		var m *jetstream.RawStreamMsg
		for try := 0; ; try++ {
			if m, err = st.GetMsg(context.Background(), seq); err == nil || try == 20 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("read sequence %d: %v", seq, err)
		}
		seen[m.Header.Get("ce-id")]++
	}
	dups := 0
	for _, id := range acked {
		switch seen[id] {
		case 0:
			t.Fatalf("acknowledged event %s is not in the stream", id)
		case 1:
		default:
			dups++
		}
	}
	t.Logf("%d events acknowledged, all in the R3 stream after a node was killed (%d stored twice)", len(acked), dups)
}

// Publishing to a 3-broker Kafka cluster goes on when a broker is removed
// under load: every acknowledged event is delivered and in the topic.
func TestKafkaClusterBrokerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-broker Kafka cluster under load")
	}
	kc := testkit.Kafka(t, kfake.NumBrokers(3), kfake.SeedTopics(6, "cluster-events"))
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "cluster" { brokers = [%s] }
event %q {
  route {
    to    = "kafka.cluster"
    topic = "cluster-events"
  }
  polling { min = "10ms" }
}
`, `"`+strings.Join(kc.ListenAddrs(), `", "`)+`"`, crashType))
	runRouter(t, path, sock)
	acked := underLoad(t, sock, func() {
		leader := kc.LeaderFor("cluster-events", 0)
		t.Logf("removing broker %d, the leader of partition 0", leader)
		if err := kc.RemoveNode(leader); err != nil {
			t.Fatal(err)
		}
	})
	c := testkit.UnixClient(sock, 10*time.Second)
	for _, id := range acked {
		waitState(t, c, id, "delivered", 60*time.Second)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("cluster-events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Read until every acknowledged id was seen: the topic also holds
	// events whose request the load cut off at its end (stored, never
	// acknowledged), so a count of ids would stop early.
	missing := make(map[string]bool, len(acked))
	for _, id := range acked {
		missing[id] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(missing) > 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "ce_id" {
					delete(missing, string(h.Value))
				}
			}
		})
	}
	for _, id := range acked {
		if missing[id] {
			t.Fatalf("acknowledged event %s is not in the topic (%d of %d missing)", id, len(missing), len(acked))
		}
	}
	t.Logf("%d events acknowledged, all in the topic after a broker was removed", len(acked))
}
