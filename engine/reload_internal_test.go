package engine

import (
	"strings"
	"testing"

	"github.com/switchyard-router/switchyard/config"
)

// snake spells Go field names as the configuration's attributes.
func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"Socket": "socket", "HTTP": "http", "TokensFile": "tokens_file", "MaxConnections": "max_connections",
		"ReadTimeout": "read_timeout", "MinFree": "min_free", "URL": "url", "TLSConfig": "tls_config",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

// A reload that removes a sink or inbox block is refused naming the block
// and where it was, wherever it stood among the others: it said "the nats
// blocks changed" and no more, with no place in the file (a reload trial),
// then blamed the block that moved up into a removed one's place (a
// review). An inbox added is refused pointing at it, without the hint that
// blocks may be added (inboxes may not).
func TestAReloadThatRemovesASinkNamesIt(t *testing.T) {
	parse := func(src string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(src), "policies.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	nats := func(n, port string) string {
		return "nats \"" + n + "\" {\n  url = \"nats://127.0.0.1:" + port + "\"\n}\n"
	}
	kafka := func(n string) string { return "kafka \"" + n + "\" {\n  brokers = [\"127.0.0.1:9092\"]\n}\n" }
	inbox := func(n string) string {
		return "inbox \"" + n + "\" {\n  from = \"nats.local\"\n  subject = \"in." + n + "\"\n}\n"
	}
	local := nats("local", "4222")
	for _, c := range []struct{ name, old, new, want, not string }{
		{"nats last removed", local + nats("remote", "24999"), local, "nats.remote was removed (it was at policies.hcl:4:1)", ""},
		{"nats middle removed", local + nats("remote", "24999") + nats("third", "25000"), local + nats("third", "25000"), "nats.remote was removed (it was at policies.hcl:4:1)", "(name"},
		{"nats first removed", local + nats("remote", "24999"), nats("remote", "24999"), "nats.local was removed (it was at policies.hcl:1:1)", "(name"},
		{"kafka middle removed", local + kafka("a") + kafka("b") + kafka("c"), local + kafka("a") + kafka("c"), "kafka.b was removed (it was at policies.hcl:7:1)", "(name"},
		{"inbox middle removed", local + inbox("a") + inbox("b") + inbox("c"), local + inbox("a") + inbox("c"), "inbox.b was removed (it was at policies.hcl:8:1)", "(name"},
		{"inbox added", local + inbox("a"), local + inbox("a") + inbox("b"), "policies.hcl:8:1: reload: the inbox", "may be added"},
	} {
		err := unchangedForReload(parse(c.old), parse(c.new))
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.not != "" && strings.Contains(err.Error(), c.not)) {
			t.Errorf("%s: %v, want %q and not %q", c.name, err, c.want, c.not)
		}
	}
}
