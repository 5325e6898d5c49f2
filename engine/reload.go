package engine

import (
	"fmt"
	"reflect"

	"github.com/switchyard-router/switchyard/config"
)

// Reload swaps in a new configuration and plugin set without a restart
// (SIGHUP): new and changed event types, new plugin versions, new windows
// and TTLs. What the running router is built from — the listeners, the data
// file, the sinks and the inboxes — cannot change this way; a config that
// changes them is refused and the old one stays in force. Batches in flight
// finish under the policy they were claimed with.
func (e *Engine) Reload(cfg *config.Config, plugins []Plugin) error {
	old := e.config()
	for _, c := range []struct {
		what     string
		old, new any
	}{
		{"listen", old.Listen, cfg.Listen},
		{"storage", old.Storage, cfg.Storage},
		{"nats", old.NATS, cfg.NATS},
		{"kafka", old.Kafka, cfg.Kafka},
		{"inbox (or the defaults they inherit)", old.Inboxes, cfg.Inboxes},
	} {
		if !reflect.DeepEqual(c.old, c.new) {
			return fmt.Errorf("reload: the %s blocks changed; that needs a restart", c.what)
		}
	}
	byName := *pluginMap(plugins)
	for t, p := range cfg.Events {
		for _, r := range p.Routes {
			if _, ok := e.sinks[r.To]; !ok {
				return fmt.Errorf("reload: event %q routes to %q, which is not a configured sink", t, r.To)
			}
		}
		for _, name := range p.Plugins {
			if _, ok := byName[name]; !ok {
				return fmt.Errorf("reload: event %q uses plugin %q, which is not loaded", t, name)
			}
		}
	}
	for _, in := range cfg.Inboxes {
		for _, name := range in.Plugins {
			if _, ok := byName[name]; !ok {
				return fmt.Errorf("reload: inbox %q uses plugin %q, which is not loaded", in.Name, name)
			}
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	e.plugins.Store(&byName)
	e.conf.Store(cfg)
	for t, l := range e.loops {
		if pol, ok := e.policyOf(t); ok {
			l.setPolicy(pol)
		}
	}
	// New types get their loops now rather than on their first event.
	if e.ctx != nil {
		for t := range cfg.Events {
			if _, ok := e.loops[t]; !ok && t != "*" {
				e.startLoopLocked(t)
			}
		}
	}
	return nil
}
