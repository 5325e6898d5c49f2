package switchyard

import "time"

// Event is a CloudEvents 1.0 event as stored in the outbox. Data holds the
// payload bytes exactly as they will be published (binary mode).
type Event struct {
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	SpecVersion     string    `json:"specversion"`
	Subject         string    `json:"subject,omitempty"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype,omitempty"`
	DataSchema      string    `json:"dataschema,omitempty"`
	// Extensions are the CloudEvents extension attributes (partitionkey, ...)
	// and pass-through headers (traceparent, tracestate), sorted by name.
	Extensions []Header `json:"extensions,omitempty"`
	Data       []byte   `json:"data,omitempty"`
}

// Limits on event ids (engine/limits.go has the other limits on what an
// event holds).
const (
	// MaxIDLen bounds the id a client gives an event at ingest.
	MaxIDLen = 256
	// MaxInboundIDLen bounds an inbox's ids, which brokers may make longer
	// than a client's, and a claim's id; it is also what the API takes for
	// an id in a URL, and what a plugin may give an output (an id derived
	// from its event's, which another router's inbox reads).
	MaxInboundIDLen = 1024
)

// Header is one name/value pair.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Extension returns the value of an extension attribute, or "".
func (e *Event) Extension(name string) string {
	for _, h := range e.Extensions {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// PartitionKey is the CloudEvents partitioning extension: the Kafka record
// key and the unit of ordering = "key".
func (e *Event) PartitionKey() string { return e.Extension("partitionkey") }

// Bytes is about what the event holds in memory: its data and attributes.
// What a batch holds is counted in it (engine: maxHeldOutputBytes).
func (e *Event) Bytes() int {
	n := len(e.Data) + len(e.ID) + len(e.Source) + len(e.Type) + len(e.Subject) + len(e.DataSchema) + len(e.DataContentType)
	for _, h := range e.Extensions {
		n += len(h.Name) + len(h.Value)
	}
	return n
}

// Position is where a broker put one output: JetStream stream and sequence,
// or Kafka topic, partition and offset.
type Position struct {
	Stream    string `json:"stream,omitempty"`
	Sequence  uint64 `json:"sequence,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
}
