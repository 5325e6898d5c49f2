package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
)

// runChain runs plugins in order, each on every output of the one before,
// and counts what each made of the event (queue, tenant and ev.ID name it
// in the failures kept for operators).
//
// The chain starts from buf[:0] (the caller's, reused from event to event
// once it has copied the outputs out): without plugins, the event itself
// is the one output, and it costs no allocation.
func (e *Engine) runChain(ctx context.Context, queue, tenant string, chain []switchyard.Plugin, ev *switchyard.Event, buf []switchyard.PluginOutput) ([]switchyard.PluginOutput, error) {
	outs := append(buf[:0], switchyard.PluginOutput{Event: *ev, Key: ev.PartitionKey()})
	var bound chainBound
	for _, p := range chain {
		var next []switchyard.PluginOutput
		st := e.pluginStats.of(p.Name())
		if len(chain) > 1 {
			bound.next(e.config().PluginLimits(p.Name()))
		}
		for i := range outs {
			start := time.Now()
			got, err := p.Handle(ctx, &outs[i].Event)
			took := time.Since(start)
			if err == nil {
				err = e.checkDestinations(p.Name(), ev.ID, got)
			}
			if err == nil && len(outs) > 1 {
				err = bound.add(p.Name(), ev.ID, got)
			}
			if err == nil && len(got) > 1 {
				routes := func() []string { return e.routesOf(queue, outs[i].Destination) }
				e.noteSharedID(st, p.Name(), SharedIDEvent{Queue: queue, Tenant: tenant, EventID: ev.ID}, got, routes)
			}
			if err == nil || !errors.Is(ctx.Err(), context.Canceled) {
				// Not a call the router's stop cut short: no verdict of
				// the plugin's (the event is requeued, outputs).
				st.observe(took, len(got), err, queue, tenant, ev.ID, e.now)
			}
			if err != nil {
				return nil, err
			}
			for _, o := range got {
				if o.Destination == "" {
					o.Destination = outs[i].Destination
				}
				next = append(next, o)
			}
		}
		outs = next
	}
	return outs, nil
}

// chainBound holds what a chain makes of one event, at each plugin, to
// what one call of the most generous plugin of the chain so far may make:
// as many outputs as its max_outputs, and as much data as that many
// outputs of its max_output_bytes. Each plugin of a chain runs on every
// output of the one before, so outputs multiply from plugin to plugin: a
// plugin trial's chain of three, each making 16 outputs of 256 KiB within
// its limits, took the router from 90 MB to 1.2 GB for one event. The
// most generous so far, not each plugin's own: a 1:1 enricher after a
// splitter of 32 passes on its 32 (a review: held to its own 16, every
// such event was rejected). Past it, the plugin's reject: the same event
// would make as many the next time.
type chainBound struct {
	outputs int   // the most outputs one call of the chain so far may make
	data    int64 // and the most data
	n       int   // what this plugin made of the event so far
	bytes   int64
}

// next starts the next plugin of the chain, with its limits.
func (b *chainBound) next(lim config.PluginLimits, ok bool) {
	if ok {
		b.outputs = max(b.outputs, lim.MaxOutputs)
		b.data = max(b.data, int64(lim.MaxOutputs)*lim.MaxOutputBytes)
	}
	b.n, b.bytes = 0, 0
}

// add counts got, what the plugin made of one more output of the one
// before, and says why the plugin's outputs of the event are past the
// bound.
func (b *chainBound) add(plugin, id string, got []switchyard.PluginOutput) error {
	b.n += len(got)
	for i := range got {
		b.bytes += int64(len(got[i].Event.Data))
	}
	if b.outputs <= 0 || b.n <= b.outputs && b.bytes <= b.data {
		return nil
	}
	return fmt.Errorf("plugin %q, event %q: %w", plugin, id, switchyard.Permanent(fmt.Errorf(
		"the chain made %d outputs (%d bytes of data) of this event by this plugin, more than one call of any plugin of the chain so far may make (at most %d outputs, %d bytes of data: max_outputs, and max_outputs x max_output_bytes): each plugin of a chain runs on every output of the one before, so outputs multiply; raise a limit if that many are meant",
		b.n, b.bytes, b.outputs, b.data)))
}

