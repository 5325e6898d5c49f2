package config

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// minReadTimeout is the shortest listen.read_timeout a file may set.
const minReadTimeout = 100 * time.Millisecond

// Load reads and parses the config file at path (at most
// fsperm.MaxConfigFile bytes).
func Load(path string) (*Config, error) {
	src, err := fsperm.ReadTrusted(path, fsperm.MaxConfigFile, "a configuration file")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(src, path)
}

// Parse parses, validates and resolves a config; filename names it in
// errors. A failure is an *Error listing every problem found.
func Parse(src []byte, filename string) (*Config, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if !diags.HasErrors() {
		diags = hugeNumbers(file.Body.(*hclsyntax.Body))
	}
	if diags.HasErrors() {
		hintUnquotedValues(src, diags)
		return nil, newError(firstSyntaxError(diags)) // decoding a broken body would only add noise
	}
	d := &decoder{sinks: map[string]bool{}, plugins: map[string]bool{}}
	cfg := d.root(file.Body)
	if d.diags.HasErrors() {
		return nil, newError(d.diags)
	}
	cfg.File = filename
	return cfg, nil
}

// firstSyntaxError keeps the first of diags, in file order, and says how
// many follow it: after a syntax error the parser reads the rest of the
// file out of step (one unclosed quote made an error of each of the 47
// lines after it), so the first is the one to fix.
func firstSyntaxError(diags hcl.Diagnostics) hcl.Diagnostics {
	diags = newError(diags).Diags
	if len(diags) == 1 {
		return diags
	}
	first := *diags[0]
	first.Detail += fmt.Sprintf(" (%d more syntax errors follow, which this one may cause: fix it, then validate again.)", len(diags)-1)
	return hcl.Diagnostics{&first}
}

// hintUnquotedValues adds a hint to a syntax error that falls on the
// unit of an unquoted duration or size (`min = 50ms`, `max_size = 2GiB`):
// HCL reads the number, then stops at the unit with "Missing newline after
// argument", which does not say that durations and sizes are strings.
func hintUnquotedValues(src []byte, diags hcl.Diagnostics) {
	for _, d := range diags {
		if d.Subject == nil || d.Subject.Start.Byte > len(src) {
			continue
		}
		at := d.Subject.Start.Byte
		num := at
		for num > 0 && (src[num-1] >= '0' && src[num-1] <= '9' || src[num-1] == '.') {
			num--
		}
		unit := at
		for unit < len(src) && (src[unit] >= 'a' && src[unit] <= 'z' || src[unit] >= 'A' && src[unit] <= 'Z' || src[unit] == 0xc2 || src[unit] == 0xb5) {
			unit++
		}
		lit := string(src[num:unit])
		if num == at || unit == at {
			continue
		}
		if _, err := time.ParseDuration(lit); err == nil {
			d.Detail += fmt.Sprintf(" A duration is a string: write %q, in quotes.", lit)
		} else if _, err := parseSize(lit); err == nil {
			d.Detail += fmt.Sprintf(" A size is a string: write %q, in quotes.", lit)
		}
	}
}

// Error is a config that failed to load. Error() gives one
// "file:line:col: summary: detail" line per diagnostic.
type Error struct {
	Diags hcl.Diagnostics
}

// newError sorts diags by position: the decoder visits blocks by kind, the
// reader wants them in file order.
func newError(diags hcl.Diagnostics) *Error {
	diags = slices.Clone(diags)
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		fa, pa := position(a)
		fb, pb := position(b)
		return cmp.Or(strings.Compare(fa, fb), cmp.Compare(pa, pb))
	})
	return &Error{Diags: diags}
}

// position is a diagnostic's sort key; one without a subject sorts first.
func position(diag *hcl.Diagnostic) (file string, offset int) {
	if diag.Subject == nil {
		return "", -1
	}
	return diag.Subject.Filename, diag.Subject.Start.Byte
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, diag := range e.Diags {
		if i > 0 {
			b.WriteByte('\n')
		}
		if s := diag.Subject; s != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", s.Filename, s.Start.Line, s.Start.Column)
		}
		b.WriteString(diag.Summary)
		if diag.Detail != "" {
			b.WriteString(": ")
			b.WriteString(diag.Detail)
		}
	}
	return b.String()
}

// Built-in defaults (contract §6) that the config file overrides.
const (
	mib = 1 << 20
	day = 24 * time.Hour
)

// clone copies p so that an event inheriting the defaults' lists never
// shares their backing arrays.
func (p Policy) clone() Policy {
	p.Plugins = slices.Clone(p.Plugins)
	p.Routes = slices.Clone(p.Routes)
	return p
}

// schema builds a body schema from space-separated attribute names and the
// nested block types.
func schema(attrs string, blocks ...hcl.BlockHeaderSchema) *hcl.BodySchema {
	s := &hcl.BodySchema{Blocks: blocks}
	for _, name := range strings.Fields(attrs) {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: name})
	}
	return s
}

func block(typ string, labels ...string) hcl.BlockHeaderSchema {
	return hcl.BlockHeaderSchema{Type: typ, LabelNames: labels}
}

const policyAttrs = "batch_size max_retries max_processing_time ordering plugins"

var (
	rootSchema = schema("",
		block("listen"), block("storage"), block("idempotency"), block("outbox"), block("dlq"),
		block("nats", "name"), block("kafka", "name"), block("plugin", "name"),
		block("defaults"), block("event", "type"), block("inbox", "name"), block("tenant", "name"))
	listenSchema  = schema("socket http tokens_file max_body max_batch max_connections read_timeout pprof")
	policySchema  = schema(policyAttrs, block("polling"), block("backoff"), block("route"))
	eventSchema   = schema(policyAttrs+" max_types max_types_per_tenant", block("polling"), block("backoff"), block("route"))
	pollingSchema = schema("type min max multiplier")
	backoffSchema = schema("enabled delay multiplier")
	routeSchema   = schema("to subject topic")
	natsSchema    = schema("url embedded host port store_dir sync_always sync_interval jetstream max_pending publish_timeout "+
		"user password password_file password_env token token_file token_env creds_file nkey_seed_file",
		block("stream", "name"), block("tls"))
	streamSchema = schema("subjects storage replicas max_age duplicates")
	kafkaSchema  = schema("brokers client_id compression linger max_record_bytes idempotent publish_timeout",
		block("tls"), block("sasl"))
	tlsSchema    = schema("ca_file cert_file key_file insecure_skip_verify")
	saslSchema   = schema("mechanism username password password_file password_env")
	pluginSchema = schema("wasm config state_namespace", block("limits"))
	limitsSchema = schema("memory timeout max_outputs max_output_bytes")
	// An inbox has the policy attributes but no routes: it hands its events
	// to deliver (or to pull subscribers), not to a sink.
	inboxSchema = schema("from topics group instance_id session_timeout read_committed subject durable ttl id_header missing_id "+policyAttrs,
		block("deliver"), block("polling"), block("backoff"))
	deliverSchema = schema("url timeout concurrency mode")
	tenantSchema  = schema("rate burst")
)

