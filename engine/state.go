package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// Plugin state in a batch (docs/plugin-state.md). A plugin handling event
// i of a batch sees the committed state with the writes of events 0..i of
// the batch on top, in order: a counter counts every event once. The
// writes of an event become durable in the transaction that records its
// outcome (delivered, filtered or dead-lettered). An event that is retried,
// requeued or lost in a crash has its writes discarded, and they are made
// again on its next attempt; so is every later event of the batch that read
// or wrote a key a discarded event wrote (its view was not the committed
// one): it is requeued without an attempt. A batch that used state is
// committed before the next batch of its type runs its plugins.

// errStateNotCommitted requeues an event whose view of the state included
// writes that were discarded.
var errStateNotCommitted = fmt.Errorf("it read plugin state an earlier event of its batch wrote, and that event was not committed: tried again with the committed state: %w", switchyard.ErrUnknownOutcome)

// batchState is the state overlay of one batch of one queue.
type batchState struct {
	e     *Engine
	queue string
	now   time.Time

	writes []stateWrite // in the order the events made them
	used   map[int]map[string]bool
	usage  map[string]storage.StateUsage // committed usage + this batch's, by namespace
	ns     map[nsOf]string               // plugin and tenant → their namespace on this queue
	last   map[string]int                // ns ‖ 0 ‖ key → its last write in writes
	grown  int64                         // bytes this batch's writes add, not yet committed
}

// stateWrite is one put or delete of one event.
type stateWrite struct {
	event   int
	ns      string
	key     []byte
	value   []byte // nil: deleted
	expires time.Time
}

// stateUser is implemented by plugins that know whether they use state
// (plugins/wasm: whether the module imports a state function).
type stateUser interface{ UsesState() bool }

// mayUseState says whether a plugin of chain may read or write state; a
// plugin that cannot say is taken to.
func mayUseState(chain []switchyard.Plugin) bool {
	for _, p := range chain {
		if u, ok := p.(stateUser); !ok || u.UsesState() {
			return true
		}
	}
	return false
}

func newBatchState(e *Engine, queue string) *batchState {
	return &batchState{e: e, queue: queue, now: e.now(), used: map[int]map[string]bool{}, usage: map[string]storage.StateUsage{}, ns: map[nsOf]string{}, last: map[string]int{}}
}

// nsOf is what names a namespace within a batch: the plugin, and the
// tenant whose event runs it.
type nsOf struct{ plugin, tenant string }

// namespace is a plugin's namespace for this queue and tenant.
func (s *batchState) namespace(plugin, tenant string) string {
	if ns, ok := s.ns[nsOf{plugin, tenant}]; ok {
		return ns
	}
	ns := stateNamespace(s.e.config(), plugin, s.queue, tenant)
	s.ns[nsOf{plugin, tenant}] = ns
	return ns
}

// stateNamespace is plugin's namespace on queue for tenant: its plugin
// block's state_namespace (shared by types and plugins, not by tenants),
// else "<plugin>:<queue>"; in the tenant's space (storage.TenantNamespace).
func stateNamespace(cfg *config.Config, plugin, queue, tenant string) string {
	base := plugin + ":" + queue
	for _, p := range cfg.Plugins {
		if p.Name == plugin && p.StateNamespace != "" {
			base = p.StateNamespace
			break
		}
	}
	return storage.TenantNamespace(tenant, base)
}

// view is the view of event i of the batch, which tenant posted.
func (s *batchState) view(i int, tenant string) switchyard.StateView {
	return &eventState{s: s, i: i, tenant: tenant}
}

// any says whether any event of the batch used state.
func (s *batchState) any() bool { return s != nil && len(s.used) > 0 }

func (s *batchState) note(i int, ns string, key []byte) string {
	full := ns + "\x00" + string(key)
	if s.used[i] == nil {
		s.used[i] = map[string]bool{}
	}
	s.used[i][full] = true
	return full
}

// eventState is one event's view: it implements switchyard.StateView.
type eventState struct {
	s      *batchState
	i      int
	tenant string
}

func (v *eventState) Get(plugin string, key []byte) ([]byte, bool, error) {
	s := v.s
	ns := s.namespace(plugin, v.tenant)
	s.note(v.i, ns, key)
	// Events run in order, so the last write to a key is by this event or
	// one before it.
	if j, ok := s.last[ns+"\x00"+string(key)]; ok {
		w := &s.writes[j]
		return bytes.Clone(w.value), w.value != nil, nil
	}
	var val []byte
	var ok bool
	err := s.e.store.View(func(tx *storage.Tx) (err error) {
		val, ok, err = tx.StateGet(ns, key, s.now)
		return err
	})
	return val, ok, err
}

