package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// ctxPlugin is a plugin written in Go that sees the handle's context (the
// state view rides on it).
type ctxPlugin struct {
	name string
	fn   func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error)
}

func (p ctxPlugin) Name() string { return p.name }
func (p ctxPlugin) Handle(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
	return p.fn(ctx, ev)
}

// counterPlugin counts the events it handles in the state key "n"; an event
// whose subject is "fail" is answered with retry after counting, while fail
// is set.
func counterPlugin(fail *atomic.Bool) ctxPlugin {
	return ctxPlugin{name: "count", fn: func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		st := switchyard.StateFrom(ctx)
		v, _, err := st.Get("count", []byte("n"))
		if err != nil {
			return nil, err
		}
		n := uint32(0)
		if len(v) == 4 {
			n = binary.LittleEndian.Uint32(v)
		}
		if err := st.Put("count", []byte("n"), binary.LittleEndian.AppendUint32(nil, n+1), 0); err != nil {
			return nil, err
		}
		if ev.Subject == "fail" && fail.Load() {
			return nil, fmt.Errorf("not now: %w", switchyard.ErrPluginRetry)
		}
		return []switchyard.PluginOutput{{Event: *ev}}, nil
	}}
}

func (h *harness) stateCount(ns string) uint32 {
	h.t.Helper()
	var n uint32
	h.db.View(func(tx *storage.Tx) error {
		v, ok, err := tx.StateGet(ns, []byte("n"), time.Now().Add(24*time.Hour))
		if err != nil {
			h.t.Fatal(err)
		}
		if ok {
			n = binary.LittleEndian.Uint32(v)
		}
		return nil
	})
	return n
}

// A plugin's state writes count once per event outcome: in a batch, each
// event sees the writes of those before it; an event that is retried has
// its writes discarded, and the later events that read what it wrote are
// requeued without an attempt and count again with the committed state;
// when every event is done, the count is the number of events exactly.
func TestPluginStateCountsEachOutcomeOnce(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := newHarness(t, `
plugin "count" { wasm = "unused.wasm" }
event "t.count" {
  plugins = ["count"]
  backoff { delay = "1s" }
  route {
    to      = "nats.local"
    subject = "t.count"
  }
}
`, true, withPlugins(counterPlugin(&fail)))
	for i := 1; i <= 5; i++ {
		subject := ""
		if i == 3 {
			subject = "fail"
		}
		h.ingestEvent(switchyard.Event{ID: fmt.Sprintf("a%d", i), Type: "t.count", Source: "/t", SpecVersion: "1.0", Subject: subject})
	}
	res, err := h.eng.Loop("t.count").Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 2 || res.Retried != 1 || res.Requeued != 2 {
		t.Fatalf("first poll %+v: want a1, a2 delivered, a3 retried, a4 and a5 requeued", res)
	}
	if n := h.stateCount("count:t.count"); n != 2 {
		t.Fatalf("count after the first poll = %d, want 2 (a3's write discarded, a4 and a5 read it)", n)
	}
	if rec := h.record("a4"); rec.State != storage.StatePending || rec.Attempts != 0 || !strings.Contains(rec.LastError, "read plugin state an earlier event of its batch wrote") {
		t.Fatalf("a4: %s, %d attempts, %q", rec.State, rec.Attempts, rec.LastError)
	}
	fail.Store(false)
	for range 5 {
		h.clock.Advance(2 * time.Second)
		if _, err := h.eng.Loop("t.count").Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		if rec := h.record(fmt.Sprintf("a%d", i)); rec.State != storage.StateDelivered {
			t.Fatalf("a%d: %s", i, rec.State)
		}
	}
	if n := h.stateCount("count:t.count"); n != 5 {
		t.Fatalf("count = %d, want 5: one per event", n)
	}
}
