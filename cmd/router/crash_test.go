package main

// Crash tests (contract §8): the real router binary under load, killed with
// SIGKILL at random moments and restarted on the same data file, then
// counted. Every event the router acknowledged with a 2xx must be in the
// data file (TestCrashIngest) and in the JetStream stream (TestCrashPublish).
//
//	go test ./cmd/router/ -run Crash          # 20 and 10 kills
//	go test ./cmd/router/ -run Crash -long -timeout 30m   # 200 kills each

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

var long = flag.Bool("long", false, "crash tests: 200 kills each instead of 20 (ingest) and 10 (publish)")

const (
	crashType    = "crash.test"
	crashSubject = "crash.test"
	crashStream  = "crash"
)

func TestMain(m *testing.M) {
	if os.Getenv(checkWorkerEnv) == "1" {
		// This test binary started as `router db check`'s checking child.
		killCheckerOnce()
		if err := NewMain(os.Stdin, os.Stdout, os.Stderr).Run(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
			os.Exit(exitCode(err))
		}
		os.Exit(0)
	}
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// routerBinary builds the router once per test run.
func routerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "switchyard-crash-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "router")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// crashRouter is the router binary on one config and data file, started
// and killed over and over.
type crashRouter struct {
	t        *testing.T
	bin      string
	config   string
	socket   string
	logPath  string
	natsPort int
	logLevel string // the router's -log-level; default warn
	client   *http.Client
	// restartDelay is how long crashCycles leaves the router down after
	// each kill (systemd's RestartSec); default 0.
	restartDelay time.Duration

	cmd      *exec.Cmd
	exited   chan struct{}
	starts   int
	tails    int             // live tails the test started (TestTail)
	startups []time.Duration // exec to healthy, per start
}

func newCrashRouter(t *testing.T, dupWindow time.Duration) *crashRouter {
	t.Helper()
	bin := routerBinary(t)
	dir := t.TempDir()
	// A unix socket path must stay under ~100 bytes; t.TempDir's may not.
	sockDir, err := os.MkdirTemp("/tmp", "sy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	r := &crashRouter{
		t:        t,
		bin:      bin,
		config:   filepath.Join(dir, "router.hcl"),
		socket:   filepath.Join(sockDir, "r.sock"),
		logPath:  filepath.Join(dir, "router.log"),
		natsPort: testkit.FreePort(t),
		logLevel: "warn",
	}
	cfg := fmt.Sprintf(`
listen { socket = %q }
storage { path = %q }

nats "local" {
  embedded = true
  host     = "127.0.0.1"
  port     = %d
  stream %q {
    subjects   = [%q]
    storage    = "file"
    duplicates = %q
  }
}

event %q {
  route {
    to      = "nats.local"
    subject = %q
  }
  polling { min = "10ms" }
}
`, r.socket, filepath.Join(dir, "data", "router.db"), r.natsPort, crashStream, crashSubject+".>",
		dupWindow.String(), crashType, crashSubject+".events")
	if err := os.WriteFile(r.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.client = testkit.UnixClient(r.socket, 10*time.Second, 32)
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			r.dumpLog()
		}
	})
	return r
}

func (r *crashRouter) natsURL() string { return "nats://127.0.0.1:" + strconv.Itoa(r.natsPort) }

// start runs the router and waits until /healthz answers.
func (r *crashRouter) start() {
	r.t.Helper()
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	r.starts++
	fmt.Fprintf(logf, "=== start %d at %s\n", r.starts, time.Now().Format(time.RFC3339Nano))
	begin := time.Now()
	cmd := exec.Command(r.bin, "run", "-config", r.config, "-log-level", r.logLevel)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		r.t.Fatal(err)
	}
	logf.Close() // the child has its own copy
	r.cmd, r.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(r.exited)

	deadline := time.Now().Add(30 * time.Second)
	for {
		if r.healthy() {
			r.startups = append(r.startups, time.Since(begin))
			return
		}
		select {
		case <-r.exited:
			r.dumpLog()
			r.t.Fatalf("router exited during start %d: %v", r.starts, cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.dumpLog()
			r.t.Fatalf("router not healthy 30s after start %d", r.starts)
		}
	}
}

