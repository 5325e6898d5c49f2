package wasm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// minInitTimeout bounds _initialize, sy_abi_version and sy_init (each) from
// below: a Go runtime starting up needs more than the 50ms of an event.
const minInitTimeout = time.Second

// LoadOptions configure Load.
type LoadOptions struct {
	// Instances bounds the plugin's pool: how many events it handles at
	// once. Instances are created as needed; a Handle that finds them all
	// busy waits for one. 0 = GOMAXPROCS.
	Instances int
}

// Plugin is a loaded plugin. It implements switchyard.Plugin; Handle is safe
// for concurrent use.
type Plugin struct {
	name, file string
	rt         *Runtime
	compiled   wazero.CompiledModule
	limits     config.PluginLimits
	configEnv  []byte
	log        hclog.Logger

	hasInitialize, hasInit bool
	initTimeout            time.Duration

	idle  chan *instance
	slots chan struct{} // one token per live instance

	started, discarded atomic.Int64
	memory             atomic.Int64 // the live instances' linear memory, in bytes

	sha256    string // of the module's bytes
	loadedAt  time.Time
	usesState bool // the module imports a state function
	// tables is the bytes the module's tables may hold (boundTables),
	// counted in each instance's limits.memory.
	tables uint64
}

var _ switchyard.Plugin = (*Plugin)(nil)

// Load reads, compiles (or finds in the cache) and validates the plugin's
// module, and starts one instance, which runs _initialize,
// sy_abi_version and sy_init: a plugin that loads is one that can run. A
// relative cfg.Wasm is relative to the working directory. Errors name the
// plugin and its file and say what is wrong.
func (rt *Runtime) Load(ctx context.Context, cfg config.Plugin, opts LoadOptions) (*Plugin, error) {
	bin, err := fsperm.ReadTrusted(cfg.Wasm, fsperm.MaxPluginFile, "a plugin module")
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", cfg.Name, err)
	}
	return rt.LoadBytes(ctx, cfg, bin, opts)
}

// compile compiles bin, one compile of the same module at a time. wazero
// (v1.12.0) publishes a module it reads from its file cache before it has
// compiled the module's entry preambles, and a concurrent compile of the
// same module finds it there and instantiates it half-made
// (wazero/wazero#2547: a data race, or an index-out-of-range panic in
// NewFunction). Plugin blocks load in parallel and may share a module;
// different modules still compile in parallel.
func (rt *Runtime) compile(ctx context.Context, bin []byte, sum string) (wazero.CompiledModule, error) {
	mu, _ := rt.compiling.LoadOrStore(sum, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	compiled, err := rt.r.CompileModule(ctx, bin)
	if err != nil && rt.cacheDir != "" && strings.Contains(err.Error(), "compilationcache:") {
		// A damaged entry of the file cache (a file cut short, a bit
		// flipped): wazero reports it and keeps it, and every start would
		// fail on it. The cache is disposable: empty it and compile again.
		// wazero has no error value for it, only this prefix of its
		// messages (engine_cache.go); TestWasmCompilationCache damages a real
		// entry, so a wazero that words it otherwise fails that test.
		rt.host.Warn("the plugin compilation cache held a damaged entry: emptied, compiling again", "dir", rt.cacheDir, "error", err)
		if rerr := clearCompilationCache(rt.cacheDir); rerr != nil {
			return nil, fmt.Errorf("%w (and emptying the cache %s failed: %v)", err, rt.cacheDir, rerr)
		}
		compiled, err = rt.r.CompileModule(ctx, bin)
	}
	return compiled, err
}

// clearCompilationCache removes the compiled modules wazero keeps in dir,
// in folders named for its version and platform (wazero-v1.12.0-amd64-linux);
// the folders stay, for wazero writes into them without making them.
func clearCompilationCache(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		errs = append(errs, os.Remove(f))
	}
	return errors.Join(errs...)
}

