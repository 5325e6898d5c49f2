// Package config loads policies.hcl: the router's whole configuration.
//
// The structs here are the resolved form: durations and sizes parsed, every
// event policy already merged with the defaults block (contract §6). Nothing
// outside this package ever sees raw HCL.
package config

import (
	"time"
)

// Config is a loaded and validated policies.hcl.
type Config struct {
	// File is the path the config was read from ("" for embedded defaults).
	File string

	Listen      Listen
	Storage     Storage
	Idempotency Idempotency
	Outbox      Outbox
	DLQ         DLQ

	NATS  []NATS
	Kafka []Kafka

	// Defaults is the defaults block with built-in defaults filled in.
	Defaults Policy
	// Events maps an event type to its resolved policy. The key "*", if
	// present, catches every type without a block of its own.
	Events map[string]*Policy
	// EventsAt is where each event block is (nil without event blocks).
	EventsAt map[string]Pos
	// StreamsAt is where each stream block is, by "<nats name>/<stream
	// name>" (nil without stream blocks). Apart from the streams, so that a
	// reload compares what they are, not where.
	StreamsAt map[string]Pos
	// BlocksAt is where each block a reload cannot change is: "listen",
	// "storage", and "nats.<name>", "kafka.<name>", "inbox.<name>" (apart
	// from the blocks, as StreamsAt is; nil without such blocks).
	BlocksAt map[string]Pos
	// SecretFiles are the files of secrets the configuration names, with
	// where: each must be private to the router's user (CheckPrivate).
	SecretFiles []SecretFile
	// SecretEnvs are the environment variables of secrets it names
	// (<name>_env), with where: each must be set, and not empty.
	SecretEnvs []SecretEnv
	// WrittenPaths are the files and folders router run writes, with where
	// each is set (or implied).
	WrittenPaths []WrittenPath
	// MaxTypes bounds how many types the "*" block catches (its max_types;
	// default 256): each type is a loop, metrics series and stats rows, so
	// a client must not be able to create them without end.
	MaxTypes int
	// MaxTypesPerTenant bounds how many of them a tenant's tokens on the
	// TCP listener may add (max_types_per_tenant; default a quarter of
	// MaxTypes, at least 1), so that a tenant cannot use up the catch-all
	// for the others. The operator's clients are not held to it.
	MaxTypesPerTenant int

	// TenantLimits bounds how fast each tenant's tokens on the TCP listener
	// may store events, by tenant name (the tenant blocks); "*" bounds each
	// tenant without a block of its own (each with a bucket of its own).
	// nil without tenant blocks: no bound.
	TenantLimits map[string]TenantLimit

	Plugins []Plugin
	Inboxes []Inbox
}

// TenantLimit is a tenant "<name>" block: a token bucket of events
// (docs/decisions/tenant-rate.md). A tenant's tokens on the TCP listener
// may store Rate events a second, and Burst at once; the operator's
// clients (the unix socket, admin tokens) are not held to it.
type TenantLimit struct {
	Rate int // events a second, sustained
	// Burst is how many events the bucket holds: a request of more is
	// refused whatever the wait. Default the larger of Rate and
	// listen.max_batch, so that any batch the listener takes can pass.
	Burst int
	// Block is the block's label: the tenant's name, or "*".
	Block string
	At    Pos // where the block is
}

// TenantLimit returns the bound on tenant's events: its own tenant block,
// or the "*" block. ok is false when neither exists.
func (c *Config) TenantLimit(tenant string) (l TenantLimit, ok bool) {
	if l, ok = c.TenantLimits[tenant]; ok {
		return l, true
	}
	l, ok = c.TenantLimits["*"]
	return l, ok
}

// Policy returns the resolved policy for an event type, falling back to the
// "*" block. ok is false when the type has no block and there is no "*".
func (c *Config) Policy(eventType string) (p *Policy, ok bool) {
	if p, ok = c.Events[eventType]; ok {
		return p, true
	}
	p, ok = c.Events["*"]
	return p, ok
}

// Sinks returns the declared sinks as routes name them: "nats.local",
// "kafka.main"; NATS first, each kind in file order.
func (c *Config) Sinks() []string {
	sinks := make([]string, 0, len(c.NATS)+len(c.Kafka))
	for _, n := range c.NATS {
		sinks = append(sinks, n.SinkName())
	}
	for _, k := range c.Kafka {
		sinks = append(sinks, k.SinkName())
	}
	return sinks
}

