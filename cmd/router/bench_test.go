package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/cloudevents"
)

// TestBench runs `router bench` against the real router binary: singles
// and batches, closed and open loop, end to end through JetStream; every
// request is acknowledged and counted, with -e2e every event received, and
// the report says what the run cost the router; -cpuprofile writes the
// load generator's own profile.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	r := newCrashRouter(t, 2*time.Minute)
	r.start()
	prof := filepath.Join(t.TempDir(), "bench.prof")
	for _, scenario := range [][]string{
		{"-n", "300", "-c", "8", "-cpuprofile", prof},
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
		} else if u.Commits < 1 || u.Commits > float64(rep.Requests+rep.Events)+10 || u.WritesPerCommit < 1 {
			// Every request is a write of some commit; a loop adds one
			// write per batch it delivers (at least an event each), and
			// the cleanup a few.
			t.Errorf("bench %v: %v commits, %.2f writes each, for %d requests", scenario, u.Commits, u.WritesPerCommit, rep.Requests)
		}
		if o.E2E {
			if e := rep.E2E; e == nil || e.Received != rep.Events || e.Missing != 0 || e.EventsPerSec <= 0 {
				t.Errorf("bench %v: end to end %+v, want all %d events", scenario, e, rep.Events)
			}
		}
		t.Logf("bench %v: %.0f req/s, p50 %s", scenario, rep.RequestsPerSec, ms(rep.Latency.P50))
	}
	// A run where every request failed (a type with no event block: each a
	// 422) says so and exits 1: it exited 0, a measurement to a script.
	var out bytes.Buffer
	err := (&BenchCommand{Main: NewMain(nil, &out, &out)}).Run(context.Background(), []string{"-socket", r.socket, "-type", "no.such.type", "-n", "5", "-c", "1"})
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 1 || !strings.Contains(err.Error(), "every request failed (422: 5)") {
		t.Errorf("bench of a type with no block: %v\n%s", err, out.String())
	}
	// -cpuprofile wrote the load generator's profile: pprof's gzip format.
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("-cpuprofile: %d bytes, %v; want a gzipped profile", len(b), err)
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

// A bench connection reads every answer a net/http server gives on a real
// socket: keep-alive 202s on one connection, an error status with its body,
// a response that closes the connection (the next request dials again), a
// connection dropped mid-answer (an error, then a fresh connection), an
// answer given before the body was read (its status, not the failed write),
// and a cancelled context ends a request the server never answers.
func TestBenchConnReadsEveryAnswer(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := &http.Server{
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > 1<<20 { // answer before reading the body, as a size limit does
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			}
			body, _ := io.ReadAll(r.Body)
			switch string(body) {
			case "fail":
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `{"title":"busy"}`)
			case "bye":
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusAccepted)
				io.WriteString(w, `{"id":"bye"}`)
			case "drop":
				c, _, _ := http.NewResponseController(w).Hijack()
				io.WriteString(c, "HTTP/1.1 202 Accepted\r\nContent-Length: 50\r\n\r\n{\"id\"")
				c.Close()
			case "hang":
				<-r.Context().Done()
			default:
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprintf(w, `{"id":%q}`, body)
			}
		}),
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &benchConn{ctx: ctx, socket: socket, timeout: 10 * time.Second}
	defer c.close()
	post := func(body string) (int, string, error) {
		st, b, err := c.post(requestHead("text/plain", len(body)), []byte(body))
		return st, string(b), err
	}
	for i := range 3 {
		if st, b, err := post(fmt.Sprint("ev", i)); err != nil || st != 202 || b != fmt.Sprintf(`{"id":"ev%d"}`, i) {
			t.Fatalf("post %d: %d %q %v", i, st, b, err)
		}
	}
	if st, b, err := post("fail"); err != nil || st != 503 || b != `{"title":"busy"}` {
		t.Fatalf("error status: %d %q %v", st, b, err)
	}
	if st, _, err := post("bye"); err != nil || st != 202 || c.conn != nil {
		t.Fatalf("Connection: close: %d %v, connection kept: %v", st, err, c.conn != nil)
	}
	if _, _, err := post("drop"); errorClass(0, err) != "unexpected EOF" {
		t.Fatalf("dropped mid-answer: %v (%s)", err, errorClass(0, err))
	}
	if st, _, err := post("again"); err != nil || st != 202 {
		t.Fatalf("after a drop: %d %v", st, err)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (the first, after Connection: close, after the drop)", n)
	}
	if st, _, err := post(strings.Repeat("x", 8<<20)); err != nil || st != http.StatusRequestEntityTooLarge {
		t.Fatalf("answered before the body was read: %d %v, want the 413", st, err)
	}
	if st, _, err := post("after"); err != nil || st != 202 {
		t.Fatalf("after an early answer: %d %v", st, err)
	}
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, _, err := post("hang"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want the context's error", err)
	}
}