func (v *eventState) Put(plugin string, key, value []byte, ttl time.Duration) error {
	s := v.s
	ns := s.namespace(plugin, v.tenant)
	if err := config.CheckStateWrite(key, value); err != nil {
		return err
	}
	old, existed, err := v.Get(plugin, key)
	if err != nil {
		return err
	}
	u, err := s.usageOf(ns)
	if err != nil {
		return err
	}
	if !existed {
		u.Keys++
		u.Bytes += int64(len(key))
	}
	u.Bytes += int64(len(value) - len(old))
	switch {
	case u.Keys > config.StateMaxKeys:
		return fmt.Errorf("namespace %q holds %d keys, the limit: delete some or give them a TTL: %w", ns, config.StateMaxKeys, switchyard.ErrStateLimit)
	case u.Bytes > config.StateMaxBytes:
		return fmt.Errorf("namespace %q would hold %d bytes, over the limit of %d: %w", ns, u.Bytes, config.StateMaxBytes, switchyard.ErrStateLimit)
	}
	if grow := int64(len(value) - len(old)); !existed || grow > 0 {
		// State takes room in the data file as events do, and nothing
		// removes it to make room: past the storage budget a write that
		// grows it fails, and the plugin's event is retried later. The
		// batch's writes are committed with its outcomes, so they count
		// before they are in the file.
		if !existed {
			grow += int64(len(key))
		}
		if err := s.e.space.checkGrowing(s.grown + grow); err != nil {
			return fmt.Errorf("plugin state of namespace %q: %w", ns, err)
		}
		s.grown += grow
	}
	s.usage[ns] = u
	var expires time.Time
	if ttl > 0 {
		expires = s.now.Add(ttl)
	}
	if value == nil {
		value = []byte{}
	}
	s.write(stateWrite{event: v.i, ns: ns, key: bytes.Clone(key), value: bytes.Clone(value), expires: expires})
	return nil
}

func (v *eventState) Delete(plugin string, key []byte) error {
	s := v.s
	ns := s.namespace(plugin, v.tenant)
	old, existed, err := v.Get(plugin, key)
	if err != nil || !existed {
		return err
	}
	u, err := s.usageOf(ns)
	if err != nil {
		return err
	}
	u.Keys--
	u.Bytes -= int64(len(key) + len(old))
	s.usage[ns] = u
	s.write(stateWrite{event: v.i, ns: ns, key: bytes.Clone(key)})
	return nil
}

func (s *batchState) write(w stateWrite) {
	s.last[w.ns+"\x00"+string(w.key)] = len(s.writes)
	s.writes = append(s.writes, w)
}

// usageOf is ns's usage with this batch's writes so far.
func (s *batchState) usageOf(ns string) (storage.StateUsage, error) {
	if u, ok := s.usage[ns]; ok {
		return u, nil
	}
	var u storage.StateUsage
	err := s.e.store.View(func(tx *storage.Tx) error { u = tx.StateUsage(ns); return nil })
	s.usage[ns] = u
	return u, err
}

// stateCommit decides, in one commit of the batch, whose writes become
// durable: the events are walked in order; an event that is not final has
// its writes discarded, and so has every later event that used a key they
// wrote.
type stateCommit struct {
	s       *batchState
	tainted map[string]bool
}

func (s *batchState) commit() *stateCommit {
	if s == nil {
		return nil
	}
	return &stateCommit{s: s, tainted: map[string]bool{}}
}

// stale says whether event i used a key a discarded event wrote.
func (c *stateCommit) stale(i int) bool {
	if c == nil {
		return false
	}
	for k := range c.s.used[i] {
		if c.tainted[k] {
			return true
		}
	}
	return false
}