// decoder turns HCL bodies into resolved structs, collecting every
// diagnostic instead of stopping at the first.
type decoder struct {
	diags   hcl.Diagnostics
	sinks   map[string]bool // declared sinks: "nats.local", "kafka.main"
	plugins map[string]bool // declared plugin names
	// owned are the paths the router reads or writes besides its socket,
	// with where each is set: the socket must be none of them (paths.go).
	owned     []ownedPath
	socketAt  *hcl.Range     // listen.socket, when the file sets it
	streamsAt map[string]Pos // Config.StreamsAt
	secrets   []SecretFile   // Config.SecretFiles
	envs      []SecretEnv    // Config.SecretEnvs
}

// secretFile decodes the attribute a, a file of secrets, into path and
// records it for Config.SecretFiles.
func (d *decoder) secretFile(a *hcl.Attribute, path *string) {
	d.str(a, path)
	if a != nil && *path != "" {
		d.secrets = append(d.secrets, SecretFile{Path: *path, Attr: a.Name, At: posOf(a.Expr.Range())})
	}
}

// hasErrorIn says whether an error was reported within attribute a.
func (d *decoder) hasErrorIn(a *hcl.Attribute) bool {
	if a == nil {
		return false
	}
	for _, diag := range d.diags {
		if diag.Severity == hcl.DiagError && diag.Subject != nil && a.Range.Overlaps(*diag.Subject) {
			return true
		}
	}
	return false
}

func (d *decoder) errorf(rng hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  rng.Ptr(),
	})
}

// content checks body against s; unknown attributes and blocks, wrong label
// counts and the like are reported by HCL itself, and an unknown argument
// named like a block s takes ("routes = [...]" for "route { ... }") says
// so, which HCL's suggestions (among arguments only) do not.
func (d *decoder) content(body hcl.Body, s *hcl.BodySchema) *hcl.BodyContent {
	c, diags := body.Content(s)
	for _, diag := range diags {
		suggestBlock(diag, s.Blocks)
	}
	d.diags = append(d.diags, diags...)
	return c
}

// unsupportedArgument matches HCL's detail for an argument the schema does
// not take, without a suggestion of its own.
var unsupportedArgument = regexp.MustCompile(`^An argument named "([^"]+)" is not expected here\.$`)

// suggestBlock adds to diag, an unknown argument's, the block of blocks
// its name is close to (HCL's own measure: fewer than 3 edits).
func suggestBlock(diag *hcl.Diagnostic, blocks []hcl.BlockHeaderSchema) {
	m := unsupportedArgument.FindStringSubmatch(diag.Detail)
	if m == nil {
		return
	}
	for _, b := range blocks {
		if levenshtein.Distance(m[1], b.Type, nil) < 3 {
			labels := strings.Repeat(` "..."`, len(b.LabelNames))
			diag.Detail += fmt.Sprintf(" Did you mean a %s block (%s%s { ... })?", b.Type, b.Type, labels)
			return
		}
	}
}

// single returns the block of type typ, or nil. These blocks configure one
// thing, so a second one is reported rather than merged.
func (d *decoder) single(blocks hcl.Blocks, typ string) *hcl.Block {
	bs := blocks.OfType(typ)
	if len(bs) == 0 {
		return nil
	}
	for _, b := range bs[1:] {
		d.errorf(b.DefRange, "Duplicate "+typ+" block",
			"Only one %s block is allowed here; the first is on line %d.", typ, bs[0].DefRange.Start.Line)
	}
	return bs[0]
}

// validName matches the names of sinks, streams, plugins and inboxes: they
// end up in references ("nats.local"), destinations ("nats.local:orders")
// and URL paths.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString

// declare records the label of b in seen and reports whether it is the first
// block of that name.
func (d *decoder) declare(seen map[string]hcl.Range, b *hcl.Block) bool {
	name := b.Labels[0]
	if first, dup := seen[name]; dup {
		d.errorf(b.DefRange, "Duplicate "+b.Type+" block",
			"%s %q is already declared on line %d.", b.Type, name, first.Start.Line)
		return false
	}
	seen[name] = b.DefRange
	event, tenant := b.Type == "event", b.Type == "tenant"
	var typeErr error // what ingest would say of the type
	if event && name != "*" {
		typeErr = cloudevents.Check(cloudevents.AttrType, name)
	}
	switch {
	case tenant && name != "*":
		if err := switchyard.CheckTenant(name); err != nil {
			d.errorf(b.LabelRanges[0], "Invalid tenant", "tenant name %q: %v, or \"*\" for every tenant without a block of its own.", name, err)
		}
	case tenant:
	case !event && !validName(name):
		d.errorf(b.LabelRanges[0], "Invalid name",
			"%s name %q may hold only letters, digits, '-' and '_'.", b.Type, name)
	case event && name == "":
		d.errorf(b.LabelRanges[0], "Invalid event type", "The event type must not be empty.")
	case event && name != "*" && strings.ContainsAny(name, "*>"):
		// Types are matched exactly; "order.*" would silently match nothing.
		d.errorf(b.LabelRanges[0], "Invalid event type",
			`%q: the only wildcard is an event "*" block on its own, which catches every type without a block.`, name)
	case typeErr != nil:
		// Ingest refuses such a type: the block would never be used.
		d.errorf(b.LabelRanges[0], "Invalid event type", "%s.", switchyard.ErrorMessage(typeErr))
	case event && strings.HasPrefix(name, InboxQueuePrefix):
		d.errorf(b.LabelRanges[0], "Invalid event type",
			"event types starting with %q are the router's own (an inbox's queue): ingest refuses them, so this block could never be used.", InboxQueuePrefix)
	}
	return true
}

// required decodes a string attribute that b cannot do without.
func (d *decoder) required(c *hcl.BodyContent, name string, b *hcl.Block, hint string) string {
	before := len(d.diags)
	s, _ := d.text(c.Attributes[name])
	// Absent, null or empty, and not already reported as invalid.
	if s == "" && len(d.diags) == before {
		d.errorf(b.DefRange, "Missing required argument", "The %s block needs %s = %s.", b.Type, name, hint)
	}
	return s
}

