// Package engine is the scheduler: one loop per event type that takes due
// events from the outbox, publishes every output through its sink, and
// commits the outcome (delivered, retry with backoff, DLQ) in one
// transaction. Ingest runs here too, so that a commit can wake the loops of
// the types it wrote.
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// Store is what the engine needs of the data file; *storage.DB is one.
type Store interface {
	Update(ctx context.Context, fn func(*storage.Tx) error) error
	View(fn func(*storage.Tx) error) error
}

var _ Store = (*storage.DB)(nil)

// Options are the engine's knobs that are not policy.
type Options struct {
	Logger hclog.Logger
	// Registerer receives the engine's metrics; nil = not registered.
	Registerer prometheus.Registerer
	// Now is the wall clock; nil = time.Now. The engine's clock never
	// goes back, and never behind the time its data file last saw
	// (steadyClock). After a step back it catches up with the wall clock
	// only if Now's readings carry a monotonic reading, as time.Now's do
	// (not those of time.Now().UTC(), nor a fake clock's).
	Now func() time.Time
	// IdempotencyWait is how long a request waits for an identical request
	// in flight before it gets 409 request_in_progress. Default 2s.
	IdempotencyWait time.Duration
	// CleanupInterval is how often expired records are removed. Default 1m.
	CleanupInterval time.Duration
	// Plugins are the loaded plugins, by the names policies use.
	Plugins []switchyard.Plugin
	// Saturated reports whether the process is short of CPU
	// (schedwait.Gauge); nil = never, and delivery never yields to ingest.
	Saturated func() bool
	// DoubleSend makes every publish and every delivery happen twice
	// (a test mode; never on by default).
	DoubleSend bool
	// MaxHeldOutputBytes bounds the bytes of outputs all batches hold
	// until they are published; a batch holds at most 32 MiB of it. Default 64 MiB; a router in a small memory
	// cgroup is given less (cmd/router, docs/decisions/memory-limit.md).
	MaxHeldOutputBytes int64
}

// Engine runs the loops. Open starts them; Close stops them.
type Engine struct {
	store Store
	clock *steadyClock // over opts.Now: the engine's clock (now)
	// chunk is how many records a cleanup transaction removes: cleanupChunk,
	// less after a full disk refused one (inChunks).
	chunk atomic.Int64
	conf  atomic.Pointer[config.Config] // swapped by Reload
	// sinks by name; copy on write (Reload adds), read without a lock.
	sinkMap atomic.Pointer[map[string]switchyard.Sink]
	plugins atomic.Pointer[pluginSet] // swapped by Reload
	// retired are the plugin sets reloads replaced, until RetirePlugins
	// has waited for the batches that run them (guarded by mu).
	retired []*pluginSet
	inboxes map[string]*inbox

	inboxMetrics *inboxMetrics
	pluginStats  *pluginStats
	opts         Options
	log          hclog.Logger
	metrics      *metrics

	inflight  inFlight
	rates     tenantRates
	ingesting atomic.Int32 // requests inside Ingest
	yield     yieldTrial
	tail      tail
	recall    recall // after an unclean stop (republish.go)
	// heldOutputs is the bytes of outputs every loop's batches hold until
	// they are published and committed (Options.MaxHeldOutputBytes).
	heldOutputs atomic.Int64

	mu    sync.Mutex
	loops map[string]*Loop
	// addedBy names the tenant whose client added each type the catch-all
	// took in this run (settleTypes); types the operator's clients added are
	// left out, as are types found stored at start.
	addedBy map[string]string
	// pending counts, per new type the catch-all admitted that has no loop
	// yet, the requests between admitType and their end: such a type holds
	// its slot while one of them is in flight, and keeps it (gets its loop)
	// only when one stores an event of it (Engine.settleTypes).
	pending map[string]*pendingType
	// orphans: new types a request stored while a reload had removed the
	// catch-all, so no loop took them; the next reload that takes them
	// starts their loops. e.mu guards it.
	orphans map[string]bool
	space   *spaceWatch     // nil when the store cannot measure itself
	ctx     context.Context // the loops' context; nil until Open
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// sendCtx is what the loops' batches are sent under (sendContext):
	// Close ends it only once the loops have finished, or at its deadline.
	sendCtx    context.Context
	sendCancel context.CancelFunc
}

