package config

import (
	switchyard "github.com/switchyard-router/switchyard"

	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(src), "test.hcl")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// parseErr parses src, which must fail, and returns the error text.
func parseErr(t *testing.T, src string) string {
	t.Helper()
	cfg, err := Parse([]byte(src), "test.hcl")
	if err == nil {
		t.Fatalf("Parse succeeded, want an error; got %+v", cfg)
	}
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error is %T, want *Error: %v", err, err)
	}
	return err.Error()
}

// An empty configuration is the built-in defaults, down to each limit,
// timeout and policy, and names the paths the router will write.
func TestBuiltinDefaults(t *testing.T) {
	cfg := mustParse(t, "")
	want := &Config{
		File:              "test.hcl",
		Listen:            Listen{Socket: "./data/router.sock", MaxBody: 1 << 20, MaxBatch: 1000, MaxConnections: 512, ReadTimeout: 30 * time.Second},
		Storage:           Storage{Path: "./data/router.db", MinFree: 64 << 20, PluginCache: "data/wasm-cache"},
		Idempotency:       Idempotency{Window: 24 * time.Hour, MinWindow: time.Hour},
		Outbox:            Outbox{TTL: 24 * time.Hour, YieldLag: 10 * time.Second},
		DLQ:               DLQ{TTL: 168 * time.Hour},
		MaxTypes:          256,
		MaxTypesPerTenant: 64,
		Defaults: Policy{
			BatchSize:         200,
			MaxRetries:        3,
			MaxProcessingTime: 300 * time.Second,
			Polling:           Polling{Type: "adaptive", Min: 250 * time.Millisecond, Max: time.Minute, Multiplier: 1.5},
			Backoff:           Backoff{Enabled: true, Delay: 10 * time.Second, Multiplier: 3},
		},
		Events: map[string]*Policy{},
		WrittenPaths: []WrittenPath{
			{What: "storage.path", Path: "./data/router.db", At: "test.hcl:1:1"},
			{What: "the plugin cache beside storage.path", Path: "data/wasm-cache", Dir: true, At: "test.hcl:1:1"},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("empty config:\n got %+v\nwant %+v", cfg, want)
	}
}

const inheritSrc = `
nats "local" { embedded = true }
kafka "main" { brokers = ["127.0.0.1:9092"] }
plugin "enrich" { wasm = "enrich.wasm" }
plugin "redact" { wasm = "redact.wasm" }

defaults {
  batch_size = 50
  plugins    = ["enrich"]
  polling {
    max = "30s"
  }
  backoff {
    delay = "1s"
  }
  route {
    to      = "nats.local"
    subject = "all"
  }
}

event "nested" {
  polling { min = "50ms" }
}

event "replaced" {
  max_retries = 7
  ordering    = "key"
  plugins     = ["redact", "enrich"]
  backoff { enabled = false }
  route {
    to    = "kafka.main"
    topic = "orders"
  }
  route {
    to      = "nats.local"
    subject = "orders"
  }
}

event "emptied" {
  plugins = []
}

inbox "in" {
  from    = "nats.local"
  subject = "in.>"
  polling { multiplier = 2 }
}
`

// An event block overrides only the defaults' fields it sets, its lists
// replace theirs, and it shares no list with them; an inbox inherits the
// same way but takes neither the defaults' routes nor their plugins.
func TestInheritance(t *testing.T) {
	cfg := mustParse(t, inheritSrc)
	defaults := Policy{
		BatchSize:         50,
		MaxRetries:        3,
		MaxProcessingTime: 300 * time.Second,
		Polling:           Polling{Type: "adaptive", Min: 250 * time.Millisecond, Max: 30 * time.Second, Multiplier: 1.5},
		Backoff:           Backoff{Enabled: true, Delay: time.Second, Multiplier: 3},
		Plugins:           []string{"enrich"},
		Routes:            []Route{{To: "nats.local", Subject: "all"}},
	}
	if !reflect.DeepEqual(cfg.Defaults, defaults) {
		t.Errorf("defaults:\n got %+v\nwant %+v", cfg.Defaults, defaults)
	}

	// A nested block overrides only the fields it sets.
	nested := defaults
	nested.Polling.Min = 50 * time.Millisecond
	if got := *cfg.Events["nested"]; !reflect.DeepEqual(got, nested) {
		t.Errorf("nested:\n got %+v\nwant %+v", got, nested)
	}

	// Lists set by the event replace the defaults' lists.
	replaced := defaults
	replaced.MaxRetries = 7
	replaced.Ordering = "key"
	replaced.Backoff.Enabled = false
	replaced.Plugins = []string{"redact", "enrich"}
	replaced.Routes = []Route{{To: "kafka.main", Topic: "orders"}, {To: "nats.local", Subject: "orders"}}
	if got := *cfg.Events["replaced"]; !reflect.DeepEqual(got, replaced) {
		t.Errorf("replaced:\n got %+v\nwant %+v", got, replaced)
	}

	emptied := defaults
	emptied.Plugins = []string{}
	if got := *cfg.Events["emptied"]; !reflect.DeepEqual(got, emptied) {
		t.Errorf("emptied:\n got %+v\nwant %+v", got, emptied)
	}

	// Inboxes inherit the same way, but never routes, and run only the
	// plugins they name (the defaults' chain is for outbound events).
	in := cfg.Inboxes[0]
	inPolicy := defaults
	inPolicy.Polling.Multiplier = 2
	inPolicy.Routes = nil
	inPolicy.Plugins = nil
	if !reflect.DeepEqual(in.Policy, inPolicy) {
		t.Errorf("inbox policy:\n got %+v\nwant %+v", in.Policy, inPolicy)
	}
	if len(in.Plugins) != 0 {
		t.Errorf("inbox plugins = %q, want none", in.Plugins)
	}

	// Events must not share the defaults' backing arrays.
	cfg.Events["nested"].Plugins[0] = "changed"
	if cfg.Defaults.Plugins[0] != "enrich" {
		t.Error("an event's plugin list aliases the defaults'")
	}
}

// A type without its own event block gets the catch-all "*" block's
// policy, and no policy at all when there is no "*" block.
func TestPolicyFallback(t *testing.T) {
	cfg := mustParse(t, `
nats "local" { embedded = true }
event "a" { batch_size = 1 }
event "*" { batch_size = 2 }
`)
	for typ, want := range map[string]int{"a": 1, "b": 2, "*": 2} {
		p, ok := cfg.Policy(typ)
		if !ok || p.BatchSize != want {
			t.Errorf("Policy(%q) = %+v, %v; want batch_size %d", typ, p, ok, want)
		}
	}

	cfg = mustParse(t, `event "a" {}`)
	if p, ok := cfg.Policy("b"); ok {
		t.Errorf("Policy(b) without a \"*\" block = %+v, want not ok", p)
	}
}

// The shipped policies.hcl parses, routes its demo type to the embedded
// server, and agrees with the built-in defaults it writes out.
func TestDefault(t *testing.T) {
	cfg, err := Parse(switchyard.Policies, "policies.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sinks(); !reflect.DeepEqual(got, []string{"nats.local"}) {
		t.Errorf("Sinks() = %q", got)
	}
	n := cfg.NATS[0]
	if !n.Embedded || n.StoreDir != filepath.Join("data", "nats") || len(n.Streams) != 1 || n.Streams[0].Subjects[0] != "demo.>" {
		t.Errorf("nats = %+v", n)
	}
	if d := n.Streams[0].Duplicates; d != DefaultEmbeddedDuplicates {
		t.Errorf("policies.hcl: duplicates = %s, want the embedded default %s", d, DefaultEmbeddedDuplicates)
	}
	p, ok := cfg.Policy("demo.greeting")
	if !ok || !reflect.DeepEqual(p.Routes, []Route{{To: "nats.local", Subject: "demo.greeting"}}) {
		t.Errorf("demo.greeting = %+v, %v", p, ok)
	}
	// default.hcl writes the built-in defaults out: they must agree.
	if empty := mustParse(t, ""); !reflect.DeepEqual(cfg.Defaults, empty.Defaults) ||
		cfg.Listen != empty.Listen || cfg.Storage != empty.Storage || cfg.Idempotency != empty.Idempotency ||
		cfg.Outbox != empty.Outbox || cfg.DLQ != empty.DLQ {
		t.Errorf("default.hcl disagrees with the built-in defaults:\n got %+v\nwant %+v", cfg, empty)
	}
}

// A stream's duplicates window defaults to 1s on the embedded server (its
// ids are held in the router's memory) and to nats-server's 2m on an
// external one; a max_age shorter than the default shortens it, and a
// window that is set is kept.
func TestStreamDuplicatesDefault(t *testing.T) {
	cfg := mustParse(t, `
nats "in" {
  embedded = true
  port     = -1
  stream "a" { subjects = ["a"] }
  stream "b" {
    subjects = ["b"]
    max_age  = "500ms"
  }
  stream "c" {
    subjects   = ["c"]
    duplicates = "1m"
  }
}
nats "out" {
  url = "nats://127.0.0.1:4222"
  stream "d" { subjects = ["d"] }
  stream "e" {
    subjects = ["e"]
    max_age  = "1m"
  }
}
`)
	want := map[string]time.Duration{"a": DefaultEmbeddedDuplicates, "b": 500 * time.Millisecond, "c": time.Minute,
		"d": DefaultStreamDuplicates, "e": time.Minute}
	for _, n := range cfg.NATS {
		for _, s := range n.Streams {
			if s.Duplicates != want[s.Name] {
				t.Errorf("nats %q stream %q: duplicates = %s, want %s", n.Name, s.Name, s.Duplicates, want[s.Name])
			}
		}
	}
}

// TestDefaultExamples uncomments the example blocks of default.hcl (those
// starting with `# nats "`, `# kafka "`, `# plugin "`, `# event "` or `# inbox "`, up
// to `# }`): what users copy from must be valid.
func TestDefaultExamples(t *testing.T) {
	start := regexp.MustCompile(`^# (nats|kafka|plugin|event|inbox) "`)
	var out []string
	inside, examples := false, 0
	for _, line := range strings.Split(string(switchyard.Policies), "\n") {
		if start.MatchString(line) {
			inside = true
			examples++
		}
		if inside {
			inside = line != "# }"
			line = strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
		}
		out = append(out, line)
	}
	if examples < 5 {
		t.Fatalf("found %d examples, want at least 5", examples)
	}
	cfg := mustParse(t, strings.Join(out, "\n"))
	if len(cfg.NATS) != 2 || cfg.NATS[1].Auth.Password.File == "" || cfg.NATS[1].TLS == nil {
		t.Errorf("nats example = %+v", cfg.NATS)
	}
	if len(cfg.Kafka) != 1 || cfg.Kafka[0].SASL == nil || cfg.Kafka[0].TLS == nil {
		t.Errorf("kafka example = %+v", cfg.Kafka)
	}
	if len(cfg.Plugins) != 1 || len(cfg.Inboxes) != 2 || len(cfg.Events) != 3 {
		t.Errorf("examples gave %d plugins, %d inboxes, %d events", len(cfg.Plugins), len(cfg.Inboxes), len(cfg.Events))
	}
}

// Every block and attribute of testdata/full.hcl lands in the resolved
// config, with the defaults filled in where it is silent.
func TestFullConfig(t *testing.T) {
	cfg, err := Load("testdata/full.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != "testdata/full.hcl" {
		t.Errorf("File = %q", cfg.File)
	}
	if want := (Listen{Socket: "/run/sy.sock", HTTP: ":8080", TokensFile: "tokens.json", TokensAt: "testdata/full.hcl:5:17", MaxBody: 512 << 10, MaxBatch: 10, MaxConnections: 64, ReadTimeout: 5 * time.Second}); cfg.Listen != want {
		t.Errorf("listen = %+v, want %+v", cfg.Listen, want)
	}
	if cfg.Storage.Path != "/var/lib/sy/router.db" || cfg.Storage.CommitDelay != 2*time.Millisecond {
		t.Errorf("storage = %+v", cfg.Storage)
	}
	if want := (Outbox{TTL: 2 * time.Hour, YieldLag: 0}); cfg.Outbox != want {
		t.Errorf("outbox = %+v, want %+v", cfg.Outbox, want)
	}
	if got := cfg.Sinks(); !reflect.DeepEqual(got, []string{"nats.local", "nats.remote", "kafka.main"}) {
		t.Errorf("Sinks() = %q", got)
	}
	wantNATS := []NATS{{
		Name: "local", Embedded: true, Host: "::1", Port: -1, StoreDir: "/var/lib/nats", SyncInterval: time.Second,
		JetStream: true, MaxPending: 100, PublishTimeout: 5 * time.Second,
		Auth: NATSAuth{User: "switchyard", Password: Secret{File: "/var/lib/sy/nats-local.password"}},
		Streams: []Stream{
			{Name: "a", Subjects: []string{"a.>"}, Storage: "memory", Replicas: 3, MaxAge: time.Hour, Duplicates: time.Minute},
			{Name: "b", Subjects: []string{"b"}, Storage: "file", Replicas: 1, Duplicates: DefaultEmbeddedDuplicates},
		},
	}, {
		Name: "remote", URL: "nats://nats:4222", Host: "127.0.0.1", Port: 4222,
		MaxPending: 4096, PublishTimeout: 10 * time.Second,
		Auth: NATSAuth{CredsFile: "/etc/sy/remote.creds"}, TLS: &TLS{CAFile: "nats-ca.pem"},
	}}
	if !reflect.DeepEqual(cfg.NATS, wantNATS) {
		t.Errorf("nats:\n got %+v\nwant %+v", cfg.NATS, wantNATS)
	}
	wantKafka := []Kafka{{
		Name: "main", Brokers: []string{"k1:9092", "k2:9092"}, ClientID: "edge", Compression: "zstd",
		Linger: 5 * time.Millisecond, MaxRecordBytes: 2_000_000, Idempotent: false, PublishTimeout: time.Minute,
		TLS:  &TLS{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", InsecureSkipVerify: true},
		SASL: &SASL{Mechanism: "SCRAM-SHA-256", Username: "u", Password: Secret{Env: "KAFKA_PASSWORD"}},
	}}
	if !reflect.DeepEqual(cfg.Kafka, wantKafka) {
		t.Errorf("kafka:\n got %+v\nwant %+v", cfg.Kafka, wantKafka)
	}
	wantPlugins := []Plugin{{
		Name: "enrich", Wasm: "enrich.wasm", At: "testdata/full.hcl:72:12",
		Config: map[string]string{"region": "eu-1", "ratio": "1.5", "verbose": "true", "count": "3"},
		Limits: PluginLimits{Memory: 1 << 30, Timeout: time.Second, MaxOutputs: 2, MaxOutputBytes: 4096},
	}, {
		Name: "noop", Wasm: "noop.wasm", At: "testdata/full.hcl:82:24",
		Limits: PluginLimits{Memory: 16 << 20, Timeout: 50 * time.Millisecond, MaxOutputs: 16, MaxOutputBytes: 1 << 20},
	}}
	if !reflect.DeepEqual(cfg.Plugins, wantPlugins) {
		t.Errorf("plugins:\n got %+v\nwant %+v", cfg.Plugins, wantPlugins)
	}
	if len(cfg.Inboxes) != 2 {
		t.Fatalf("inboxes = %+v", cfg.Inboxes)
	}
	k, n := cfg.Inboxes[0], cfg.Inboxes[1]
	if k.From != "kafka.main" || !reflect.DeepEqual(k.Topics, []string{"payments"}) || k.Group != "pay" ||
		k.IDHeader != "ce_id" || k.TTL != time.Hour || k.Deliver != (Deliver{URL: "unix:///run/pay.sock/events", Timeout: 2 * time.Second, Concurrency: DefaultDeliverConcurrency, Mode: ContentModeBinary}) ||
		!reflect.DeepEqual(k.Plugins, []string{"noop"}) || k.Policy.BatchSize != 5 {
		t.Errorf("kafka inbox = %+v", k)
	}
	if n.From != "nats.remote" || n.Subject != "alerts.>" || n.Durable != "alerts" || n.IDHeader != "x-id" ||
		n.TTL != 24*time.Hour || n.Deliver != (Deliver{Timeout: 10 * time.Second, Concurrency: DefaultDeliverConcurrency, Mode: ContentModeBinary}) {
		t.Errorf("nats inbox = %+v", n)
	}
	if p := cfg.Events["fixed"]; p.Polling != (Polling{Type: "fixed", Min: time.Second, Max: time.Minute, Multiplier: 1.5}) || p.Ordering != "" {
		t.Errorf("fixed = %+v", p)
	}
}

// A configuration file that does not exist is a not-exist error the
// caller can tell apart.
func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.hcl"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want a not-exist error", err)
	}
}

