package config

import (
	"path/filepath"
	"time"

	"github.com/switchyard-router/switchyard/cloudevents"
)

// The defaults: one home for each value the router runs with when
// policies.hcl does not say. Load puts them into the resolved form it
// returns, and the plugins take that form as it is — they never default
// again. A test that builds a block by hand starts from the constructors
// below, which Load uses too.
const (
	DefaultSocket            = "./data/router.sock" // listen.socket, and the commands' -socket
	DefaultStoragePath       = "./data/router.db"
	DefaultMinFree           = 64 << 20 // storage.min_free
	DefaultIdempotencyWindow = 24 * time.Hour
	DefaultOutboxTTL         = 24 * time.Hour
	DefaultDLQTTL            = 7 * 24 * time.Hour
	DefaultPublishTimeout    = 10 * time.Second // nats and kafka blocks
	DefaultNATSMaxPending    = 4096
	DefaultNATSHost          = "127.0.0.1"
	DefaultNATSPort          = 4222
	DefaultStreamReplicas    = 1
	DefaultStreamDuplicates  = 2 * time.Minute // nats-server's own default
	// DefaultEmbeddedDuplicates is the duplicates window of a stream on
	// the embedded server: it holds every id of the window in the
	// router's memory, and the router's restart after a crash is covered
	// by reading back the stream instead (docs/decisions/dedup-window.md).
	DefaultEmbeddedDuplicates = time.Second
	DefaultKafkaClientID      = "switchyard"
	DefaultKafkaCompression   = "none"
	DefaultMaxRecordBytes     = 1 << 20
	DefaultBatchSize          = 200
	DefaultInboxTTL           = 24 * time.Hour
	DefaultDeliverTimeout     = 10 * time.Second
	DefaultDeliverConcurrency = 8
	// MinSessionTimeout is the shortest Kafka group session franz-go
	// takes (kgo.SessionTimeout refuses less at the client's start).
	MinSessionTimeout     = 100 * time.Millisecond
	DefaultMaxBody        = 1 << 20
	DefaultMaxBatch       = 1000
	DefaultMaxConnections = 512
	DefaultReadTimeout    = 30 * time.Second
	// MaxCommitDelay bounds storage { commit_delay } (off by default): a
	// write waits up to that long beyond its fdatasyncs.
	MaxCommitDelay = 10 * time.Millisecond
)

// Plugin state limits, per namespace (docs/plugin-state.md).
const (
	StateMaxKeyBytes   = 256
	StateMaxValueBytes = 64 << 10
	StateMaxKeys       = 100_000
	StateMaxBytes      = 64 << 20
)

// DefaultPluginLimits are a plugin block's limits when it has no limits
// block.
var DefaultPluginLimits = PluginLimits{Memory: 16 << 20, Timeout: 50 * time.Millisecond, MaxOutputs: 16, MaxOutputBytes: 1 << 20}

// DefaultStoreDir is an embedded nats block's store_dir when it sets none:
// beside the data file, in dataDir.
func DefaultStoreDir(dataDir string) string { return filepath.Join(dataDir, "nats") }

// NewListen is a listen block on socket with every default set.
func NewListen(socket string) Listen {
	return Listen{Socket: socket, MaxBody: DefaultMaxBody, MaxBatch: DefaultMaxBatch, MaxConnections: DefaultMaxConnections, ReadTimeout: DefaultReadTimeout}
}

// NewNATS is a nats block with every default set.
func NewNATS(name string) NATS {
	return NATS{
		Name:           name,
		Host:           DefaultNATSHost,
		Port:           DefaultNATSPort,
		JetStream:      true,
		MaxPending:     DefaultNATSMaxPending,
		PublishTimeout: DefaultPublishTimeout,
	}
}

// ReplayWindow is how far back, after an unclean stop, the router checks
// what it delivered to the embedded server against what the server holds:
// twice the sync interval, so that the store's last fsync is older than
// the oldest delivery checked, plus 5 s of margin
// (docs/decisions/power-loss.md).
func (n NATS) ReplayWindow() time.Duration { return 2*n.SyncInterval + 5*time.Second }

// MinMinFree is the smallest storage.min_free: under the floor, delivery
// and the cleanup need room of their own to make room.
const MinMinFree = 1 << 20

// MaxReserve caps the reserve (Storage.Reserve).
const MaxReserve = 16 << 20

// Reserve is how much of the disk the router holds in a file beside the
// data file for the moment the disk is full (storage.DB.HoldReserve;
// docs/decisions/disk-full.md): a quarter of min_free, at most MaxReserve;
// none without a floor. Delivery stops once the free room outside it is
// down to its size again, so that the last of min_free is for the
// cleanup.
func (s Storage) Reserve() int64 {
	if s.MinFree <= 0 {
		return 0
	}
	return min(s.MinFree/4, MaxReserve)
}

// NewStream is a stream block capturing subjects, with every default set.
func NewStream(name string, subjects ...string) Stream {
	return Stream{Name: name, Subjects: subjects, Storage: "file", Replicas: DefaultStreamReplicas, Duplicates: DefaultStreamDuplicates}
}

// NewKafka is a kafka block for brokers, with every default set.
func NewKafka(name string, brokers ...string) Kafka {
	return Kafka{
		Name:           name,
		Brokers:        brokers,
		ClientID:       DefaultKafkaClientID,
		Compression:    DefaultKafkaCompression,
		MaxRecordBytes: DefaultMaxRecordBytes,
		Idempotent:     true,
		PublishTimeout: DefaultPublishTimeout,
	}
}

// NewInbox is an inbox block consuming from the sink from (a kafka or nats
// block's SinkName) under policy, with every default set: the group or
// durable is the inbox's name, the id header the binding's id attribute.
func NewInbox(name string, from Broker, policy Policy) Inbox {
	kind, _ := ParseSinkName(from.SinkName())
	return newInbox(name, from.SinkName(), kind, policy)
}

// Broker is a kafka or nats block, as an inbox's from names it.
type Broker interface{ SinkName() string }

// newInbox is NewInbox for the sink named from, of kind.
func newInbox(name, from string, kind SinkKind, policy Policy) Inbox {
	in := Inbox{
		Name:      name,
		From:      from,
		TTL:       DefaultInboxTTL,
		MissingID: MissingIDDerive,
		Deliver:   Deliver{Timeout: DefaultDeliverTimeout, Concurrency: DefaultDeliverConcurrency, Mode: ContentModeBinary},
		Policy:    policy.clone(),
	}
	in.Policy.Routes = nil
	if kind == SinkKafka {
		in.Group, in.IDHeader = name, cloudevents.Kafka.Prefix()+cloudevents.AttrID
	} else {
		in.Durable, in.IDHeader = name, cloudevents.NATS.Prefix()+cloudevents.AttrID
	}
	return in
}

// DefaultPolicy is the policy an event type or inbox has when neither it
// nor a defaults block sets anything.
func DefaultPolicy() Policy {
	return Policy{
		BatchSize:         DefaultBatchSize,
		MaxRetries:        3,
		MaxProcessingTime: 300 * time.Second,
		Polling:           Polling{Type: PollingAdaptive, Min: 250 * time.Millisecond, Max: time.Minute, Multiplier: 1.5},
		Backoff:           Backoff{Enabled: true, Delay: 10 * time.Second, Multiplier: 3},
	}
}