// New checks that every route names a configured sink and returns an engine
// ready to Open.
func New(store Store, cfg *config.Config, sinks []switchyard.Sink, opts Options) (*Engine, error) {
	opts = opts.withDefaults()
	e := &Engine{
		store:    store,
		opts:     opts,
		clock:    clockFor(store, opts.Now),
		log:      opts.Logger.Named("engine"),
		inflight: inFlight{scopes: make(map[string]*flight)},
		loops:    make(map[string]*Loop),
		addedBy:  make(map[string]string),
		pending:  make(map[string]*pendingType),
		orphans:  make(map[string]bool),
	}
	if m, ok := store.(SpaceMeter); ok {
		e.space = &spaceWatch{meter: m}
	}
	e.sinkMap.Store(e.withSinks(nil, sinks))
	e.inboxes = make(map[string]*inbox, len(cfg.Inboxes))
	for _, in := range cfg.Inboxes {
		e.inboxes[in.Name] = newInbox(in)
	}
	e.conf.Store(cfg)
	e.plugins.Store(newPluginSet(opts.Plugins))
	if err := e.checkReferences(cfg); err != nil {
		return nil, err
	}
	e.metrics = newMetrics(e)
	e.metrics.tenantSeries(cfg)
	e.inboxMetrics = newInboxMetrics(cfg.Inboxes)
	e.pluginStats = newPluginStats()
	e.pluginStats.loaded = func() map[string]switchyard.Plugin { return e.plugins.Load().byName }
	if err := e.registerMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	e.sayClockAhead()
	return e, nil
}

// withDefaults fills in the options left zero.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.IdempotencyWait <= 0 {
		o.IdempotencyWait = 2 * time.Second
	}
	if o.CleanupInterval <= 0 {
		o.CleanupInterval = time.Minute
	}
	if o.MaxHeldOutputBytes <= 0 {
		o.MaxHeldOutputBytes = maxHeldOutputBytes
	}
	return o
}

// checkReferences makes sure every sink and plugin the configuration names
// was given: an inbox's delivery sink, each event's routes and plugins, each
// inbox's plugins.
func (e *Engine) checkReferences(cfg *config.Config) error {
	for _, in := range cfg.Inboxes {
		if in.Deliver.URL != "" {
			if _, ok := e.sinks()[config.InboxSinkName(in.Name)]; !ok {
				return fmt.Errorf("inbox %q delivers to %s, but no sink %q was given", in.Name, in.Deliver.URL, config.InboxSinkName(in.Name))
			}
		}
	}
	for t, p := range cfg.Events {
		for _, r := range p.Routes {
			if _, ok := e.sinks()[r.To]; !ok {
				return fmt.Errorf("event %q routes to %q, which is not a configured sink", t, r.To)
			}
		}
		for _, name := range p.Plugins {
			if _, ok := e.plugin(name); !ok {
				return fmt.Errorf("event %q uses plugin %q, which is not loaded", t, name)
			}
		}
	}
	for _, in := range cfg.Inboxes {
		for _, name := range in.Plugins {
			if _, ok := e.plugin(name); !ok {
				return fmt.Errorf("inbox %q uses plugin %q, which is not loaded", in.Name, name)
			}
		}
	}
	return nil
}

// registerMetrics registers the engine's collectors with reg, if one was given.
func (e *Engine) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	if err := reg.Register(e.metrics); err != nil {
		return err
	}
	if err := reg.Register(e.pluginStats); err != nil {
		return err
	}
	return e.inboxMetrics.register(reg)
}

func (e *Engine) now() time.Time { return e.clock.now() }

// Now is the engine's clock, the one its stored times are read by: the
// API's and the console's relative times are counted from it.
func (e *Engine) Now() time.Time { return e.now() }

func (e *Engine) policy(eventType string) (*config.Policy, bool) { return e.config().Policy(eventType) }

// config is the configuration in force (Reload swaps it).
func (e *Engine) config() *config.Config { return e.conf.Load() }

func (e *Engine) plugin(name string) (switchyard.Plugin, bool) {
	p, ok := e.plugins.Load().byName[name]
	return p, ok
}

