package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	switchyard "github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/every"
	"github.com/switchyard-router/switchyard/internal/grace"
	"github.com/switchyard-router/switchyard/internal/history"
	"github.com/switchyard-router/switchyard/internal/schedwait"
	"github.com/switchyard-router/switchyard/plugins/kafka"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/plugins/wasm"
	"github.com/switchyard-router/switchyard/plugins/webhook"
	"github.com/switchyard-router/switchyard/storage"
)

const defaultConfigPath = "./policies.hcl"

// embeddedName names the shipped policies.hcl, embedded in the binary, in
// errors and logs.
const embeddedName = "policies.hcl (embedded)"

// RunCommand runs the router until SIGINT/SIGTERM.
type RunCommand struct {
	*Main
	ConfigPath string
	// configNamed: -config was given. Only a default path that does not
	// exist runs on the embedded defaults; a file named must exist.
	configNamed bool
	LogLevel    string
	LogFormat   format
	// ShutdownTimeout bounds the graceful stop.
	ShutdownTimeout time.Duration
	// DoubleSend makes every publish and delivery happen twice (tests).
	DoubleSend bool
	// PluginCacheDir keeps compiled plugins; "" = <data dir>/wasm-cache.
	PluginCacheDir string
	// Reloads, if set, asks for a reload as SIGHUP does (router plugin dev).
	Reloads <-chan struct{}

	log hclog.Logger
	reg *prometheus.Registry
	// memCeiling is the collector's ceiling under a cgroup memory limit
	// (memoryCeiling; 0 without one), read once at start.
	memCeiling int64
	// reloadMetrics count the reloads (nil until the registry is made).
	reloadMetrics *reloadMetrics
	health        *health        // runs the sinks', servers' and inboxes' checks
	progress      *startProgress // while open runs; nil after
	db            *storage.DB
	natsServers   []*natsplugin.Server
	wasm          *wasm.Runtime // nil without plugins
	plugins       []switchyard.Plugin
	pprof         *http.Server // listen { pprof }; nil when off
	// activated is the API socket systemd passed (socket activation); nil
	// when the router creates its own.
	activated   net.Listener
	sources     []switchyard.Source
	sourcesCtx  context.Context // ends when Close begins
	stopSources context.CancelFunc
	history     *history.Recorder // the console's last 15 minutes
	stopHistory context.CancelFunc
	sourcesWG   sync.WaitGroup
	sinksMu     sync.Mutex // a reload adds sinks while /readyz reads them
	sinks       []switchyard.Sink
	cfg         *config.Config // in force: the start's, then each reload's
	engine      *engine.Engine
	api         *api.Server
}

