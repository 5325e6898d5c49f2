package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// natsBlock is an embedded NATS server on a free port whose stream captures
// the t.> subjects; subjects outside it have no stream (publishes fail).
const natsBlock = `
nats "local" {
  embedded = true
  port     = -1
  stream "events" {
    subjects = ["t.>"]
  }
}
`

// harness is an engine over a real data file publishing to a real
// in-process NATS server with JetStream.
type harness struct {
	t      testing.TB
	cfg    *config.Config
	db     *storage.DB
	srv    *natsplugin.Server
	sink   *natsplugin.Sink
	eng    *engine.Engine
	clock  *clock
	js     jetstream.JetStream
	dir    string
	opened bool
}

// clock is a fake clock for tests that step loops by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newHarness starts everything for policies (HCL appended to natsBlock).
// With fake, the engine runs on a fake clock and is not opened: the test
// steps its loops with Poll.
// harnessOption adjusts the engine's options.
type harnessOption func(*engine.Options)

// sinkWrap wraps the harness's NATS sink before the engine gets it.
type sinkWrap func(*natsplugin.Sink) switchyard.Sink

// storeWrap wraps the harness's data file before the engine gets it (to
// hold or fail its writes).
type storeWrap func(engine.Store) engine.Store

func withPlugins(p ...switchyard.Plugin) harnessOption {
	return func(o *engine.Options) { o.Plugins = append(o.Plugins, p...) }
}

func newHarness(t testing.TB, policies string, fake bool, extra ...any) *harness {
	t.Helper()
	cfg, err := config.Parse([]byte(natsBlock+policies), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cfg: cfg, dir: t.TempDir()}
	h.db = storagetest.Open(t)
	h.startNATS()
	opts := engine.Options{CleanupInterval: time.Hour}
	if fake {
		h.clock = &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		opts.Now = h.clock.Now
	}
	sinks := []switchyard.Sink{h.sink}
	var store engine.Store = h.db
	for _, x := range extra {
		switch x := x.(type) {
		case sinkWrap:
			sinks[0] = x(h.sink)
		case switchyard.Sink:
			sinks = append(sinks, x)
		case harnessOption:
			x(&opts)
		case storeWrap:
			store = x(store)
		}
	}
	h.eng, err = engine.New(store, cfg, sinks, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !fake {
		if err := h.eng.Open(); err != nil {
			t.Fatal(err)
		}
		h.opened = true
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.eng.Close(ctx)
		h.sink.Close(ctx)
		h.srv.Close(ctx)
	})
	return h
}

