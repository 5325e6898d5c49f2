package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/cloudevents"
)

// TestBench runs `router bench` against the real router binary: singles
// and batches, closed and open loop, end to end through JetStream; every
// request is acknowledged and counted, with -e2e every event received, and
// the report says what the run cost the router.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	r := newCrashRouter(t, 2*time.Minute)
	r.start()
	for _, scenario := range [][]string{
		{"-n", "300", "-c", "8"},
		{"-n", "30", "-c", "4", "-batch", "10", "-e2e"},
		{"-d", "500ms", "-c", "4", "-rate", "400", "-e2e"},
		{"-n", "30", "-c", "4", "-batch", "10", "-e2e", "-client-ids"},
	} {
		var out bytes.Buffer
		m := NewMain(nil, &out, &out)
		args := append([]string{"-socket", r.socket, "-type", crashType, "-o", "json",
			"-config", r.config, "-nats-url", r.natsURL(), "-subject", crashSubject + ".>", "-drain", "5s"}, scenario...)
		if err := (&BenchCommand{Main: m}).Run(context.Background(), args); err != nil {
			t.Fatalf("bench %v: %v\n%s", scenario, err, out.Bytes())
		}
		var rep benchReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("bench %v: %v\n%s", scenario, err, out.Bytes())
		}
		o := rep.Options
		switch {
		case len(rep.Errors) > 0:
			t.Errorf("bench %v: errors %v", scenario, rep.Errors)
		case rep.Events != rep.Requests*uint64(o.Batch) || rep.Requests == 0:
			t.Errorf("bench %v: %d requests, %d events", scenario, rep.Requests, rep.Events)
		case o.Requests > 0 && rep.Requests != uint64(o.Requests):
			t.Errorf("bench %v: %d requests ok, want %d", scenario, rep.Requests, o.Requests)
		case rep.Latency.Count != rep.Requests || rep.Latency.P50 <= 0 || rep.Latency.P50 > rep.Latency.Max:
			t.Errorf("bench %v: latency %+v", scenario, rep.Latency)
		}
		if u := rep.Router; u == nil || u.AllocsPerEvent <= 0 || u.AllocBytesPerEvent <= 0 || u.HeapInuse <= 0 || u.Resident <= 0 ||
			u.AnonResident <= 0 || u.AnonResident > u.Resident {
			t.Errorf("bench %v: router use %+v", scenario, u)
		} else if u.Records < float64(rep.Events) || u.DiskUsed <= 0 || u.DiskFile < u.DiskUsed || u.DiskPerRecord != u.DiskUsed/u.Records {
			// Every event of the run is still in the file (delivered ones
			// are kept until outbox.ttl).
			t.Errorf("bench %v: data file %+v after %d events", scenario, u, rep.Events)
		}
		if o.E2E {
			if e := rep.E2E; e == nil || e.Received != rep.Events || e.Missing != 0 || e.EventsPerSec <= 0 {
				t.Errorf("bench %v: end to end %+v, want all %d events", scenario, e, rep.Events)
			}
		}
		t.Logf("bench %v: %.0f req/s, p50 %s", scenario, rep.RequestsPerSec, ms(rep.Latency.P50))
	}
}

// With -client-ids every event of every request has an id of its own, in
// a body that still decodes as the batch it was.
func TestBenchClientIDs(t *testing.T) {
	template, _ := requestBody("demo.greeting", 3, 16, true)
	ids := newClientIDs()
	seen := map[string]bool{}
	for _, first := range []int64{0, 3, 1 << 40} {
		evs, err := cloudevents.DecodeBatch(ids.fill(template, first), 10)
		if err != nil || len(evs) != 3 {
			t.Fatalf("body of %d: %d events, %v", first, len(evs), err)
		}
		for i, ev := range evs {
			want := fmt.Sprintf("%s-%016x", ids.prefix[:], first+int64(i))
			if ev.ID != want || seen[ev.ID] {
				t.Fatalf("event %d of body %d: id %q, want %q once", i, first, ev.ID, want)
			}
			seen[ev.ID] = true
		}
	}
	if single, _ := requestBody("demo.greeting", 1, 16, false); bytes.Contains(single, []byte(`"id"`)) {
		t.Fatalf("without -client-ids the body has an id: %s", single)
	}
}