// checkDestinations says why an output of plugin's for event id names a
// destination nothing could go to: the plugin's reject, permanent (the same
// output would fail every time) and counted as its own (before, such an
// event counted as the plugin's "ok" and was dead-lettered all the same: a
// plugin author's trial), and named here, where the plugin that chose it
// is known.
func (e *Engine) checkDestinations(plugin, id string, outs []switchyard.PluginOutput) error {
	configured := func(s string) bool { _, ok := e.sinks()[s]; return ok }
	if err := CheckDestinations(outs, configured); err != nil {
		return fmt.Errorf("plugin %q, event %q: %w", plugin, id, switchyard.Permanent(err))
	}
	return nil
}

// CheckDestinations says why one of outs (the first) names a destination
// no message could go to (config.CheckDestination: its form, its target,
// and its sink where configured says which sinks there are). The router's
// loop asks it of every plugin's outputs, and router plugin test too, so
// that what a test passes the router sends.
func CheckDestinations(outs []switchyard.PluginOutput, configured func(sink string) bool) error {
	for _, o := range outs {
		if o.Destination == "" {
			continue // the type's routes
		}
		if _, _, err := config.CheckDestination(o.Destination, configured); err != nil {
			return err
		}
	}
	return nil
}

// SharedID says which outputs of one event, sent the same way, share an
// id ("" when none do): a CloudEvents consumer that drops what it has seen
// (source and id), another router's inbox among them, keeps the first of
// them and drops the rest as copies. An output to another destination may
// share its event's id: that is the same event sent elsewhere
// (docs/decisions/output-ids.md). routes says where an output without a
// destination goes (nil, or a nil answer: unknown, and "" is a destination
// of its own), so that "" and a route named outright are one way; it is
// asked only when two outputs with one id meet so. router plugin test
// shows it too.
func SharedID(outs []switchyard.PluginOutput, routes func() []string) string {
	var byID map[string][]int // past sharedIDPairs outputs: the earlier outputs with each id
	if len(outs) > sharedIDPairs {
		byID = make(map[string][]int, len(outs))
	}
	for i := range outs {
		earlier := byID[outs[i].Event.ID]
		if byID == nil {
			earlier = sharedIDRange[:i]
		}
		for _, j := range earlier {
			if outs[i].Event.ID != outs[j].Event.ID {
				continue
			}
			if d, ok := sameWay(outs[j].Destination, outs[i].Destination, routes); ok {
				return sharedIDProblem(j, i, d, outs[i].Event.ID)
			}
		}
		if byID != nil {
			byID[outs[i].Event.ID] = append(earlier, i)
		}
	}
	return ""
}

// sharedIDPairs is how many outputs SharedID compares pair by pair; more
// (limits.max_outputs may be in the thousands) are grouped by id first.
const sharedIDPairs = 8

// sharedIDRange is 0, 1, …: the earlier outputs of output i are its first i.
var sharedIDRange = [sharedIDPairs]int{0, 1, 2, 3, 4, 5, 6, 7}

// sameWay says whether outputs to a and b reach one destination, and
// which.
func sameWay(a, b string, routes func() []string) (string, bool) {
	switch {
	case a == b:
		return a, true
	case routes == nil || a != "" && b != "":
		return "", false
	case a == "" && slices.Contains(routes(), b):
		return b, true
	case b == "" && slices.Contains(routes(), a):
		return a, true
	}
	return "", false
}

func sharedIDProblem(j, i int, dest, id string) string {
	return fmt.Sprintf("outputs %d and %d to %s have the same id %q: a consumer that drops repeated events (by source and id) keeps only the first; give each output its own id (docs/plugin-abi.md, output flag bit 3)",
		j, i, destinationName(dest), id)
}

func destinationName(d string) string {
	if d == "" {
		return "the type's routes"
	}
	return d
}