// NoEvent is the not found of an event id, naming the tenant: an id
// looked up under the wrong tenant says where it was looked for, and the
// default tenant's how to name another (`router dlq retry ID` of a
// tenant's dead letter said only "no event": a console trial).
func NoEvent(tenant, id string) error {
	if tenant != "" && tenant != storage.DefaultTenant {
		return switchyard.Errorf(switchyard.ENOTFOUND, "no event with id %q in tenant %q", id, tenant)
	}
	return switchyard.Errorf(switchyard.ENOTFOUND, "no event with id %q in the default tenant (another tenant's: ?tenant=T, or -tenant T)", id)
}

// PluginLoaded reports whether a plugin of that name is loaded.
func (e *Engine) PluginLoaded(name string) bool {
	_, ok := e.plugin(name)
	return ok
}

// pluginSet is the plugins in force, by name. A batch holds the set it
// began with until its chain has run (takePlugins), so that the plugins a
// reload replaced are closed only once no batch runs them (RetirePlugins):
// a fixed grace closed them under a batch that ran longer, and its events
// failed ("source module must be compiled before instantiation").
type pluginSet struct {
	byName  map[string]switchyard.Plugin
	mu      sync.RWMutex // read-held by each batch running the set
	retired bool         // no batch takes it any more
	retire  sync.Once    // waits for its batches, once; later callers wait for the first
}

func newPluginSet(plugins []switchyard.Plugin) *pluginSet {
	m := make(map[string]switchyard.Plugin, len(plugins))
	for _, p := range plugins {
		m[p.Name()] = p
	}
	return &pluginSet{byName: m}
}

// takePlugins is the plugin set in force, held until release is called.
func (e *Engine) takePlugins() (set *pluginSet, release func()) {
	for {
		set = e.plugins.Load()
		set.mu.RLock()
		if !set.retired {
			return set, set.mu.RUnlock
		}
		set.mu.RUnlock() // retired after the load: the one in force is newer
	}
}

// RetirePlugins waits until no batch runs the plugins that reloads so far
// replaced; then the caller may close those its reload replaced. Batches
// that begin meanwhile take the plugins in force. Each set is retired
// once (the callers of two reloads close together wait on the same sets:
// one that took them all left the other none to wait for), and leaves the
// list only after.
func (e *Engine) RetirePlugins() {
	e.mu.Lock()
	sets := slices.Clone(e.retired)
	e.mu.Unlock()
	for _, s := range sets {
		s.retire.Do(func() {
			s.mu.Lock()
			s.retired = true
			s.mu.Unlock()
		})
	}
	e.mu.Lock()
	e.retired = slices.DeleteFunc(e.retired, func(s *pluginSet) bool { return slices.Contains(sets, s) })
	e.mu.Unlock()
}

// Open starts a loop for every configured event type and for every type
// that has pending events in the data file (caught by "*"), and the
// cleanup of expired records.
func (e *Engine) Open() error {
	e.mu.Lock()
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.sendCtx, e.sendCancel = context.WithCancel(context.Background())
	e.mu.Unlock()
	e.noteIdempotencyWindow(e.config().Idempotency.Window)
	types := make(map[string]bool)
	for t := range e.config().Events {
		if t != "*" {
			types[t] = true
		}
	}
	for name, in := range e.inboxes {
		if !in.pull() {
			types[config.InboxQueueName(name)] = true
		}
	}
	stored, err := e.storedTypes()
	if err != nil {
		return err
	}
	for _, t := range stored {
		types[t] = true
	}
	for t := range types {
		if _, ok := e.policyOf(t); !ok {
			if n := e.pendingIn(t); n > 0 {
				e.log.Warn("stored events wait in a queue the configuration no longer has; they wait until it comes back (a reload that brings it back starts their loop)", "queue", t, "pending", n)
			}
			continue
		}
		if e.runsLoop(t) {
			e.loop(t)
		}
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.cleanupLoop(e.ctx)
	}()
	if e.space != nil {
		e.space.measure(e.config().Storage)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.spaceLoop(e.ctx)
		}()
	}
	return nil
}

// Close stops every loop: they take no new batch, and the batches in
// flight have their acknowledgements until sendGrace before ctx's
// deadline. What is unanswered then has an unknown outcome: its events
// stay pending, their outcomes written in the time left (a review: a
// silent broker held the batches to the deadline, and the loops wrote
// after Close had returned, while the sinks and the file closed).
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	cancel, sendCancel := e.cancel, e.sendCancel
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	defer sendCancel()
	if dl, ok := ctx.Deadline(); ok {
		stop := time.AfterFunc(time.Until(dl)-sendGrace(time.Until(dl)), sendCancel)
		defer stop.Stop()
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("engine: close: %w", ctx.Err())
	}
}

