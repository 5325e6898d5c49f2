// Package wasm runs Switchyard plugins: WebAssembly modules that speak the
// plugin ABI v1 (docs/plugin-abi.md), on wazero.
//
// A Runtime compiles modules (with an on-disk compilation cache, so a
// restart does not compile again) and hosts the imports every plugin shares:
// module "switchyard" (input_read, emit, fail, log) and a sandboxed
// wasi_snapshot_preview1. Runtime.Load validates a module and returns a
// Plugin, which implements switchyard.Plugin on a pool of instances.
//
// What a plugin must export, in the order the host calls them on a new
// instance:
//
//	memory                            the module's own linear memory
//	_initialize()                     optional: Go c-shared, wasi-libc reactors
//	sy_abi_version() -> i32           must return 1
//	sy_init(config_len: i32) -> i32   optional: once per instance; 0 = ok; the
//	                                  config envelope is read with input_read
//	sy_handle(event_len: i32) -> i32  once per event: 0 ok, 1 retry, 2 reject
//
// See envelope.go for the event, output and config envelopes and
// RATIONALE.md for why things are the way they are.
package wasm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// HostModule is the name of the module the host functions are imported from.
const HostModule = "switchyard"

// ABIVersion is the plugin ABI this host speaks: sy_abi_version() must
// return it.
const ABIVersion = 1

// RuntimeOptions configure NewRuntime.
type RuntimeOptions struct {
	// CacheDir keeps compiled modules on disk, so that a restart does not
	// compile them again; "" keeps them in memory only. The router uses
	// <data dir>/wasm-cache.
	CacheDir string
	// Logger receives the plugins' log() calls and their stdout/stderr,
	// under the name "plugin" with a "plugin" attribute; nil = discard.
	Logger hclog.Logger
	// HostLogger receives the runtime's own lines about the plugins (one
	// loaded, an instance discarded, a damaged cache entry), under the
	// same name; nil = Logger. router plugin test shows a plugin's log at
	// every level, and of these only warnings and errors.
	HostLogger hclog.Logger
}

// Runtime compiles and runs plugins. One Runtime hosts every plugin of a
// router; Close it after the plugins' last Handle.
type Runtime struct {
	r        wazero.Runtime
	cache    wazero.CompilationCache
	cacheDir string       // "" without a file cache
	log      hclog.Logger // the plugins' own lines
	host     hclog.Logger // the runtime's lines about them
	// wasi are the functions of wasi_snapshot_preview1 that wazero
	// implements, by name: the allowlist for that module.
	wasi map[string]api.FunctionDefinition
	// compiling holds a mutex per module (by sha256): compile.
	compiling sync.Map
}

// NewRuntime returns a runtime with the compiler engine (the interpreter
// only where wazero has no compiler) and timeouts enabled
// (WithCloseOnContextDone).
func NewRuntime(ctx context.Context, opts RuntimeOptions) (*Runtime, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	host := opts.HostLogger
	if host == nil {
		host = log
	}
	// NewRuntimeConfig picks the compiler wherever wazero has one (amd64
	// and arm64) and the CPU supports it, the interpreter elsewhere.
	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		host.Warn("no WebAssembly compiler for this architecture: plugins run in wazero's interpreter, 20-50x slower", "arch", runtime.GOARCH)
	}
	rt := &Runtime{log: log.Named("plugin"), host: host.Named("plugin")}
	if opts.CacheDir != "" {
		// wazero makes the folders (0700) here, and reads an entry only
		// when a compile looks for it: checked before any is.
		cache, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err == nil {
			err = fsperm.CheckPrivateTree(opts.CacheDir)
		}
		if err != nil {
			return nil, fmt.Errorf("wasm compilation cache %s: %w", opts.CacheDir, err)
		}
		rt.cache, rt.cacheDir = cache, opts.CacheDir
		cfg = cfg.WithCompilationCache(cache)
	}
	rt.r = wazero.NewRuntimeWithConfig(ctx, cfg)
	fail := func(err error) (*Runtime, error) {
		rt.Close(ctx)
		return nil, err
	}
	wasi := wasi_snapshot_preview1.NewBuilder(rt.r)
	compiled, err := wasi.Compile(ctx)
	if err != nil {
		return fail(fmt.Errorf("wasi: %w", err))
	}
	rt.wasi = compiled.ExportedFunctions()
	if _, err := wasi.Instantiate(ctx); err != nil {
		return fail(fmt.Errorf("wasi: %w", err))
	}
	if err := instantiateHost(ctx, rt.r); err != nil {
		return fail(fmt.Errorf("host module %q: %w", HostModule, err))
	}
	return rt, nil
}

// Compile compiles a module without loading it. With a CacheDir that fills
// the compilation cache: a later Load of the same module, in this runtime or
// another one on the same directory, does not compile it again.
func (rt *Runtime) Compile(ctx context.Context, bin []byte) error {
	compiled, err := rt.compile(ctx, bin, fmt.Sprintf("%x", sha256.Sum256(bin)))
	if err != nil {
		return invalidModule(bin, err)
	}
	return compiled.Close(ctx)
}

// invalidModule is the error for bytes that do not compile. A module that
// ends in the middle of a section is most often a file cut short (a copy
// or a build that did not finish), which wazero reports only as an EOF
// deep in its decoder; the error says so.
func invalidModule(bin []byte, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.HasSuffix(err.Error(), "EOF") {
		return fmt.Errorf("not a valid WebAssembly module: it ends in the middle of its contents, after %d bytes: is the file cut short (an unfinished copy or build)? Build or copy it again (%w)", len(bin), err)
	}
	return fmt.Errorf("not a valid WebAssembly module: %w", err)
}

// Close closes every plugin instance and module of the runtime and the
// compilation cache.
func (rt *Runtime) Close(ctx context.Context) error {
	var errs []error
	if rt.r != nil {
		errs = append(errs, rt.r.Close(ctx))
	}
	if rt.cache != nil {
		errs = append(errs, rt.cache.Close(ctx))
	}
	return errors.Join(errs...)
}

var (
	i32 = api.ValueTypeI32
	// hostFuncs are the functions of module "switchyard" with their
	// signatures: the allowlist for that module.
	hostFuncs = map[string]struct{ params, results []api.ValueType }{
		"input_read": {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		"emit":       {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
		"fail":       {[]api.ValueType{i32, i32}, nil},
		"log":        {[]api.ValueType{i32, i32, i32}, nil},
		// state.go: optional
		"state_get":    {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
		"state_put":    {[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
		"state_delete": {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	}
)

// instantiateHost instantiates module "switchyard". Its functions find the
// calling instance in the context (instanceOf): wazero hands them the
// context of the guest call.
func instantiateHost(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(HostModule)
	fns := map[string]struct {
		fn    api.GoModuleFunc
		names []string
	}{
		"input_read": {hostInputRead, []string{"ptr", "len"}},
		"emit":       {hostEmit, []string{"ptr", "len"}},
		"fail":       {hostFail, []string{"ptr", "len"}},
		"log":        {hostLog, []string{"level", "ptr", "len"}},
	}
	for name, f := range stateFuncs {
		fns[name] = f
	}
	for name, f := range fns {
		sig := hostFuncs[name]
		b = b.NewFunctionBuilder().
			WithGoModuleFunction(f.fn, sig.params, sig.results).
			WithParameterNames(f.names...).
			Export(name)
	}
	_, err := b.Instantiate(ctx)
	return err
}
