package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"

	switchyard "github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/plugins/kafka"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/plugins/wasm"
)

// serve waits until ctx ends, reloading the configuration on each SIGHUP
// (hup, registered by Run before anything was opened).
func (c *RunCommand) serve(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-c.Reloads: // nil unless router plugin dev: never ready
		}
		if ctx.Err() == nil {
			if err := c.Reload(ctx); err != nil {
				c.log.Error("reload refused; the running configuration stays in force", "error", err)
			}
		}
	}
}

// Reload reads the configuration file again, loads its plugins (new
// versions included) and swaps both into the engine, and re-reads the API
// tokens; the nats blocks' streams it sets up on their servers. A config
// that does not parse, a plugin that does not load, a stream change a
// server refuses, or a change that needs a restart (listeners, data file,
// sinks' other settings, inboxes) is refused whole: nothing changes. A
// tokens_file that does not load keeps the tokens in force, the rest
// applied (logged; not Reload's error). Either counts as refused in the
// metrics (reloadMetrics) and systemd's status line: systemd has no word
// for a refused reload, and the log alone was where no alert looks (a
// reload trial).
func (c *RunCommand) Reload(ctx context.Context) error {
	sdNotify("RELOADING=1")
	tokensErr, err := c.reload(ctx)
	c.reloadMetrics.reloaded(errors.Join(err, tokensErr))
	sdNotify("READY=1\n" + reloadStatus(err, tokensErr))
	return err
}

// reloadStatus is systemd's status line after a reload that was refused
// (err), or applied but for the tokens_file (tokensErr), or applied.
func reloadStatus(err, tokensErr error) string {
	firstLine := func(err error) string { line, _, _ := strings.Cut(err.Error(), "\n"); return line }
	switch {
	case err != nil:
		return "STATUS=running; the last reload was refused, the configuration before it stays in force: " + firstLine(err)
	case tokensErr != nil:
		return "STATUS=running; the configuration was reloaded, but for the tokens_file (the tokens before it stay in force): " + firstLine(tokensErr)
	}
	return "STATUS=running; the configuration was reloaded"
}

// reload is Reload's work: a refusal is its error; a tokens_file that did
// not load, the rest applied, is tokensErr.
func (c *RunCommand) reload(ctx context.Context) (tokensErr, err error) {
	// Never the embedded defaults: a file missing for a moment while it is
	// deployed must not swap the configuration for the demo's.
	cfg, err := loadConfig(c.ConfigPath, false)
	if errors.Is(err, fs.ErrNotExist) {
		if c.cfg.File == embeddedName {
			return nil, fmt.Errorf("%s does not exist: the router runs on the embedded defaults, which a reload does not change (write the file, then reload)", c.ConfigPath)
		}
		return nil, fmt.Errorf("the configuration file is gone: %w", err)
	}
	if err != nil {
		return nil, err
	}
	plugins, err := c.loadPlugins(ctx, cfg)
	if err != nil {
		return nil, err
	}
	added, err := c.applyReload(ctx, cfg, plugins)
	if err != nil {
		closePlugins(ctx, plugins)
		return nil, err
	}
	c.tookReload(cfg, plugins, added)
	for _, w := range runWarnings(cfg) {
		c.log.Warn(w)
	}
	if err := c.api.ReloadTokens(); err != nil {
		c.log.Error("tokens_file not reloaded; the tokens in force stay", "error", err)
		c.log.Warn("configuration reloaded, except the tokens_file (see above)", "file", cfg.File, "event_types", len(cfg.Events), "plugins", len(plugins), "tenant_blocks", len(cfg.TenantLimits))
		return fmt.Errorf("tokens_file not reloaded: %w", err), nil
	}
	c.log.Info("configuration reloaded", "file", cfg.File, "event_types", len(cfg.Events), "plugins", len(plugins), "tenant_blocks", len(cfg.TenantLimits))
	return nil, nil
}