// sendGrace is how much of a stop's time left is kept from the batches
// in flight, for their outcomes to be written: a tenth, at least a second,
// at most half.
func sendGrace(left time.Duration) time.Duration {
	return min(max(left/10, time.Second), left/2)
}

// sendContext is what a loop's batch is sent under: not the loop's ctx,
// which a stop ends at once, but one Close ends only when the loops have
// finished or its deadline came. So a stop records the acknowledgements in
// flight, and does not leave what the broker stored pending, to be sent
// again after the restart (past the embedded stream's 1 s dedup window:
// an adversarial trial found hundreds of events twice in the stream after
// a few SIGTERMs under load). Before Open (a test's Poll) it is ctx.
func (e *Engine) sendContext(ctx context.Context) context.Context {
	if e.sendCtx == nil {
		return ctx
	}
	return e.sendCtx
}

// declared says whether queue t is a type with an event block of its own
// or a configured inbox's.
func (e *Engine) declared(t string) bool {
	if name, ok := strings.CutPrefix(t, inboxQueuePrefix); ok {
		_, in := e.inboxes[name] // set at New: inboxes do not change on reload
		return in
	}
	_, own := e.config().Events[t]
	return own
}

// storedTypes are the queues the data file holds waiting events of: a
// type whose events were all delivered needs no loop, and under a
// catch-all took one of its max_types (a reload trial: two such types
// filled max_types = 2). A retry of its dead letters, or its next event,
// starts its loop.
func (e *Engine) storedTypes() (types []string, err error) {
	err = e.store.View(func(tx *storage.Tx) error {
		types = tx.QueuedTypes()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("engine: list stored types: %w", err)
	}
	return types, nil
}

// runsLoop reports whether queue t has a loop: the configuration takes it
// (its own block, an inbox or the catch-all), and it is not a pull
// inbox's, whose events wait for GET .../messages.
func (e *Engine) runsLoop(t string) bool {
	pol, ok := e.policyOf(t)
	if !ok {
		return false
	}
	return len(pol.Routes) > 0 || len(pol.Plugins) > 0 || !strings.HasPrefix(t, inboxQueuePrefix)
}

// loop returns the loop of type t, starting it if the engine is open.
func (e *Engine) loop(t string) *Loop {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l, ok := e.loops[t]; ok {
		return l
	}
	return e.startLoopLocked(t)
}

// startLoopLocked creates type t's loop and, if the engine is open, starts
// it. e.mu is held.
func (e *Engine) startLoopLocked(t string) *Loop {
	pol, _ := e.policyOf(t)
	l := newLoop(e, t, pol)
	e.loops[t] = l
	e.metrics.typeSeries(t, pol)
	if e.ctx != nil && e.ctx.Err() == nil {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			l.run(e.ctx)
		}()
	}
	return l
}

// Loop returns the loop of an event type, creating it (not started) if
// needed. Tests step loops by hand with Loop.Poll.
func (e *Engine) Loop(eventType string) *Loop { return e.loop(eventType) }

// kickAll makes every loop poll now: a sink became reachable.
func (e *Engine) kickAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.loops {
		l.kick()
	}
}

// wake tells type t's loop that new events were committed. A type without
// one gets one if its block (or the catch-all) takes it, or else is noted
// as an orphan (strandedLocked).
func (e *Engine) wake(t string) {
	e.mu.Lock()
	l := e.loops[t]
	if l == nil {
		e.strandedLocked(t)
	}
	e.mu.Unlock()
	if l != nil {
		l.wake()
	}
}

// strandedLocked handles events committed to queue t while it had no
// loop: a reload removed the type's block after the request was admitted
// (or a dead letter's retry checked it), and the type's loop, its queue
// empty, had stopped (Engine.retire) before the commit. A block that takes
// t again (a reload in between) starts its loop; otherwise the events
// wait, as a removed type's do after a restart, for the reload that takes
// the type again, and the log says so (a review found them stranded in
// silence). e.mu is held.
func (e *Engine) strandedLocked(t string) {
	switch {
	case e.runsLoop(t):
		if e.ctx != nil {
			e.startLoopLocked(t)
		}
	case e.orphans[t]:
	default:
		if _, ok := e.policyOf(t); !ok {
			e.orphans[t] = true // for the reload that takes it again
			e.log.Warn("events were stored for a type no block or catch-all takes (a reload removed it): they wait until one takes the type again (a reload)", "type", t)
		}
	}
}

