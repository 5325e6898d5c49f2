package config

import (
	"fmt"
	"strings"
)

// The names the configuration's blocks go by elsewhere, each made here and
// nowhere else: a route names a sink ("nats.local", "kafka.main"), an
// inbox's events wait in a queue of their own ("inbox:payments") and are
// delivered through a sink of their own ("inbox.payments").
const (
	natsSinkPrefix  = string(SinkNATS) + "."
	kafkaSinkPrefix = string(SinkKafka) + "."
	inboxSinkPrefix = string(SinkInbox) + "."
	// InboxQueuePrefix starts the queue of every inbox: a name no event
	// type may take.
	InboxQueuePrefix = "inbox:"
)

// SinkKind is what a sink reaches, the first part of its name.
type SinkKind string

const (
	SinkNATS  SinkKind = "nats"  // a nats block's server
	SinkKafka SinkKind = "kafka" // a kafka block's cluster
	SinkInbox SinkKind = "inbox" // an inbox's local service
)

// ParseSinkName splits the name of a sink into its kind and the name of
// its block (or inbox): "kafka.main" is SinkKafka and "main". The kind is
// "" when the name starts with none.
func ParseSinkName(sink string) (SinkKind, string) {
	prefix, name, ok := strings.Cut(sink, ".")
	switch k := SinkKind(prefix); k {
	case SinkNATS, SinkKafka, SinkInbox:
		if ok {
			return k, name
		}
	}
	return "", sink
}

// SinkName is how routes and inboxes refer to the sink of a nats block.
func (n NATS) SinkName() string { return natsSinkPrefix + n.Name }

// SinkName is how routes and inboxes refer to the sink of a kafka block.
func (k Kafka) SinkName() string { return kafkaSinkPrefix + k.Name }

// InboxSinkName is the sink that delivers the events of the inbox named
// inbox to its local service.
func InboxSinkName(inbox string) string { return inboxSinkPrefix + inbox }

// IsInboxSink says whether the sink named name delivers an inbox's events.
func IsInboxSink(name string) bool {
	kind, _ := ParseSinkName(name)
	return kind == SinkInbox
}

// InboxQueueName is the queue the events of the inbox named inbox wait in.
func InboxQueueName(inbox string) string { return InboxQueuePrefix + inbox }

// The broker names a configuration (or a plugin's destination) may use.
// Checked when the file is read, so that a name no broker takes is an error
// at its file:line:col, not a dead letter for every event at run time.

// CheckSubject says why s is not a NATS subject: tokens split by '.', none
// empty, no white space; with wildcards (a stream's or a consumer's
// filter) a token may be '*', and '>' may be the last; without (where a
// message is published) neither may appear. The same rules as
// nats-server's IsValidSubject and IsValidPublishSubject
// (TestSubjectRulesMatchTheServer checks them against it); hand-written so
// that config does not import the server.
func CheckSubject(s string, wildcards bool) error {
	if s == "" {
		return fmt.Errorf("a subject is not empty")
	}
	if strings.ContainsAny(s, " \t\r\n\f") {
		return fmt.Errorf("subject %q holds white space", s)
	}
	for rest := s; ; { // token by token, without allocating: plugins' destinations pass here per event
		t, after, more := strings.Cut(rest, ".")
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token (tokens are split by single dots)", s)
		case (t == "*" || t == ">") && !wildcards:
			return fmt.Errorf("subject %q has the wildcard %q: a message is published to one subject, without wildcards", s, t)
		case t == ">" && more:
			return fmt.Errorf("subject %q: '>' may only be the last token", s)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// CheckPublishSubject says why a message may not be published to s: not
// a subject without wildcards (CheckSubject), or one of the server's own
// control namespaces (controlPrefixes). A message there is a command: a
// plugin's output to $JS.API.STREAM.PURGE.<stream> emptied the stream, and
// to $JS.API.STREAM.DELETE.<stream> deleted it (a plugin trial). The data
// namespaces a stream captures ($KV.<bucket>.<key>, $O.…) stay open.
func CheckPublishSubject(s string) error {
	if err := CheckSubject(s, false); err != nil {
		return err
	}
	for _, p := range controlPrefixes {
		if strings.HasPrefix(s, p) {
			return fmt.Errorf("subject %q is in the NATS server's own namespace %s*: a message there is a command to the server (%s…PURGE empties a stream), not an event", s, p, "$JS.API.STREAM.")
		}
	}
	return nil
}

// controlPrefixes are the subjects of NATS's server-side APIs: JetStream's
// (its API, acks, flow control and advisories: $JS.; its cluster's:
// $JSC., $NRG.) and the system account's ($SYS.).
var controlPrefixes = []string{"$JS.", "$JSC.", "$NRG.", "$SYS."}

// CheckTopic says why s is not a Kafka topic name: 1 to 249 of the
// characters a-z A-Z 0-9 . _ -, and not "." or ".." (Kafka's own rule).
func CheckTopic(s string) error {
	switch {
	case s == "" || len(s) > 249:
		return fmt.Errorf("topic %q: a topic name has 1 to 249 characters", s)
	case s == "." || s == "..":
		return fmt.Errorf("topic %q: Kafka refuses %q as a topic name", s, s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic %q has %q: topic names use a-z, A-Z, 0-9, '.', '_' and '-'", s, r)
		}
	}
	return nil
}

// CheckDestination splits a plugin's output destination "<sink>:<topic or
// subject>", or says why no message could go there: not of that form, a
// sink configured does not report (when configured is given), or a target
// its sink cannot take (CheckTarget). The router's loop and router plugin
// test both ask it, so that what a test passes the router sends.
func CheckDestination(d string, configured func(sink string) bool) (sink, target string, err error) {
	sink, target, ok := strings.Cut(d, ":")
	if !ok || target == "" {
		return "", "", fmt.Errorf("destination %q is not <sink>:<topic or subject>", d)
	}
	if configured != nil && !configured(sink) {
		return "", "", fmt.Errorf("destination %q names sink %q, which is not configured", d, sink)
	}
	if err := CheckTarget(sink, target); err != nil {
		return "", "", fmt.Errorf("destination %q: %v", d, err)
	}
	return sink, target, nil
}

// CheckTarget says why target cannot be a topic or subject of sink (a
// route's or a plugin's destination "<sink>:<target>"): a subject for a
// NATS sink, a topic name for a Kafka one.
func CheckTarget(sink, target string) error {
	switch kind, _ := ParseSinkName(sink); kind {
	case SinkNATS:
		return CheckPublishSubject(target)
	case SinkKafka:
		return CheckTopic(target)
	}
	return nil
}