// routesOf is where an output without a destination goes: the one its
// input had (from an earlier plugin of the chain), or queue's routes.
func (e *Engine) routesOf(queue, inherited string) []string {
	if inherited != "" {
		return []string{inherited}
	}
	pol, ok := e.policyOf(queue)
	if !ok {
		return nil
	}
	return pol.RouteDestinations()
}

// noteSharedID counts an event whose outputs from plugin share an id
// (SharedID) and logs it, at most once a minute per plugin: a plugin that
// splits events without ids does it to every event.
func (e *Engine) noteSharedID(st *pluginCounters, plugin string, ev SharedIDEvent, outs []switchyard.PluginOutput, routes func() []string) {
	ev.Problem = SharedID(outs, routes)
	if ev.Problem == "" {
		return
	}
	ev.At = e.now()
	st.mu.Lock() // with the count: a status never has a count without the last event
	st.lastSharedID = ev
	st.sharedIDs++
	st.mu.Unlock()
	if n, ok := e.pluginStats.sharedIDLog.Take(plugin, time.Now()); ok {
		e.log.Warn("plugin outputs share an id", "plugin", plugin, "type", ev.Queue, "event", ev.EventID, "problem", ev.Problem, "like_it_since_last", n)
	}
}

// PluginVerdict is what a plugin made of one event, as counted.
type PluginVerdict string

const (
	PluginOK       PluginVerdict = "ok"       // one output or more
	PluginFiltered PluginVerdict = "filtered" // no output: the event goes no further
	PluginRetry    PluginVerdict = "retry"    // a retry verdict or a failure (trap, timeout, limits)
	PluginReject   PluginVerdict = "reject"   // a reject verdict: the event is dead-lettered
)

// pluginVerdicts are the verdicts in the order the counters keep them.
var pluginVerdicts = [...]PluginVerdict{PluginOK, PluginFiltered, PluginRetry, PluginReject}

// keptFailures is how many recent failures a plugin's stats keep.
const keptFailures = 20

// PluginFailure is one event a plugin did not pass (retry or reject).
type PluginFailure struct {
	At      time.Time     `json:"at"`
	Queue   string        `json:"type"`
	Tenant  string        `json:"tenant"` // whose event: the stored event is the tenant's EventID
	EventID string        `json:"event_id"`
	Verdict PluginVerdict `json:"verdict"`
	Reason  string        `json:"reason"`
}

// pluginStats counts every plugin's verdicts, outputs and time by name;
// they outlive reloads (a reloaded plugin keeps its name).
type pluginStats struct {
	byName sync.Map // name → *pluginCounters
	took   *prometheus.HistogramVec

	verdictsDesc, outputsDesc, failuresDesc, memoryDesc, sharedIDsDesc *prometheus.Desc
	loaded                                                             func() map[string]switchyard.Plugin

	sharedIDLog logthrottle.Throttle // noteSharedID's lines, by plugin
}

func newPluginStats() *pluginStats {
	return &pluginStats{
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_plugin_duration_seconds",
			Help:    "Time a plugin took over one event (one guest call), whatever its verdict.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18), // 10µs … 1.3s
		}, []string{"plugin"}),
		verdictsDesc: prometheus.NewDesc("switchyard_plugin_events_total",
			"Events a plugin handled, by verdict: ok (outputs), filtered (none), retry (verdict or failure), reject.",
			[]string{"plugin", "verdict"}, nil),
		outputsDesc: prometheus.NewDesc("switchyard_plugin_outputs_total", "Outputs plugins returned.", []string{"plugin"}, nil),
		sharedIDsDesc: prometheus.NewDesc("switchyard_plugin_shared_id_events_total",
			"Events (each attempt once) whose outputs from a plugin, sent the same way, share an id: a consumer that drops repeated events keeps only the first (docs/decisions/output-ids.md).",
			[]string{"plugin"}, nil),
		memoryDesc: prometheus.NewDesc("switchyard_plugin_memory_bytes",
			"Linear memory of a plugin's live instances (plugins that report it: plugins/wasm).", []string{"plugin"}, nil),
		failuresDesc: prometheus.NewDesc("switchyard_plugin_failures_total",
			"Plugin calls that failed without a verdict of the plugin's own, by kind: trap, timeout, memory, start (retried), broken_rule (rejected).",
			[]string{"plugin", "kind"}, nil),
		sharedIDLog: logthrottle.Throttle{Every: time.Minute},
	}
}

