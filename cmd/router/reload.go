package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/plugins/wasm"
)

// pluginGrace is how long replaced plugins stay open after a reload, for
// batches claimed before it that still run them.
const pluginGrace = time.Minute

// serve waits until ctx ends, reloading the configuration on SIGHUP.
func (c *RunCommand) serve(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := c.Reload(ctx); err != nil {
				c.log.Error("reload refused; the running configuration stays in force", "error", err)
			}
		}
	}
}

// Reload reads the configuration file again, loads its plugins (new
// versions included) and swaps both into the engine, and re-reads the API
// tokens. A config that does not parse, a plugin that does not load, or a
// change that needs a restart (listeners, data file, sinks, inboxes) is
// refused whole: nothing changes.
func (c *RunCommand) Reload(ctx context.Context) error {
	sdNotify("RELOADING=1")
	defer sdNotify("READY=1")
	cfg, err := loadConfig(c.ConfigPath, true)
	if err != nil {
		return err
	}
	plugins, err := c.loadPlugins(ctx, cfg)
	if err != nil {
		return err
	}
	if err := c.engine.Reload(cfg, plugins); err != nil {
		closePlugins(ctx, plugins)
		return err
	}
	old := c.plugins
	c.plugins = plugins
	time.AfterFunc(pluginGrace, func() { closePlugins(context.Background(), old) })
	if err := c.api.ReloadTokens(); err != nil {
		c.log.Error("tokens_file not reloaded; the tokens in force stay", "error", err)
	}
	c.log.Info("configuration reloaded", "file", cfg.File, "event_types", len(cfg.Events), "plugins", len(plugins))
	return nil
}

// closePlugins closes WebAssembly plugins (the engine knows them only as
// engine.Plugin).
func closePlugins(ctx context.Context, plugins []engine.Plugin) error {
	var errs []error
	for _, p := range plugins {
		if wp, ok := p.(*wasm.Plugin); ok {
			errs = append(errs, wp.Close(ctx))
		}
	}
	return errors.Join(errs...)
}