// requiredList decodes a list of strings that b needs at least one of;
// check, when not nil, is asked about each (an error at the element).
func (d *decoder) requiredList(c *hcl.BodyContent, name string, b *hcl.Block, hint string, check func(string) error) []string {
	before := len(d.diags)
	var list []string
	rngs := d.strs(c.Attributes[name], &list)
	if len(list) == 0 && len(d.diags) == before {
		d.errorf(b.DefRange, "Missing required argument", "The %s block needs %s = %s.", b.Type, name, hint)
	}
	for i, s := range list {
		if check == nil || i >= len(rngs) {
			break
		}
		if err := check(s); err != nil {
			d.errorf(rngs[i], "Invalid name", "%s: %v.", name, err)
		}
	}
	return list
}

// check reports at a what check says is wrong with its value s ("" when a
// is absent: reported as missing elsewhere).
func (d *decoder) check(a *hcl.Attribute, s string, check func(string) error) {
	if a == nil || s == "" {
		return
	}
	if err := check(s); err != nil {
		d.errorf(a.Expr.Range(), "Invalid name", "%s: %v.", a.Name, err)
	}
}

// unused reports attributes that do not apply to the sink kind in use;
// ignoring a topic on a NATS route would hide the user's mistake.
func (d *decoder) unused(c *hcl.BodyContent, kind string, names ...string) {
	for _, name := range names {
		if a := c.Attributes[name]; a != nil {
			d.errorf(a.NameRange, "Unsupported argument", "%s does not apply to a %s sink.", name, kind)
		}
	}
}

func (d *decoder) root(body hcl.Body) *Config {
	c := d.content(body, rootSchema)
	cfg := &Config{
		Listen:            NewListen(DefaultSocket),
		Storage:           Storage{Path: DefaultStoragePath, MinFree: DefaultMinFree},
		Idempotency:       Idempotency{Window: DefaultIdempotencyWindow},
		Outbox:            Outbox{TTL: DefaultOutboxTTL, YieldLag: DefaultYieldLag},
		DLQ:               DLQ{TTL: DefaultDLQTTL},
		Defaults:          DefaultPolicy(),
		Events:            map[string]*Policy{},
		MaxTypes:          defaultMaxTypes,
		MaxTypesPerTenant: perTenantTypes(defaultMaxTypes),
	}
	if b := d.single(c.Blocks, "listen"); b != nil {
		d.listen(b, &cfg.Listen)
	}
	d.storage(c, body, &cfg.Storage)
	d.idempotency(c.Blocks, &cfg.Idempotency)
	if b := d.single(c.Blocks, "outbox"); b != nil {
		oc := d.content(b.Body, schema("ttl yield_lag"))
		d.duration(oc.Attributes["ttl"], &cfg.Outbox.TTL, true)
		d.duration(oc.Attributes["yield_lag"], &cfg.Outbox.YieldLag, false)
	}
	d.durationBlock(c.Blocks, "dlq", "ttl", &cfg.DLQ.TTL)
	// Sinks and plugins first: policies and inboxes refer to them.
	d.sinksAndPlugins(c, cfg)
	// Inheritance: built-in ← defaults block ← each event (and inbox) block,
	// by decoding each block over a copy of what it inherits.
	if b := d.single(c.Blocks, "defaults"); b != nil {
		d.policy(d.content(b.Body, policySchema), &cfg.Defaults)
	}
	d.events(c, cfg)
	inboxNames := map[string]hcl.Range{}
	for _, b := range c.Blocks.OfType("inbox") {
		in := d.inbox(b, cfg.Defaults)
		if d.declare(inboxNames, b) {
			d.oneConsumer(cfg, cfg.Inboxes, b, in)
			cfg.Inboxes = append(cfg.Inboxes, in)
		}
	}
	d.tenants(c.Blocks, cfg)
	d.checkSocketPath(cfg.Listen.Socket, body.MissingItemRange())
	cfg.WrittenPaths = d.writtenPaths()
	cfg.BlocksAt = blocksAt(c.Blocks)
	return cfg
}

// blocksAt is Config.BlocksAt: where each listen, storage, nats, kafka and
// inbox block is (the first, where one is declared twice); nil without any.
func blocksAt(blocks hcl.Blocks) map[string]Pos {
	var at map[string]Pos
	for _, b := range blocks {
		key := b.Type
		switch b.Type {
		case "listen", "storage":
		case "nats", "kafka", "inbox":
			if len(b.Labels) != 1 {
				continue
			}
			key += "." + b.Labels[0]
		default:
			continue
		}
		if _, seen := at[key]; !seen {
			if at == nil {
				at = map[string]Pos{}
			}
			at[key] = posOf(b.DefRange)
		}
	}
	return at
}

// storage decodes the storage block into st, and claims the data file and
// the plugin cache beside it as paths the router owns.
func (d *decoder) storage(c *hcl.BodyContent, body hcl.Body, st *Storage) {
	at := body.MissingItemRange()
	if b := d.single(c.Blocks, "storage"); b != nil {
		sc := d.content(b.Body, schema("path max_size min_free commit_delay"))
		a := sc.Attributes["path"]
		d.str(a, &st.Path)
		d.size(sc.Attributes["max_size"], &st.MaxSize, 1<<50)
		if a := sc.Attributes["min_free"]; a != nil {
			d.size(a, &st.MinFree, 1<<50)
			if st.MinFree > 0 && st.MinFree < MinMinFree {
				d.errorf(a.Expr.Range(), "Invalid size", "min_free is at least %s, not %s: when the disk fills, the last of the floor (a quarter of it, kept in a reserve file) is what delivery and the cleanup use to make room again.", FormatSize(MinMinFree), FormatSize(st.MinFree))
			}
		}
		if cd := sc.Attributes["commit_delay"]; cd != nil {
			d.duration(cd, &st.CommitDelay, false)
			if st.CommitDelay > MaxCommitDelay {
				d.errorf(cd.Expr.Range(), "Invalid duration", "commit_delay is at most %s (each commit of a few writes waits that long), not %s.", MaxCommitDelay, st.CommitDelay)
			}
		}
		at = attrOr(a, b.DefRange)
	}
	st.PluginCache = filepath.Join(filepath.Dir(st.Path), "wasm-cache")
	d.own(WhatDataFile, st.Path, writtenFile, at)
	d.own(WhatPluginCache, st.PluginCache, filledDir, at)
}

