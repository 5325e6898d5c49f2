package engine

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// Reload swaps in a new configuration and plugin set without a restart
// (SIGHUP): new and changed event types, new plugin versions, new windows
// and TTLs, and new sinks (added: the caller opened them, and they connect
// in the background like the sinks of a start), and new stream blocks of
// the nats blocks (the caller sets them up on the servers). What else the
// running router is built from — the listeners, the data file, the sinks
// it has and the inboxes — cannot change this way; a config that changes
// them is refused and the old one stays in force. Batches in flight finish under
// the policy they were taken with.
func (e *Engine) Reload(cfg *config.Config, plugins []switchyard.Plugin, added ...switchyard.Sink) error {
	names := make([]string, len(added))
	for i, s := range added {
		names[i] = s.Name()
	}
	if err := e.CheckReload(cfg, plugins, names...); err != nil {
		return err
	}
	sinks := *e.withSinks(e.sinks(), added)
	set := newPluginSet(plugins)
	// Stored types the new configuration takes get their loops too: a
	// catch-all brought back takes the queues it left. Read before the
	// lock: a reader waiting on e.mu (Stats) would hold a bbolt remap, and
	// so this read, up.
	stored, err := e.storedTypes()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	var removed []string
	defer func() { // after the unlock below: these read and write the data file
		for _, t := range removed {
			e.warnRemoved(t)
		}
		e.noteIdempotencyWindow(cfg.Idempotency.Window)
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sinkMap.Store(&sinks)
	e.retired = append(e.retired, e.plugins.Swap(set))
	e.conf.Store(cfg)
	e.rates.reload(cfg, e.now())
	e.metrics.tenantSeries(cfg)
	for t, l := range e.loops {
		if pol, ok := e.policyOf(t); ok {
			l.setPolicy(pol)
			e.metrics.typeSeries(t, pol) // the routes it adds
		} else {
			removed = append(removed, t)
			l.retire()
		}
	}
	if e.ctx != nil {
		e.startReloadedLoopsLocked(cfg, stored)
	}
	return nil
}

// CheckReload returns the error Reload would refuse cfg with, the sinks
// named added being added, changing nothing: the caller opens new sinks
// and changes what the engine does not own (a NATS block's streams) only
// once the engine would take the rest.
func (e *Engine) CheckReload(cfg *config.Config, plugins []switchyard.Plugin, added ...string) error {
	if err := unchangedForReload(e.config(), cfg); err != nil {
		return err
	}
	sinks := make(map[string]bool)
	for name := range e.sinks() {
		sinks[name] = true
	}
	for _, name := range added {
		sinks[name] = true
	}
	return referencesResolve(cfg, sinks, newPluginSet(plugins).byName)
}

// unchangedForReload refuses a configuration whose blocks the running
// router is built from (listeners, data file, sinks it has, inboxes)
// differ from old's, saying where and which settings.
func unchangedForReload(old, cfg *config.Config) error {
	for _, c := range []struct {
		what     string
		old, new any
		block    func() (string, bool) // changedBlock's answer, asked only then
		addable  bool                  // blocks may be added after the others
	}{
		{"listen", placeless(old.Listen), placeless(cfg.Listen), func() (string, bool) { return "listen", false }, false},
		{"storage", old.Storage, cfg.Storage, func() (string, bool) { return "storage", false }, false},
		{"nats", streamless(old.NATS), streamless(prefix(cfg.NATS, len(old.NATS))), func() (string, bool) {
			return changedBlock(streamless(old.NATS), streamless(cfg.NATS), config.NATS.SinkName)
		}, true},
		{"kafka", old.Kafka, prefix(cfg.Kafka, len(old.Kafka)), func() (string, bool) { return changedBlock(old.Kafka, cfg.Kafka, config.Kafka.SinkName) }, true},
		{"inbox (or the defaults they inherit)", old.Inboxes, cfg.Inboxes, func() (string, bool) {
			return changedBlock(old.Inboxes, cfg.Inboxes, func(in config.Inbox) string { return config.InboxSinkName(in.Name) })
		}, false},
	} {
		if reflect.DeepEqual(c.old, c.new) || (isEmpty(c.old) && isEmpty(c.new)) {
			continue
		}
		return blockChanged(old, cfg, c.what, c.old, c.new, c.block, c.addable)
	}
	return nil
}

// blockChanged is unchangedForReload's refusal: where the block that
// changed is, or which block was removed and where it was, and which
// settings differ.
func blockChanged(old, cfg *config.Config, what string, was, is any, block func() (string, bool), addable bool) error {
	key, removed := block()
	where, gone := "", ""
	if at, ok := cfg.BlocksAt[key]; ok && !removed {
		where = string(at) + ": "
	}
	if removed {
		// A removed sink or inbox has no place in the new file: the
		// message names it, and where it was (a reload trial got "the nats
		// blocks changed" and no more).
		gone = fmt.Sprintf("; %s was removed", key)
		if at, ok := old.BlocksAt[key]; ok {
			gone += fmt.Sprintf(" (it was at %s)", at)
		}
	}
	fields := ""
	if f := changedFields(was, is); len(f) > 0 && !removed { // by place: a removal shifts the rest
		fields = " (" + strings.Join(f, ", ") + ")"
	}
	hint := ""
	if addable {
		hint = " (new blocks may be added after the others)"
	}
	return fmt.Errorf("%sreload: the %s blocks changed%s%s; that needs a restart%s", where, what, fields, gone, hint)
}

// referencesResolve refuses a configuration naming a sink or a plugin the
// router would not have after the reload.
func referencesResolve(cfg *config.Config, sinks map[string]bool, byName map[string]switchyard.Plugin) error {
	for t, p := range cfg.Events {
		for _, r := range p.Routes {
			if !sinks[r.To] {
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
	return nil
}

// startReloadedLoopsLocked starts the loops a reload adds: new types get
// theirs now rather than on their first event, and stored types the
// configuration takes again theirs, with the types a request stored after
// stored was read, while no configuration took them (settleTypes keeps
// them in e.orphans for this). It runs with e.mu held.
func (e *Engine) startReloadedLoopsLocked(cfg *config.Config, stored []string) {
	for t := range cfg.Events {
		if _, ok := e.loops[t]; !ok && t != "*" {
			e.startLoopLocked(t)
		}
	}
	for _, t := range append(stored, slices.Collect(maps.Keys(e.orphans))...) {
		if _, ok := e.loops[t]; !ok && e.runsLoop(t) {
			e.startLoopLocked(t)
		}
		if _, ok := e.loops[t]; ok {
			delete(e.orphans, t)
		}
	}
}

// streamless is list without its stream blocks, which a reload may change
// (the caller sets them up: natsplugin.Sink.SetStreams).
func streamless(list []config.NATS) []config.NATS {
	out := slices.Clone(list)
	for i := range out {
		out[i].Streams = nil
	}
	return out
}

// placeless is l without where its settings are written: moving the block
// in the file changes nothing.
func placeless(l config.Listen) config.Listen {
	l.TokensAt = ""
	return l
}

// changedFields names the settings in which old and now differ, as the
// file spells them (MaxConnections: max_connections): for two blocks, the
// fields that differ; for two lists of blocks, those of the first block
// that differs. Nil when it cannot tell.
func changedFields(old, now any) []string {
	a, b := reflect.ValueOf(old), reflect.ValueOf(now)
	if a.Kind() == reflect.Slice && b.Kind() == reflect.Slice {
		for i := range min(a.Len(), b.Len()) {
			if !reflect.DeepEqual(a.Index(i).Interface(), b.Index(i).Interface()) {
				return changedFields(a.Index(i).Interface(), b.Index(i).Interface())
			}
		}
		return nil
	}
	if a.Kind() != reflect.Struct || a.Type() != b.Type() {
		return nil
	}
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if f.IsExported() && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, snake(f.Name))
		}
	}
	return out
}

// snake spells a Go field name as the configuration does: MaxSize is
// max_size, HTTP is http, TokensFile is tokens_file.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		upper := unicode.IsUpper(r)
		if upper && i > 0 {
			prev := rune(name[i-1])
			nextLower := i+1 < len(name) && unicode.IsLower(rune(name[i+1]))
			if unicode.IsLower(prev) || nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// prefix is the first n of list (all of it when shorter): the blocks a
// reload must leave as they were, before the ones it adds.
func prefix[T any](list []T, n int) []T { return list[:min(n, len(list))] }

// changedBlock is the BlocksAt key of the block a reload changed: a block
// of old that now no longer has (removed: it has no place in the new file
// to point at), else the first block of now that differs from the one at
// its place in old, or that old had none at (added). By name first:
// compared by place alone, a block removed from the middle blamed the one
// that moved up into its place, with changes it did not have (a review).
func changedBlock[T any](old, now []T, key func(T) string) (string, bool) {
	names := make(map[string]bool, len(now))
	for _, b := range now {
		names[key(b)] = true
	}
	for _, b := range old {
		if !names[key(b)] {
			return key(b), true
		}
	}
	for i := range now {
		if i >= len(old) || !reflect.DeepEqual(old[i], now[i]) {
			return key(now[i]), false
		}
	}
	return "", false
}

// isEmpty tells an empty list from a value: nil and empty lists compare
// equal for Reload.
func isEmpty(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Slice && rv.Len() == 0
}

// pendingIn is how many events wait in queue t (0 when it cannot be read).
func (e *Engine) pendingIn(t string) (pending int) {
	e.store.View(func(tx *storage.Tx) error {
		pending = tx.Queue(t).Pending
		return nil
	})
	return pending
}

// warnRemoved says, at a reload, what becomes of the events of a type whose
// block is gone, as the start does for a queue the configuration no longer
// has: a log line that names the type, with what is stored.
func (e *Engine) warnRemoved(t string) {
	if pending := e.pendingIn(t); pending > 0 {
		e.log.Warn("a reload removed the block of an event type with stored events: its loop delivers them with the type's last settings, then stops; after a restart they wait until the block comes back",
			"type", t, "pending", pending)
	}
}

// retire ends the loop l of a type a reload removed, once nothing of the
// type is pending (a retry waiting out its backoff keeps it): the loop
// leaves e.loops and its metric series go, and it reports that l is to
// stop. A block brought back meanwhile keeps it; an event committed while
// it retired is noted as stranded (strandedLocked). Before, the loop and its
// series stayed until a restart: a trial that rotated 300 of 2,000 types
// at each reload grew by 300 goroutines and ~5,100 series every time.
func (e *Engine) retire(l *Loop) bool {
	if e.pendingIn(l.typ) > 0 { // before the lock: a read under e.mu would hold a remap up
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.policyOf(l.typ); ok || e.loops[l.typ] != l {
		return false
	}
	delete(e.loops, l.typ)
	e.metrics.dropTypeSeries(l.typ)
	e.log.Debug("a reload removed the type's block and its queue is empty: its loop stopped", "type", l.typ)
	e.mu.Unlock()
	// An event committed after the read above and before the delete woke
	// l, not a missing loop (a review found it stranded in silence).
	pending := e.pendingIn(l.typ)
	e.mu.Lock()
	if pending > 0 && e.loops[l.typ] == nil {
		e.strandedLocked(l.typ)
	}
	return true
}
