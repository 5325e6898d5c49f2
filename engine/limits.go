package engine

// Limits on what the router keeps of an event and puts in keys, URLs and
// headers: one home for the API's checks at ingest and the inbox's when it
// reads a message. A key in the data file may be at most 32 KiB (bbolt's
// limit); one larger fails its whole commit.
const (
	// MaxIDLen bounds a client's event id at ingest.
	MaxIDLen = 256
	// MaxTypeLen bounds an event type: each type is a queue, a loop and a
	// label on every per-type metric. A claim's consumer is held to it too.
	MaxTypeLen = 256
	// MaxAttrLen bounds any other attribute at ingest, and the partition
	// key an inbox keeps (a key in the data file with ordering = "key").
	MaxAttrLen = 4096
	// MaxInboundIDLen bounds an inbox's ids, which brokers may make longer
	// than a client's, and a claim's id; it is also what the API takes for
	// an id in a URL.
	MaxInboundIDLen = 1024
)