// sinksAndPlugins decodes the nats, kafka and plugin blocks, each name
// declared once.
func (d *decoder) sinksAndPlugins(c *hcl.BodyContent, cfg *Config) {
	natsNames := map[string]hcl.Range{}
	for _, b := range c.Blocks.OfType("nats") {
		n := d.nats(b, cfg.Storage.Path)
		if d.declare(natsNames, b) {
			cfg.NATS = append(cfg.NATS, n)
			d.sinks[n.SinkName()] = true
		}
	}
	cfg.StreamsAt = d.streamsAt
	kafkaNames := map[string]hcl.Range{}
	for _, b := range c.Blocks.OfType("kafka") {
		k := d.kafka(b)
		if d.declare(kafkaNames, b) {
			cfg.Kafka = append(cfg.Kafka, k)
			d.sinks[k.SinkName()] = true
		}
	}
	cfg.SecretFiles, cfg.SecretEnvs = d.secrets, d.envs
	pluginNames := map[string]hcl.Range{}
	for _, b := range c.Blocks.OfType("plugin") {
		p := d.plugin(b)
		if d.declare(pluginNames, b) {
			cfg.Plugins = append(cfg.Plugins, p)
			d.plugins[p.Name] = true
		}
	}
}

// defaultMaxTypes is max_types without the attribute.
const defaultMaxTypes = 256

// perTenantTypes is max_types_per_tenant without the attribute: a quarter
// of max_types, so that one tenant's tokens leave at least three quarters
// of the catch-all to the others and the operator.
func perTenantTypes(maxTypes int) int { return max(1, maxTypes/4) }

// catchAllBounds reads max_types and max_types_per_tenant, which only the
// catch-all event "*" block takes. Without max_types_per_tenant a tenant
// may add a quarter of max_types.
func (d *decoder) catchAllBounds(ec *hcl.BodyContent, label string, cfg *Config) {
	for _, name := range []string{"max_types", "max_types_per_tenant"} {
		if a := ec.Attributes[name]; a != nil && label != "*" {
			d.errorf(a.NameRange, "Unsupported argument", `%s applies to the catch-all event "*" block only.`, name)
		}
	}
	if label != "*" {
		return
	}
	if a := ec.Attributes["max_types"]; a != nil {
		d.integer(a, &cfg.MaxTypes, 1, 100_000)
	}
	cfg.MaxTypesPerTenant = perTenantTypes(cfg.MaxTypes)
	if a := ec.Attributes["max_types_per_tenant"]; a != nil {
		d.integer(a, &cfg.MaxTypesPerTenant, 1, 100_000)
		if cfg.MaxTypesPerTenant > cfg.MaxTypes {
			d.errorf(a.Expr.Range(), "Invalid value", "max_types_per_tenant (%d) must not be more than max_types (%d).", cfg.MaxTypesPerTenant, cfg.MaxTypes)
		}
	}
}

// tenants decodes each tenant block: its rate, and its burst (default the
// larger of the rate and listen.max_batch, decoded before).
func (d *decoder) tenants(blocks hcl.Blocks, cfg *Config) {
	seen := map[string]hcl.Range{}
	for _, b := range blocks.OfType("tenant") {
		c := d.content(b.Body, tenantSchema)
		l := TenantLimit{Block: b.Labels[0], At: posOf(b.DefRange)}
		if a := c.Attributes["rate"]; a == nil {
			d.errorf(b.DefRange, "Missing required argument", "The tenant block needs rate = <events a second>.")
		} else {
			d.integer(a, &l.Rate, 1, 10_000_000)
		}
		l.Burst = max(l.Rate, cfg.Listen.MaxBatch)
		d.integer(c.Attributes["burst"], &l.Burst, 1, 10_000_000)
		if d.declare(seen, b) {
			if cfg.TenantLimits == nil {
				cfg.TenantLimits = map[string]TenantLimit{}
			}
			cfg.TenantLimits[b.Labels[0]] = l
		}
	}
}

// events decodes each event block over a copy of the defaults.
func (d *decoder) events(c *hcl.BodyContent, cfg *Config) {
	eventTypes := map[string]hcl.Range{}
	for _, b := range c.Blocks.OfType("event") {
		p := cfg.Defaults.clone()
		ec := d.content(b.Body, eventSchema)
		d.policy(ec, &p)
		d.catchAllBounds(ec, b.Labels[0], cfg)
		if d.declare(eventTypes, b) {
			cfg.Events[b.Labels[0]] = &p
			if cfg.EventsAt == nil {
				cfg.EventsAt = map[string]Pos{}
			}
			cfg.EventsAt[b.Labels[0]] = posOf(b.DefRange)
		}
	}
}

// idempotency decodes idempotency { window min_window }.
func (d *decoder) idempotency(blocks hcl.Blocks, idem *Idempotency) {
	idem.MinWindow = -1 // unset
	if b := d.single(blocks, "idempotency"); b != nil {
		c := d.content(b.Body, schema("window min_window"))
		d.duration(c.Attributes["window"], &idem.Window, true)
		d.duration(c.Attributes["min_window"], &idem.MinWindow, false)
		if a := c.Attributes["min_window"]; a != nil && idem.MinWindow > idem.Window {
			d.errorf(a.Expr.Range(), "min_window longer than window",
				"idempotency.min_window (%v) is how much of the window (%v) is kept while the storage budget is full: at most the window.", idem.MinWindow, idem.Window)
		}
	}
	if idem.MinWindow < 0 {
		idem.MinWindow = min(DefaultMinWindow, idem.Window)
	}
}

// durationBlock decodes a block holding a single duration, such as
// dlq { ttl = "168h" }.
func (d *decoder) durationBlock(blocks hcl.Blocks, typ, attr string, dst *time.Duration) {
	if b := d.single(blocks, typ); b != nil {
		d.duration(d.content(b.Body, schema(attr)).Attributes[attr], dst, true)
	}
}

// maxSocketPath is the longest path a unix socket can be bound to: the
// 108 bytes of sockaddr_un's sun_path on Linux, less its closing NUL. Go's
// net package passes the path as it is given (a relative one stays
// relative), and a longer one fails at bind with only "invalid argument".
const maxSocketPath = 107