// Listen is the listen block: where the HTTP API is served.
type Listen struct {
	Socket     string // unix socket path; default "./data/router.sock"
	HTTP       string // optional TCP address; "" = off
	TokensFile string // bearer tokens for the TCP listener
	TokensAt   Pos    // where tokens_file is set
	MaxBody    int64  // bytes; default 1 MiB
	MaxBatch   int    // events per batch request; default 1000
	// MaxConnections caps the TCP listener's open connections (default
	// 512): past it a new client takes the place of the connection idle
	// the longest, or, while all are mid-request, waits in the kernel's
	// backlog instead of taking the file descriptors the unix socket, the
	// data file and the brokers need (api/connlimit.go). The unix socket is
	// not counted against it.
	MaxConnections int
	// ReadTimeout bounds reading one request, headers and body (default
	// 30s): a client that announces a body and sends nothing is cut off.
	ReadTimeout time.Duration
	// Pprof, if set, serves net/http/pprof on this TCP address (keep it on
	// loopback): CPU and heap profiles of a running router.
	Pprof string
}

// Storage is the storage block: the bbolt data file.
type Storage struct {
	Path string // default "./data/router.db"
	// MaxSize is the data file's budget: past it ingest answers 507
	// storage_full (delivery goes on and makes room). 0 = no budget.
	MaxSize int64
	// MinFree is the free-disk floor: ingest stops while the disk holding
	// the data file has less left (default 64 MiB), so the node keeps room
	// for everything else on it. At least MinMinFree (0 only in code: no
	// floor). Part of it is the reserve (Reserve), and delivery waits
	// short of its last part (engine).
	MinFree int64
	// CommitDelay is how long a commit of a few writes waits for more to
	// join it: fewer commits (two fdatasyncs each) for a longer wait.
	// 0 (the default) commits at once; at most MaxCommitDelay.
	CommitDelay time.Duration
	// PluginCache keeps compiled plugins across restarts; default
	// <data dir>/wasm-cache (not settable in the file: `router run
	// -plugin-cache-dir` overrides it).
	PluginCache string
}

// Idempotency is the idempotency block.
type Idempotency struct {
	Window time.Duration // default 24h
	// MinWindow is how long a record is kept even while the storage budget
	// is full: past it, records are removed early to make room (engine's
	// space loop), so that a full budget does not refuse every request
	// until the window ends. Default: DefaultMinWindow, or Window if
	// shorter.
	MinWindow time.Duration
}

// DefaultMinWindow is idempotency.min_window's default: a retry within an
// hour is still recognised while the storage budget is full.
const DefaultMinWindow = time.Hour

// DefaultYieldLag is outbox.yield_lag's default: a burst of up to about
// ten seconds is stored at ingest's full speed and delivered after it.
const DefaultYieldLag = 10 * time.Second

// Outbox is the outbox block.
type Outbox struct {
	TTL time.Duration // how long delivered records are kept; default 24h
	// YieldLag is how far behind delivery may fall while it yields the CPU
	// to requests (docs/decisions/ingest-first.md); 0 = it never yields.
	// Default DefaultYieldLag.
	YieldLag time.Duration
}

// DLQ is the dlq block.
type DLQ struct {
	TTL time.Duration // how long resolved DLQ records are kept; default 168h
}

// Policy is the scheduling and routing policy of one event type (or the
// defaults). In a resolved Config every field is set.
type Policy struct {
	BatchSize         int
	MaxRetries        int
	MaxProcessingTime time.Duration // default 300s
	Ordering          Ordering      // OrderingNone or OrderingKey
	Polling           Polling
	Backoff           Backoff
	Plugins           []string
	Routes            []Route
}

// Polling is the adaptive (or fixed) poll delay of a type's loop.
type Polling struct {
	Type       PollingType   // PollingAdaptive (default) or PollingFixed
	Min        time.Duration // default 250ms
	Max        time.Duration // default 1m
	Multiplier float64       // default 1.5
}

// Backoff is the retry schedule: Delay × Multiplier^(attempt-1).
type Backoff struct {
	Enabled    bool          // default true; false = retry on the next poll
	Delay      time.Duration // default 10s
	Multiplier float64       // default 3.0
}