// LoadBytes is Load on a module already read; cfg.Wasm only names it in
// errors and logs.
func (rt *Runtime) LoadBytes(ctx context.Context, cfg config.Plugin, bin []byte, opts LoadOptions) (*Plugin, error) {
	wrap := func(err error) error { return fmt.Errorf("plugin %q (%s): %w", cfg.Name, cfg.Wasm, err) }
	lim := cfg.Limits
	if lim.Memory <= 0 || lim.Timeout <= 0 || lim.MaxOutputs <= 0 || lim.MaxOutputBytes <= 0 {
		return nil, wrap(fmt.Errorf("limits %+v: not resolved (config.DefaultPluginLimits has every one)", lim))
	}
	if lim.Memory > 4<<30 {
		return nil, wrap(fmt.Errorf("limits.memory = %s is over the 4GiB a wasm32 memory can address", formatBytes(uint64(lim.Memory))))
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(bin)) // of the file, as its author has it
	bin, tables, err := rt.boundTables(ctx, bin, sum, lim)
	if err != nil {
		return nil, wrap(err)
	}
	n := opts.Instances
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	p := &Plugin{
		name:        cfg.Name,
		file:        cfg.Wasm,
		rt:          rt,
		limits:      lim,
		configEnv:   appendConfig(nil, cfg.Config),
		log:         rt.log.With("plugin", cfg.Name),
		initTimeout: max(10*lim.Timeout, minInitTimeout),
		idle:        make(chan *instance, n),
		slots:       make(chan struct{}, n),
		sha256:      sum,
		tables:      tables,
		loadedAt:    time.Now(),
	}

	start := time.Now()
	compiled, err := rt.compile(ctx, bin, p.sha256)
	if err != nil {
		return nil, wrap(invalidModule(bin, err))
	}
	compileTook := time.Since(start)
	p.compiled = compiled
	p.usesState = importsState(compiled)
	if err := p.validate(); err != nil {
		compiled.Close(ctx)
		return nil, wrap(err)
	}
	in, err := p.newInstance(ctx)
	if err != nil {
		compiled.Close(ctx)
		return nil, wrap(err)
	}
	p.slots <- struct{}{}
	p.idle <- in
	p.started.Add(1)
	rt.host.Debug("plugin loaded", "plugin", p.name, "file", p.file, "compile", compileTook.Round(time.Microsecond),
		"total", time.Since(start).Round(time.Microsecond), "instances", n,
		"memory", formatBytes(uint64(lim.Memory)), "timeout", lim.Timeout)
	return p, nil
}

// boundTables is the package's boundTables on a plugin's module bin, with
// limits lim: the module to compile and its tables' bytes, or why it does
// not load. A module the table reader refuses gets wazero's word when
// wazero refuses it too (the same words as any other invalid module).
func (rt *Runtime) boundTables(ctx context.Context, bin []byte, sum string, lim config.PluginLimits) ([]byte, uint64, error) {
	bounded, tables, err := boundTables(bin)
	if err != nil {
		compiled, cerr := rt.compile(ctx, bin, sum)
		if cerr != nil {
			return nil, 0, invalidModule(bin, cerr)
		}
		compiled.Close(ctx)
		return nil, 0, err
	}
	if tables >= uint64(lim.Memory) {
		return nil, 0, fmt.Errorf("its tables may hold %s (8 bytes an element, at their maxima or, without one, their minima): not less than limits.memory = %s, which counts them with the linear memory", formatBytes(tables), formatBytes(uint64(lim.Memory)))
	}
	return bounded, tables, nil
}

// validate checks the module's exports and imports against the ABI: every
// problem, in one error.
func (p *Plugin) validate() error {
	probs := p.checkExports()
	probs = append(probs, p.checkMemory()...)
	probs = append(probs, p.checkImports()...)
	if len(probs) == 0 {
		return nil
	}
	return errors.New(strings.Join(probs, "; "))
}

