package config

// The names the configuration's blocks go by elsewhere, each made here and
// nowhere else: a route names a sink ("nats.local", "kafka.main"), an
// inbox's events wait in a queue of their own ("inbox:payments") and are
// delivered through a sink of their own ("inbox.payments").
const (
	natsSinkPrefix  = "nats."
	kafkaSinkPrefix = "kafka."
	inboxSinkPrefix = "inbox."
	// InboxQueuePrefix starts the queue of every inbox: a name no event
	// type may take.
	InboxQueuePrefix = "inbox:"
)

// SinkName is how routes and inboxes refer to the sink of a nats block.
func (n NATS) SinkName() string { return natsSinkPrefix + n.Name }

// SinkName is how routes and inboxes refer to the sink of a kafka block.
func (k Kafka) SinkName() string { return kafkaSinkPrefix + k.Name }

// InboxSinkName is the sink that delivers the events of the inbox named
// inbox to its local service.
func InboxSinkName(inbox string) string { return inboxSinkPrefix + inbox }

// InboxQueueName is the queue the events of the inbox named inbox wait in.
func InboxQueueName(inbox string) string { return InboxQueuePrefix + inbox }