// A path to something endless (/dev/zero) is refused after
// fsperm.MaxConfigFile bytes: it was read until the machine ran out of memory.
func TestLoadEndlessFile(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	_, err := Load("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "holds more than the 8 MiB a configuration file may") {
		t.Fatalf("Load(/dev/zero) = %v", err)
	}
}

// Each mistake in a configuration (a typo, a wrong type or range, an
// undeclared sink or plugin, a duplicate, a secret written inline, a
// socket at a path in use) is told as file:line:col with a summary that
// says what is wrong.
func TestErrors(t *testing.T) {
	const sinks = `nats "local" { embedded = true }
kafka "main" { brokers = ["k:9092"] }
plugin "p" { wasm = "p.wasm" }
`
	// sinks is 3 lines long: positions below count from line 4.
	tests := []struct {
		name, src, want string
	}{
		{"syntax", "listen {\n", "test.hcl:1:8: Unclosed configuration block"},
		{"unknown block", "listne {}\n", "test.hcl:1:1: Unsupported block type"},
		{"unknown attribute", "listen {\n  sokcet = \"x\"\n}\n", "test.hcl:2:3: Unsupported argument"},
		{"unknown nested block", "defaults {\n  poling {}\n}\n", "test.hcl:2:3: Unsupported block type"},
		{"an argument for a block", "event \"a\" {\n  routes = [\"nats.local\"]\n}\n", `test.hcl:2:3: Unsupported argument: An argument named "routes" is not expected here. Did you mean a route block (route { ... })?`},
		{"an argument for a labelled block", "plugins = [\"p\"]\n", `test.hcl:1:1: Unsupported argument: An argument named "plugins" is not expected here. Did you mean a plugin block (plugin "..." { ... })?`},
		{"missing label", "event {}\n", "test.hcl:1:7: Missing type for event"},
		{"wrong type", "listen {\n  max_batch = \"many\"\n}\n", "test.hcl:2:15: Incorrect attribute value type"},
		{"wrong list type", "defaults {\n  plugins = \"p\"\n}\n", "test.hcl:2:13: Incorrect attribute value type"},
		{"not a whole number", "defaults {\n  batch_size = 1.5\n}\n", "test.hcl:2:16: Invalid value: batch_size must be a whole number"},
		{"below minimum", "defaults {\n  batch_size = 0\n}\n", "test.hcl:2:16: Invalid value: batch_size must be at least 1"},
		{"variable", "listen {\n  socket = var.x\n}\n", "test.hcl:2:12: Variables not allowed"},
		{"bad duration", "idempotency {\n  window = \"5x\"\n}\n", `test.hcl:2:12: Invalid duration: window: "5x" is not a duration`},
		{"min_window past window", "idempotency {\n  window     = \"1h\"\n  min_window = \"2h\"\n}\n", `test.hcl:3:16: min_window longer than window`},
		{"duration without unit", "outbox {\n  ttl = 60\n}\n", `test.hcl:2:9: Invalid duration: ttl: "60" is not a duration`},
		{"duration too long", "outbox {\n  ttl = \"99999999h\"\n}\n", `test.hcl:2:9: Invalid duration: ttl: "99999999h" is longer than the longest duration`},
		{"duration unit alone", "outbox {\n  ttl = \"h\"\n}\n", `test.hcl:2:9: Invalid duration: ttl: "h" is not a duration`},
		{"negative duration", "dlq {\n  ttl = \"-1h\"\n}\n", "test.hcl:2:9: Invalid duration: ttl must not be negative"},
		{"zero duration", "defaults {\n  polling { min = \"0s\" }\n}\n", "test.hcl:2:19: Invalid duration: min must be greater than zero"},
		{"commit delay over the limit", "storage {\n  commit_delay = \"50ms\"\n}\n", "test.hcl:2:18: Invalid duration: commit_delay is at most 10ms"},
		{"negative commit delay", "storage {\n  commit_delay = \"-1ms\"\n}\n", "test.hcl:2:18: Invalid duration: commit_delay must not be negative"},
		{"negative yield lag", "outbox {\n  yield_lag = \"-1s\"\n}\n", "test.hcl:2:15: Invalid duration: yield_lag must not be negative"},
		{"bad size", "listen {\n  max_body = \"16MB!\"\n}\n", `test.hcl:2:14: Invalid size: max_body: "16MB!" is not a size`},
		{"zero size", "listen {\n  max_body = 0\n}\n", "test.hcl:2:14: Invalid size: max_body: size must be greater than zero"},
		{"min_free too small", "storage {\n  min_free = \"512KiB\"\n}\n", "test.hcl:2:14: Invalid size: min_free is at least 1MiB, not 512KiB"},
		{"polling multiplier", "defaults {\n  polling {\n    multiplier = 0.5\n  }\n}\n", "test.hcl:3:18: Invalid multiplier: multiplier must be at least 1"},
		{"backoff multiplier", "event \"a\" {\n  backoff { multiplier = 0.9 }\n}\n", "test.hcl:2:26: Invalid multiplier"},
		{"polling type", "defaults {\n  polling { type = \"eager\" }\n}\n", `test.hcl:2:20: Invalid value: type must be one of "adaptive", "fixed", not "eager"`},
		{"polling min over max", "event \"a\" {\n  polling { min = \"2m\" }\n}\n", "test.hcl:2:3: Invalid polling: min (2m0s) exceeds max (1m0s)"},
		{"polling min under a millisecond", "event \"a\" {\n  polling {\n    type = \"fixed\"\n    min = \"1ns\"\n  }\n}\n", "test.hcl:4:11: Invalid polling: min (1ns) is under 1ms"},
		{"ordering", "defaults {\n  ordering = \"fifo\"\n}\n", "test.hcl:2:14: Invalid value: ordering must be one of"},
		{"an inbox's queue as an event type", "event \"inbox:mail\" {}\n", `test.hcl:1:7: Invalid event type: event types starting with "inbox:" are the router's own`},
		{"read_timeout too short", "listen {\n  read_timeout = \"1ns\"\n}\n", "test.hcl:2:18: Invalid duration: read_timeout is at least 100ms"},
		{"undeclared nats sink", sinks + "event \"a\" {\n  route {\n    to      = \"nats.remote\"\n    subject = \"a\"\n  }\n}\n",
			`test.hcl:6:15: Unknown sink: "nats.remote": no nats "remote" block is declared`},
		{"undeclared kafka sink", "event \"a\" {\n  route {\n    to    = \"kafka.main\"\n    topic = \"a\"\n  }\n}\n",
			`test.hcl:3:13: Unknown sink: "kafka.main": no kafka "main" block is declared`},
		{"not a sink", sinks + "event \"a\" {\n  route { to = \"redis.x\" }\n}\n", `test.hcl:5:16: Invalid sink: "redis.x" is not a sink`},
		{"route without to", sinks + "event \"a\" {\n  route { subject = \"a\" }\n}\n", "test.hcl:5:3: Missing required argument: The route block needs to ="},
		{"nats route without subject", sinks + "event \"a\" {\n  route { to = \"nats.local\" }\n}\n",
			"test.hcl:5:3: Missing required argument: The route block needs subject ="},
		{"kafka route without topic", sinks + "event \"a\" {\n  route { to = \"kafka.main\" }\n}\n",
			"test.hcl:5:3: Missing required argument: The route block needs topic ="},
		{"topic on nats route", sinks + "event \"a\" {\n  route {\n    to = \"nats.local\"\n    subject = \"a\"\n    topic = \"a\"\n  }\n}\n",
			"test.hcl:8:5: Unsupported argument: topic does not apply to a NATS sink"},
		{"undeclared plugin", sinks + "event \"x\" {\n  plugins = [\"p\", \"q\"]\n}\n", `test.hcl:5:19: Unknown plugin: No plugin "q" is declared`},
		{"undeclared plugin in defaults", "defaults { plugins = [\"q\"] }\n", `test.hcl:1:23: Unknown plugin`},
		{"null plugin", sinks + "event \"x\" {\n  plugins = [\"p\", null]\n}\n", "test.hcl:5:19: Invalid value: plugins must not contain null"},
		{"duplicate event", "event \"a\" {}\nevent \"a\" {}\n", `test.hcl:2:1: Duplicate event block: event "a" is already declared on line 1`},
		{"duplicate nats", "nats \"n\" { embedded = true }\nnats \"n\" { embedded = true }\n", "test.hcl:2:1: Duplicate nats block"},
		{"duplicate kafka", "kafka \"k\" { brokers = [\"k\"] }\n\nkafka \"k\" { brokers = [\"k\"] }\n", "test.hcl:3:1: Duplicate kafka block"},
		{"duplicate plugin", "plugin \"p\" { wasm = \"a\" }\nplugin \"p\" { wasm = \"b\" }\n", "test.hcl:2:1: Duplicate plugin block"},
		{"duplicate inbox", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n}\n  inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n}\n",
			"test.hcl:8:3: Duplicate inbox block"},
		{"duplicate stream", "nats \"n\" {\n  embedded = true\n  stream \"s\" { subjects = [\"a\"] }\n  stream \"s\" { subjects = [\"b\"] }\n}\n", "test.hcl:4:3: Duplicate stream block"},
		{"duplicate defaults", "defaults {}\ndefaults {}\n", "test.hcl:2:1: Duplicate defaults block: Only one defaults block is allowed here; the first is on line 1"},
		{"duplicate polling", "event \"a\" {\n  polling {}\n  polling {}\n}\n", "test.hcl:3:3: Duplicate polling block"},
		{"wildcard type", "event \"order.*\" {}\n", "test.hcl:1:7: Invalid event type"},
		{"empty type", "event \"\" {}\n", "test.hcl:1:7: Invalid event type"},
		{"bad name", "nats \"a.b\" { embedded = true }\n", `test.hcl:1:6: Invalid name: nats name "a.b"`},
		{"nats without server", "nats \"n\" {}\n", "test.hcl:1:1: Missing required argument: The nats block needs url"},
		{"nats url and embedded", "nats \"n\" {\n  embedded = true\n  url = \"nats://x\"\n}\n", "test.hcl:3:9: Conflicting arguments"},
		{"streams without jetstream", "nats \"n\" {\n  url = \"nats://x\"\n  jetstream = false\n  stream \"s\" { subjects = [\"a\"] }\n}\n", "test.hcl:4:3: Streams need JetStream"},
		{"stream without subjects", "nats \"n\" {\n  url = \"nats://x\"\n  stream \"s\" {}\n}\n", "test.hcl:3:3: Missing required argument: The stream block needs subjects"},
		{"kafka without brokers", "kafka \"k\" {\n  brokers = []\n}\n", "test.hcl:1:1: Missing required argument: The kafka block needs brokers"},
		{"compression", "kafka \"k\" {\n  brokers = [\"k\"]\n  compression = \"brotli\"\n}\n", "test.hcl:3:17: Invalid value: compression must be one of"},
		{"sasl mechanism", "kafka \"k\" {\n  brokers = [\"k\"]\n  sasl {\n    mechanism = \"MD5\"\n    username = \"u\"\n    password_file = \"p\"\n  }\n}\n", "test.hcl:4:17: Invalid value: mechanism must be one of"},
		{"sasl without password", "kafka \"k\" {\n  brokers = [\"k\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n  }\n}\n", "test.hcl:3:3: Missing required argument: The sasl block needs password_file or password_env"},
		{"sasl password inline", "kafka \"k\" {\n  brokers = [\"k\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"hunter2\"\n  }\n}\n", "test.hcl:6:5: Secret in the configuration: Put the password in a file (password_file, mode 0600)"},
		{"nats url with password", "nats \"n\" {\n  url = \"nats://u:p@x:4222\"\n}\n", "test.hcl:2:9: Secret in the configuration: url carries credentials"},
		{"nats token inline", "nats \"n\" {\n  url = \"nats://x\"\n  token = \"t\"\n}\n", "test.hcl:3:3: Secret in the configuration: Put the token in a file"},
		{"nats two kinds of credentials", "nats \"n\" {\n  url = \"nats://x\"\n  token_file = \"t\"\n  creds_file = \"c\"\n}\n", "test.hcl:1:1: Conflicting arguments: Set one kind of credentials, not creds_file and token"},
		{"nats user without password", "nats \"n\" {\n  url = \"nats://x\"\n  user = \"u\"\n}\n", "test.hcl:1:1: Incomplete credentials"},
		{"nats password file and env", "nats \"n\" {\n  url = \"nats://x\"\n  user = \"u\"\n  password_file = \"f\"\n  password_env = \"E\"\n}\n", "test.hcl:1:1: Conflicting arguments: Set password_file or password_env, not both"},
		{"embedded nats token", "nats \"n\" {\n  embedded = true\n  token_file = \"t\"\n}\n", "test.hcl:1:1: Unsupported argument: An embedded server takes user and password_file"},
		{"embedded nats tls", "nats \"n\" {\n  embedded = true\n  tls { ca_file = \"c\" }\n}\n", "test.hcl:3:3: Unsupported block"},
		{"tls half a certificate", "kafka \"k\" {\n  brokers = [\"k\"]\n  tls { cert_file = \"c\" }\n}\n", "test.hcl:3:3: Incomplete client certificate"},
		{"plugin without wasm", "plugin \"p\" {}\n", "test.hcl:1:1: Missing required argument: The plugin block needs wasm"},
		{"plugin config nested", "plugin \"p\" {\n  wasm = \"p\"\n  config = { a = [1] }\n}\n", "test.hcl:3:12: Incorrect attribute value type: config.a must be a string, number or bool"},
		{"plugin memory", "plugin \"p\" {\n  wasm = \"p\"\n  limits { memory = \"lots\" }\n}\n", "test.hcl:3:21: Invalid size"},
		{"inbox without from", "inbox \"i\" {}\n", "test.hcl:1:1: Missing required argument: The inbox block needs from"},
		{"inbox unknown sink", "inbox \"i\" {\n  from = \"kafka.x\"\n}\n", "test.hcl:2:10: Unknown sink"},
		// Names no broker takes: every event would be a dead letter.
		{"route subject with a space", sinks + "event \"t\" {\n  route {\n    to = \"nats.local\"\n    subject = \"demo.a b\"\n  }\n}\n", `test.hcl:7:15: Invalid name: subject: subject "demo.a b" holds white space.`},
		{"route subject empty token", sinks + "event \"t\" {\n  route {\n    to = \"nats.local\"\n    subject = \"demo..a\"\n  }\n}\n", `test.hcl:7:15: Invalid name: subject: subject "demo..a" has an empty token`},
		{"route subject wildcard", sinks + "event \"t\" {\n  route {\n    to = \"nats.local\"\n    subject = \"demo.>\"\n  }\n}\n", `test.hcl:7:15: Invalid name: subject: subject "demo.>" has the wildcard ">"`},
		{"route topic", sinks + "event \"t\" {\n  route {\n    to = \"kafka.main\"\n    topic = \"bad topic/../\"\n  }\n}\n", `test.hcl:7:13: Invalid name: topic: topic "bad topic/../" has ' '`},
		{"stream subject", "nats \"n\" {\n  embedded = true\n  stream \"s\" {\n    subjects = [\"ok.>\", \">.x\"]\n  }\n}\n", `test.hcl:4:25: Invalid name: subjects: subject ">.x": '>' may only be the last token.`},
		{"inbox subject", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"in. x\"\n}\n", `test.hcl:6:13: Invalid name: subject: subject "in. x" holds white space.`},
		{"inbox topic", sinks + "inbox \"i\" {\n  from = \"kafka.main\"\n  topics = [\"ok\", \"a/b\"]\n}\n", `test.hcl:6:19: Invalid name: topics: topic "a/b" has '/'`},
		{"kafka inbox without topics", sinks + "inbox \"i\" {\n  from = \"kafka.main\"\n}\n", "test.hcl:4:1: Missing required argument: The inbox block needs topics"},
		{"nats inbox without subject", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n}\n", "test.hcl:4:1: Missing required argument: The inbox block needs subject"},
		{"kafka inbox with subject", sinks + "inbox \"i\" {\n  from = \"kafka.main\"\n  topics = [\"t\"]\n  subject = \"s\"\n}\n", "test.hcl:7:3: Unsupported argument: subject does not apply to a Kafka sink"},
		{"inbox route", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n  route { to = \"nats.local\" }\n}\n", "test.hcl:7:3: Unsupported block type"},
		{"inbox deliver url", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n  deliver { url = \"ftp://x\" }\n}\n", "test.hcl:7:19: Invalid URL"},
		// An inbox's consumer is its own: two sharing a NATS durable or a
		// Kafka group split or misroute each other's events (an
		// adversarial trial: validate passed both, run lost one's events).
		{"inboxes sharing a durable", sinks + "inbox \"a\" {\n  from = \"nats.local\"\n  subject = \"a.>\"\n  durable = \"d\"\n}\ninbox \"b\" {\n  from = \"nats.local\"\n  subject = \"b.>\"\n  durable = \"d\"\n}\n", `test.hcl:12:13: Shared durable: inbox "b" reads nats.local's durable "d" on their stream (not declared in the nats block: declare it to tell them apart), as inbox "a" does`},
		{"inboxes sharing a durable on a declared stream", "nats \"local\" {\n  embedded = true\n  stream \"alerts\" { subjects = [\"alerts.>\"] }\n}\ninbox \"a\" {\n  from = \"nats.local\"\n  subject = \"alerts.a.>\"\n  durable = \"d\"\n}\ninbox \"b\" {\n  from = \"nats.local\"\n  subject = \"alerts.b.>\"\n  durable = \"d\"\n}\n", `test.hcl:13:13: Shared durable: inbox "b" reads nats.local's durable "d" on stream "alerts", as inbox "a" does`},
		{"a durable named as another inbox", sinks + "inbox \"a\" {\n  from = \"nats.local\"\n  subject = \"a.>\"\n}\ninbox \"b\" {\n  from = \"nats.local\"\n  subject = \"b.>\"\n  durable = \"a\"\n}\n", `test.hcl:11:13: Shared durable: inbox "b" reads nats.local's durable "a" on their stream`},
		{"inboxes sharing a group", sinks + "inbox \"a\" {\n  from = \"kafka.main\"\n  topics = [\"t\"]\n  group = \"g\"\n}\ninbox \"b\" {\n  from = \"kafka.main\"\n  topics = [\"u\", \"t\"]\n  group = \"g\"\n}\n", `test.hcl:12:11: Shared group: inbox "b" reads kafka.main's group "g" on topic "t", as inbox "a" does: the group would split`},
		// What router run refused, validate passed, without a position.
		{"empty id_header", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n  id_header = \"\"\n}\n", "test.hcl:7:15: Empty id_header: id_header names the message header that carries an event's id; leave it out for the default (ce-id for this sink)."},
		{"session_timeout under the client's", sinks + "inbox \"i\" {\n  from = \"kafka.main\"\n  topics = [\"t\"]\n  session_timeout = \"1ms\"\n}\n", `test.hcl:7:21: Session timeout too short: session_timeout = "1ms": the Kafka client takes no less than 100ms`},
		{"inbox undeclared plugin", sinks + "inbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n  plugins = [\"q\"]\n}\n", "test.hcl:7:14: Unknown plugin"},
		{"plugins on a pull inbox", sinks + "plugin \"p\" {\n  wasm = \"p.wasm\"\n}\ninbox \"i\" {\n  from = \"nats.local\"\n  subject = \"s\"\n  plugins = [\"p\"]\n}\n", `test.hcl:10:13: Plugins on a pull inbox: inbox "i" has no deliver block`},
		{"http without tokens", "listen {\n  http = \":8080\"\n}\n", "test.hcl:2:10: Missing tokens_file"},
		{"event type with a control character", "event \"a\\u0001b\" {}\n", `test.hcl:1:7: Invalid event type: attribute "type" has the control character U+0001`},
		// pprof has no authentication: loopback only.
		{"pprof on every interface", "listen {\n  pprof = \":6060\"\n}\n", "test.hcl:2:11: pprof off loopback"},
		{"pprof on a public address", "listen {\n  pprof = \"192.0.2.2:6060\"\n}\n", "test.hcl:2:11: pprof off loopback"},
		{"embedded NATS on every interface", "nats \"local\" {\n  embedded = true\n  host     = \"0.0.0.0\"\n}\n", "test.hcl:3:14: Embedded server off loopback"},
		{"huge number", "plugin \"p\" {\n  wasm = \"p\"\n  config = { a = \"${1e400000000}\" }\n}\n", "test.hcl:3:21: Number out of range"},
		{"port", "nats \"n\" {\n  embedded = true\n  port = 70000\n}\n", "test.hcl:3:10: Invalid value: port must be at most 65535"},
		{"max_body huge", "listen {\n  max_body = \"100GB\"\n}\n", `test.hcl:2:14: Invalid size: max_body: 100GB is over the limit of 256MiB`},
		{"plugin memory huge", "plugin \"p\" {\n  wasm = \"p\"\n  limits { memory = \"100GiB\" }\n}\n", `test.hcl:3:21: Invalid size: memory: 100GiB is over the limit of 4GiB`},
		{"batch_size huge", "defaults {\n  batch_size = 99999999999\n}\n", `test.hcl:2:16: Invalid value: batch_size must be at most 100000`},
		{"http not an address", "listen {\n  http = \"not-an-address\"\n  tokens_file = \"t\"\n}\n", `test.hcl:2:10: Invalid address: http: "not-an-address" is not host:port`},
		{"http bad port", "listen {\n  http = \"127.0.0.1:99999\"\n  tokens_file = \"t\"\n}\n", `test.hcl:2:10: Invalid address: http: "127.0.0.1:99999": the port must be a number`},
		{"kafka broker without port", "kafka \"k\" {\n  brokers = [\"k1:9092\", \"k2\"]\n}\n", `test.hcl:2:25: Invalid address: brokers: "k2" is not host:port`},
		{"nats url", "nats \"n\" {\n  url = \"http://x:4222\"\n}\n", `test.hcl:2:9: Invalid URL: url "http://x:4222": write nats://host:4222`},
		{"max_types outside the catch-all", "event \"a\" {\n  max_types = 3\n}\n", `test.hcl:2:3: Unsupported argument: max_types applies to the catch-all event "*" block only`},
		{"max_types zero", "event \"*\" {\n  max_types = 0\n}\n", `test.hcl:2:15: Invalid value: max_types must be at least 1`},
		{"socket path too long", "listen {\n  socket = \"/tmp/" + strings.Repeat("s", 100) + "/r.sock\"\n}\n", `test.hcl:2:12: Socket path too long: listen.socket is 112 bytes; the kernel takes a unix socket's path of at most 107 bytes`},
		{"max_types_per_tenant outside the catch-all", "event \"a\" {\n  max_types_per_tenant = 3\n}\n", `test.hcl:2:3: Unsupported argument: max_types_per_tenant applies to the catch-all event "*" block only`},
		{"max_types_per_tenant over max_types", "event \"*\" {\n  max_types = 8\n  max_types_per_tenant = 9\n}\n", `test.hcl:3:26: Invalid value: max_types_per_tenant (9) must not be more than max_types (8)`},
		{"socket is the data file", "listen {\n  socket = \"/srv/sy/r.db\"\n}\nstorage {\n  path = \"/srv/sy/r.db\"\n}\n",
			`test.hcl:2:12: Socket path in use: listen.socket "/srv/sy/r.db" is the path of storage.path ("/srv/sy/r.db")`},
		{"socket is the default data file", "storage {\n  path = \"./data/router.sock\"\n}\n",
			`test.hcl:2:10: Socket path in use: listen.socket "./data/router.sock" is the path of storage.path`},
		{"socket inside the nats store", "listen {\n  socket = \"/srv/sy/nats/s.sock\"\n}\nstorage {\n  path = \"/srv/sy/r.db\"\n}\nnats \"n\" { embedded = true }\n",
			`test.hcl:2:12: Socket path in use: listen.socket "/srv/sy/nats/s.sock" is inside the store_dir of nats "n"`},
		{"socket is the tokens file", "listen {\n  socket = \"/srv/t.json\"\n  http = \"127.0.0.1:8080\"\n  tokens_file = \"/srv/t.json\"\n}\n",
			`test.hcl:2:12: Socket path in use: listen.socket "/srv/t.json" is the path of listen.tokens_file`},
		{"socket above the data file", "listen {\n  socket = \"/srv/sy\"\n}\nstorage {\n  path = \"/srv/sy/r.db\"\n}\n",
			`test.hcl:2:12: Socket path in use: listen.socket "/srv/sy" is a parent folder of storage.path`},
		{"socket is a plugin", "listen {\n  socket = \"p.wasm\"\n}\nplugin \"p\" { wasm = \"./p.wasm\" }\n",
			`test.hcl:2:12: Socket path in use: listen.socket "p.wasm" is the path of the wasm file of plugin "p"`},
		{"tenant without rate", "tenant \"acme\" {\n  burst = 10\n}\n", "test.hcl:1:1: Missing required argument: The tenant block needs rate"},
		{"tenant rate zero", "tenant \"acme\" {\n  rate = 0\n}\n", "test.hcl:2:10: Invalid value: rate must be at least 1, not 0"},
		{"tenant rate fraction", "tenant \"acme\" {\n  rate = 0.5\n}\n", "test.hcl:2:10: Invalid value: rate must be a whole number, not 0.5"},
		{"tenant burst zero", "tenant \"acme\" {\n  rate = 5\n  burst = 0\n}\n", "test.hcl:3:11: Invalid value: burst must be at least 1, not 0"},
		{"tenant name", "tenant \"a\\u0001b\" {\n  rate = 5\n}\n", `test.hcl:1:8: Invalid tenant: tenant name "a\x01b": up to 64 bytes of printable UTF-8`},
		{"tenant twice", "tenant \"acme\" {\n  rate = 5\n}\ntenant \"acme\" {\n  rate = 6\n}\n", `test.hcl:4:1: Duplicate tenant block: tenant "acme" is already declared on line 1`},
		{"tenant attribute", "tenant \"acme\" {\n  rate = 5\n  max_size = 6\n}\n", `test.hcl:3:3: Unsupported argument`},
	}
	line := regexp.MustCompile(`^test\.hcl:\d+:\d+: \S`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := parseErr(t, tt.src)
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", msg, tt.want)
			}
			for _, l := range strings.Split(msg, "\n") {
				if !line.MatchString(l) {
					t.Errorf("line %q is not file:line:col: summary", l)
				}
			}
		})
	}
}