// ParseFlags reads the run command's flags.
func (c *RunCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("router run", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&c.ConfigPath, "config", defaultConfigPath, "the configuration file (without -config: ./policies.hcl, or the embedded defaults when it does not exist)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "trace, debug, info, warn, error or off")
	formatVar(fs, &c.LogFormat, "log-format", "log", formatText, formatJSON)
	durationVar(fs, &c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful stop may take: requests in flight finish, tails and waiting pulls end at once")
	fs.BoolVar(&c.DoubleSend, "double-send", false, "test mode: make every publish and every delivery twice, to prove receivers idempotent")
	fs.StringVar(&c.PluginCacheDir, "plugin-cache-dir", "", "where compiled plugins are kept across restarts (default <data dir>/wasm-cache)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("router run takes no arguments, only flags: %q (flags after it were not read)", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { c.configNamed = c.configNamed || f.Name == "config" })
	return c.checkFlags()
}

// checkFlags refuses settings the router cannot honour, instead of
// starting on a fallback: an unknown log level or format, a stop with no
// time. Run asks it too, for the commands that set the fields themselves
// (router plugin dev).
func (c *RunCommand) checkFlags() error {
	logFormat := checkFormat(c.LogFormat, formatText, formatJSON)
	switch {
	case hclog.LevelFromString(c.LogLevel) == hclog.NoLevel:
		return fmt.Errorf("-log-level %q: use trace, debug, info, warn, error or off", c.LogLevel)
	case logFormat != nil: // set by code (router plugin dev): the flag refuses it first
		return fmt.Errorf("-log-format %q: %w", c.LogFormat, logFormat)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout %v: a graceful stop needs some time (30s by default)", c.ShutdownTimeout)
	}
	return nil
}

// Run opens everything, serves until ctx ends, then closes.
func (c *RunCommand) Run(ctx context.Context) (err error) {
	if err := c.checkFlags(); err != nil {
		return err
	}
	// SIGHUP is ours from the start (hupAtStart): one that came while the router opened
	// (systemd's ExecReload right after READY=1, a deploy script) would
	// otherwise stop the process, Go's default, and is now a reload once
	// it runs.
	hup := hupAtStart // main.go
	if hup == nil {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
	}
	defer signal.Stop(hup)
	c.log = newLogger(c.Stderr, c.LogLevel, c.LogFormat)
	c.health = newHealth(healthWait, c.log)
	cfg, err := loadConfig(c.ConfigPath, !c.configNamed)
	if err != nil {
		return err
	}
	if cfg.File == embeddedName {
		c.log.Info("no configuration file; running on the embedded defaults", "path", c.ConfigPath)
	}
	for _, w := range runWarnings(cfg) {
		c.log.Warn(w)
	}
	c.memCeiling = memoryCeiling()
	logMemoryBudget(c.log, c.memCeiling)
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
		defer cancel()
		if cerr := c.Close(closeCtx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	c.progress = newStartProgress(ctx, c.log)
	err = c.open(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		err = c.progress.cancelled(err)
	}
	c.progress.done()
	c.progress = nil
	if err != nil {
		return err
	}
	if ctx.Err() != nil { // a stop during the last steps, which did not notice it
		c.log.Info("stopping before the start was announced")
		return nil
	}
	c.log.Info("switchyard is running", "version", versionString(), "pid", os.Getpid(), "config", cfg.File, "socket", cfg.Listen.Socket, "data", cfg.Storage.Path) // pid: what kill -HUP takes (README)
	logFileLimit(c.log)
	if err := sdNotify("READY=1"); err != nil {
		c.log.Warn("could not tell systemd the router is ready", "error", err)
	}
	c.serve(ctx, hup) // reload.go: until ctx ends, reloading on SIGHUP
	c.log.Info("stopping", "shutdown_timeout", c.ShutdownTimeout, "hint", "a second SIGTERM or Ctrl-C stops at once")
	sdNotify("STOPPING=1")
	return nil
}

// open builds the router in the order of the story in
// docs/architecture.md, once the files of secrets are checked: the data file, the brokers and sinks, the plugins,
// the engine (and, after an unclean stop, the republish), the inbox
// sources, and last the API, so that nothing is served before it works.
func (c *RunCommand) open(ctx context.Context, cfg *config.Config) error {
	// A tokens file others may read, or a socket another router serves on,
	// is refused in milliseconds, not after the brokers started and the
	// plugins compiled.
	if problems := checkFiles(cfg); len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	// A socket systemd passed is systemd's, at whatever path: it answers
	// there, so the check for another router serving on the configured
	// path would refuse it.
	var err error
	if c.activated, err = activationListener(); err != nil { // sdnotify.go
		return err
	}
	if c.activated == nil {
		if err := api.CheckSocket(cfg.Listen.Socket); err != nil {
			return err
		}
	}
	for _, f := range foldersToMake(cfg, c.activated != nil) { // validate.go
		c.log.Info("making a folder that does not exist", "folder", f.folder, "for", strings.Join(f.paths, ", "))
	}
	c.sourcesCtx, c.stopSources = context.WithCancel(context.WithoutCancel(ctx))
	c.reg = newRegistry()
	c.reloadMetrics = newReloadMetrics(c.reg)
	if err := c.openStorage(ctx, cfg); err != nil {
		return err
	}
	natsURLs, err := c.openSinks(ctx, cfg)
	if err != nil {
		return err
	}
	plugins, err := c.loadPlugins(ctx, cfg) // plugin.go
	if err != nil {
		return err
	}
	c.plugins = plugins
	if err := c.startEngine(ctx, cfg); err != nil {
		return err
	}
	end := c.progress.step("opening the inbox sources")
	err = c.openSources(ctx, cfg, natsURLs)
	end()
	if err != nil {
		return err
	}
	registerInboxes(c.reg, c.health, inboxChecks(c.sources, c.engine), c.sources)
	var hctx context.Context
	hctx, c.stopHistory = context.WithCancel(context.WithoutCancel(ctx))
	c.history = startHistory(hctx, c.reg) // history.go
	return c.openAPI(cfg)
}

// openStorage opens the data file; after an unclean stop, only once a
// check of the whole file in a process of its own found it sound. A stop
// (ctx) cuts the check short: the file stays marked, and the next start
// checks it again.
func (c *RunCommand) openStorage(ctx context.Context, cfg *config.Config) error {
	defer c.progress.step("opening the data file %s", cfg.Storage.Path)()
	db, err := storage.Open(cfg.Storage.Path, storage.Options{
		OnCommit: storageMetrics(c.reg), CommitDelay: cfg.Storage.CommitDelay,
		CheckUnclean: func(path string) error { return c.checkAfterUncleanStop(ctx, path) },
	})
	if err != nil {
		return err
	}
	c.db = db
	if err := db.FreeListError(); err != nil {
		c.log.Warn("the start was slower than it had to be", "path", cfg.Storage.Path, "error", err)
	}
	if was := db.UpgradedFrom(); was != "" {
		c.log.Warn("the data file was upgraded to this router's schema: routers that read only the one it had refuse it from now on; to go back to one, restore the backup taken before the upgrade (README, Upgrading)",
			"path", cfg.Storage.Path, "schema_before", was, "schema", storage.SchemaVersion)
	}
	registerStorage(c.reg, db)
	return nil
}

// checkAfterUncleanStop is checkAfterUncleanStop (db.go), saying in the
// log why the start takes longer, and what it found.
func (c *RunCommand) checkAfterUncleanStop(ctx context.Context, path string) error {
	var size int64
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	c.log.Warn("the last run did not stop cleanly: checking the whole data file before opening it", "path", path, "bytes", size)
	start := time.Now()
	defer extendStart()()
	if err := checkAfterUncleanStop(ctx, path); err != nil {
		return err
	}
	c.log.Info("the data file is sound", "path", path, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// extendStart tells systemd, now and every startReportEvery until the
// returned stop, that the start goes on (EXTEND_TIMEOUT_USEC): the check
// of a whole data file takes as long as the file is large, which no
// TimeoutStartSec fits, and a start killed at it would leave the running
// mark, and Restart= would begin the same check again, for ever (a
// review). Without $NOTIFY_SOCKET it does nothing.
func extendStart() (stop func()) {
	extend := func() { sdNotify(fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", (3 * startReportEvery).Microseconds())) }
	extend()
	return every.Start(startReportEvery, extend)
}

// openSinks starts the embedded NATS servers and opens every sink: NATS,
// Kafka, and the webhooks of the inboxes that deliver. It returns the
// client URL of each nats block, for the inbox sources.
func (c *RunCommand) openSinks(ctx context.Context, cfg *config.Config) (map[string]string, error) {
	natsURLs := make(map[string]string, len(cfg.NATS))
	for _, n := range cfg.NATS {
		url := n.URL
		if n.Embedded {
			srv, err := c.startNATSServer(n, filepath.Dir(cfg.Storage.Path))
			if err != nil && cfg.File == embeddedName {
				// The hint's "this nats block" is in no file the user has.
				return nil, fmt.Errorf("%w; the router runs on its embedded defaults (no %s): copy the repository's policies.hcl there and edit it", err, c.ConfigPath)
			}
			if err != nil {
				return nil, err
			}
			url = srv.ClientURL()
		}
		natsURLs[n.Name] = url
		end := c.progress.step("connecting to nats %q", n.Name)
		sink, err := natsplugin.Open(ctx, n, url, c.log)
		end()
		if err != nil {
			return nil, fmt.Errorf("nats %q: %w", n.Name, err)
		}
		c.sinks = append(c.sinks, sink)
	}
	for _, k := range cfg.Kafka {
		sink, err := kafka.Open(ctx, k, c.log)
		if err != nil {
			return nil, fmt.Errorf("kafka %q: %w", k.Name, err)
		}
		c.sinks = append(c.sinks, sink)
		go c.warnMissingTopics(ctx, cfg, sink) // a cluster that is away must not hold up the start
	}
	for _, in := range cfg.Inboxes {
		if in.Deliver.URL == "" {
			continue // pulled: GET /v1/subscriptions/{name}/messages
		}
		sink, err := webhook.New(in, c.log)
		if err != nil {
			return nil, fmt.Errorf("inbox %q: %w", in.Name, err)
		}
		c.sinks = append(c.sinks, sink)
	}
	registerSinks(c.reg, c.health, c.sinks)
	return natsURLs, nil
}

// startNATSServer starts the in-process server of an embedded nats block.
func (c *RunCommand) startNATSServer(n config.NATS, dataDir string) (*natsplugin.Server, error) {
	defer c.progress.step("starting the embedded NATS server %q", n.Name)()
	srv, err := natsplugin.StartServer(n, dataDir, c.log) // it names its logger
	if err != nil {
		return nil, fmt.Errorf("nats %q: %w", n.Name, err)
	}
	c.natsServers = append(c.natsServers, srv)
	registerNATSServer(c.reg, c.health, n.Name, srv)
	c.log.Info("embedded NATS server with JetStream", "name", n.Name, "url", srv.ClientURL())
	return srv, nil
}

// startEngine starts the loops over the data file and the sinks and, after
// an unclean stop, republishes what the embedded JetStream may have lost.
func (c *RunCommand) startEngine(ctx context.Context, cfg *config.Config) error {
	end := c.progress.step("starting the engine")
	eng, err := engine.New(c.db, cfg, c.sinks, engine.Options{
		Logger: c.log, Registerer: c.reg, DoubleSend: c.DoubleSend, Plugins: c.plugins,
		Saturated: new(schedwait.Gauge).Saturated, MaxHeldOutputBytes: heldOutputBound(c.memCeiling),
	})
	if err != nil {
		end()
		return err
	}
	if c.db.Unclean() {
		// Before Open: nothing may be published or marked delivered
		// while the streams are asked what they kept.
		if err := c.republishAfterCrash(ctx, eng, cfg); err != nil {
			end()
			return err
		}
	}
	err = eng.Open()
	end()
	if err != nil {
		return err
	}
	c.engine = eng
	c.cfg = cfg
	registerSpace(c.reg, eng)
	return nil
}

// openAPI serves the API on the unix socket (or the one systemd passed),
// the TCP listener if configured, and pprof if asked for.
func (c *RunCommand) openAPI(cfg *config.Config) error {
	socket := cfg.Listen.Socket
	if c.activated != nil {
		socket = c.activated.Addr().String()
		c.log.Info("serving the API on the socket systemd passed", "addr", socket)
	}
	if cfg.Listen.Pprof != "" {
		if err := c.servePprof(cfg.Listen.Pprof); err != nil {
			return err
		}
	}
	defer c.progress.step("opening the API socket %s", socket)()
	c.api = api.New(c.engine, cfg.Listen, api.Options{Logger: c.log, Gatherer: c.reg, Registerer: c.reg, Now: c.engine.Now,
		Ready: c.ready, Sinks: c.sinkHealth, Inboxes: c.inboxHealth, Listener: c.activated, Backup: c.db.Backup, History: c.history})
	return c.api.Open()
}

// openSource opens the source of in, the broker its from names; nil when
// no block of the configuration has that name. The source asks eng where
// the inbox got to when its Kafka group has no offsets, or its durable is
// gone.
func openSource(ctx context.Context, cfg *config.Config, in config.Inbox, natsURLs map[string]string, eng *engine.Engine, log hclog.Logger) (switchyard.Source, error) {
	kept := func(topic string, partition int32) (switchyard.Read, bool, error) {
		return eng.InboxRead(in.Name, topic, partition)
	}
	kind, name := config.ParseSinkName(in.From)
	switch kind {
	case config.SinkKafka:
		if i := slices.IndexFunc(cfg.Kafka, func(k config.Kafka) bool { return k.Name == name }); i >= 0 {
			return kafka.OpenSource(ctx, cfg.Kafka[i], in, log, kept)
		}
	case config.SinkNATS:
		if i := slices.IndexFunc(cfg.NATS, func(n config.NATS) bool { return n.Name == name }); i >= 0 {
			keep := func(ctx context.Context, r switchyard.Read) error { return eng.KeepInboxRead(ctx, in.Name, r) }
			return natsplugin.OpenSource(ctx, cfg.NATS[i], natsURLs[name], in, log, kept, keep)
		}
	}
	return nil, nil
}

// openSources starts consuming every inbox's broker into the data file.
func (c *RunCommand) openSources(ctx context.Context, cfg *config.Config, natsURLs map[string]string) error {
	for _, in := range cfg.Inboxes {
		src, err := openSource(ctx, cfg, in, natsURLs, c.engine, c.log)
		if err != nil {
			return err // it names the inbox
		}
		if src == nil {
			return fmt.Errorf("inbox %q: no sink %q to consume from", in.Name, in.From)
		}
		c.sources = append(c.sources, src)
		name := in.Name
		c.sourcesWG.Add(1)
		go func() {
			defer c.sourcesWG.Done()
			receive := func(ctx context.Context, msgs []switchyard.Inbound) error {
				_, err := c.engine.Receive(ctx, name, msgs)
				return err
			}
			if err := src.Run(c.sourcesCtx, receive); err != nil {
				c.log.Error("inbox stopped consuming", "inbox", name, "error", err)
			}
		}()
	}
	return nil
}

// warnMissingTopics says at startup which routed Kafka topics do not exist:
// a clear warning now instead of a surprise per event later.
func (c *RunCommand) warnMissingTopics(ctx context.Context, cfg *config.Config, sink *kafka.Sink) {
	topics := routedTopics(cfg, sink)
	if len(topics) == 0 {
		return
	}
	checkCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := sink.CheckTopics(checkCtx, topics); err != nil {
		c.log.Warn("kafka topics are not ready; events routed there wait, counting no attempt, until they are", "sink", sink.Name(), "error", err)
	}
}

// ready is what /readyz answers on: whether events can be stored: the
// data file takes writes, and its budget (storage.max_size, min_free) has
// room (a full one answered every ingest 507 while /readyz said ready: a
// tenant trial).
func (c *RunCommand) ready(context.Context) map[string]error {
	return map[string]error{"storage": c.db.Writable(), "storage_budget": c.engine.BudgetFull()}
}

// sinkHealth is /readyz's detail: every sink and every embedded NATS
// server (a JetStream store that cannot write), each within healthWait.
func (c *RunCommand) sinkHealth(ctx context.Context) map[string]error {
	c.sinksMu.Lock()
	checks := sinkChecks(c.sinks)
	c.sinksMu.Unlock()
	for _, s := range c.natsServers {
		checks = append(checks, serverCheck(s))
	}
	return c.health.check(ctx, checks)
}

// inboxHealth is /readyz's detail on the inboxes: whether each consumes
// from its broker, each within healthWait.
func (c *RunCommand) inboxHealth(ctx context.Context) map[string]error {
	return c.health.check(ctx, inboxChecks(c.sources, c.engine))
}

// Close stops in the reverse order of open: stop accepting, let the loops
// finish or release their batches, close the sinks, the brokers and last the
// data file.
func (c *RunCommand) Close(ctx context.Context) error {
	start := time.Now()
	var errs []error
	if c.pprof != nil {
		c.pprof.Close()
	}
	if c.stopHistory != nil {
		c.stopHistory()
	}
	if c.api != nil {
		errs = append(errs, c.closeAPI(ctx))
	} else if c.activated != nil {
		c.activated.Close() // the start failed before the API took it
	}
	// Stop consuming before the engine: a batch being stored finishes (or
	// is not acknowledged to the broker, which redelivers it).
	if c.stopSources != nil {
		c.stopSources()
	}
	errs = append(errs, closeAll(ctx, c.sources))
	c.sourcesWG.Wait()
	if c.engine != nil {
		errs = append(errs, c.engine.Close(ctx))
	}
	if c.wasm != nil { // after the engine: its loops run the plugins
		errs = append(errs, c.wasm.Close(ctx))
	}
	c.sinksMu.Lock()
	sinks := slices.Clone(c.sinks)
	c.sinksMu.Unlock()
	errs = append(errs, closeAll(ctx, sinks))
	errs = append(errs, closeAll(ctx, c.natsServers))
	if c.db != nil {
		dctx, cancel := grace.AtLeast(ctx, dataCloseGrace)
		err := c.db.Close(dctx)
		cancel()
		errs = append(errs, err)
		if err == nil { // whatever the others' errors: this one decides the next start
			c.log.Info("stopped: the data file is closed clean (the next start needs no check)", "took", time.Since(start).Round(time.Millisecond))
		}
	}
	return errors.Join(errs...)
}

// dataCloseGrace is the least time the data file's close gets, past the
// stop's time if need be (the unit file's TimeoutStopSec leaves 15 s over
// -shutdown-timeout): it commits what is queued and removes the running
// mark, and without it the next start takes the stop for a crash, checks
// the whole file and republishes the last window.
const dataCloseGrace = 2 * time.Second

// closeAPI lets the API's requests in flight finish within half the time
// the stop has left, and cuts those still open then: a client that sends
// its body slowly would otherwise take the whole stop (listen.read_timeout
// is as long as -shutdown-timeout by default), and leave the engine and
// the data file none (a review: the next start found the running mark).
// Cut requests are no error of the stop's.
func (c *RunCommand) closeAPI(ctx context.Context) error {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		actx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
	}
	defer cancel()
	start := time.Now()
	err := c.api.Close(actx)
	if errors.Is(err, api.ErrRequestsCut) {
		c.log.Warn("stopping: "+err.Error(), "after", time.Since(start).Round(time.Millisecond))
		return nil
	}
	return err
}

// closeAll closes each of cs side by side and joins their errors: one that
// holds until the deadline (an inbox or a sink on a dark cluster) leaves
// the others the whole time, where closing one after another gave those
// after it none.
func closeAll[C interface{ Close(context.Context) error }](ctx context.Context, cs []C) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// loadConfig loads path; with embedded, a missing default path means the
// shipped defaults.
func loadConfig(path string, embedded bool) (*config.Config, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && embedded && path == defaultConfigPath {
		return config.Parse(switchyard.Policies, embeddedName)
	}
	return config.Load(path)
}

func newLogger(w io.Writer, level string, f format) hclog.Logger {
	color := hclog.ColorOff
	if _, isFile := w.(*os.File); isFile {
		color = hclog.AutoColor // a terminal gets colour, a file or pipe does not
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "switchyard",
		Level:      hclog.LevelFromString(level),
		Output:     w,
		JSONFormat: f == formatJSON,
		Color:      color,
	})
}

// republishAfterCrash runs after an unclean stop, before the loops start
// (engine.Republish). The embedded JetStream acknowledges a message before
// it fsyncs it (within sync_interval), so a power cut can take from it what
// the router had already marked delivered: of what was delivered to it in
// the last 2×sync_interval+5s, what its streams no longer hold goes out
// again under the same message ids (docs/decisions/power-loss.md). And
// what the streams stored that the router never recorded (a crash between
// acknowledgement and commit) is recorded at the stream's position instead
// of being sent again (docs/decisions/dedup-window.md). Each store is
// fsynced first: what a stream holds then is what survives the next power
// cut too. Only once the requeue has committed does a clean stop clear the
// data file's running mark (storage.DB.MarkRecovered); a failure fails the
// start, and the next start tries again.
func (c *RunCommand) republishAfterCrash(ctx context.Context, eng *engine.Engine, cfg *config.Config) error {
	var sinks []string
	var window time.Duration
	for _, n := range cfg.NATS {
		if n.Embedded {
			sinks = append(sinks, n.SinkName())
			window = max(window, n.ReplayWindow())
		}
	}
	if len(sinks) == 0 {
		c.db.MarkRecovered()
		return nil
	}
	start := time.Now()
	for _, srv := range c.natsServers {
		if err := srv.SyncStore(); err != nil {
			return fmt.Errorf("the last run did not stop cleanly, and syncing the JetStream store %s failed: %w", srv.StoreDir(), err)
		}
	}
	done, err := eng.Republish(ctx, sinks, window)
	if err != nil {
		return fmt.Errorf("the last run did not stop cleanly, and republishing what it delivered last failed: %w", err)
	}
	c.log.Warn("the last run did not stop cleanly: checked what the embedded NATS server holds of what the router sent it last",
		"republished_events", done.Events, "recorded_unsent_outputs", done.Recalled, "window", window, "sinks", sinks,
		"took", time.Since(start).Round(time.Millisecond))
	c.db.MarkRecovered()
	return nil
}