// EventStatus is GET /v1/events/{id}: the stored record, with the state
// in_process while a loop holds it.
func (e *Engine) EventStatus(tenant, id string) (*storage.Record, error) {
	var rec *storage.Record
	err := e.store.View(func(tx *storage.Tx) error {
		var err error
		rec, err = tx.Record(storage.EventKey(tenant, id))
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil, NoEvent(tenant, id)
	}
	if err != nil {
		return nil, err
	}
	if l := e.loopIfAny(rec.QueueName()); rec.State == storage.StatePending && l != nil && l.holds([]byte(rec.Key())) {
		rec.State = storage.StateInProcess
	}
	return rec, nil
}

// EventsByKey is GET /v1/events?idempotency_key=K: the events a request with
// that key stored, for the tenant.
func (e *Engine) EventsByKey(tenant, endpoint, key string) ([]*storage.Record, error) {
	var ids []string
	err := e.store.View(func(tx *storage.Tx) error {
		rec, err := tx.Idempotency(keyScope(tenant, endpoint, key), e.now())
		if err != nil {
			return err
		}
		ids = rec.EventIDs
		return nil
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil, switchyard.Errorf(switchyard.ENOTFOUND, "no request with idempotency key %q in the window", key)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*storage.Record, 0, len(ids))
	for _, id := range ids {
		rec, err := e.EventStatus(tenant, id)
		if err != nil {
			return nil, err
		}
		if rec.Tenant == tenant {
			out = append(out, rec)
		}
	}
	return out, nil
}

// TypeStats is one queue's depth: an event type's or an inbox's.
type TypeStats struct {
	Type          string
	Pending       int // due or waiting, not held by the loop
	InProcess     int // held by the loop: being published
	OldestPending time.Duration
	PollDelay     time.Duration
	DLQ           int
}

// Stats reports the depth, oldest pending age, poll delay and DLQ size of
// every type with a loop, a block or an inbox of its own, or events
// waiting or dead.
func (e *Engine) Stats() ([]TypeStats, error) {
	now := e.now()
	var out []TypeStats
	err := e.store.View(func(tx *storage.Tx) error {
		seen := make(map[string]bool)
		for _, t := range tx.Types() {
			seen[t] = true
		}
		e.mu.Lock()
		for t := range e.loops {
			seen[t] = true
		}
		e.mu.Unlock()
		for t := range seen {
			q := tx.Queue(t)
			s := TypeStats{Type: t, Pending: q.Pending, DLQ: tx.DLQDepth(t)}
			l := e.loopIfAny(t) // never start one here: a pull inbox has none, a removed type cannot
			if l == nil && s.Pending == 0 && s.DLQ == 0 && !e.declared(t) {
				// A type no block of its own takes any more, all its
				// events delivered: its series go, as README says (they
				// stayed, at 0, for as long as the file had its queue: a
				// trial). A declared type or inbox stays (a pull inbox
				// has no loop: a review).
				continue
			}
			if !q.OldestPending.IsZero() && q.OldestPending.Before(now) {
				s.OldestPending = now.Sub(q.OldestPending)
			}
			if l != nil {
				// Taken events are still in the queue: count them once,
				// as in_process, as GET /v1/events/{id} does.
				s.InProcess = min(l.inProcess(), s.Pending)
				s.Pending -= s.InProcess
				s.PollDelay = l.currentDelay()
			}
			out = append(out, s)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, err
}

// cleanupLoop removes delivered records after outbox.ttl and idempotency
// records after their window, in small transactions that never stall
// ingest for long.
func (e *Engine) cleanupLoop(ctx context.Context) {
	t := time.NewTicker(e.opts.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if e.fileLost() != nil {
				continue
			}
			if _, err := e.Cleanup(ctx); err != nil {
				e.log.Error("cleanup", "error", err)
			}
		}
	}
}

// cleanupChunk bounds one cleanup transaction.
const cleanupChunk = 500

// Cleanup removes what has expired and returns how many records it removed.
func (e *Engine) Cleanup(ctx context.Context) (int, error) {
	total := 0
	steps := []func(*storage.Tx, time.Time, int) (int, error){
		(*storage.Tx).DeleteExpiredDelivered,
		(*storage.Tx).DeleteExpiredIdempotency,
		(*storage.Tx).DeleteExpiredResolved,
		(*storage.Tx).DeleteExpiredInboxIDs,
		(*storage.Tx).DeleteExpiredClaims,
		(*storage.Tx).DeleteExpiredState, // plugin state keys past their TTL
	}
	for name, in := range e.inboxes {
		steps = append(steps, func(tx *storage.Tx, now time.Time, limit int) (int, error) {
			return tx.DeleteOldSkips(name, now.Add(-in.cfg.TTL), limit)
		})
	}
	for _, step := range steps {
		n, err := e.inChunks(ctx, counted(step))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// removal is one step of a cleanup: it removes at most limit records in
// tx, beginning at from (nil: at the first), and returns how many it
// removed and where the next chunk begins (nil: nothing is left). It may
// run again in another transaction (its group replayed), so from moves on
// only once its commit is in.
type removal func(tx *storage.Tx, now time.Time, from []byte, limit int) (n int, next []byte, err error)

// counted is a removal for a step that always begins at the first record
// left, because it removes what it passes: more may be left while a chunk
// comes back full.
func counted(step func(*storage.Tx, time.Time, int) (int, error)) removal {
	return func(tx *storage.Tx, now time.Time, _ []byte, limit int) (int, []byte, error) {
		n, err := step(tx, now, limit)
		if n < limit {
			return n, nil, err
		}
		return n, []byte{}, err
	}
}

// inChunks runs a removal in transactions of at most cleanupChunk records
// until it says nothing is left, and returns how many it removed.
//
// A chunk the full disk refused is tried again at half the size, down to
// one: bbolt writes a removal to new pages too, and a smaller one fits in
// the few free pages the file has when something else took the reserve's
// room (docs/decisions/disk-full.md). Each refusal costs a failed commit
// (bbolt's rollback then walks the file for its free pages), so the size
// that fitted is where the next call starts (Engine.chunk), and it grows
// back by doubling only across calls that met no refusal.
func (e *Engine) inChunks(ctx context.Context, step removal) (int, error) {
	total, chunk, refused := 0, int(e.chunk.Load()), false
	if chunk <= 0 {
		chunk = cleanupChunk
	}
	defer func() {
		if !refused {
			chunk = min(2*chunk, cleanupChunk)
		}
		e.chunk.Store(int64(chunk))
	}()
	var from []byte
	for ctx.Err() == nil {
		var (
			n    int
			next []byte
		)
		err := e.store.Update(ctx, func(tx *storage.Tx) error {
			var err error
			n, next, err = step(tx, e.now(), from, chunk)
			return err
		})
		if storage.IsDiskFull(err) && chunk > 1 {
			chunk, refused = chunk/2, true
			continue
		}
		if err != nil {
			return total, err
		}
		total += n
		if from = next; from == nil {
			break
		}
	}
	return total, nil
}

// chain returns the plugins of a policy in set, in order;
// ok is false when set lacks one of them: the policy was read before a
// reload that removed the plugin, and the set after it.
func (set *pluginSet) chain(p *config.Policy) (chain []switchyard.Plugin, ok bool) {
	if len(p.Plugins) == 0 {
		return nil, true
	}
	out := make([]switchyard.Plugin, len(p.Plugins))
	for i, name := range p.Plugins {
		if out[i], ok = set.byName[name]; !ok {
			return nil, false
		}
	}
	return out, true
}

// sinks is the sinks by name.
func (e *Engine) sinks() map[string]switchyard.Sink { return *e.sinkMap.Load() }

// withSinks returns a copy of old with sinks added: wrapped for
// -double-send, and told to wake the loops when they become reachable.
func (e *Engine) withSinks(old map[string]switchyard.Sink, sinks []switchyard.Sink) *map[string]switchyard.Sink {
	m := make(map[string]switchyard.Sink, len(old)+len(sinks))
	for name, s := range old {
		m[name] = s
	}
	for _, s := range sinks {
		if r, ok := s.(switchyard.ReadyNotifier); ok {
			r.OnReady(e.kickAll)
		}
		if e.opts.DoubleSend {
			s = doubleSink{s}
		}
		m[s.Name()] = s
	}
	return &m
}