func (r *crashRouter) healthy() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://router/healthz", nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kill sends SIGKILL and waits for the process to be gone.
func (r *crashRouter) kill() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		r.t.Fatalf("kill: %v", err)
	}
	<-r.exited
	r.cmd = nil
}

// stop ends the router gracefully (SIGTERM), or kills it after 10s.
func (r *crashRouter) stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.exited
	}
	r.cmd = nil
}

func (r *crashRouter) dumpLog() {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	r.t.Logf("router log (tail):\n%s", b)
}

// crashCycles lets the load run on the started router for a random while,
// kills it and starts it again, kills times; the router is left running.
// It returns how many kills hit a router with events claimed for
// publishing (in_process just before the kill).
func (r *crashRouter) crashCycles(kills int, minUp, maxUp time.Duration) (midPublish int) {
	r.t.Helper()
	for range kills {
		time.Sleep(minUp + rand.N(maxUp-minUp))
		if _, inProcess, err := r.typeStats(); err == nil && inProcess > 0 {
			midPublish++
		}
		r.kill()
		time.Sleep(r.restartDelay)
		r.start()
	}
	return midPublish
}

// loader posts events under load and records every id the router
// acknowledged with a 2xx: structured singles, binary singles and batches,
// half of them with client-chosen ids.
type loader struct {
	client *http.Client

	mu    sync.Mutex
	acked []string

	requests, ok, failed, unreadable atomic.Int64
	seq                              atomic.Int64
}

// run posts from workers goroutines until ctx ends.
func (l *loader) run(ctx context.Context, workers int) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if !l.post(ctx, w) {
					// Most likely the router is down: don't spin.
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	return wg.Wait
}

func (l *loader) post(ctx context.Context, worker int) bool {
	n := 1
	kind := rand.N(3) // 0 structured, 1 binary, 2 batch
	if kind == 2 {
		n = 2 + rand.N(19)
	}
	clientIDs := rand.N(2) == 0
	ids := make([]string, n)
	events := make([]map[string]any, n)
	for i := range events {
		ev := map[string]any{
			"specversion": "1.0",
			"type":        crashType,
			"source":      fmt.Sprintf("/crash/%d", worker),
			"data":        map[string]any{"n": l.seq.Add(1)},
		}
		if clientIDs {
			ids[i] = fmt.Sprintf("w%d-%d", worker, l.seq.Add(1))
			ev["id"] = ids[i]
		}
		events[i] = ev
	}
	var req *http.Request
	switch kind {
	case 0:
		body, _ := json.Marshal(events[0])
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://router/v1/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/cloudevents+json")
	case 1:
		body, _ := json.Marshal(events[0]["data"])
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://router/v1/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Type", crashType)
		req.Header.Set("Ce-Source", events[0]["source"].(string))
		if clientIDs {
			req.Header.Set("Ce-Id", ids[0])
		}
	case 2:
		body, _ := json.Marshal(events)
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://router/v1/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	}
	l.requests.Add(1)
	resp, err := l.client.Do(req)
	if err != nil {
		l.failed.Add(1)
		return false
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		l.failed.Add(1)
		return false
	}
	l.ok.Add(1)
	if got, err := acceptedIDs(body); readErr == nil && err == nil && len(got) == n {
		ids = got
	} else if !clientIDs {
		// A 2xx whose ids we cannot read: nothing to check it by.
		l.unreadable.Add(1)
		return true
	}
	l.mu.Lock()
	l.acked = append(l.acked, ids...)
	l.mu.Unlock()
	return true
}

func (l *loader) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.acked...)
}

// eventStatus is the part of GET /v1/events/{id} the tests read.
type eventStatus struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Outputs []struct {
		Destination string `json:"destination"`
		Delivered   bool   `json:"delivered"`
		Position    *struct {
			Stream   string `json:"stream"`
			Sequence uint64 `json:"sequence"`
		} `json:"position"`
	} `json:"outputs"`
}

