package engine

import (
	"strings"
	"testing"

	"github.com/switchyard-router/switchyard/config"
)

// A reload that removes a sink block is refused naming the block and
// where it was: it said "the nats blocks changed" and no more, with no
// place in the file (a reload trial).
func TestAReloadThatRemovesASinkNamesIt(t *testing.T) {
	parse := func(src string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(src), "policies.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	local := "nats \"local\" {\n  url = \"nats://127.0.0.1:4222\"\n}\n"
	remote := "nats \"remote\" {\n  url = \"nats://127.0.0.1:24999\"\n}\n"
	err := unchangedForReload(parse(local+remote), parse(local))
	if err == nil || !strings.Contains(err.Error(), "nats.remote was removed (it was at policies.hcl:4:1)") {
		t.Fatalf("a reload that removed nats \"remote\": %v", err)
	}
}