// checkExports checks the ABI's exports and their signatures, and notes
// which optional ones the module has.
func (p *Plugin) checkExports() (probs []string) {
	exports := p.compiled.ExportedFunctions()
	sig := func(name string, params, results []api.ValueType, required bool) {
		f, ok := exports[name]
		if !ok {
			if required {
				probs = append(probs, fmt.Sprintf("it does not export %s%s", signature(name, params, results), exportHint(name, exports)))
			}
			return
		}
		if !slices.Equal(f.ParamTypes(), params) || !slices.Equal(f.ResultTypes(), results) {
			probs = append(probs, fmt.Sprintf("it exports %s, want %s",
				signature(name, f.ParamTypes(), f.ResultTypes()), signature(name, params, results)))
		}
	}
	sig("sy_abi_version", nil, []api.ValueType{i32}, true)
	sig("sy_handle", []api.ValueType{i32}, []api.ValueType{i32}, true)
	sig("sy_init", []api.ValueType{i32}, []api.ValueType{i32}, false)
	sig("_initialize", nil, nil, false)
	_, p.hasInit = exports["sy_init"]
	_, p.hasInitialize = exports["_initialize"]
	if _, ok := exports["_start"]; ok && !p.hasInitialize {
		// Go without -buildmode=c-shared exports the ABI beside _start, and
		// every call traps in runtime.notInitialized.
		probs = append(probs, "it exports _start and no _initialize, so it was built as a WASI command: build a reactor (Go: -buildmode=c-shared; C: -mexec-model=reactor; Rust: --crate-type cdylib)")
	}
	return probs
}

// exportHint lists what a module exports instead of name, and the one it
// most likely meant.
func exportHint(name string, exports map[string]api.FunctionDefinition) string {
	names := slices.Sorted(maps.Keys(exports))
	if len(names) == 0 {
		return " (it exports no function)"
	}
	hint := fmt.Sprintf(" (it exports %s)", strings.Join(names, ", "))
	best, bestD := "", 3 // a near name is at most two edits away
	for _, n := range names {
		if d := editDistance(n, name); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		hint += fmt.Sprintf(": did you mean %s?", best)
	}
	return hint
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkMemory checks that the module exports its own memory, within
// limits.memory.
func (p *Plugin) checkMemory() (probs []string) {
	m := p.compiled
	if mem, ok := m.ExportedMemories()["memory"]; !ok {
		probs = append(probs, `it does not export its memory as "memory"`)
	} else if minBytes := uint64(mem.Min()) * 65536; minBytes > uint64(p.limits.Memory)-p.tables {
		probs = append(probs, fmt.Sprintf("its memory starts at %s, over limits.memory = %s",
			p.withTables(minBytes), formatBytes(uint64(p.limits.Memory))))
	}
	if len(m.ImportedMemories()) > 0 {
		probs = append(probs, "it imports a memory: a plugin defines and exports its own")
	}
	return probs
}

// withTables says memory bytes of a linear memory and, where the module
// has tables, the sum with theirs: what limits.memory counts.
func (p *Plugin) withTables(memory uint64) string {
	if p.tables == 0 {
		return formatBytes(memory)
	}
	return fmt.Sprintf("%s (%s with its tables' %s)", formatBytes(memory), formatBytes(memory+p.tables), formatBytes(p.tables))
}

// checkImports checks that the module imports only the host's functions
// and WASI's, with their signatures.
func (p *Plugin) checkImports() (probs []string) {
	for _, f := range p.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		got := signature(name, f.ParamTypes(), f.ResultTypes())
		switch mod {
		case HostModule:
			want, ok := hostFuncs[name]
			switch {
			case !ok:
				probs = append(probs, fmt.Sprintf("it imports %q.%q: module %q has only input_read, emit, fail, log, state_get, state_put and state_delete", mod, name, HostModule))
			case !slices.Equal(f.ParamTypes(), want.params) || !slices.Equal(f.ResultTypes(), want.results):
				probs = append(probs, fmt.Sprintf("it imports %s.%s, want %s", mod, got, signature(name, want.params, want.results)))
			}
		case "wasi_snapshot_preview1":
			want, ok := p.rt.wasi[name]
			switch {
			case !ok:
				probs = append(probs, fmt.Sprintf("it imports %q.%q, which is not a wasi_snapshot_preview1 function", mod, name))
			case !slices.Equal(f.ParamTypes(), want.ParamTypes()) || !slices.Equal(f.ResultTypes(), want.ResultTypes()):
				probs = append(probs, fmt.Sprintf("it imports %s.%s, want %s", mod, got, signature(name, want.ParamTypes(), want.ResultTypes())))
			}
		case "env":
			hint := ""
			if name == "abort" { // AssemblyScript's default abort
				hint = "; AssemblyScript: build with --use abort=~lib/@switchyard-router/sdk-assemblyscript/assembly/index/abort (the SDK's abort says why through fail() and traps)"
			}
			probs = append(probs, fmt.Sprintf("it imports %q.%q (%s): plugins may import only from %q and \"wasi_snapshot_preview1\"%s", mod, name, got, HostModule, hint))
		default:
			probs = append(probs, fmt.Sprintf("it imports %q.%q (%s): plugins may import only from %q and \"wasi_snapshot_preview1\"", mod, name, got, HostModule))
		}
	}
	return probs
}