// statuses GETs every id (concurrently); a missing event has no entry.
func (r *crashRouter) statuses(ids []string) (map[string]*eventStatus, error) {
	var (
		mu   sync.Mutex
		out  = make(map[string]*eventStatus, len(ids))
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				st, err := r.status(ids[i])
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if st != nil {
					out[ids[i]] = st
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// status is one GET /v1/events/{id}; nil, nil when it is not found.
func (r *crashRouter) status(id string) (*eventStatus, error) {
	resp, err := r.client.Get("http://router/v1/events/" + id)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("GET /v1/events/%s: %s: %s", id, resp.Status, body)
	}
	st := new(eventStatus)
	if err := json.Unmarshal(body, st); err != nil {
		return nil, fmt.Errorf("GET /v1/events/%s: %w", id, err)
	}
	return st, nil
}

// typeStats is the crash type's line of GET /v1/stats.
func (r *crashRouter) typeStats() (pending, inProcess int, err error) {
	return r.statsOf(crashType)
}

// statsOf is the pending and in-process counts of the type typ.
func (r *crashRouter) statsOf(typ string) (pending, inProcess int, err error) {
	st, err := fetchStats(r.client)
	if err != nil {
		return 0, 0, err
	}
	pending, inProcess, _ = st.waiting(typ)
	return pending, inProcess, nil
}

// crashLoad runs the loader against r through kills crash cycles and
// returns the acknowledged ids, with the router left running and idle.
func crashLoad(t *testing.T, r *crashRouter, kills int) []string {
	t.Helper()
	l := &loader{client: r.client}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	r.start()
	wait := l.run(ctx, 8)
	midPublish := r.crashCycles(kills, 100*time.Millisecond, 1200*time.Millisecond)
	// A little load on the last, unkilled run too.
	time.Sleep(300 * time.Millisecond)
	cancel()
	wait()
	acked := l.ackedIDs()
	t.Logf("%d kills (%d with events in process) in %s: %d requests, %d acknowledged (%d events), %d failed (in flight at a kill, or the router down), %d acknowledged without readable ids",
		kills, midPublish, time.Since(start).Round(time.Millisecond), l.requests.Load(), l.ok.Load(), len(acked), l.failed.Load(), l.unreadable.Load())
	var h Histogram
	for _, d := range r.startups {
		h.Record(d)
	}
	t.Logf("restart to healthy: p50 %s, p90 %s, max %s (last %s)",
		ms(h.Quantile(0.5)), ms(h.Quantile(0.9)), ms(h.Max()), ms(r.startups[len(r.startups)-1]))
	if len(acked) == 0 {
		t.Fatal("no event was acknowledged")
	}
	if n := l.unreadable.Load(); n > 0 {
		t.Errorf("%d requests got a 2xx with a body that does not list their ids", n)
	}
	return acked
}

// The real binary, SIGKILLed 20 times (200 with -long) under ingest and
// started again each time on the same data file: every event it
// acknowledged is in the file, in a state it may be in, and each start
// after a kill says in its log that it checks the file first.
func TestCrashIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	kills := 20
	if *long {
		kills = 200
	}
	r := newCrashRouter(t, 2*time.Minute)
	acked := crashLoad(t, r, kills)
	if b, _ := os.ReadFile(r.logPath); !strings.Contains(string(b), "the last run did not stop cleanly: checking the whole data file before opening it") {
		t.Errorf("no start after a kill says that it checks the data file")
	}

	st, err := r.statuses(acked)
	if err != nil {
		t.Fatalf("reading statuses: %v", err)
	}
	states := map[string]int{}
	lost := 0
	for _, id := range acked {
		s, ok := st[id]
		if !ok {
			if lost < 10 {
				t.Errorf("acknowledged event %s is not in the data file", id)
			}
			lost++
			continue
		}
		states[s.State]++
	}
	t.Logf("acked %d, found %d, lost %d; states %v", len(acked), len(acked)-lost, lost, states)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged events lost", lost, len(acked))
	}
	for s := range states {
		switch s {
		case "pending", "in_process", "delivered", "dlq":
		default:
			t.Errorf("%d events in unexpected state %q", states[s], s)
		}
	}
}

// The real binary, SIGKILLed 10 times (200 with -long) while it publishes
// to JetStream with a dedup window as long as the run: every event it
// acknowledged is delivered, in the stream exactly once, at the position
// the router recorded.
func TestCrashPublish(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	kills := 10
	if *long {
		kills = 200
	}
	// The dedup window must cover the whole run for "no duplicates" to hold.
	r := newCrashRouter(t, 30*time.Minute)
	acked := crashLoad(t, r, kills)
	checkExactlyOnce(t, r, acked)
}

