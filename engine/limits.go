package engine

// Limits on what the router keeps of an event and puts in keys, URLs and
// headers: one home for the API's checks at ingest and the inbox's when it
// reads a message. A key in the data file may be at most 32 KiB (bbolt's
// limit); one larger fails its whole commit. The limits on event ids are
// switchyard.MaxIDLen and switchyard.MaxInboundIDLen.
const (
	// MaxTypeLen bounds an event type: each type is a queue, a loop and a
	// label on every per-type metric. A claim's consumer is held to it too.
	MaxTypeLen = 256
	// MaxAttrLen bounds any other attribute at ingest, and the partition
	// key an inbox keeps (a key in the data file with ordering = "key").
	MaxAttrLen = 4096
)
