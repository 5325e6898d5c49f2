package engine_test

import (
	"fmt"
	"strings"
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

// newEvent is one event of type typ for ingestEvents; digest stands for
// its content.
func newEvent(typ, id string, clientID bool, digest byte) engine.IngestEvent {
	return engine.IngestEvent{ClientID: clientID, Digest: []byte{digest}, Event: switchyard.Event{ID: id, Type: typ, Source: "/t", SpecVersion: "1.0"}}
}

// ingestEvents sends evs as one request of the default tenant's token
// (not the operator's: held to max_types_per_tenant).
func ingestEvents(h *harness, evs ...engine.IngestEvent) error {
	return ingestTo(h.eng, "default", evs...)
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