func (d *decoder) listen(b *hcl.Block, l *Listen) {
	c := d.content(b.Body, listenSchema)
	d.str(c.Attributes["socket"], &l.Socket)
	if a := c.Attributes["socket"]; a != nil {
		d.socketAt = a.Expr.Range().Ptr()
		if len(l.Socket) > maxSocketPath {
			d.errorf(a.Expr.Range(), "Socket path too long",
				"listen.socket is %d bytes; the kernel takes a unix socket's path of at most %d bytes (sockaddr_un): choose a shorter path, or a relative one from the directory the router runs in.", len(l.Socket), maxSocketPath)
		}
	}
	d.address(c.Attributes["http"], &l.HTTP)
	d.str(c.Attributes["tokens_file"], &l.TokensFile)
	if l.TokensFile != "" {
		d.own("listen.tokens_file", l.TokensFile, readFile, c.Attributes["tokens_file"].Expr.Range())
		l.TokensAt = posOf(c.Attributes["tokens_file"].Expr.Range())
	}
	d.address(c.Attributes["pprof"], &l.Pprof)
	if host, _, err := net.SplitHostPort(l.Pprof); err == nil && !LoopbackHost(host) {
		d.errorf(c.Attributes["pprof"].Expr.Range(), "pprof off loopback",
			"pprof %q: the profiles (and every goroutine's stack) are served without authentication; keep pprof on a loopback address such as 127.0.0.1:6060.", l.Pprof)
	}
	d.size(c.Attributes["max_body"], &l.MaxBody, 256*mib)
	d.integer(c.Attributes["max_batch"], &l.MaxBatch, 1, 100_000)
	d.integer(c.Attributes["max_connections"], &l.MaxConnections, 1, 1<<20)
	d.duration(c.Attributes["read_timeout"], &l.ReadTimeout, true)
	if a := c.Attributes["read_timeout"]; a != nil && l.ReadTimeout > 0 && l.ReadTimeout < minReadTimeout {
		d.errorf(a.Expr.Range(), "Invalid duration",
			"read_timeout is at least %v: every request, and each write of its answer, must be done within it, and %v would refuse them all.", minReadTimeout, l.ReadTimeout)
	}
	// contract §4: the TCP listener always requires a bearer token.
	if l.HTTP != "" && l.TokensFile == "" {
		d.errorf(c.Attributes["http"].Expr.Range(), "Missing tokens_file",
			"A TCP listener requires bearer tokens: set tokens_file in the listen block.")
	}
}

// minPolling is the shortest polling.min.
const minPolling = time.Millisecond

// policy decodes the policy attributes and blocks of c over p: whatever c
// leaves out, including single fields of polling and backoff, keeps p's
// value. Lists (plugins, routes) are replaced as a whole when set.
func (d *decoder) policy(c *hcl.BodyContent, p *Policy) {
	d.integer(c.Attributes["batch_size"], &p.BatchSize, 1, 100_000)
	d.integer(c.Attributes["max_retries"], &p.MaxRetries, 0, math.MaxInt)
	d.duration(c.Attributes["max_processing_time"], &p.MaxProcessingTime, true)
	oneOf(d, c.Attributes["ordering"], &p.Ordering, OrderingNone, "none", OrderingKey)
	if p.Ordering == "none" {
		p.Ordering = OrderingNone // "none" exists so that an event can undo the defaults' "key"
	}
	if a := c.Attributes["plugins"]; a != nil {
		for i, rng := range d.strs(a, &p.Plugins) {
			if name := p.Plugins[i]; !d.plugins[name] {
				d.errorf(rng, "Unknown plugin", "No plugin %q is declared.", name)
			}
		}
	}
	if b := d.single(c.Blocks, "polling"); b != nil {
		pc := d.content(b.Body, pollingSchema)
		oneOf(d, pc.Attributes["type"], &p.Polling.Type, PollingAdaptive, PollingFixed)
		d.duration(pc.Attributes["min"], &p.Polling.Min, true)
		d.duration(pc.Attributes["max"], &p.Polling.Max, true)
		d.multiplier(pc.Attributes["multiplier"], &p.Polling.Multiplier)
		// Checked only where polling is written: inherited values were
		// checked where they came from.
		if p.Polling.Min > p.Polling.Max {
			d.errorf(b.DefRange, "Invalid polling", "min (%s) exceeds max (%s).", p.Polling.Min, p.Polling.Max)
		}
		if a := pc.Attributes["min"]; a != nil && p.Polling.Min > 0 && p.Polling.Min < minPolling {
			// A reload trial's fixed "1ns" kept a core 96% busy polling one idle type.
			d.errorf(a.Expr.Range(), "Invalid polling",
				"min (%s) is under %s: a type polled that often keeps a core busy while it is idle (new events wake it at once anyway).", p.Polling.Min, minPolling)
		}
	}
	if b := d.single(c.Blocks, "backoff"); b != nil {
		bc := d.content(b.Body, backoffSchema)
		d.boolean(bc.Attributes["enabled"], &p.Backoff.Enabled)
		d.duration(bc.Attributes["delay"], &p.Backoff.Delay, true)
		d.multiplier(bc.Attributes["multiplier"], &p.Backoff.Multiplier)
	}
	if routes := c.Blocks.OfType("route"); len(routes) > 0 {
		p.Routes = make([]Route, 0, len(routes))
		for _, b := range routes {
			p.Routes = append(p.Routes, d.route(b))
		}
	}
}

func (d *decoder) route(b *hcl.Block) Route {
	c := d.content(b.Body, routeSchema)
	var r Route
	var kind SinkKind
	r.To, kind = d.sink(c, "to", b)
	switch kind {
	case SinkNATS:
		r.Subject = d.required(c, "subject", b, `"<subject>" for a NATS sink`)
		d.check(c.Attributes["subject"], r.Subject, CheckPublishSubject)
		d.unused(c, "NATS", "topic")
	case SinkKafka:
		r.Topic = d.required(c, "topic", b, `"<topic>" for a Kafka sink`)
		d.check(c.Attributes["topic"], r.Topic, CheckTopic)
		d.unused(c, "Kafka", "subject")
	}
	return r
}

// sink decodes the attribute name of b as a reference to a declared sink
// ("nats.local") and returns it with its kind, SinkNATS or SinkKafka; kind
// is "" when the reference is missing or wrong.
func (d *decoder) sink(c *hcl.BodyContent, name string, b *hcl.Block) (ref string, kind SinkKind) {
	ref = d.required(c, name, b, `"nats.<name>" or "kafka.<name>"`)
	if ref == "" {
		return ref, ""
	}
	kind, sinkName := ParseSinkName(ref)
	if d.sinks[ref] {
		return ref, kind
	}
	rng := c.Attributes[name].Expr.Range()
	switch kind {
	case SinkNATS, SinkKafka:
		d.errorf(rng, "Unknown sink", "%q: no %s %q block is declared.", ref, kind, sinkName)
	default:
		d.errorf(rng, "Invalid sink", `%q is not a sink; write "nats.<name>" or "kafka.<name>".`, ref)
	}
	return ref, ""
}