// settle writes event i's writes into tx when final, or discards them.
func (c *stateCommit) settle(tx *storage.Tx, i int, final bool) error {
	if c == nil {
		return nil
	}
	for _, w := range c.s.writes {
		if w.event != i {
			continue
		}
		if !final {
			c.tainted[w.ns+"\x00"+string(w.key)] = true
			continue
		}
		var err error
		if w.value == nil {
			_, err = tx.StateDelete(w.ns, w.key)
		} else {
			err = tx.StatePut(w.ns, w.key, w.value, w.expires)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// final says whether v ends the event's life in this commit (delivered,
// filtered or dead-lettered), so that its state writes count.
func (v verdict) final(attempts, maxRetries int) bool {
	switch {
	case v.permanent != nil:
		return true
	case v.retry != nil:
		return attempts+1 > maxRetries
	case v.unknown != nil:
		return false
	}
	return true
}

// StateNamespace is a namespace that holds keys: a plugin's for one queue
// (Plugin and Queue set), or a shared one (Shared: a state_namespace), of
// one tenant.
type StateNamespace struct {
	Name          string // as stored (storage.TenantNamespace of the forms below)
	Tenant        string
	Plugin, Queue string // "" for a shared one
	Shared        bool
	storage.StateUsage
}

// StateNamespaces lists every namespace that holds keys, of plugin ("" =
// every plugin): its own, and the shared ones its plugin block names.
func (e *Engine) StateNamespaces(plugin string) ([]StateNamespace, error) {
	shared := map[string]bool{}
	for _, p := range e.config().Plugins {
		if p.StateNamespace != "" && (plugin == "" || p.Name == plugin) {
			shared[p.StateNamespace] = true
		}
	}
	var out []StateNamespace
	err := e.store.View(func(tx *storage.Tx) error {
		for ns, u := range tx.StateNamespaces() {
			tenant, base := storage.SplitTenantNamespace(ns)
			p, q, ok := strings.Cut(base, ":")
			switch {
			case ok && (plugin == "" || p == plugin):
				out = append(out, StateNamespace{Name: ns, Tenant: tenant, Plugin: p, Queue: q, StateUsage: u})
			case !ok && (shared[base] || plugin == ""):
				out = append(out, StateNamespace{Name: ns, Tenant: tenant, Shared: true, StateUsage: u})
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b StateNamespace) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}

// StateKeys lists up to limit keys of the namespace ns that start with
// prefix, from cursor ("" = the first), and the cursor of the page after
// ("" at the end).
func (e *Engine) StateKeys(ns string, prefix []byte, cursor string, limit int) (keys []storage.StateEntry, next string, err error) {
	var after []byte
	if cursor != "" {
		// The cursor holds its namespace: one of another namespace, or of
		// another prefix, would start the listing somewhere else.
		inListing := func(pos []byte) bool {
			key, ok := stateKeyOf(pos, ns)
			after = key
			return ok && bytes.HasPrefix(key, prefix)
		}
		if _, err := DecodeCursor(CursorState, "", cursor, inListing); err != nil {
			return nil, "", err
		}
	}
	err = e.store.View(func(tx *storage.Tx) (err error) {
		keys, err = tx.StateScan(ns, prefix, after, e.now(), limit+1)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if len(keys) > limit {
		keys = keys[:limit]
		next = EncodeCursor(CursorState, "", statePos(ns, keys[limit-1].Key))
	}
	return keys, next, nil
}

// statePos is a state listing's position: its namespace (length first)
// and the key.
func statePos(ns string, key []byte) []byte {
	return append(append(binary.AppendUvarint(nil, uint64(len(ns))), ns...), key...)
}

// stateKeyOf returns the key of a position statePos made in namespace ns.
func stateKeyOf(pos []byte, ns string) (key []byte, ok bool) {
	n, w := binary.Uvarint(pos)
	if w <= 0 || uint64(len(pos)-w) < n || string(pos[w:w+int(n)]) != ns {
		return nil, false
	}
	return pos[w+int(n):], true
}

// DeleteState removes the keys of ns that start with prefix (an
// operator's action: a batch that read them before is not told), in
// chunks; it returns how many it removed.
func (e *Engine) DeleteState(ctx context.Context, ns string, prefix []byte) (int, error) {
	total := 0
	for {
		var n int
		err := e.store.Update(ctx, func(tx *storage.Tx) (err error) {
			n, err = tx.DeleteStatePrefix(ns, prefix, cleanupChunk)
			return err
		})
		total += n
		if err != nil || n < cleanupChunk {
			return total, err
		}
	}
}

// DeleteStateKey removes one key of ns and says whether it was there.
func (e *Engine) DeleteStateKey(ctx context.Context, ns string, key []byte) (bool, error) {
	var found bool
	err := e.store.Update(ctx, func(tx *storage.Tx) (err error) {
		found, err = tx.StateDelete(ns, key)
		return err
	})
	return found, err
}

// StateNamespaceOf is the namespace plugin keeps on queue for tenant.
func (e *Engine) StateNamespaceOf(plugin, queue, tenant string) string {
	return stateNamespace(e.config(), plugin, queue, tenant)
}

// republished says whether rec was delivered once and is pending again to
// be published again (storage.Tx.Redeliver, after a power cut): an output
// with a broker position that is no longer marked delivered.
func republished(rec *storage.Record) bool {
	for _, o := range rec.Outputs {
		if o.Position != nil && !o.Delivered {
			return true
		}
	}
	return false
}
