package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// A request refused after its types were admitted (here: a batch whose
// second event reuses a stored event's id with other content) takes no
// slot of max_types, nor of its tenant's share, for the new type its first
// event named: the types the catch-all holds are those stored, and those
// of requests in flight.
func TestRefusedRequestTakesNoCatchAllSlot(t *testing.T) {
	h := newHarness(t, `
event "*" {
  max_types            = 2
  max_types_per_tenant = 2
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
}
`, false)
	if err := ingestEvents(h, newEvent("t.a", "a-1", true, 1)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		err := ingestEvents(h, newEvent(fmt.Sprintf("t.new%d", i), fmt.Sprintf("n-%d", i), false, 1), newEvent("t.a", "a-1", true, 2))
		if switchyard.ErrorCode(err) != switchyard.EIDEMREUSE {
			t.Fatalf("batch %d, whose second event reuses a-1 with other content: %v, want %s", i, err, switchyard.EIDEMREUSE)
		}
	}
	if err := ingestEvents(h, newEvent("t.b", "b-1", false, 1)); err != nil {
		t.Fatalf("the catch-all's second type, after five refused requests: %v", err)
	}
	if err := ingestEvents(h, newEvent("t.c", "c-1", false, 1)); switchyard.ErrorCode(err) != switchyard.ETOOMANYTYPES {
		t.Fatalf("a third type past max_types = 2: %v, want %s", err, switchyard.ETOOMANYTYPES)
	}
	noLoops(t, h, "t.new")
}

// catchAllOf8 is a catch-all taking 8 types, for a tenant too, to one
// subject.
const catchAllOf8 = `
event "*" {
  max_types            = 8
  max_types_per_tenant = 8
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
}
`

