package config

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// CheckSubject takes what nats-server takes and refuses what it refuses,
// for filters (wildcards) and for publish subjects (none).
func TestSubjectRulesMatchTheServer(t *testing.T) {
	for _, s := range []string{
		"demo", "demo.greeting", "demo.*", "demo.>", ">", "*", "demo.*.x", "a.b.c.d",
		"", ".", "demo.", ".demo", "demo..a", "demo a", "demo.a b", "demo\tx", "demo.>.x", ">.x",
		"demo.a>", "demo.*a", "a*.b", "é.ü", "demo.-_~", "demo.\r",
	} {
		if ok := CheckSubject(s, true) == nil; ok != server.IsValidSubject(s) {
			t.Errorf("filter %q: CheckSubject says %v, the server %v", s, ok, server.IsValidSubject(s))
		}
		if ok := CheckSubject(s, false) == nil; ok != server.IsValidPublishSubject(s) {
			t.Errorf("publish subject %q: CheckSubject says %v, the server %v", s, ok, server.IsValidPublishSubject(s))
		}
	}
}

// CheckTopic takes Kafka's legal topic names and refuses the others.
func TestTopicRules(t *testing.T) {
	for s, ok := range map[string]bool{
		"orders": true, "orders.v1": true, "a_b-c": true, "..x": true,
		"": false, ".": false, "..": false, "bad topic": false, "a/b": false, "é": false,
		string(make([]byte, 250)): false,
	} {
		if got := CheckTopic(s) == nil; got != ok {
			t.Errorf("topic %q: ok %v, want %v", s, got, ok)
		}
	}
}

// subjectsCollide (the shared-durable check's) agrees with nats-server on
// whether some subject matches two filters.
func TestSubjectsCollideMatchesTheServer(t *testing.T) {
	subjects := []string{"a", "a.b", "a.c", "a.b.c", "a.*", "a.>", "*", ">", "*.b", "a.*.c", "a.b.>", "b.>", "*.*", "a.b.c.d"}
	for _, x := range subjects {
		for _, y := range subjects {
			if got, want := subjectsCollide(x, y), server.SubjectsCollide(x, y); got != want {
				t.Errorf("subjectsCollide(%q, %q) = %v, the server says %v", x, y, got, want)
			}
		}
	}
}

// A sink's name splits into the kind its prefix names and its block's
// name, and the names the blocks give their sinks split back into them; a
// name without a kind's prefix has no kind.
func TestParseSinkName(t *testing.T) {
	for _, c := range []struct {
		sink string
		kind SinkKind
		name string
	}{
		{NewKafka("main").SinkName(), SinkKafka, "main"},
		{NewNATS("local").SinkName(), SinkNATS, "local"},
		{InboxSinkName("payments"), SinkInbox, "payments"},
		{"nats.a.b", SinkNATS, "a.b"},
		{"redis.cache", "", "redis.cache"},
		{"kafka", "", "kafka"},
		{"", "", ""},
	} {
		if kind, name := ParseSinkName(c.sink); kind != c.kind || name != c.name {
			t.Errorf("ParseSinkName(%q) = %q, %q; want %q, %q", c.sink, kind, name, c.kind, c.name)
		}
	}
}