// Route is one route block: a sink and the topic or subject on it.
type Route struct {
	To      string // "nats.local" or "kafka.main"
	Subject string // for NATS sinks
	Topic   string // for Kafka sinks
}

// SecretFile is a file of secrets the configuration names: a password,
// token, creds or nkey seed file, or a TLS client key.
type SecretFile struct {
	Path string
	Attr string // the attribute that names it: "password_file", "key_file", ...
	At   Pos    // where
}

// SecretEnv is an environment variable of a secret the configuration names.
type SecretEnv struct {
	Name string
	Attr string // "password_env", "token_env"
	At   Pos
}

// Pos is a place in the configuration file, "file:line:col": checks made
// after loading (router validate) report problems where they were written.
type Pos string

// NATS is a nats "<name>" block.
type NATS struct {
	Name     string
	URL      string // external server; "" with Embedded
	Embedded bool   // run an in-process nats-server with JetStream
	Host     string // embedded: listen host; default "127.0.0.1"
	Port     int    // embedded: listen port; default 4222; -1 = random
	StoreDir string // embedded: JetStream store; default <data dir>/nats
	// SyncInterval is how often the embedded server fsyncs its JetStream
	// store (default 1s; nats-server's own default is 2m). After an
	// unclean stop the router checks what it delivered in the last
	// ReplayWindow (docs/decisions/power-loss.md).
	SyncInterval time.Duration
	// SyncAlways makes the embedded server fsync every stored message
	// before it acks (JetStream's sync_interval: always). Off, an acked
	// message survives a crash of the process, not of the machine.
	SyncAlways bool
	JetStream  bool // publish through JetStream (default true); false = core NATS, at most once
	// MaxPending bounds in-flight async publishes; default 4096.
	MaxPending int
	// PublishTimeout bounds one batch publish; default 10s.
	PublishTimeout time.Duration
	Streams        []Stream
	// Auth is how the router proves itself to the server. An embedded
	// server always requires it: user "switchyard" with a password the
	// router generates into <data dir>/nats-<name>.password (mode 0600)
	// unless the block names its own.
	Auth NATSAuth
	TLS  *TLS // a tls block: how to reach an external server over TLS
}

// NATSAuth is a NATS client's credentials; at most one kind is set, and
// each secret lives in a file (or the environment), never in policies.hcl.
type NATSAuth struct {
	User     string // with Password
	Password Secret
	Token    Secret
	// CredsFile is a JWT user credentials file (nsc's .creds).
	CredsFile string
	// NKeySeedFile holds an nkey seed (SU...).
	NKeySeedFile string
}

// Secret is a password or token kept outside policies.hcl: in a file
// (the whole file, less a trailing newline) or an environment variable.
type Secret struct {
	File string
	Env  string
}

// IsSet reports whether the secret is configured.
func (s Secret) IsSet() bool { return s.File != "" || s.Env != "" }

// Stream is a stream block inside a nats block: created on start.
type Stream struct {
	Name       string
	Subjects   []string
	Storage    string        // "file" (default) or "memory"
	Replicas   int           // default 1
	MaxAge     time.Duration // 0 = unlimited
	Duplicates time.Duration // dedup window; default 2m, 1s on the embedded server
}

// Kafka is a kafka "<name>" block.
type Kafka struct {
	Name           string
	Brokers        []string
	ClientID       string // default "switchyard"
	TLS            *TLS
	SASL           *SASL
	Compression    string        // "none", "gzip", "snappy", "lz4", "zstd"; default "none"
	Linger         time.Duration // default 0
	MaxRecordBytes int64         // default 1 MiB
	Idempotent     bool          // default true
	PublishTimeout time.Duration // the router's own deadline on a publish; default 10s
}

// TLS is a tls block.
type TLS struct {
	CAFile, CertFile, KeyFile string
	InsecureSkipVerify        bool
}

// SASL is a sasl block.
type SASL struct {
	Mechanism string // "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
	Username  string
	Password  Secret
}

// Plugin is a plugin "<name>" block.
type Plugin struct {
	Name   string
	Wasm   string
	At     Pos // where wasm is set
	Config map[string]string
	Limits PluginLimits
	// StateNamespace, if set, is the state namespace of this plugin on
	// every type that runs it, shared with any plugin block that names the
	// same one; "" = one namespace per event type, "<plugin>:<type>"
	// (docs/plugin-state.md).
	StateNamespace string
}