// applyReload checks cfg with the engine, then changes what it does not
// own, and swaps cfg and plugins in: the nats blocks' streams, then the
// sinks cfg adds (they set their streams up as they open), so that nothing
// reaches a server before the engine would take the rest (a refused
// reload that had opened an added block first had changed its streams: an
// adversarial trial). It returns the sinks added; on a refusal it puts
// back what it changed and closes them.
func (c *RunCommand) applyReload(ctx context.Context, cfg *config.Config, plugins []switchyard.Plugin) ([]switchyard.Sink, error) {
	if err := c.engine.CheckReload(cfg, plugins, addedSinkNames(c.cfg, cfg)...); err != nil {
		return nil, err
	}
	restore, changed, err := c.reloadStreams(ctx, cfg)
	if err != nil {
		return nil, err
	}
	added, restoreAdded, err := c.openAddedSinks(ctx, cfg)
	if err != nil {
		restore()
		return nil, err
	}
	if err := c.engine.Reload(cfg, plugins, added...); err != nil {
		restoreAdded()
		restore()
		for _, s := range added {
			s.Close(ctx)
		}
		return nil, err
	}
	if len(changed) > 0 {
		c.log.Info("reload: streams added to", "nats", changed)
	}
	return added, nil
}

// addedSinkNames names the nats and kafka blocks cfg adds after those of
// old (openAddedSinks opens them).
func addedSinkNames(old, cfg *config.Config) []string {
	var names []string
	for _, n := range cfg.NATS[min(len(old.NATS), len(cfg.NATS)):] {
		names = append(names, n.SinkName())
	}
	for _, k := range cfg.Kafka[min(len(old.Kafka), len(cfg.Kafka)):] {
		names = append(names, k.SinkName())
	}
	return names
}

// tookReload keeps what the engine took: the configuration, the plugins
// (the replaced ones closed once no batch runs them) and the sinks added.
func (c *RunCommand) tookReload(cfg *config.Config, plugins []switchyard.Plugin, added []switchyard.Sink) {
	c.sinksMu.Lock()
	c.sinks = append(c.sinks, added...)
	c.sinksMu.Unlock()
	registerSinks(c.reg, c.health, added)
	c.cfg = cfg
	old := c.plugins
	c.plugins = plugins
	go func() {
		// Batches taken before the reload may still run the replaced
		// plugins, for as long as their events take.
		c.engine.RetirePlugins()
		closePlugins(context.Background(), old)
	}()
}

// reloadStreams sets up the stream blocks cfg changes in the nats blocks
// in force (a new subject for a new event type needs no restart), one
// sink after another; when one is refused (natsplugin.Sink.SetStreams says
// which changes a reload makes), those already changed are put back and
// the reload is refused. restore puts them all back (the reload was
// refused afterwards).
func (c *RunCommand) reloadStreams(ctx context.Context, cfg *config.Config) (restore func(), changed []string, err error) {
	var undo []func()
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	for i, old := range c.cfg.NATS[:min(len(c.cfg.NATS), len(cfg.NATS))] {
		now := cfg.NATS[i]
		sink := c.natsSink(old.SinkName())
		if reflect.DeepEqual(old.Streams, now.Streams) || sink == nil {
			continue
		}
		var putBack func()
		err := inboxStreamsKept(cfg, old, now)
		if err == nil {
			putBack, err = setStreams(ctx, sink, now)
		}
		if err != nil {
			restore()
			return nil, nil, fmt.Errorf("%sreload: %w", blockAt(cfg, now.SinkName()), err) // err names the sink
		}
		undo = append(undo, putBack)
		changed = append(changed, now.Name)
	}
	return restore, changed, nil
}

// blockAt is "file:line:col: " of the block of sink in cfg, for a
// refused reload's error; "" when unknown. A block a reload added that its
// server refused said no place (a reload trial).
func blockAt(cfg *config.Config, sink string) string {
	if at, ok := cfg.BlocksAt[sink]; ok {
		return string(at) + ": "
	}
	return ""
}