// pluginCounters are one plugin's.
type pluginCounters struct {
	verdicts [len(pluginVerdicts)]atomic.Int64
	outputs  atomic.Int64
	took     prometheus.Observer

	mu           sync.Mutex
	failures     []PluginFailure  // oldest first, at most keptFailures
	kinds        map[string]int64 // failures without a verdict, by kind (trap, timeout ...)
	kindsListed  []string         // the kinds the plugin may fail with (failureKindLister), at 0 until counted
	lastSharedID SharedIDEvent    // the last event SharedID found, for operators
	sharedIDs    int64            // events whose outputs share an id (SharedID)
}

// SharedIDEvent is an event whose outputs from a plugin, sent the same
// way, share an id (SharedID says what it found).
type SharedIDEvent struct {
	At      time.Time `json:"at"`
	Queue   string    `json:"type"`
	Tenant  string    `json:"tenant"`
	EventID string    `json:"event_id"`
	Problem string    `json:"problem"`
}

// failureKind is implemented by plugin errors that failed without a
// verdict of the plugin's own (plugins/wasm: trap, timeout, memory, start,
// broken_rule).
type failureKind interface {
	error
	PluginFailure() string
}

func (s *pluginStats) of(name string) *pluginCounters {
	if c, ok := s.byName.Load(name); ok {
		return c.(*pluginCounters)
	}
	c, _ := s.byName.LoadOrStore(name, &pluginCounters{took: s.took.WithLabelValues(name)})
	return c.(*pluginCounters)
}

// observe counts one call; now is read only for a failure, which is kept.
func (c *pluginCounters) observe(took time.Duration, outputs int, err error, queue, tenant, id string, now func() time.Time) {
	c.took.Observe(took.Seconds())
	c.outputs.Add(int64(outputs))
	v := pluginVerdict(outputs, err)
	c.verdicts[verdictIndex(v)].Add(1)
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if fk, ok := errors.AsType[failureKind](err); ok && fk.PluginFailure() != "" {
		if c.kinds == nil {
			c.kinds = make(map[string]int64)
		}
		c.kinds[fk.PluginFailure()]++
	}
	if len(c.failures) == keptFailures {
		c.failures = append(c.failures[:0], c.failures[1:]...)
	}
	c.failures = append(c.failures, PluginFailure{At: now(), Queue: queue, Tenant: tenant, EventID: id, Verdict: v, Reason: err.Error()})
}

func verdictIndex(v PluginVerdict) int {
	for i, pv := range pluginVerdicts {
		if pv == v {
			return i
		}
	}
	return 0
}

func pluginVerdict(outputs int, err error) PluginVerdict {
	switch {
	case err != nil && switchyard.IsPermanent(err):
		return PluginReject
	case err != nil:
		return PluginRetry
	case outputs == 0:
		return PluginFiltered
	}
	return PluginOK
}

// Describe implements prometheus.Collector.
func (s *pluginStats) Describe(ch chan<- *prometheus.Desc) {
	s.took.Describe(ch)
	ch <- s.verdictsDesc
	ch <- s.outputsDesc
	ch <- s.sharedIDsDesc
	ch <- s.failuresDesc
	ch <- s.memoryDesc
}

// memoryReporter is implemented by plugins that know their memory.
type memoryReporter interface{ MemoryBytes() int64 }

// failureKindLister is implemented by plugins whose errors give a
// failureKind: the kinds they may give, counted at 0 before the first.
// They are read once per plugin name (a reloaded plugin of one kind
// lists the same).
type failureKindLister interface{ FailureKinds() []string }