// A nats url that does not evaluate (a variable) is its own error, alone:
// "The nats block needs url" came first, and misled (a reload trial).
func TestAURLFromAVariableIsItsOwnError(t *testing.T) {
	msg := parseErr(t, "nats \"n\" {\n  url = \"${NATS_URL}\"\n}\n")
	if !strings.HasPrefix(msg, "test.hcl:2:12: Variables not allowed") || strings.Contains(msg, "needs url") {
		t.Fatalf("error:\n%s\nwant only the variable's", msg)
	}
}

// TestErrorsCollected checks that one pass reports every problem, in file
// order, one per line.
func TestErrorsCollected(t *testing.T) {
	msg := parseErr(t, `event "a" {
  batch_size = "x"
}
listen { max_body = "huge" }
event "a" {}
nats "n" {}
`)
	want := []string{
		"test.hcl:2:16: Incorrect attribute value type",
		"test.hcl:4:21: Invalid size",
		"test.hcl:5:1: Duplicate event block",
		"test.hcl:6:1: Missing required argument",
	}
	lines := strings.Split(msg, "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(lines), len(want), msg)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

// A size is a whole number of bytes with an optional SI or IEC unit in
// any case; a fraction, a unit alone, zero, a negative or an overflowing
// size is refused.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1":       1,
		"1048576": 1 << 20,
		"512KiB":  512 << 10,
		"16MiB":   16 << 20,
		"16 mib":  16 << 20,
		"1GB":     1e9,
		"2kb":     2000,
		"1TiB":    1 << 40,
		"10B":     10,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "1.5MiB", "-1", "0", "16XB", "9999999999TiB", "99999999999999999999"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// Whatever the source, Parse returns a configuration or an error, never
// both nor neither, and an error always has a message.
func FuzzParse(f *testing.F) {
	f.Add(switchyard.Policies)
	f.Add([]byte(inheritSrc))
	if src, err := os.ReadFile("testdata/full.hcl"); err == nil {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, err := Parse(src, "fuzz.hcl")
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a config and an error", cfg, err)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}

// A tenant's share of the catch-all is a quarter of max_types unless
// max_types_per_tenant says otherwise, and at least one type.
func TestMaxTypesPerTenant(t *testing.T) {
	for _, c := range []struct {
		block          string
		all, perTenant int
	}{
		{"", 256, 64},
		{"event \"*\" {\n}\n", 256, 64},
		{"event \"*\" {\n  max_types = 10\n}\n", 10, 2},
		{"event \"*\" {\n  max_types = 3\n}\n", 3, 1},
		{"event \"*\" {\n  max_types_per_tenant = 200\n}\n", 256, 200},
		{"event \"*\" {\n  max_types = 10\n  max_types_per_tenant = 10\n}\n", 10, 10},
	} {
		cfg := mustParse(t, c.block)
		if cfg.MaxTypes != c.all || cfg.MaxTypesPerTenant != c.perTenant {
			t.Errorf("%q: max_types %d, per tenant %d; want %d, %d", c.block, cfg.MaxTypes, cfg.MaxTypesPerTenant, c.all, c.perTenant)
		}
	}
}

// A tenant block's burst is the larger of its rate and listen.max_batch
// unless it says otherwise, so that any batch the listener takes can pass;
// "*" is kept as the bound of every tenant without a block of its own.
func TestTenantLimits(t *testing.T) {
	cfg := mustParse(t, "listen {\n  max_batch = 50\n}\ntenant \"acme\" {\n  rate = 10\n}\ntenant \"beta corp\" {\n  rate = 100\n}\ntenant \"*\" {\n  rate = 5\n  burst = 7\n}\n")
	for _, c := range []struct {
		tenant      string
		rate, burst int
		at          Pos
	}{
		{"acme", 10, 50, "test.hcl:4:1"},
		{"beta corp", 100, 100, "test.hcl:7:1"},
		{"other", 5, 7, "test.hcl:10:1"},
	} {
		l, ok := cfg.TenantLimit(c.tenant)
		if !ok || l.Rate != c.rate || l.Burst != c.burst || l.At != c.at {
			t.Errorf("tenant %q: %+v %v; want rate %d, burst %d at %s", c.tenant, l, ok, c.rate, c.burst, c.at)
		}
	}
	if l, ok := mustParse(t, "tenant \"acme\" {\n  rate = 10\n}\n").TenantLimit("beta"); ok {
		t.Errorf("a tenant without a block, and no \"*\" block: %+v", l)
	}
}

// What idempotency.min_window keeps while the storage budget is full is
// an hour of the window by default, all of a shorter window, or what it
// says (0s: nothing).
func TestIdempotencyMinWindow(t *testing.T) {
	for _, c := range []struct {
		block       string
		window, min time.Duration
	}{
		{"", 24 * time.Hour, time.Hour},
		{"idempotency {\n  window = \"30m\"\n}\n", 30 * time.Minute, 30 * time.Minute},
		{"idempotency {\n  min_window = \"5m\"\n}\n", 24 * time.Hour, 5 * time.Minute},
		{"idempotency {\n  min_window = \"0s\"\n}\n", 24 * time.Hour, 0},
	} {
		idem := mustParse(t, c.block).Idempotency
		if idem.Window != c.window || idem.MinWindow != c.min {
			t.Errorf("%q: window %v, min_window %v; want %v, %v", c.block, idem.Window, idem.MinWindow, c.window, c.min)
		}
	}
}

// A secret's mode may let in only its owner, except that a file root owns
// may also be read by its group when the router is another user
// (PostgreSQL's rule: root:ssl-cert 0640 needs no copy).
func TestSecretModeAllows(t *testing.T) {
	const root, router = 0, 1000
	cases := []struct {
		uid, euid int
		perm      os.FileMode
		ok        bool
	}{
		{router, router, 0o600, true},
		{router, router, 0o400, true},
		{router, router, 0o640, false},
		{router, router, 0o604, false},
		{root, router, 0o640, true},
		{root, router, 0o600, true},
		{root, router, 0o660, false}, // the group could change it
		{root, router, 0o644, false},
		{root, router, 0o641, false},
		{root, root, 0o640, false}, // root's own secret: 0600
		{root, root, 0o600, true},
	}
	for _, c := range cases {
		err := secretModeAllows(c.uid, c.euid, c.perm)
		if (err == nil) != c.ok {
			t.Errorf("owner %d, router %d, mode %04o: err = %v, want ok %v", c.uid, c.euid, c.perm, err, c.ok)
		}
	}
}

// An unquoted duration or size is a syntax error at its unit; the error
// keeps its file:line:col and says to quote it. A syntax error that is no duration
// gets no such hint.
func TestUnquotedValueHint(t *testing.T) {
	for src, want := range map[string]string{
		"event \"a.b\" {\n  polling {\n    min = 50ms\n  }\n}\n": `test.hcl:3:13: Missing newline after argument: An argument definition must end with a newline. A duration is a string: write "50ms", in quotes.`,
		"idempotency {\n  window = 1.5h\n}\n":                    `test.hcl:2:15: Missing newline after argument: An argument definition must end with a newline. A duration is a string: write "1.5h", in quotes.`,
		"storage {\n  max_size = 2GiB\n}\n":                      `test.hcl:2:15: Missing newline after argument: An argument definition must end with a newline. A size is a string: write "2GiB", in quotes.`,
	} {
		_, err := Parse([]byte(src), "test.hcl")
		if err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
	_, err := Parse([]byte("idempotency {\n  window = 5 five\n}\n"), "test.hcl")
	if err == nil || strings.Contains(err.Error(), "duration") {
		t.Errorf("no duration: %v", err)
	}
}

// One unclosed quote gives one error, at the quote, not one for each line
// after it that the parser then reads out of step (a new user's trial saw
// 48), and says how many followed.
func TestSyntaxErrorsStopAtTheFirst(t *testing.T) {
	src := "event \"a.b\" {\n  polling {\n    min = \"50ms\n    max = \"1m\"\n  }\n  batch_size = 10\n}\nevent \"c.d\" {\n  batch_size = 5\n}\n"
	_, err := Parse([]byte(src), "test.hcl")
	var cfgErr *Error
	if !errors.As(err, &cfgErr) || len(cfgErr.Diags) != 1 {
		t.Fatalf("want one error, got: %v", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "test.hcl:3:") || !strings.Contains(msg, "more syntax errors follow") {
		t.Errorf("the error: %s", msg)
	}
}