// nats decodes a nats block: its server (embedded or external), its
// credentials and TLS, and its streams.
func (d *decoder) nats(b *hcl.Block, storagePath string) NATS {
	n := NewNATS(b.Labels[0])
	c := d.content(b.Body, natsSchema)
	d.str(c.Attributes["url"], &n.URL)
	d.boolean(c.Attributes["embedded"], &n.Embedded)
	d.boolean(c.Attributes["sync_always"], &n.SyncAlways)
	if n.Embedded {
		n.SyncInterval = time.Second
	}
	d.duration(c.Attributes["sync_interval"], &n.SyncInterval, true)
	d.str(c.Attributes["host"], &n.Host)
	d.integer(c.Attributes["port"], &n.Port, -1, 65535)
	d.str(c.Attributes["store_dir"], &n.StoreDir)
	d.boolean(c.Attributes["jetstream"], &n.JetStream)
	d.integer(c.Attributes["max_pending"], &n.MaxPending, 1, math.MaxInt)
	d.duration(c.Attributes["publish_timeout"], &n.PublishTimeout, true)
	d.natsServer(c, b, &n, storagePath)
	d.natsAuth(c, b, &n, storagePath)
	n.TLS = d.tls(c.Blocks)
	if n.Embedded {
		d.embeddedNATS(c, &n, b)
	}
	d.natsStreams(c, &n)
	return n
}

// natsServer checks which server a nats block names: an external one by
// url (without credentials in it), or the embedded one, whose store is
// beside the data file unless store_dir says.
func (d *decoder) natsServer(c *hcl.BodyContent, b *hcl.Block, n *NATS, storagePath string) {
	switch {
	case n.Embedded && n.URL != "":
		d.errorf(c.Attributes["url"].Expr.Range(), "Conflicting arguments",
			"url names an external server, embedded = true runs one in process; set only one.")
	case !n.Embedded && n.URL == "" && !d.hasErrorIn(c.Attributes["url"]):
		// A url that does not evaluate (${NATS_URL}) has its own error:
		// this one, first, misled (a reload trial).
		d.errorf(b.DefRange, "Missing required argument",
			`The nats block needs url = "nats://host:4222" or embedded = true.`)
	}
	if n.Embedded && n.StoreDir == "" {
		n.StoreDir = DefaultStoreDir(filepath.Dir(storagePath))
	}
	if u, err := url.Parse(n.URL); n.URL != "" && (err != nil || u.Host == "" || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme)) {
		d.errorf(c.Attributes["url"].Expr.Range(), "Invalid URL", "url %q: write nats://host:4222 (or tls://, ws://, wss://).", n.URL)
	} else if err == nil && u.User != nil {
		d.errorf(c.Attributes["url"].Expr.Range(), "Secret in the configuration",
			"url carries credentials; give them as user and password_file (or token_file) instead.")
	}
}

// embeddedNATS checks what only the embedded server asks: a loopback host,
// a store the router fills, no tls.
func (d *decoder) embeddedNATS(c *hcl.BodyContent, n *NATS, b *hcl.Block) {
	if a := c.Attributes["host"]; a != nil && !LoopbackHost(n.Host) {
		d.errorf(a.Expr.Range(), "Embedded server off loopback",
			"host %q: the embedded server is this router's own broker, and listens on loopback only (127.0.0.1, ::1 or localhost); to share a broker with other machines, run nats-server and name it with url.", n.Host)
	}
	d.own(fmt.Sprintf("the store_dir of nats %q", n.Name), n.StoreDir, filledDir, attrOr(c.Attributes["store_dir"], b.DefRange))
	if n.TLS != nil {
		d.errorf(c.Blocks.OfType("tls")[0].DefRange, "Unsupported block",
			"The embedded server listens on loopback for this router; tls applies to an external server (url).")
	}
}

// natsStreams decodes a nats block's stream blocks, each named once.
func (d *decoder) natsStreams(c *hcl.BodyContent, n *NATS) {
	streams := c.Blocks.OfType("stream")
	if len(streams) > 0 && !n.JetStream {
		d.errorf(streams[0].DefRange, "Streams need JetStream",
			"nats %q has jetstream = false, so it cannot create streams.", n.Name)
	}
	names := map[string]hcl.Range{}
	for _, sb := range streams {
		s := d.stream(sb, n.Embedded)
		if d.declare(names, sb) {
			n.Streams = append(n.Streams, s)
			if d.streamsAt == nil {
				d.streamsAt = map[string]Pos{}
			}
			d.streamsAt[n.Name+"/"+s.Name] = posOf(sb.DefRange)
		}
	}
}

// natsAuth decodes the credentials of a nats block: at most one kind. An
// embedded server always requires a user and password: by default user
// "switchyard" and a password the router generates into
// <data dir>/nats-<name>.password.
func (d *decoder) natsAuth(c *hcl.BodyContent, b *hcl.Block, n *NATS, storagePath string) {
	a := &n.Auth
	d.str(c.Attributes["user"], &a.User)
	a.Password = d.secret(c, "password", b)
	a.Token = d.secret(c, "token", b)
	d.secretFile(c.Attributes["creds_file"], &a.CredsFile)
	d.secretFile(c.Attributes["nkey_seed_file"], &a.NKeySeedFile)
	var kinds []string
	for kind, set := range map[string]bool{
		"user": a.User != "" || a.Password.IsSet(), "token": a.Token.IsSet(),
		"creds_file": a.CredsFile != "", "nkey_seed_file": a.NKeySeedFile != "",
	} {
		if set {
			kinds = append(kinds, kind)
		}
	}
	slices.Sort(kinds)
	switch {
	case len(kinds) > 1:
		d.errorf(b.DefRange, "Conflicting arguments", "Set one kind of credentials, not %s.", strings.Join(kinds, " and "))
	case (a.User == "") != !a.Password.IsSet():
		d.errorf(b.DefRange, "Incomplete credentials", "user and password_file (or password_env) go together.")
	case n.Embedded && len(kinds) == 1 && kinds[0] != "user":
		d.errorf(b.DefRange, "Unsupported argument", "An embedded server takes user and password_file (or nothing: the router generates them), not %s.", kinds[0])
	case n.Embedded && len(kinds) == 0:
		a.User = "switchyard"
		a.Password.File = filepath.Join(filepath.Dir(storagePath), "nats-"+n.Name+".password")
	}
	if a.Password.File != "" {
		d.own(fmt.Sprintf("the password file of nats %q", n.Name), a.Password.File, readFile, attrOr(c.Attributes["password_file"], b.DefRange))
	}
}

// secret decodes <name>_file and <name>_env; <name> itself (the secret
// inline) is refused: policies.hcl is read by many and kept in version
// control.
func (d *decoder) secret(c *hcl.BodyContent, name string, b *hcl.Block) Secret {
	var s Secret
	if a := c.Attributes[name]; a != nil {
		d.errorf(a.NameRange, "Secret in the configuration",
			"Put the %s in a file (%s_file, mode 0600) or an environment variable (%s_env), not in %s.", name, name, name, a.NameRange.Filename)
	}
	d.secretFile(c.Attributes[name+"_file"], &s.File)
	d.str(c.Attributes[name+"_env"], &s.Env)
	if a := c.Attributes[name+"_env"]; a != nil && s.Env != "" {
		d.envs = append(d.envs, SecretEnv{Name: s.Env, Attr: a.Name, At: posOf(a.Expr.Range())})
	}
	if s.File != "" && s.Env != "" {
		d.errorf(b.DefRange, "Conflicting arguments", "Set %s_file or %s_env, not both.", name, name)
	}
	return s
}