// signature formats a function type: "sy_handle(i32) -> i32".
func signature(name string, params, results []api.ValueType) string {
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('(')
	for i, t := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(api.ValueTypeName(t))
	}
	b.WriteByte(')')
	if len(results) > 0 {
		b.WriteString(" -> ")
		for i, t := range results {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(api.ValueTypeName(t))
		}
	}
	return b.String()
}

// Info describes a loaded module, for `router plugin check`.
type Info struct {
	Imports []string // "module.name", sorted
	Exports []string // function names, sorted
	// MemoryMin and MemoryMax are the declared bounds of the memory in
	// bytes; MemoryMax is 0 when the module declares none.
	MemoryMin, MemoryMax uint64
	// Tables is the bytes the module's tables may hold (tables.go),
	// counted in limits.memory.
	Tables uint64
}

// Info describes the plugin's module.
func (p *Plugin) Info() Info {
	info := Info{Tables: p.tables}
	for _, f := range p.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		info.Imports = append(info.Imports, mod+"."+name)
	}
	for name := range p.compiled.ExportedFunctions() {
		info.Exports = append(info.Exports, name)
	}
	slices.Sort(info.Imports)
	info.Imports = slices.Compact(info.Imports)
	slices.Sort(info.Exports)
	if mem, ok := p.compiled.ExportedMemories()["memory"]; ok {
		info.MemoryMin = uint64(mem.Min()) * 65536
		if max, ok := mem.Max(); ok {
			info.MemoryMax = uint64(max) * 65536
		}
	}
	return info
}

// Name is the plugin block's name.
func (p *Plugin) Name() string { return p.name }

// Module says which module this plugin runs, and since when.
func (p *Plugin) Module() switchyard.PluginModule {
	return switchyard.PluginModule{File: p.file, SHA256: p.sha256, LoadedAt: p.loadedAt}
}

// File is the module's path.
func (p *Plugin) File() string { return p.file }

// Limits are the plugin's limits, with defaults filled in.
func (p *Plugin) Limits() config.PluginLimits { return p.limits }