// A router started again long after each SIGKILL — three times the
// embedded server's default duplicates window, which therefore drops
// nothing — stores nothing twice: what the stream stored and the router had
// not yet marked delivered is read back at the start and recorded, not
// sent again (engine.Republish).
func TestCrashPublishDefaultWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	r := newCrashRouter(t, config.DefaultEmbeddedDuplicates)
	r.restartDelay = 3 * config.DefaultEmbeddedDuplicates
	acked := crashLoad(t, r, 5)
	checkExactlyOnce(t, r, acked)
}

// checkExactlyOnce lets the router drain, then checks that every
// acknowledged event is delivered, in the stream exactly once, at the
// position the router recorded.
func checkExactlyOnce(t *testing.T, r *crashRouter, acked []string) {
	t.Helper()
	// Let the router drain: nothing pending, then every event delivered.
	waitDrained(t, r.client, crashType, "after the load", time.Minute)
	st, err := r.statuses(acked)
	if err != nil {
		t.Fatalf("reading statuses: %v", err)
	}
	notDelivered := 0
	for _, id := range acked {
		if s, ok := st[id]; !ok || s.State != "delivered" {
			if notDelivered < 10 {
				t.Errorf("acknowledged event %s: status %+v, want delivered", id, s)
			}
			notDelivered++
		}
	}
	if notDelivered > 0 {
		t.Fatalf("%d of %d acknowledged events not delivered", notDelivered, len(acked))
	}

	bySeq, total := readStream(t, r.config, r.natsURL(), crashStream)
	ids := make(map[string]int, len(bySeq))
	for _, id := range bySeq {
		ids[id]++
	}
	lost, misplaced := 0, 0
	for _, id := range acked {
		if ids[id] == 0 {
			if lost < 10 {
				t.Errorf("acknowledged event %s is not in the stream", id)
			}
			lost++
		}
		// The position the router recorded holds this event.
		for _, o := range st[id].Outputs {
			var at string
			if o.Position != nil {
				at = bySeq[o.Position.Sequence]
			}
			if at != id {
				if misplaced < 10 {
					t.Errorf("event %s: the recorded position %+v holds %q", id, o.Position, at)
				}
				misplaced++
			}
		}
	}
	extra := int(total) - len(ids)
	t.Logf("acked %d, in stream %d messages, %d distinct ids: lost %d, duplicates %d, wrong recorded positions %d",
		len(acked), total, len(ids), lost, extra, misplaced)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged events are not in the stream", lost, len(acked))
	}
	if extra > 0 {
		t.Errorf("%d duplicate messages in the stream despite Nats-Msg-Id dedup", extra)
	}
}

// routerConn connects to the NATS server of the nats block named block in
// the router's config (with the password it names or generated); the
// connection closes with the test.
func routerConn(t testing.TB, config, block, url string) *natsgo.Conn {
	t.Helper()
	nc, err := connectNATS(config, block, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// routerJetStream is a JetStream client on routerConn's connection.
func routerJetStream(t testing.TB, config, block, url string) jetstream.JetStream {
	t.Helper()
	return testkit.JetStreamOn(t, routerConn(t, config, block, url))
}

// readStream reads a whole stream of the router's embedded server with an
// ordered consumer and returns the ce-id of each message by sequence, and
// the message count.
func readStream(t *testing.T, config, url, name string) (map[uint64]string, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := routerJetStream(t, config, "local", url)
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := info.State.Msgs
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bySeq := make(map[uint64]string, total)
	for uint64(len(bySeq)) < total {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			bySeq[md.Sequence.Stream] = m.Headers().Get("ce-id")
			n++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsgo.ErrTimeout) {
			t.Fatalf("fetch: %v", err)
		}
		if n == 0 && ctx.Err() != nil {
			t.Fatalf("read %d of %d messages before the timeout", len(bySeq), total)
		}
	}
	if first := info.State.FirstSeq; first != 1 {
		t.Logf("stream starts at sequence %d", first)
	}
	return bySeq, total
}
