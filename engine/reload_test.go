package engine_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A reload that removes the block of an event type with stored events says
// so, naming the type and what is stored (the start says as much of a
// queue the configuration no longer has); one that keeps every block says
// nothing of the kind.
func TestReloadWarnsOfARemovedType(t *testing.T) {
	var logs testkit.Buffer // the loops log from their goroutines
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	keep := `
event "t.keep" {
  route {
    to      = "nats.local"
    subject = "t.keep"
  }
}
`
	gone := `
event "nostream.gone" {
  route {
    to      = "nats.local"
    subject = "nostream.gone"
  }
  backoff { delay = "1h" }
}
`
	h := newHarness(t, keep+gone, false, harnessOption(func(o *engine.Options) { o.Logger = logger }))
	h.ingest("nostream.gone", 3)
	reload := func(policies string) {
		cfg, err := config.Parse([]byte(natsBlock+policies), "reload.hcl")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.eng.Reload(cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	reload(keep + gone)
	if strings.Contains(logs.String(), "removed the block") {
		t.Fatalf("a reload that keeps every block warned:\n%s", logs.String())
	}
	reload(keep)
	if l := logs.String(); !strings.Contains(l, "a reload removed the block of an event type with stored events") || !strings.Contains(l, "type=nostream.gone pending=3") {
		t.Fatalf("no warning for the removed type:\n%s", l)
	}
}