// Handle runs sy_handle on ev in an instance of the pool: exactly one guest
// call. It returns the outputs on verdict ok (none = the event is dropped),
// an *Error wrapping switchyard.ErrPluginRetry on verdict retry or on a
// failure (trap, timeout, memory limit, an output over the limits or
// malformed), and switchyard.Permanent(*Error) on verdict reject. A failed
// instance is discarded; the pool starts a new one when needed.
func (p *Plugin) Handle(ctx context.Context, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
	in, err := p.get(ctx)
	if err != nil && ctx.Err() == nil {
		// The plugin's failure, counted as one (a plugin trial: an sy_init
		// that failed at run time showed only as verdicts of retry).
		return nil, p.failed(ev.ID, FailureStart, err.Error(), err)
	}
	if err != nil {
		return nil, p.retry(ev.ID, err.Error(), err)
	}
	outs, keep, err := in.run(ctx, ev)
	if keep {
		p.idle <- in
	} else {
		p.rt.host.Debug("plugin instance discarded", "plugin", p.name, "event", ev.ID, "error", err)
		p.discard(in)
	}
	return outs, err
}

// get takes an idle instance, starts a new one if the pool has room, or
// waits for one.
func (p *Plugin) get(ctx context.Context) (*instance, error) {
	select {
	case in := <-p.idle:
		return in, nil
	default:
	}
	select {
	case in := <-p.idle:
		return in, nil
	case p.slots <- struct{}{}:
		in, err := p.newInstance(ctx)
		if err != nil {
			<-p.slots
			return nil, fmt.Errorf("starting an instance: %w", err)
		}
		p.started.Add(1)
		return in, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for an instance: %w", ctx.Err())
	}
}

func (p *Plugin) discard(in *instance) {
	in.close()
	<-p.slots
	p.discarded.Add(1)
}

// UsesState says whether the plugin imports a state function: the engine
// keeps a state overlay only for chains that may use one.
func (p *Plugin) UsesState() bool { return p.usesState }

// MemoryBytes is the linear memory of the plugin's live instances.
func (p *Plugin) MemoryBytes() int64 { return p.memory.Load() }

// Stats are counters of a plugin's pool.
type Stats struct {
	Started   int64 // instances started, the one Load starts included
	Discarded int64 // instances discarded (failures and Close)
	Live      int   // instances now alive, idle or busy
}

// Stats returns the pool's counters.
func (p *Plugin) Stats() Stats {
	return Stats{Started: p.started.Load(), Discarded: p.discarded.Load(), Live: len(p.slots)}
}

// Close closes the idle instances and the compiled module. Call it after
// the last Handle has returned.
func (p *Plugin) Close(ctx context.Context) error {
	for {
		select {
		case in := <-p.idle:
			p.discard(in)
		default:
			return p.compiled.Close(ctx)
		}
	}
}

// outputs maps the decoded outputs onto ev.
func (p *Plugin) outputs(ev *switchyard.Event, outs []output) []switchyard.PluginOutput {
	if len(outs) == 0 {
		return nil
	}
	res := make([]switchyard.PluginOutput, len(outs))
	inKey := ev.PartitionKey()
	for i := range outs {
		o := &outs[i]
		r := &res[i]
		r.Destination = o.Destination
		r.Event = *ev
		r.Key = inKey
		if o.HasHeaders {
			r.Event.Extensions = o.Headers
			if k, ok := extension(o.Headers, "partitionkey"); ok {
				r.Key = k
			}
		}
		if o.HasKey {
			r.Key = o.Key
		}
		if o.HasData {
			r.Event.Data = o.Data
		}
		if o.HasID {
			r.Event.ID = o.ID
		}
		// The key and the partitionkey extension are one thing (storage
		// Event.PartitionKey): keep them in agreement.
		if k, ok := extension(r.Event.Extensions, "partitionkey"); k != r.Key || ok != (r.Key != "") {
			r.Event.Extensions = withExtension(r.Event.Extensions, "partitionkey", r.Key)
		}
	}
	return res
}

func extension(hs []switchyard.Header, name string) (string, bool) {
	for _, h := range hs {
		if h.Name == name {
			return h.Value, true
		}
	}
	return "", false
}