// openOver opens a second engine, on h's configuration and sink, over
// store (h.db wrapped to hold or fail its writes); the test's end closes it.
func (h *harness) openOver(store engine.Store, opts engine.Options) *engine.Engine {
	h.t.Helper()
	eng, err := engine.New(store, h.cfg, []switchyard.Sink{h.sink}, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := eng.Open(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { eng.Close(context.Background()) })
	return eng
}

func (h *harness) startNATS() {
	h.t.Helper()
	n := h.cfg.NATS[0]
	n.StoreDir = h.dir + "/nats"
	n.Auth.Password.File = h.dir + "/nats.password"
	if h.srv != nil {
		// Restart on the same port and store.
		n.Port = portOf(h.srv.ClientURL())
	}
	srv, err := natsplugin.StartServer(n, h.dir, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv = srv
	if h.sink != nil {
		return // the sink reconnects by itself
	}
	h.sink, err = natsplugin.Open(context.Background(), n, srv.ClientURL(), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	auth, err := natsplugin.ClientOptions(n, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), append(auth, nats.MaxReconnects(-1))...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(nc.Close)
	h.js, _ = jetstream.New(nc)
}

func portOf(url string) int {
	var port int
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == ':' {
			fmt.Sscanf(url[i+1:], "%d", &port)
			break
		}
	}
	return port
}

// ingestEvent stores one event as given and returns its id.
func (h *harness) ingestEvent(ev switchyard.Event) string {
	h.t.Helper()
	return h.ingestAs(storage.DefaultTenant, ev)
}

// ingestAs stores one event as given, posted by tenant, and returns its id.
func (h *harness) ingestAs(tenant string, ev switchyard.Event) string {
	h.t.Helper()
	req := &engine.IngestRequest{
		Tenant: tenant, Events: []engine.IngestEvent{{Event: ev}},
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	}
	if _, err := h.eng.Ingest(context.Background(), req); err != nil {
		h.t.Fatal(err)
	}
	return ev.ID
}

// ingest stores n events of type typ and returns their ids.
func (h *harness) ingest(typ string, n int, extra ...switchyard.Header) []string {
	h.t.Helper()
	req := &engine.IngestRequest{
		Tenant: "default",
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d-%d", typ, time.Now().UnixNano(), i)
		req.Events = append(req.Events, engine.IngestEvent{Event: switchyard.Event{
			ID: ids[i], Type: typ, Source: "/test", SpecVersion: "1.0", Time: time.Now(),
			DataContentType: "application/json", Data: []byte(`{"i":` + fmt.Sprint(i) + `}`), Extensions: extra,
		}})
	}
	if _, err := h.eng.Ingest(context.Background(), req); err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func (h *harness) record(id string) *storage.Record {
	h.t.Helper()
	rec, err := h.eng.EventStatus(storage.DefaultTenant, id)
	if err != nil {
		h.t.Fatalf("status of %s: %v", id, err)
	}
	return rec
}

// waitDelivered waits until every id is delivered.
func (h *harness) waitDelivered(ids []string, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, id := range ids {
		for h.record(id).State != storage.StateDelivered {
			if time.Now().After(deadline) {
				rec := h.record(id)
				h.t.Fatalf("%s not delivered after %v: %s, attempts %d, %q", id, timeout, rec.State, rec.Attempts, rec.LastError)
			}
			time.Sleep(time.Millisecond) // fine-grained: TestWakeOnWrite measures with it
		}
	}
}

// streamMessages reads the whole "events" stream (but deleted messages).
// streamHoldsOnce fails the test unless the stream holds exactly the
// events ids, each once.
func (h *harness) streamHoldsOnce(ids []string) {
	h.t.Helper()
	msgs := h.streamMessages()
	seen := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		seen[m.Header.Get("ce-id")] = true
	}
	if len(msgs) != len(ids) || len(seen) != len(ids) {
		h.t.Fatalf("stream has %d messages (%d ids), want the %d events stored, once each", len(msgs), len(seen), len(ids))
	}
	for _, id := range ids {
		if !seen[id] {
			h.t.Fatalf("%s stored but not in the stream", id)
		}
	}
}

func (h *harness) streamMessages() []*jetstream.RawStreamMsg {
	h.t.Helper()
	ctx := context.Background()
	s, err := h.js.Stream(ctx, "events")
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted
		}
		if err != nil {
			h.t.Fatalf("get %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// timesSent counts the stream's messages with Nats-Msg-Id id, on subject
// (any subject when it is "").
func (h *harness) timesSent(subject, id string) int {
	h.t.Helper()
	n := 0
	for _, m := range h.streamMessages() {
		if (subject == "" || m.Subject == subject) && m.Header.Get("Nats-Msg-Id") == id {
			n++
		}
	}
	return n
}

// subscribe subscribes to subject on h's NATS server, and returns once the
// server has the subscription: a publish right after it reaches it.
func (h *harness) subscribe(subject string) *nats.Subscription {
	h.t.Helper()
	sub, err := h.js.Conn().SubscribeSync(subject)
	if err == nil {
		err = h.js.Conn().Flush()
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return sub
}

// reload reloads h's engine with policies (HCL appended to natsBlock) and
// plugins.
func (h *harness) reload(policies string, plugins ...switchyard.Plugin) {
	h.t.Helper()
	cfg, err := config.Parse([]byte(natsBlock+policies), "reload.hcl")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.eng.Reload(cfg, plugins); err != nil {
		h.t.Fatal(err)
	}
}

// linedUp reports whether the file marks queue q as lined up by key
// (storage.Tx.LinedUp).
func (h *harness) linedUp(q string) (ok bool) {
	h.t.Helper()
	if err := h.db.View(func(tx *storage.Tx) error { ok = tx.LinedUp(q); return nil }); err != nil {
		h.t.Fatal(err)
	}
	return ok
}