// Requests racing to add new types never take the catch-all past
// max_types: of 64 concurrent requests for 32 new types (two each), those
// of exactly max_types types are stored, the others refused with
// too_many_event_types.
func TestConcurrentNewTypesStayWithinMaxTypes(t *testing.T) {
	h := newHarness(t, catchAllOf8, false)
	var mu sync.Mutex
	stored := map[string]int{}
	var wg sync.WaitGroup
	for i := range 64 {
		typ := fmt.Sprintf("t.race%d", i/2)
		wg.Go(func() {
			err := ingestEvents(h, newEvent(typ, fmt.Sprintf("r-%d", i), false, 1))
			if err != nil && switchyard.ErrorCode(err) != switchyard.ETOOMANYTYPES {
				t.Errorf("%s: %v", typ, err)
			}
			if err == nil {
				mu.Lock()
				stored[typ]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	use, _ := h.eng.CatchAll()
	if len(stored) != 8 || use.Types != 8 {
		t.Errorf("%d types stored (%v), the catch-all holds %d; want 8 and 8", len(stored), stored, use.Types)
	}
}

// catchAllShare is a catch-all of ten types, one per tenant, beside a
// declared type.
const catchAllShare = `
event "*" {
  max_types            = 10
  max_types_per_tenant = 1
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
}
event "t.order" {
  route {
    to      = "nats.local"
    subject = "t.order"
  }
}
`

// A reload that removes the catch-all while a request of a new type is
// between its admission and its commit does not bring the router down:
// the request is answered (its event is stored), the type gets no loop,
// and its event waits, as those of a removed type do, until a reload
// brings the catch-all back.
func TestReloadRemovesCatchAllMidRequest(t *testing.T) {
	h := newHarness(t, catchAllShare, false)
	slow := &slowStore{Store: h.db, gate: make(chan struct{}), entered: make(chan struct{})}
	eng := h.openOver(slow, engine.Options{})
	done := make(chan error, 1)
	go func() { done <- ingestTo(eng, "acme", newEvent("t.new", "x-1", false, 1)) }()
	<-slow.entered
	cfg, err := config.Parse([]byte(natsBlock+catchAllShare[strings.Index(catchAllShare, `event "t.order"`):]), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Reload(cfg, nil); err != nil {
		t.Fatal(err)
	}
	close(slow.gate)
	if err := <-done; err != nil {
		t.Fatalf("the request across the reload: %v", err)
	}
	if rec, err := eng.EventStatus("acme", "x-1"); err != nil || rec.State != storage.StatePending {
		t.Errorf("its event: %+v %v, want pending", rec, err)
	}
	if _, ok := eng.CatchAll(); ok {
		t.Errorf("the catch-all is still there after the reload")
	}
	// A reload that brings the catch-all back starts the type's loop, and
	// the event goes out.
	if err := eng.Reload(h.cfg, nil); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		rec, err := eng.EventStatus("acme", "x-1")
		return err == nil && rec.State == storage.StateDelivered
	}, func() string { rec, err := eng.EventStatus("acme", "x-1"); return fmt.Sprint(rec.State, err) })
}

// A new type two tenants ask for at once counts against the share of the
// one whose request asked first, whichever request stores it: tenant a's
// request reserves t.x and ends storing nothing (it replays an earlier
// request under its key), tenant b's stores it; b, which holds its one
// type already, is not charged a second.
func TestNewTypeCountsAgainstTheFirstToAsk(t *testing.T) {
	h := newHarness(t, catchAllShare, false)
	gs := &gatedStore{Store: h.db, gate: make(chan struct{}), in: make(chan struct{}, 4)}
	eng := h.openOver(gs, engine.Options{IdempotencyWait: 10 * time.Second})
	if err := ingestTo(eng, "b", newEvent("t.b", "b-1", false, 1)); err != nil {
		t.Fatal(err)
	}
	keyed := func(typ string) *engine.IngestRequest {
		return &engine.IngestRequest{Tenant: "a", Key: "k", Endpoint: "POST /v1/events", Digest: []byte{7},
			Events: []engine.IngestEvent{newEvent(typ, "", false, 1)}, Render: accepted}
	}
	gs.block.Store(true)
	errs := make(chan error, 3)
	go func() { _, err := eng.Ingest(context.Background(), keyed("t.order")); errs <- err }()
	<-gs.in // a's first request holds key k, in the store
	go func() { _, err := eng.Ingest(context.Background(), keyed("t.x")); errs <- err }()
	testkit.EventuallyWith(t, 5*time.Second, func() bool { use, _ := eng.CatchAll(); return use.ByTenant["a"] == 1 && use.InFlight == 1 },
		func() string {
			use, _ := eng.CatchAll()
			return fmt.Sprintf("a's second request never reserved t.x: %+v", use)
		})
	go func() { errs <- ingestTo(eng, "b", newEvent("t.x", "bx-1", false, 1)) }()
	<-gs.in // b's request of t.x, in the store
	close(gs.gate)
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("a request: %v", err)
		}
	}
	if use, _ := eng.CatchAll(); use.Types != 2 || use.InFlight != 0 || use.ByTenant["a"] != 1 || use.ByTenant["b"] != 1 {
		t.Errorf("the catch-all holds %+v, want t.b for b and t.x for a", use)
	}
}

// gatedStore holds every write at its gate while block is set, saying so
// on in.
type gatedStore struct {
	engine.Store
	block atomic.Bool
	gate  chan struct{}
	in    chan struct{}
}

func (s *gatedStore) Update(ctx context.Context, fn func(*storage.Tx) error) error {
	if s.block.Load() {
		s.in <- struct{}{}
		<-s.gate
	}
	return s.Store.Update(ctx, fn)
}

// ingestTo sends evs as one request of tenant's token.
func ingestTo(eng *engine.Engine, tenant string, evs ...engine.IngestEvent) error {
	_, err := eng.Ingest(context.Background(), &engine.IngestRequest{Tenant: tenant, Events: evs, Render: accepted})
	return err
}

// accepted renders every request 202.
func accepted([]engine.Outcome) engine.Response { return engine.Response{Status: 202} }

// Events of a type only the catch-all took wait while the configuration
// lacks it (a start without the "*" block), and a reload that brings the
// catch-all back starts their loop, which delivers them. (Before, a reload
// started loops only for types with a block of their own, and they waited
// for another event of their type or a restart; found by a review.)
func TestReloadBringsTheCatchAllBack(t *testing.T) {
	keep := `
event "t.keep" {
  route {
    to      = "nats.local"
    subject = "t.keep"
  }
}
`
	h := newHarness(t, keep, false)
	// Stored by an earlier run that had the catch-all.
	if err := h.db.Update(context.Background(), func(tx *storage.Tx) error {
		return tx.InsertEvent(&storage.Record{Tenant: storage.DefaultTenant, CreatedAt: time.Now(),
			Event: switchyard.Event{ID: "c-1", Type: "t.caught", Source: "/t", SpecVersion: "1.0"}}, false)
	}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(natsBlock+keep+`
event "*" {
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
}
`), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Reload(cfg, nil); err != nil {
		t.Fatal(err)
	}
	h.waitDelivered([]string{"c-1"}, 10*time.Second)
}

// A catch-all a reload adds holds the types whose stored events still
// wait, not those whose events were all delivered: a reload trial's two
// types, removed by an earlier reload with nothing pending, filled a new
// max_types = 2, and its first new type was refused 422. At a start too.
// Such a type leaves the stats once its loop retires.
func TestACatchAllHoldsOnlyTypesWithWaitingEvents(t *testing.T) {
	const route = `
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
`
	h := newHarness(t, `event "t.done" {`+route+`}
event "t.kept" {`+route+`}
`, false)
	h.waitDelivered(h.ingest("t.done", 3), 10*time.Second)
	h.reload(`event "t.kept" {` + route + `}
`)
	// Its loop retired, the type leaves the stats (and the metrics), its
	// events all delivered: it stayed, at 0, while the file had its queue.
	testkit.Eventually(t, "t.done gone from the stats", 10*time.Second, func() bool {
		stats, _ := h.eng.Stats()
		return !slices.ContainsFunc(stats, func(s engine.TypeStats) bool { return s.Type == "t.done" })
	})
	h.reload(`event "t.kept" {` + route + `}
event "*" {
  max_types            = 1
  max_types_per_tenant = 1` + route + `}
`)
	if err := ingestEvents(h, newEvent("t.new", "n-1", false, 1)); err != nil {
		t.Fatalf("the catch-all's first type: %v", err)
	}
}