// PluginLimits is the limits of the plugin block named name.
func (c *Config) PluginLimits(name string) (PluginLimits, bool) {
	for i := range c.Plugins {
		if c.Plugins[i].Name == name {
			return c.Plugins[i].Limits, true
		}
	}
	return PluginLimits{}, false
}

// PluginLimits bounds one plugin instance.
type PluginLimits struct {
	Memory         int64         // default 16 MiB
	Timeout        time.Duration // default 50ms
	MaxOutputs     int           // default 16
	MaxOutputBytes int64         // default 1 MiB
}

// Inbox is an inbox "<name>" block.
type Inbox struct {
	Name   string
	From   string   // "kafka.main" or "nats.local"
	Topics []string // Kafka
	Group  string   // Kafka
	// InstanceID makes this router a static member of the Kafka group
	// (KIP-345): restarted, it takes its partitions back at once instead
	// of waiting for the group to notice the old member is gone. Unique
	// per router.
	InstanceID string
	// SessionTimeout is how long the Kafka group waits for a member that
	// stopped answering; default franz-go's 45s.
	SessionTimeout time.Duration
	// ReadCommitted reads only committed records of transactional
	// producers (Kafka's isolation.level=read_committed); default off.
	ReadCommitted bool
	Subject       string // NATS
	Durable       string // NATS
	TTL           time.Duration
	IDHeader      string
	// MissingID is what to do with a message without an id header:
	// MissingIDDerive (default: store it under an id derived from its
	// content, with a warning) or MissingIDReject (acknowledge and drop it,
	// audited).
	MissingID MissingID
	Plugins   []string
	Deliver   Deliver
	Policy    Policy
}

// ReadsAs is the name the inbox reads its broker as: its Kafka group, or
// its JetStream durable.
func (in Inbox) ReadsAs() string {
	if in.Durable != "" {
		return in.Durable
	}
	return in.Group
}

// Deliver is where an inbox hands events to the local service.
type Deliver struct {
	URL     string
	Timeout time.Duration
	// Concurrency bounds the POSTs in flight to the service
	// (DefaultDeliverConcurrency).
	Concurrency int
	// Mode is the CloudEvents HTTP content mode of each POST.
	Mode ContentMode
}

// ContentMode is a CloudEvents content mode.
type ContentMode string

const (
	// ContentModeBinary: attributes in ce- headers (percent-encoded), the
	// data as the body. The default.
	ContentModeBinary ContentMode = "binary"
	// ContentModeStructured: the whole event as the body, in the JSON
	// format (application/cloudevents+json) — every value exactly, for a
	// receiver whose SDK does not percent-decode headers.
	ContentModeStructured ContentMode = "structured"
)

// Ordering is a policy's ordering attribute.
type Ordering string

const (
	OrderingNone Ordering = ""    // next-attempt order only ("none" in the file)
	OrderingKey  Ordering = "key" // an event waits behind earlier ones of its partition key
)

// ByKey reports whether events of the policy wait behind earlier ones with
// the same partition key.
func (p *Policy) ByKey() bool { return p != nil && p.Ordering == OrderingKey }

// RouteDestinations are where an output without a destination goes: each
// route's "<sink>:<topic or subject>" (Route.Destination), in file order.
func (p *Policy) RouteDestinations() []string {
	dests := make([]string, len(p.Routes))
	for i, r := range p.Routes {
		dests[i] = r.Destination()
	}
	return dests
}

// PollingType is a polling block's type.
type PollingType string

const (
	PollingAdaptive PollingType = "adaptive" // the delay adapts to what polls find
	PollingFixed    PollingType = "fixed"    // every min
)

// MissingID is what an inbox does with a message without an event id.
type MissingID string

const (
	MissingIDDerive MissingID = "derive" // an id derived from the content
	MissingIDReject MissingID = "reject" // acknowledged, dropped and audited
)

// Target is the route's subject (NATS) or topic (Kafka): the one its sink
// takes.
func (r Route) Target() string {
	if r.Topic != "" {
		return r.Topic
	}
	return r.Subject
}

// Destination names the route's output: "<sink>:<subject or topic>",
// "nats.local:orders.created".
func (r Route) Destination() string { return r.To + ":" + r.Target() }