// inboxStreamsKept refuses new stream blocks of old (now) that store an
// inbox's subject in other streams: an inbox consumes the stream it found
// at its start, and would read nothing more (a review).
func inboxStreamsKept(cfg *config.Config, old, now config.NATS) error {
	for _, in := range cfg.Inboxes {
		if in.From != now.SinkName() {
			continue
		}
		was, is := natsplugin.StreamsStoring(old.Streams, in.Subject), natsplugin.StreamsStoring(now.Streams, in.Subject)
		if !slices.Equal(was, is) {
			return fmt.Errorf("%s: inbox %q reads subject %q from stream %q; the new stream blocks store it in %q: an inbox keeps the stream it started on, so that needs a restart",
				now.SinkName(), in.Name, in.Subject, was, is)
		}
	}
	return nil
}

// setStreams makes n's stream blocks sink's, within n's publish timeout;
// undo puts the blocks before back.
func setStreams(ctx context.Context, sink *natsplugin.Sink, n config.NATS) (undo func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, n.PublishTimeout)
	defer cancel()
	return sink.SetStreams(ctx, n.Streams)
}

// natsSink is the running NATS sink named name, or nil.
func (c *RunCommand) natsSink(name string) *natsplugin.Sink {
	c.sinksMu.Lock()
	defer c.sinksMu.Unlock()
	for _, s := range c.sinks {
		if ns, ok := s.(*natsplugin.Sink); ok && ns.Name() == name {
			return ns
		}
	}
	return nil
}

// closePlugins closes WebAssembly plugins (the engine knows them only as
// switchyard.Plugin).
func closePlugins(ctx context.Context, plugins []switchyard.Plugin) error {
	var errs []error
	for _, p := range plugins {
		if wp, ok := p.(*wasm.Plugin); ok {
			errs = append(errs, wp.Close(ctx))
		}
	}
	return errors.Join(errs...)
}

// openAddedSinks opens the nats and kafka blocks a reloaded config adds
// after those in force (the engine refuses any other change to them). Like
// the sinks of a start they need not reach their brokers now: they connect
// in the background; but a nats block with stream blocks sets them up as
// a reload does, only adding, on a server that answers (natsplugin.Sink.
// SetStreams), not whole as a start would (a refused reload, or one
// naming a stream the router already has, had changed it: an adversarial
// trial). An embedded server needs a restart. restore takes back their
// streams (the reload was refused afterwards); the caller closes them.
func (c *RunCommand) openAddedSinks(ctx context.Context, cfg *config.Config) (added []switchyard.Sink, restore func(), err error) {
	var undo []func()
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	fail := func(err error) ([]switchyard.Sink, func(), error) {
		restore()
		for _, s := range added {
			s.Close(ctx)
		}
		return nil, nil, err
	}
	for _, n := range cfg.NATS[min(len(c.cfg.NATS), len(cfg.NATS)):] {
		if n.Embedded {
			return fail(fmt.Errorf("%sreload: nats %q is an embedded server; adding one needs a restart", blockAt(cfg, n.SinkName()), n.Name))
		}
		bare := n
		bare.Streams = nil // set up below
		s, err := natsplugin.Open(ctx, bare, n.URL, c.log)
		if err != nil {
			return fail(fmt.Errorf("%sreload: nats %q: %w", blockAt(cfg, n.SinkName()), n.Name, err))
		}
		added = append(added, s)
		if len(n.Streams) > 0 {
			u, err := setStreams(ctx, s, n)
			if err != nil {
				return fail(fmt.Errorf("%sreload: nats %q: %w", blockAt(cfg, n.SinkName()), n.Name, err))
			}
			undo = append(undo, u)
		}
	}
	for _, k := range cfg.Kafka[min(len(c.cfg.Kafka), len(cfg.Kafka)):] {
		s, err := kafka.Open(ctx, k, c.log)
		if err != nil {
			return fail(fmt.Errorf("%sreload: kafka %q: %w", blockAt(cfg, k.SinkName()), k.Name, err))
		}
		added = append(added, s)
	}
	return added, restore, nil
}