// Collect implements prometheus.Collector.
func (s *pluginStats) Collect(ch chan<- prometheus.Metric) {
	if s.loaded != nil {
		for name, p := range s.loaded() {
			c := s.of(name) // its counters at 0 before its first call, as typeSeries's
			if m, ok := p.(memoryReporter); ok {
				ch <- prometheus.MustNewConstMetric(s.memoryDesc, prometheus.GaugeValue, float64(m.MemoryBytes()), name)
			}
			if l, ok := p.(failureKindLister); ok {
				c.mu.Lock()
				if c.kindsListed == nil {
					c.kindsListed = l.FailureKinds()
				}
				c.mu.Unlock()
			}
		}
	}
	s.took.Collect(ch)
	s.byName.Range(func(k, v any) bool {
		name, c := k.(string), v.(*pluginCounters)
		for i, verdict := range pluginVerdicts {
			ch <- prometheus.MustNewConstMetric(s.verdictsDesc, prometheus.CounterValue, float64(c.verdicts[i].Load()), name, string(verdict))
		}
		ch <- prometheus.MustNewConstMetric(s.outputsDesc, prometheus.CounterValue, float64(c.outputs.Load()), name)
		c.mu.Lock()
		ch <- prometheus.MustNewConstMetric(s.sharedIDsDesc, prometheus.CounterValue, float64(c.sharedIDs), name)
		for kind, n := range c.kinds {
			ch <- prometheus.MustNewConstMetric(s.failuresDesc, prometheus.CounterValue, float64(n), name, kind)
		}
		for _, kind := range c.kindsListed {
			if _, ok := c.kinds[kind]; !ok {
				ch <- prometheus.MustNewConstMetric(s.failuresDesc, prometheus.CounterValue, 0, name, kind)
			}
		}
		c.mu.Unlock()
		return true
	})
}

// PluginStatus is a loaded plugin as operators see it.
type PluginStatus struct {
	Name     string
	Module   *switchyard.PluginModule // nil when the plugin cannot say
	UsedBy   []string                 // the event types and inbox queues that run it
	Verdicts map[PluginVerdict]int64  // since the router started
	Outputs  int64
	Failures []PluginFailure // newest first
	// FailureKinds counts the failures without a verdict of the plugin's
	// own, by kind (trap, timeout, memory, start, broken_rule).
	FailureKinds map[string]int64
	// SharedIDEvents counts the events whose outputs from the plugin, sent
	// the same way, share an id; SharedIDLast is the last of them (nil
	// when none).
	SharedIDEvents int64
	SharedIDLast   *SharedIDEvent
}

// Plugins returns every loaded plugin with its counts, by name.
func (e *Engine) Plugins() []PluginStatus {
	used := e.pluginUsers()
	var out []PluginStatus
	for name, p := range e.plugins.Load().byName {
		st := PluginStatus{Name: name, UsedBy: used[name], Verdicts: make(map[PluginVerdict]int64, len(pluginVerdicts))}
		if m, ok := p.(switchyard.ModuleReporter); ok {
			mod := m.Module()
			st.Module = &mod
		}
		c := e.pluginStats.of(name)
		for i, v := range pluginVerdicts {
			st.Verdicts[v] = c.verdicts[i].Load()
		}
		st.Outputs = c.outputs.Load()
		c.mu.Lock()
		st.SharedIDEvents = c.sharedIDs
		if last := c.lastSharedID; last.EventID != "" {
			st.SharedIDLast = &last
		}
		st.FailureKinds = maps.Clone(c.kinds)
		for i := len(c.failures) - 1; i >= 0; i-- {
			st.Failures = append(st.Failures, c.failures[i])
		}
		c.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b PluginStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// pluginUsers maps each plugin to the queues whose policy runs it.
func (e *Engine) pluginUsers() map[string][]string {
	used := map[string][]string{}
	cfg := e.config()
	for t, p := range cfg.Events {
		for _, name := range p.Plugins {
			used[name] = append(used[name], t)
		}
	}
	for _, in := range cfg.Inboxes {
		for _, name := range in.Plugins {
			used[name] = append(used[name], config.InboxQueueName(in.Name))
		}
	}
	for _, qs := range used {
		slices.Sort(qs)
	}
	return used
}