// tls decodes the optional tls block among blocks.
func (d *decoder) tls(blocks hcl.Blocks) *TLS {
	tb := d.single(blocks, "tls")
	if tb == nil {
		return nil
	}
	tc := d.content(tb.Body, tlsSchema)
	t := &TLS{}
	d.str(tc.Attributes["ca_file"], &t.CAFile)
	d.str(tc.Attributes["cert_file"], &t.CertFile)
	d.secretFile(tc.Attributes["key_file"], &t.KeyFile)
	d.boolean(tc.Attributes["insecure_skip_verify"], &t.InsecureSkipVerify)
	if (t.CertFile == "") != (t.KeyFile == "") {
		d.errorf(tb.DefRange, "Incomplete client certificate", "cert_file and key_file must be set together.")
	}
	return t
}

func (d *decoder) stream(b *hcl.Block, embedded bool) Stream {
	s := NewStream(b.Labels[0])
	if embedded {
		s.Duplicates = DefaultEmbeddedDuplicates
	}
	c := d.content(b.Body, streamSchema)
	s.Subjects = d.requiredList(c, "subjects", b, `["<subject>", ...]`, func(s string) error { return CheckSubject(s, true) })
	d.oneOf(c.Attributes["storage"], &s.Storage, "file", "memory")
	d.integer(c.Attributes["replicas"], &s.Replicas, 1, math.MaxInt)
	d.duration(c.Attributes["max_age"], &s.MaxAge, false)
	if c.Attributes["duplicates"] == nil && s.MaxAge > 0 && s.Duplicates > s.MaxAge {
		// JetStream refuses a duplicates window longer than max_age: the
		// default shrinks to fit; a set one is the server's to refuse.
		s.Duplicates = s.MaxAge
	}
	d.duration(c.Attributes["duplicates"], &s.Duplicates, true)
	return s
}

func (d *decoder) kafka(b *hcl.Block) Kafka {
	k := NewKafka(b.Labels[0])
	c := d.content(b.Body, kafkaSchema)
	k.Brokers = d.requiredList(c, "brokers", b, `["host:9092", ...]`, nil)
	if a := c.Attributes["brokers"]; a != nil && len(k.Brokers) > 0 {
		rngs := d.strs(a, &k.Brokers)
		for i, broker := range k.Brokers {
			if _, port, err := net.SplitHostPort(broker); err != nil || port == "" {
				d.errorf(rngs[i], "Invalid address", "brokers: %q is not host:port.", broker)
			}
		}
	}
	d.str(c.Attributes["client_id"], &k.ClientID)
	d.oneOf(c.Attributes["compression"], &k.Compression, "none", "gzip", "snappy", "lz4", "zstd")
	d.duration(c.Attributes["linger"], &k.Linger, false)
	d.size(c.Attributes["max_record_bytes"], &k.MaxRecordBytes, 1<<30)
	d.boolean(c.Attributes["idempotent"], &k.Idempotent)
	d.duration(c.Attributes["publish_timeout"], &k.PublishTimeout, true)

	k.TLS = d.tls(c.Blocks)
	if sb := d.single(c.Blocks, "sasl"); sb != nil {
		sc := d.content(sb.Body, saslSchema)
		mechanisms := []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
		k.SASL = &SASL{
			Mechanism: d.required(sc, "mechanism", sb, quoteAll(mechanisms)),
			Username:  d.required(sc, "username", sb, `"<user>"`),
			Password:  d.secret(sc, "password", sb),
		}
		if m := k.SASL.Mechanism; m != "" && !slices.Contains(mechanisms, m) {
			d.errorf(sc.Attributes["mechanism"].Expr.Range(), "Invalid value",
				"mechanism must be one of %s, not %q.", quoteAll(mechanisms), m)
		}
		if !k.SASL.Password.IsSet() {
			d.errorf(sb.DefRange, "Missing required argument", "The sasl block needs password_file or password_env.")
		}
	}
	return k
}

func (d *decoder) plugin(b *hcl.Block) Plugin {
	p := Plugin{
		Name:   b.Labels[0],
		Limits: DefaultPluginLimits,
	}
	c := d.content(b.Body, pluginSchema)
	p.Wasm = d.required(c, "wasm", b, `"path/to/plugin.wasm"`)
	if p.Wasm != "" {
		p.At = posOf(c.Attributes["wasm"].Expr.Range())
		d.own(fmt.Sprintf("the wasm file of plugin %q", p.Name), p.Wasm, readFile, c.Attributes["wasm"].Expr.Range())
	}
	d.stringMap(c.Attributes["config"], &p.Config)
	if a := c.Attributes["state_namespace"]; a != nil {
		d.str(a, &p.StateNamespace)
		if !validName(p.StateNamespace) {
			d.errorf(a.Expr.Range(), "Invalid name", "state_namespace %q: use letters, digits, - and _.", p.StateNamespace)
		}
	}
	if lb := d.single(c.Blocks, "limits"); lb != nil {
		lc := d.content(lb.Body, limitsSchema)
		d.size(lc.Attributes["memory"], &p.Limits.Memory, 4<<30) // what a wasm32 memory can address
		d.duration(lc.Attributes["timeout"], &p.Limits.Timeout, true)
		d.integer(lc.Attributes["max_outputs"], &p.Limits.MaxOutputs, 1, math.MaxInt)
		d.size(lc.Attributes["max_output_bytes"], &p.Limits.MaxOutputBytes, 64*mib)
	}
	return p
}

