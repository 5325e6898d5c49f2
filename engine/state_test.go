package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// counterPlugin counts the events it handles in the state key "n"; an event
// whose subject is "fail" is answered with retry after counting, while fail
// is set.
func counterPlugin(fail *atomic.Bool) funcPlugin {
	return funcPlugin{name: "count", fn: func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
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
	h := newHarness(t, pluginPolicy("count", "t.count", `backoff { delay = "1s" }`), true, withPlugins(counterPlugin(&fail)))
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

// Plugin state is kept per tenant: the same plugin on the same type counts
// each tenant's events in a namespace of its own (storage.TenantNamespace;
// the default tenant's is the one it always had), so no tenant reads or
// changes what another tenant's events wrote.
func TestPluginStateIsPerTenant(t *testing.T) {
	h := newHarness(t, pluginPolicy("count", "t.count", ""), true, withPlugins(counterPlugin(new(atomic.Bool))))
	for i, tenant := range []string{storage.DefaultTenant, "acme", "acme", "beta/x:y", "acme"} {
		h.ingestAs(tenant, switchyard.Event{ID: fmt.Sprintf("e%d", i), Type: "t.count", Source: "/t", SpecVersion: "1.0"})
	}
	res, err := h.eng.Loop("t.count").Poll(context.Background())
	if err != nil || res.Delivered != 5 {
		t.Fatalf("poll: %+v, %v: want 5 delivered", res, err)
	}
	for ns, want := range map[string]uint32{"count:t.count": 1, "@acme/count:t.count": 3, "@beta%2Fx:y/count:t.count": 1} {
		if n := h.stateCount(ns); n != want {
			t.Errorf("namespace %q counts %d, want %d", ns, n, want)
		}
	}
	nss, err := h.eng.StateNamespaces("count")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ns := range nss {
		got = append(got, ns.Tenant+" "+ns.Plugin+" "+ns.Queue)
	}
	if want := "[acme count t.count beta/x:y count t.count default count t.count]"; fmt.Sprint(got) != want {
		t.Errorf("namespaces listed as %v, want %s", got, want)
	}
}

// The state limits hold and say which: a value over 64 KiB, a key over 256
// bytes or empty, and a namespace past 100,000 keys are refused with
// ErrStateLimit (the wasm host turns it into a reject naming the plugin and
// the event); a put within the limits is not.
func TestPluginStateLimits(t *testing.T) {
	var errs []error
	limits := funcPlugin{name: "lim", fn: func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		st := switchyard.StateFrom(ctx)
		errs = append(errs,
			st.Put("lim", []byte("v"), make([]byte, 64<<10+1), 0),
			st.Put("lim", make([]byte, 257), []byte("x"), 0),
			st.Put("lim", nil, []byte("x"), 0),
			st.Put("lim", []byte("ok"), make([]byte, 64<<10), 0))
		var many error
		for i := 0; many == nil && !testing.Short(); i++ { // 100,000 puts: not with -short
			many = st.Put("lim", []byte(fmt.Sprint(i)), nil, 0)
			if many != nil {
				errs = append(errs, fmt.Errorf("after %d keys: %w", i, many))
			}
		}
		return nil, nil
	}}
	h := newHarness(t, pluginPolicy("lim", "t.lim", ""), true, withPlugins(limits))
	h.ingestEvent(switchyard.Event{ID: "l1", Type: "t.lim", Source: "/t", SpecVersion: "1.0"})
	if _, err := h.eng.Loop("t.lim").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	wants := []string{"state value of 65537 bytes, over the limit of 65536", "state key of 257 bytes: keys have 1 to 256", "state key of 0 bytes", "", "after 99999 keys: namespace \"lim:t.lim\" holds 100000 keys, the limit"}
	if testing.Short() {
		wants = wants[:4]
	}
	for i, want := range wants {
		switch err := errs[i]; {
		case want == "" && err != nil:
			t.Errorf("put %d: %v, want it stored", i, err)
		case want != "" && (!errors.Is(err, switchyard.ErrStateLimit) || !strings.Contains(err.Error(), want)):
			t.Errorf("put %d: %v, want ErrStateLimit saying %q", i, err, want)
		}
	}
}

// A delivered event that is republished (after a power cut: its outputs
// marked undelivered again) runs its plugins again, but its state writes
// were committed with its first outcome and do not count twice.
func TestPluginStateRepublishCountsOnce(t *testing.T) {
	var fail atomic.Bool
	h := newHarness(t, pluginPolicy("count", "t.count", ""), true, withPlugins(counterPlugin(&fail)))
	id := h.ingestEvent(switchyard.Event{ID: "r1", Type: "t.count", Source: "/t", SpecVersion: "1.0"})
	if _, err := h.eng.Loop("t.count").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.db.Update(context.Background(), func(tx *storage.Tx) error {
		rec := h.record(id)
		_, err := tx.Redeliver(rec, func(storage.Output) bool { return true }, false, h.clock.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Loop("t.count").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(id); rec.State != storage.StateDelivered {
		t.Fatalf("republished event: %s", rec.State)
	}
	if n := h.stateCount("count:t.count"); n != 1 {
		t.Fatalf("count = %d after a republish, want 1", n)
	}
}

// A plugin's state keys page with a cursor that neither skips nor repeats a
// key, and a cursor is refused (EINVALIDREQUEST) where it would start the listing
// somewhere else: another namespace's, another prefix's, another
// listing's, or one made up.
func TestStateKeysCursor(t *testing.T) {
	h := newHarness(t, pluginPolicy("count", "t.count", ""), true, withPlugins(counterPlugin(new(atomic.Bool))))
	err := h.db.Update(context.Background(), func(tx *storage.Tx) error {
		for _, ns := range []string{"count:t.count", "@acme/count:t.count"} {
			for _, k := range []string{"a1", "b1", "b2", "b3", "c1"} {
				if err := tx.StatePut(ns, []byte(k), []byte("v"), time.Time{}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "count:t.count"
	var seen []string
	var cursors []string
	for cursor := ""; ; {
		keys, next, err := h.eng.StateKeys(ns, []byte("b"), cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			seen = append(seen, string(k.Key))
		}
		if next == "" {
			break
		}
		cursors = append(cursors, next)
		cursor = next
	}
	if fmt.Sprint(seen) != "[b1 b2 b3]" || len(cursors) != 1 {
		t.Fatalf("paged %v with cursors %q, want [b1 b2 b3] in two pages", seen, cursors)
	}
	_, acmeNext, err := h.eng.StateKeys("@acme/count:t.count", []byte("b"), "", 1)
	if err != nil || acmeNext == "" {
		t.Fatalf("acme's first page: %q, %v", acmeNext, err)
	}
	for what, try := range map[string]func() error{
		"another namespace's": func() error { _, _, err := h.eng.StateKeys(ns, []byte("b"), acmeNext, 2); return err },
		"another prefix's":    func() error { _, _, err := h.eng.StateKeys(ns, []byte("a"), cursors[0], 2); return err },
		"the claims'": func() error {
			_, _, err := h.eng.StateKeys(ns, nil, engine.EncodeCursor(engine.CursorClaims, "", []byte("d\x00c\x00i")), 2)
			return err
		},
		"made up": func() error { _, _, err := h.eng.StateKeys(ns, nil, "AQ", 2); return err },
	} {
		if err := try(); switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST {
			t.Errorf("%s cursor: %v, want EINVALIDREQUEST", what, err)
		}
	}
}

// Plugin state takes room in the data file as events do, and nothing
// removes it to make room: past the storage budget a write that grows it
// fails with storage_full (the plugin answers retry: the event waits, no
// attempt counted), counting the batch's writes not yet committed. Without it three events of a plugin
// that wrote until it failed filled a 200 MiB disk past a 10 MiB budget,
// and ingest was refused for good (an adversarial trial).
func TestPluginStateKeepsToTheBudget(t *testing.T) {
	type result struct {
		written int
		err     error
	}
	done := make(chan result, 4)
	hog := funcPlugin{name: "hog", fn: func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		st := switchyard.StateFrom(ctx)
		var r result
		for i := 0; i < 1000 && r.err == nil; i++ {
			if r.err = st.Put("hog", []byte(fmt.Sprintf("%s-%d", ev.ID, i)), make([]byte, 64<<10), 0); r.err == nil {
				r.written += 64 << 10
			}
		}
		select {
		case done <- r:
		default:
		}
		return nil, r.err
	}}
	h := newHarness(t, `
storage { max_size = "1MiB" }
`+pluginPolicy("hog", "t.hog", "max_retries = 0\n  polling { min = \"10ms\" }"), false, withPlugins(hog))
	id := h.ingest("t.hog", 1)[0]
	select {
	case r := <-done:
		if switchyard.ErrorCode(r.err) != switchyard.ESTORAGEFULL {
			t.Fatalf("after %d bytes of state: %v, want storage_full", r.written, r.err)
		}
		if r.written > 2<<20 {
			t.Errorf("%d bytes of state taken under a budget of 1 MiB", r.written)
		}
		t.Logf("refused after %d bytes of state: %v", r.written, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin never ran")
	}
	// The budget is the router's, not the event's: no attempt is counted
	// (with max_retries = 0 it was dead-lettered at once), and the event
	// waits to be taken again.
	time.Sleep(200 * time.Millisecond)
	if rec := h.record(id); rec.Attempts != 0 || rec.State != storage.StatePending {
		t.Fatalf("after a full budget under its plugin: %s, %d attempts (%s)", rec.State, rec.Attempts, rec.LastError)
	}
}

// While the storage budget is full, a stateful plugin's events go back a
// second ahead with no attempt ended, and the loop's delay still grows:
// it does not wake for their next due time and rerun the plugin every
// second for as long as the disk stays full (a review of the wake at a
// retry's end of backoff: 19 runs in 20 s, against 3 before it; here 4
// in 4 s, against 1).
func TestAFullBudgetDoesNotRerunThePluginEachSecond(t *testing.T) {
	var runs atomic.Int32
	hog := funcPlugin{name: "hog", fn: func(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
		runs.Add(1)
		st := switchyard.StateFrom(ctx)
		for i := 0; ; i++ {
			if err := st.Put("hog", []byte(fmt.Sprintf("%s-%d", ev.ID, i)), make([]byte, 64<<10), 0); err != nil {
				return nil, err
			}
		}
	}}
	h := newHarness(t, `
storage { max_size = "1MiB" }
`+pluginPolicy("hog", "t.hog", `max_retries = 0
  polling {
    min        = "10ms"
    max        = "1m"
    multiplier = 100
  }`), false, withPlugins(hog))
	h.ingest("t.hog", 1)
	testkit.Eventually(t, "the plugin to run", 10*time.Second, func() bool { return runs.Load() > 0 })
	time.Sleep(4 * time.Second) // the delay: 1 s after the first (empty) poll, then 1 m
	if n := runs.Load(); n > 2 {
		t.Errorf("the plugin ran %d times in 4 s of a full budget, want at most 2 (the adaptive delay's)", n)
	}
}
