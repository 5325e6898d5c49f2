package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// While the storage budget is full, a request for a type the catch-all has
// not seen — with router-made ids or client-chosen ones, which nothing
// stored can replay — is refused before the type is admitted: it gets no
// loop, and so takes none of max_types, for events that were never
// stored.
func TestFullBudgetTakesNoCatchAllSlot(t *testing.T) {
	h := newHarness(t, `
storage { max_size = "1" }
event "*" {
  max_types = 4
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
}
`, false)
	ingest := func(typ string, clientID bool) error {
		return ingestEvents(h, newEvent(typ, typ+"-1", clientID, 1))
	}
	testkit.EventuallyWith(t, 5*time.Second, func() bool { sp, _, _ := h.eng.Space(); return sp.Used > 0 },
		func() string { return "the budget was never measured" })
	for i := range 10 {
		if err := ingest(fmt.Sprintf("t.new%d", i), i%2 == 1); switchyard.ErrorCode(err) != switchyard.ESTORAGEFULL {
			t.Fatalf("t.new%d past the budget: %v", i, err)
		}
	}
	noLoops(t, h, "t.new")
}

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

// Requests racing to add new types never take the catch-all past
// max_types: of 64 concurrent requests for 32 new types (two each), those
// of exactly max_types types are stored, the others refused with
// too_many_event_types.
func TestConcurrentNewTypesStayWithinMaxTypes(t *testing.T) {
	h := newHarness(t, `
event "*" {
  max_types            = 8
  max_types_per_tenant = 8
  route {
    to      = "nats.local"
    subject = "t.caught"
  }
}
`, false)
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

// newEvent is one event of type typ for ingestEvents; digest stands for
// its content.
func newEvent(typ, id string, clientID bool, digest byte) engine.IngestEvent {
	return engine.IngestEvent{ClientID: clientID, Digest: []byte{digest}, Event: switchyard.Event{ID: id, Type: typ, Source: "/t", SpecVersion: "1.0"}}
}

// ingestEvents sends evs as one request of the default tenant's token
// (not the operator's: held to max_types_per_tenant).
func ingestEvents(h *harness, evs ...engine.IngestEvent) error {
	_, err := h.eng.Ingest(context.Background(), &engine.IngestRequest{
		Tenant: "default", Events: evs,
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	})
	return err
}

// noLoops fails t if a type named with prefix has a loop.
func noLoops(t *testing.T, h *harness, prefix string) {
	t.Helper()
	stats, err := h.eng.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if strings.HasPrefix(s.Type, prefix) {
			t.Errorf("type %s has a loop, for events never stored", s.Type)
		}
	}
}