// inbox decodes an inbox block. Its policy inherits from the defaults like an
// event's does, except routes: an inbox delivers to deliver, not to a sink.
func (d *decoder) inbox(b *hcl.Block, defaults Policy) Inbox {
	c := d.content(b.Body, inboxSchema)
	from, kind := d.sink(c, "from", b)
	in := newInbox(b.Labels[0], from, kind, defaults)
	switch kind {
	case SinkKafka:
		in.Topics = d.requiredList(c, "topics", b, `["<topic>", ...] for a Kafka sink`, CheckTopic)
		d.str(c.Attributes["group"], &in.Group)
		d.str(c.Attributes["instance_id"], &in.InstanceID)
		d.duration(c.Attributes["session_timeout"], &in.SessionTimeout, true)
		if a := c.Attributes["session_timeout"]; a != nil && in.SessionTimeout > 0 && in.SessionTimeout < MinSessionTimeout {
			d.errorf(a.Expr.Range(), "Session timeout too short", "session_timeout = %q: the Kafka client takes no less than %v (and brokers, by default, no less than 6s: group.min.session.timeout.ms).", in.SessionTimeout, MinSessionTimeout)
		}
		d.boolean(c.Attributes["read_committed"], &in.ReadCommitted)
		d.unused(c, "Kafka", "subject", "durable")
	case SinkNATS:
		in.Subject = d.required(c, "subject", b, `"<subject>" for a NATS sink`)
		d.check(c.Attributes["subject"], in.Subject, func(s string) error { return CheckSubject(s, true) })
		d.str(c.Attributes["durable"], &in.Durable)
		d.unused(c, "NATS", "topics", "group", "instance_id", "session_timeout", "read_committed")
	}
	d.duration(c.Attributes["ttl"], &in.TTL, true)
	d.str(c.Attributes["id_header"], &in.IDHeader)
	if a := c.Attributes["id_header"]; a != nil && in.IDHeader == "" {
		d.errorf(a.Expr.Range(), "Empty id_header", "id_header names the message header that carries an event's id; leave it out for the default (%s for this sink).", newInbox(in.Name, in.From, kind, defaults).IDHeader)
	}
	oneOf(d, c.Attributes["missing_id"], &in.MissingID, MissingIDDerive, MissingIDReject)
	if db := d.single(c.Blocks, "deliver"); db != nil {
		dc := d.content(db.Body, deliverSchema)
		d.str(dc.Attributes["url"], &in.Deliver.URL)
		d.duration(dc.Attributes["timeout"], &in.Deliver.Timeout, true)
		d.integer(dc.Attributes["concurrency"], &in.Deliver.Concurrency, 1, 1024)
		oneOf(d, dc.Attributes["mode"], &in.Deliver.Mode, ContentModeBinary, ContentModeStructured)
		if u := in.Deliver.URL; u != "" && !validDeliverURL(u) {
			d.errorf(dc.Attributes["url"].Expr.Range(), "Invalid URL",
				`%q: deliver url must be http://host/path, https://host/path or unix:///path/to.sock/path.`, u)
		}
	}
	d.policy(c, &in.Policy)
	// An inbox runs only the plugins it names: the defaults' chain is
	// written for outbound events.
	if c.Attributes["plugins"] == nil {
		in.Policy.Plugins = nil
	}
	in.Plugins = slices.Clone(in.Policy.Plugins)
	if len(in.Plugins) > 0 && in.Deliver.URL == "" {
		// A pull subscriber gets the events as stored; a loop running the
		// plugins would find no destination and dead-letter them all (a
		// review: after any restart or reload).
		d.errorf(c.Attributes["plugins"].Expr.Range(), "Plugins on a pull inbox",
			"inbox %q has no deliver block: its subscribers pull the events as they were received, and no plugin runs on them; remove plugins, or add deliver { url = ... }.", in.Name)
	}
	return in
}

// oneConsumer refuses an inbox that reads through the same consumer as an
// inbox before it on the same sink (seen: those read so far): a NATS
// durable of the same name on a stream both read (a durable is named per
// stream; with the streams not declared in the nats block the router
// cannot tell, and refuses), or a Kafka group of the same name on a topic
// both read. The two would share that consumer's messages (an adversarial
// trial: a NATS durable shared by two inboxes ended with the second's
// filter, the first's events never delivered, and one of the second's
// reached the first's service; a group split one topic between two
// services). Different streams or topics under one name (one an
// account's permissions or an ACL grants) pass (a review).
func (d *decoder) oneConsumer(cfg *Config, seen []Inbox, b *hcl.Block, in Inbox) {
	for _, other := range seen {
		if other.From != in.From || other.Durable != in.Durable || other.Group != in.Group {
			continue
		}
		what, name, shared := "durable", in.Durable, sharedStream(cfg, in, other)
		harm := "the consumer would take one inbox's subject, and the other's events would go unread or reach the wrong service"
		if in.Group != "" {
			what, name, shared = "group", in.Group, sharedTopic(in, other)
			harm = "the group would split the records of " + shared + " between the two, each service getting part of the other's"
		}
		if shared == "" {
			continue
		}
		rng := b.DefRange
		if c, _, _ := b.Body.PartialContent(inboxSchema); c != nil && c.Attributes[what] != nil {
			rng = c.Attributes[what].Expr.Range()
		}
		d.errorf(rng, "Shared "+what, "inbox %q reads %s's %s %q on %s, as inbox %q does: %s; give each inbox a %s of its own (the default is the inbox's name).", in.Name, in.From, what, name, shared, other.Name, harm, what)
		return
	}
}

// sharedTopic names a topic both Kafka inboxes read, or "".
func sharedTopic(a, b Inbox) string {
	for _, t := range a.Topics {
		if slices.Contains(b.Topics, t) {
			return fmt.Sprintf("topic %q", t)
		}
	}
	return ""
}

// sharedStream names the stream both NATS inboxes read, as far as the nats
// block's streams tell: a stream whose subjects collide with both
// subjects, or "their stream" when neither's is declared; "" when the
// declared streams put them apart.
func sharedStream(cfg *Config, a, b Inbox) string {
	var streams []Stream
	for _, n := range cfg.NATS {
		if n.SinkName() == a.From {
			streams = n.Streams
		}
	}
	known := false
	for _, st := range streams {
		inA, inB := collidesAny(st.Subjects, a.Subject), collidesAny(st.Subjects, b.Subject)
		known = known || inA || inB
		if inA && inB {
			return fmt.Sprintf("stream %q", st.Name)
		}
	}
	if known {
		return ""
	}
	return "their stream (not declared in the nats block: declare it to tell them apart)"
}

func collidesAny(filters []string, subject string) bool {
	return slices.ContainsFunc(filters, func(f string) bool { return subjectsCollide(f, subject) })
}

// subjectsCollide reports whether some subject matches both NATS subjects
// a and b (wildcards allowed: * one token, > one or more at the end).
func subjectsCollide(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		if i == len(at) || i == len(bt) {
			return len(at) == len(bt)
		}
		x, y := at[i], bt[i]
		if x == ">" || y == ">" {
			return true
		}
		if x != y && x != "*" && y != "*" {
			return false
		}
	}
}

func validDeliverURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "http", "https":
		return u.Host != ""
	case "unix":
		return u.Path != ""
	}
	return false
}

// posOf is rng's start as "file:line:col".
func posOf(rng hcl.Range) Pos {
	return Pos(fmt.Sprintf("%s:%d:%d", rng.Filename, rng.Start.Line, rng.Start.Column))
}
