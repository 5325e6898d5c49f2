package switchyard

import "context"

// Source consumes an inbox's messages from a broker. The engine knows
// sources only through this interface; plugins/kafka and plugins/nats
// implement it.
//
// A Source may implement HealthChecker: whether it is connected and its
// last fetch worked. Whether the inbox took its last batch is the
// engine's to say (Engine.InboxRefusal); the inbox's health is both. It
// may implement Lagger: how far behind its broker it reads.
type Source interface {
	// Name is the inbox's name.
	Name() string
	// Run consumes until ctx ends. For every batch it fetches it calls
	// receive, and only after receive returned nil does it acknowledge the
	// batch to the broker (commit the Kafka offsets, ack the JetStream
	// messages). When receive fails it must not acknowledge: the broker
	// redelivers, and the inbox drops what it already stored.
	Run(ctx context.Context, receive func(ctx context.Context, msgs []Inbound) error) error
	// Close releases the source's connections.
	Close(ctx context.Context) error
}

// Inbound is one consumed message, decoded from its CloudEvents binding.
type Inbound struct {
	// Event is the message as a CloudEvent (binary mode: ce-* / ce_*
	// headers, the value as data). Event.ID is the dedup key: the id header
	// (config id_header), or, for a message without one, an id derived from
	// its content (never from its offset) — then IDDerived is true.
	Event     Event
	IDDerived bool
	// IDTooLong: the id header held an id longer than an inbox keeps
	// (MaxInboundIDLen); Event.ID is derived in its place.
	IDTooLong bool
	// Origin says where it came from, for the dedup audit:
	// "kafka.main:payments/3@1042" or "nats.local:events#17".
	Origin string
	// Read is where the inbox's reading of the message's partition goes
	// on from after it: the inbox keeps the latest with each batch it
	// takes, for a group or durable made again.
	Read Read
}

// Read is where an inbox's reading of a partition goes on from after a
// message: for Kafka the partition's next offset; for a JetStream durable
// the stream sequence after its ack floor as the source last saw it
// (every message of its subject up to the floor was acknowledged, so
// stored). An inbox keeps the latest of each partition (Engine.InboxRead),
// so that a Kafka group whose committed offsets are gone (expired by the
// cluster's offsets.retention.minutes while the router was stopped, or
// deleted), or a durable deleted, reads on from there, not from the start
// (docs/decisions/inbox-offsets.md).
type Read struct {
	Topic     string // the Kafka topic; the JetStream stream
	Partition int32  // the Kafka partition; 0 for JetStream
	Next      int64
	// ID is the topic's id in its Kafka cluster, or the JetStream
	// stream's creation time; zero where the cluster gives none. A topic
	// or stream made again under its name gets another, and its offsets
	// begin again.
	ID [16]byte
}

// KeptReads says what an inbox kept of its reading of a partition (the
// Read of the last batch it took from there); false when it kept none.
type KeptReads func(topic string, partition int32) (Read, bool, error)

// Lagger is a Source that knows how many of its broker's messages for the
// inbox it has not read yet (switchyard_inbox_lag_messages): an inbox
// falling behind, or stuck, shows there before the messages age out of
// the broker.
type Lagger interface {
	// Lag is the messages the broker held past what the inbox had read,
	// as its last fetch saw them; ok is false until a fetch brought any.
	Lag() (n int64, ok bool)
}
