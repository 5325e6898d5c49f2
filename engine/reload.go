package engine

import (
	"fmt"
	"reflect"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// Reload swaps in a new configuration and plugin set without a restart
// (SIGHUP): new and changed event types, new plugin versions, new windows
// and TTLs, and new sinks (added: the caller opened them, and they connect
// in the background like the sinks of a start). What else the running
// router is built from — the listeners, the data file, the sinks it has
// and the inboxes — cannot change this way; a config that changes them is
// refused and the old one stays in force. Batches in flight finish under
// the policy they were taken with.
func (e *Engine) Reload(cfg *config.Config, plugins []switchyard.Plugin, added ...switchyard.Sink) error {
	old := e.config()
	for _, c := range []struct {
		what     string
		old, new any
		block    func() string // the key in BlocksAt of the block that changed, asked only then
	}{
		{"listen", old.Listen, cfg.Listen, func() string { return "listen" }},
		{"storage", old.Storage, cfg.Storage, func() string { return "storage" }},
		{"nats", old.NATS, prefix(cfg.NATS, len(old.NATS)), func() string { return changedBlock(old.NATS, cfg.NATS, config.NATS.SinkName) }},
		{"kafka", old.Kafka, prefix(cfg.Kafka, len(old.Kafka)), func() string { return changedBlock(old.Kafka, cfg.Kafka, config.Kafka.SinkName) }},
		{"inbox (or the defaults they inherit)", old.Inboxes, cfg.Inboxes, func() string {
			return changedBlock(old.Inboxes, cfg.Inboxes, func(in config.Inbox) string { return config.InboxSinkName(in.Name) })
		}},
	} {
		if !reflect.DeepEqual(c.old, c.new) && !(isEmpty(c.old) && isEmpty(c.new)) {
			where := ""
			if at, ok := cfg.BlocksAt[c.block()]; ok {
				where = string(at) + ": "
			}
			return fmt.Errorf("%sreload: the %s blocks changed; that needs a restart (new blocks may be added after the others)", where, c.what)
		}
	}
	sinks := *e.withSinks(e.sinks(), added)
	byName := *pluginMap(plugins)
	for t, p := range cfg.Events {
		for _, r := range p.Routes {
			if _, ok := sinks[r.To]; !ok {
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

	var removed []string
	defer func() { // after the unlock below: warnRemoved reads the data file
		for _, t := range removed {
			e.warnRemoved(t)
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sinkMap.Store(&sinks)
	e.plugins.Store(&byName)
	e.conf.Store(cfg)
	for t, l := range e.loops {
		if pol, ok := e.policyOf(t); ok {
			l.setPolicy(pol)
		} else {
			removed = append(removed, t)
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

// prefix is the first n of list (all of it when shorter): the blocks a
// reload must leave as they were, before the ones it adds.
func prefix[T any](list []T, n int) []T { return list[:min(n, len(list))] }

// changedBlock is the BlocksAt key of the first block of now that differs
// from the one at its place in old ("" when a block was removed, and so
// has no place in the file to point at).
func changedBlock[T any](old, now []T, key func(T) string) string {
	for i := range old {
		if i >= len(now) {
			return ""
		}
		if !reflect.DeepEqual(old[i], now[i]) {
			return key(now[i])
		}
	}
	return ""
}

// isEmpty tells an empty list from a value: nil and empty lists compare
// equal for Reload.
func isEmpty(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Slice && rv.Len() == 0
}

// warnRemoved says, at a reload, what becomes of the events of a type whose
// block is gone, as the start does for a queue the configuration no longer
// has: a log line that names the type, with what is stored.
func (e *Engine) warnRemoved(t string) {
	var pending int
	e.store.View(func(tx *storage.Tx) error {
		pending = tx.Queue(t).Pending
		return nil
	})
	if pending > 0 {
		e.log.Warn("a reload removed the block of an event type with stored events: its loop goes on with the type's last settings until the router restarts; after a restart they wait until the block comes back",
			"type", t, "pending", pending)
	}
}