// withExtension returns a sorted copy of hs with name set to value ("" =
// removed).
func withExtension(hs []switchyard.Header, name, value string) []switchyard.Header {
	out := make([]switchyard.Header, 0, len(hs)+1)
	for _, h := range hs {
		if h.Name != name {
			out = append(out, h)
		}
	}
	if value != "" {
		i, _ := slices.BinarySearchFunc(out, name, func(h switchyard.Header, n string) int { return strings.Compare(h.Name, n) })
		out = slices.Insert(out, i, switchyard.Header{Name: name, Value: value})
	}
	return out
}

// Verdict is a plugin's answer to one event.
type Verdict int

// The verdicts of sy_handle.
const (
	VerdictOK     Verdict = 0
	VerdictRetry  Verdict = 1
	VerdictReject Verdict = 2
)

func (v Verdict) String() string {
	switch v {
	case VerdictOK:
		return "ok"
	case VerdictRetry:
		return "retry"
	case VerdictReject:
		return "reject"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Error is a Handle that did not end in verdict ok: the plugin's retry or
// reject (Reason is what it passed to fail()), or a failure that counts as
// retry (trap, timeout, memory limit, a bad output; Reason says which).
// A retry wraps switchyard.ErrPluginRetry; a reject comes wrapped in
// switchyard.Permanent. errors.As finds it in both.
type Error struct {
	Plugin  string
	EventID string
	Verdict Verdict // VerdictRetry or VerdictReject
	Reason  string
	// Cause is the runtime's error of a trap (with its wasm stack trace) or
	// of the caller's context; nil otherwise.
	Cause error
	// Failure says what went wrong when the plugin did not answer with a
	// verdict of its own; "" when it did.
	Failure Failure
}

// Failure is how a guest call failed without a verdict of its own.
type Failure string

const (
	FailureTrap       Failure = "trap"        // a trap or proc_exit: retried
	FailureTimeout    Failure = "timeout"     // over limits.timeout: retried
	FailureMemory     Failure = "memory"      // over limits.memory: retried
	FailureBrokenRule Failure = "broken_rule" // a malformed or oversized output, a bad range, an unknown verdict: rejected (it fails every time)
	FailureStart      Failure = "start"       // no instance to run it in: the module's start, _initialize or sy_init failed: retried
)

// Failures are every Failure, in the order above.
var Failures = [...]Failure{FailureTrap, FailureTimeout, FailureMemory, FailureBrokenRule, FailureStart}

// PluginFailure is the failure's kind, for the engine's per-plugin counts.
func (e *Error) PluginFailure() string { return string(e.Failure) }

// FailureKinds are the kinds PluginFailure may give, for the engine's
// counters at 0 before the first failure. Every plugin returns the same
// slice: a caller must not change it.
func (p *Plugin) FailureKinds() []string { return failureKinds }

var failureKinds = func() []string {
	kinds := make([]string, len(Failures))
	for i, f := range Failures {
		kinds[i] = string(f)
	}
	return kinds
}()

// Error is `plugin "enrich", event "01ab…": reason`.
func (e *Error) Error() string {
	return fmt.Sprintf("plugin %q, event %q: %s", e.Plugin, e.EventID, e.Reason)
}

func (e *Error) Unwrap() []error {
	var errs []error
	if e.Verdict == VerdictRetry {
		errs = append(errs, switchyard.ErrPluginRetry)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

func (p *Plugin) retry(id, reason string, cause error) error {
	return &Error{Plugin: p.name, EventID: id, Verdict: VerdictRetry, Reason: reason, Cause: cause}
}

// failed is a guest call that ended without a verdict: a broken rule of
// the ABI fails the same way every time, so it is a reject (the event goes
// to the DLQ with the reason); a trap, a timeout or the memory limit may
// not, so they are retried.
func (p *Plugin) failed(id string, f Failure, reason string, cause error) error {
	e := &Error{Plugin: p.name, EventID: id, Verdict: VerdictRetry, Reason: reason, Cause: cause, Failure: f}
	if f == FailureBrokenRule {
		e.Verdict = VerdictReject
		return switchyard.Permanent(e)
	}
	return e
}
