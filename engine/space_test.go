package engine_test

import (
	"context"
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
		_, err := h.eng.Ingest(context.Background(), &engine.IngestRequest{
			Tenant: "default", Events: []engine.IngestEvent{{ClientID: clientID, Digest: []byte{1}, Event: switchyard.Event{ID: typ + "-1", Type: typ, Source: "/t", SpecVersion: "1.0"}}},
			Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
		})
		return err
	}
	testkit.EventuallyWith(t, 5*time.Second, func() bool { sp, _, _ := h.eng.Space(); return sp.Used > 0 },
		func() string { return "the budget was never measured" })
	for i := range 10 {
		if err := ingest(fmt.Sprintf("t.new%d", i), i%2 == 1); switchyard.ErrorCode(err) != switchyard.ESTORAGEFULL {
			t.Fatalf("t.new%d past the budget: %v", i, err)
		}
	}
	stats, err := h.eng.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if strings.HasPrefix(s.Type, "t.new") {
			t.Errorf("type %s has a loop, for events never stored", s.Type)
		}
	}
}
